"""Spec rules: one spec for a mixed organisation, each repo audited with its own data, model and published cells.

A rule names which repos it applies to (``match``: repo-id patterns and/or ``config.json`` fields) and the spec
sections it replaces for them (:data:`RULE_OVERRIDES`). Every matching rule applies, in the order written; a
section set by a later rule replaces the one set by an earlier rule (sections are replaced whole, never merged
key by key), and a repo no rule matches is audited with the spec as written. The effective spec of a repo has no
rules of its own and passes every check a written spec passes (:meth:`AuditSpec.check`); a rule that could never
give a valid spec is refused when the spec is loaded, with the JSON pointer of the rule.

Matching reads the repo's ``config.json`` as data: a pattern is compared with :func:`fnmatch.fnmatchcase`, never
imported or evaluated.

>>> match = RuleMatch.model_validate({"repo": "lab/timm-*", "config": {"architecture": "resnet*"}})
>>> matches(match, repo_id="lab/timm-resnet18", config={"architecture": "resnet18"})
True
>>> matches(match, repo_id="lab/timm-resnet18", config={"architecture": "convnext_tiny"})
False
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Protocol, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from bnconvention.errors import AuditSpecError

RULE_OVERRIDES: tuple[str, ...] = ("dataset", "splits", "model", "refit", "published", "published_source",
                                   "model_index_metrics", "provenance", "diagnostics")
Pattern = Annotated[str, StringConstraints(min_length=1)]
ConfigValue = str | int | float | bool | None


class RuledSpec(Protocol):
    """What the rules read of a spec (:class:`bnconvention.audit.spec.audit_spec.AuditSpec`, which checks its rules
    when it is validated, so this module cannot import it): its rules, its fields, and its validation and checks."""

    @property
    def rules(self) -> Sequence[Any]: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...

    @classmethod
    def model_validate(cls, obj: Any) -> Self: ...

    def check(self) -> Self: ...


SpecT = TypeVar("SpecT", bound=RuledSpec)


class RuleMatch(BaseModel):
    """Which repos a rule applies to: every condition given must hold."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    repo: Pattern | list[Pattern] | None = Field(default=None, description=(
        "Repo-id pattern(s) in fnmatch syntax ('lab/timm-*', 'lab/resnet-??'), compared case-insensitively; the "
        "condition holds when any pattern matches."))
    config: dict[Pattern, ConfigValue] | None = Field(default=None, description=(
        "Fields of the repo's config.json and the values they must have, e.g. {architecture: 'resnet*'} (timm) or "
        "{model_type: resnet} (transformers); a dotted name reads a nested field ('pretrained_cfg.architecture'). "
        "A string is an fnmatch pattern (case-insensitive), other values compare equal; a list field (such as "
        "'architectures') holds when one of its items does. A repo without config.json matches no config "
        "condition."))

    def patterns(self) -> list[str]:
        if self.repo is None:
            return []
        return [self.repo] if isinstance(self.repo, str) else list(self.repo)


def config_field(config: Any, name: str) -> tuple[bool, Any]:
    """``(found, value)`` of a field of a decoded ``config.json``, a dotted name reading nested objects."""
    value = config
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _value_matches(found: Any, wanted: ConfigValue) -> bool:
    if isinstance(found, list):
        return any(_value_matches(item, wanted) for item in found)
    if isinstance(wanted, str):
        return isinstance(found, str) and fnmatch.fnmatchcase(found.casefold(), wanted.casefold())
    if isinstance(wanted, bool) or isinstance(found, bool):
        return type(found) is type(wanted) and found == wanted
    return found == wanted


def matches(match: RuleMatch, *, repo_id: str, config: Any) -> bool:
    """Whether a rule's conditions all hold for this repo (and its decoded ``config.json``, None when absent)."""
    patterns = match.patterns()
    if patterns and not any(fnmatch.fnmatchcase(repo_id.casefold(), p.casefold()) for p in patterns):
        return False
    for name, wanted in (match.config or {}).items():
        found, value = config_field(config, name)
        if not found or not _value_matches(value, wanted):
            return False
    return True


def _overrides(rule: Any) -> dict[str, Any]:
    return {name: getattr(rule, name) for name in RULE_OVERRIDES if getattr(rule, name) is not None}


def _effective(spec: SpecT, updates: Mapping[str, Any]) -> SpecT:
    """The spec with ``updates`` applied and no rules, validated and checked like a written spec."""
    data = spec.model_dump(mode="python")
    data.update({name: (value.model_dump(mode="python") if isinstance(value, BaseModel) else value)
                 for name, value in updates.items()})
    data["rules"] = []
    return type(spec).model_validate(data).check()


def apply_rules(spec: SpecT, *, repo_id: str, config: Any) -> tuple[SpecT, list[str]]:
    """The spec this repo is audited with, and the names of the rules that shaped it (``rule N`` for an unnamed
    one, counting from 1). The spec itself, unchanged, when no rule matches."""
    updates: dict[str, Any] = {}
    names: list[str] = []
    for number, rule in enumerate(spec.rules, start=1):
        if matches(rule.match, repo_id=repo_id, config=config):
            updates.update(_overrides(rule))
            names.append(rule.name or f"rule {number}")
    if not names:
        return spec, []
    return _effective(spec, updates), names


def check_rules(spec: RuledSpec) -> None:
    """Refuse a rule without a condition, or one whose sections make an invalid spec, naming the rule."""
    for index, rule in enumerate(spec.rules):
        where = f"/rules/{index}"
        if not rule.match.patterns() and not rule.match.config:
            raise AuditSpecError(f"rule {index + 1} has no condition; give match.repo patterns or match.config "
                                 "fields (a rule for every repo is the spec itself)", field=f"{where}/match")
        updates = _overrides(rule)
        if not updates:
            raise AuditSpecError(f"rule {index + 1} changes nothing; give the sections it replaces "
                                 f"({', '.join(RULE_OVERRIDES)})", field=where)
        try:
            _effective(spec, updates)
        except AuditSpecError as exc:
            field = exc.field or ""
            inside = field.split("/")[1] in updates if field.count("/") >= 1 and field != "" else False
            raise AuditSpecError(f"rule {index + 1}: {exc}", field=where + field if inside else field) from exc


__all__ = ["RULE_OVERRIDES", "RuleMatch", "RuledSpec", "apply_rules", "check_rules", "config_field", "matches"]
