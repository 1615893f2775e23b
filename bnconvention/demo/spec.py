"""The demo's audit spec: the census design of docs/statistics.md on the digits zoo, read from the example the package
ships (``audit/digits-zoo.yaml`` of :mod:`bnconvention.examples`, which ``bnconvention examples write`` writes out and
the quickstarts pass to ``--spec``): the demo and the docs audit with one spec, kept in one file.
"""

from __future__ import annotations

from typing import Any

from bnconvention.audit.spec import AuditSpec, parse_spec
from bnconvention.examples import AUDIT_SPEC, read_example
from bnconvention.formats.card import load_yaml_strict


def _spec_data() -> dict[str, Any]:
    data = load_yaml_strict(read_example(AUDIT_SPEC).decode("utf-8"), source=f"bnconvention/examples/{AUDIT_SPEC}")
    if not isinstance(data, dict):
        raise TypeError(f"the packaged {AUDIT_SPEC} is not a mapping")
    return data


DEMO_SPEC: dict[str, Any] = _spec_data()


def demo_spec() -> AuditSpec:
    """The parsed spec."""
    return parse_spec(DEMO_SPEC)


__all__ = ["DEMO_SPEC", "demo_spec"]
