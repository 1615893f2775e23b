"""The demo's audit spec: the design of seed 001 on the digits zoo (the same spec as
``examples/audit/digits-zoo.yaml``, kept here so an installed package runs the demo without the repository; a test
checks the two are the same spec).
"""

from __future__ import annotations

from typing import Any

DEMO_SPEC: dict[str, Any] = {
    "spec_version": "1.0",
    "kind": "audit_spec",
    "name": "digits-zoo",
    "dataset": {"kind": "digits"},
    "splits": {"forget_classes": [3]},
    "cells": ["df", "dr", "dt"],
    "criteria": ["df <= 0.05", "dr >= 0.95"],
    "headline": "df",
    "published_source": "sidecar",
    "anchor_tolerance": 0.02,
    "margin_pp": 1.2,
    "replicates": 10,
    "fdr_q": 0.05,
    "seed": 0,
    "refit": {"rule": "exact", "transform": "train", "pool_size": 512, "batch_size": 128},
    "staleness": True,
    "recoverability": {"images": 10, "source": "test"},
    "provenance": {"pool_size": 512, "exchanged": 51},
}


def demo_spec() -> Any:
    """The parsed spec (:class:`bnconvention.audit.AuditSpec`)."""
    from bnconvention.audit.spec import parse_spec

    return parse_spec(DEMO_SPEC)


__all__ = ["DEMO_SPEC", "demo_spec"]
