"""Classify one Hub repo from its safetensors headers (and its model card) alone.

Classes (:data:`REPO_CLASSES`), each with a reason:

* ``no_weights`` — the repo ships no ``.safetensors`` checkpoint (maybe pickles, which we never open);
* ``channel_absent`` — no BatchNorm running statistics (GroupNorm, LayerNorm, ...): a refit is the identity;
* ``declared_consistent`` — BatchNorm statistics and a declaration (in the header or the card) that is a valid
  record whose layers match the header's running buffers (names and ``num_features``), with card and header
  carrying the same record;
* ``declared_inconsistent`` — a declaration that is invalid, of the wrong kind, disagrees with the card, or does not
  match the header's running buffers;
* ``undeclared`` — BatchNorm statistics and no declaration;
* ``unreadable`` — a header, index or card that cannot be parsed, or a Hub failure that outlasted the retries.

Whether a declaration is consistent is the validator's rule (:mod:`bnconvention.validation.consistency`, the same
function ``bnconvention validate`` and ``publish`` call): its issues, with their codes, are the checkpoint's
``findings``, and any error among them makes the checkpoint ``declared_inconsistent``.

Digests bind a record to tensor *bytes*. The census reads no weights, but it does read the running buffers of a
consistent declaration (a few KB, :mod:`bnconvention.hub.running`) and compares their digests, so a stale
declaration (buffers changed after it was written) is ``declared_inconsistent``; the trainable digest needs every
weight and is left to ``hub validate``, which downloads. A repo with several checkpoints takes the most severe class
of its checkpoints (:data:`SEVERITY`), and every checkpoint's own class is kept in the report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from bnconvention.errors import BnConventionError, UntrustedInputError
from bnconvention.formats.card import CARD_NAME, MAX_CARD_BYTES, decode_card, read_card_record
from bnconvention.formats.checkpoint_files import FOREIGN_WEIGHTS_SUFFIXES
from bnconvention.formats.digests import bn_layers_from_tensor_names
from bnconvention.formats.safetensors_header import SafetensorsHeader, TensorInfo
from bnconvention.formats.text import one_line, plural
from bnconvention.hub.client import HubClient
from bnconvention.hub.headers import WeightsSet, read_sharded, read_single, weights_files
from bnconvention.hub.quantized import describe_quantization, split_scales_files
from bnconvention.hub.retry import describe, is_retryable
from bnconvention.hub.running import RUNNING_CHECK_BYTES, check_running_statistics
from bnconvention.standard.models import Declaration
from bnconvention.validation import CODES, Issue, best_issue, check_record
from bnconvention.validation.consistency import (
    StoredRecord,
    bind_record,
    check_consistency,
    layer_issues,
    location_issues,
    records_equal,
)
from bnconvention.validation.issues import new_issue
from bnconvention.validation.sources import header_record

RepoClass: TypeAlias = Literal["no_weights", "channel_absent", "declared_consistent", "declared_inconsistent",
                               "undeclared", "unreadable"]
REPO_CLASSES: tuple[RepoClass, ...] = ("no_weights", "channel_absent", "declared_consistent",
                                       "declared_inconsistent", "undeclared", "unreadable")
# Most severe first: a repo takes the first class any of its checkpoints has.
SEVERITY: tuple[RepoClass, ...] = ("unreadable", "declared_inconsistent", "undeclared", "declared_consistent",
                                   "channel_absent", "no_weights")
BN_CLASSES: frozenset[str] = frozenset({"declared_consistent", "declared_inconsistent", "undeclared"})
FINDING_KEYS = ("code", "path", "message")  # what a census file or journal stores of each finding


def _issue_from_stored(value: Any) -> Any:
    """A finding as a census file or journal stores it (``{code, path, message}``) read back as an issue; the
    severity is the code's own (errors, for every finding the census records)."""
    if not isinstance(value, Mapping) or not set(value) <= set(FINDING_KEYS) | {"severity", "file"}:
        return value  # not a stored finding: pydantic reports what is wrong with it
    info = CODES.get(str(value.get("code")))
    return {"severity": info.severity if info is not None else "error", "file": "", "path": "", **value}


class CheckpointReport(BaseModel):
    """One checkpoint (a single file or a sharded set) of a repo."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The .safetensors file, or the index of a sharded checkpoint.")
    kind: Literal["single", "sharded"]
    files: list[str] = Field(default_factory=list)
    status: RepoClass
    reason: str
    bn_layers: int = 0
    declared: bool = False
    record_source: Literal["header", "card"] | None = None
    declared_convention: str | None = None
    findings: list[Issue] = Field(default_factory=list, description=(
        "The validator's issues behind an inconsistent or unreadable declaration (stored as code, path, message)."))
    file_size: int = 0
    header_bytes: int = Field(default=0, description="8-byte length fields plus headers, all files.")
    bytes_read: int = Field(default=0, description="Body bytes of the successful responses while reading it.")
    activation_sites: int = Field(default=0, description="Activation-quantization sites (0: not quantized).")
    scales_file: str | None = Field(default=None, description="The scales file beside the weights, if any.")

    @field_validator("findings", mode="before")
    @classmethod
    def _stored_findings(cls, value: Any) -> Any:
        return [_issue_from_stored(item) for item in value] if isinstance(value, list) else value

    @field_serializer("findings")
    def _finding_records(self, findings: list[Issue]) -> list[dict[str, str]]:
        return [{key: getattr(issue, key) for key in FINDING_KEYS} for issue in findings]


class RepoCensus(BaseModel):
    """The census entry of one repo at one revision (deterministic: no timings, no retry counts)."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str
    sha: str | None
    status: RepoClass
    reason: str
    checkpoints: list[CheckpointReport] = Field(default_factory=list)
    card: Literal["absent", "no_block", "block", "unreadable"] = "absent"
    bytes_read: int = 0

    @property
    def bn(self) -> bool:
        return self.status in BN_CLASSES


def _repo_status(checkpoints: list[CheckpointReport]) -> RepoClass:
    found = {c.status for c in checkpoints}
    return next(s for s in SEVERITY if s in found)


# --- the pure part: headers and card in, class out -------------------------------------------------------------------


def _natural(name: str) -> list[Any]:
    """Sort key putting ``features.4`` before ``features.11`` (module order for the usual numbered layers)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _shapes(tensors: Mapping[str, TensorInfo]) -> dict[str, tuple[int, ...]]:
    return {name: info.shape for name, info in tensors.items()}


def check_layers(record: Declaration, tensors: Mapping[str, TensorInfo]) -> list[Issue]:
    """The declared BatchNorm layers against the running buffers a header holds (names, lengths, affine tensors).

    The validator's own header-only check (:func:`~bnconvention.validation.consistency.layer_issues`, codes
    ``layers.*``); the digest checks that follow it in ``bnconvention validate`` need the tensor bytes and are left
    to ``hub validate``.
    """
    issues, _ = layer_issues(record, _shapes(tensors), display="the header", source="")
    return issues


@dataclass(frozen=True)
class CheckpointVerdict:
    """A checkpoint's class, the reason shown for it and the validator's issues behind it."""

    status: RepoClass
    reason: str
    findings: list[Issue] = field(default_factory=list)


def _errors(issues: list[Issue]) -> list[Issue]:
    return [issue for issue in issues if issue.severity == "error"]


def stamped_records(headers: list[tuple[str, SafetensorsHeader]], *,
                    source: str) -> tuple[list[tuple[str, Any]], CheckpointVerdict | None]:
    """The records stamped in a checkpoint's headers, ``(file, data)``; or the verdict when one is not JSON or the
    shards carry different records (every shard of a checkpoint must carry the same one)."""
    found: list[tuple[str, Any]] = []
    for filename, header in headers:
        data, _, issues = header_record(header, source=f"{source}/{filename}")
        if _errors(issues):  # safetensors.record_not_json (a record that is not canonical is a warning only)
            return [], CheckpointVerdict(status="declared_inconsistent",
                                         reason=f"{filename}: the stamped record is not valid JSON",
                                         findings=_errors(issues))
        if data is not None:
            found.append((filename, data))
    if len(found) > 1 and not all(records_equal(found[0][1], data) for _, data in found[1:]):
        return [], CheckpointVerdict(status="declared_inconsistent", reason="the shards carry different records",
                                     findings=[new_issue("release.card_header_mismatch", file=source,
                                                         message=f"{found[0][0]} and {found[1][0]} differ")])
    return found, None


def undeclared_verdict(bn: list[str]) -> CheckpointVerdict:
    """The class of a checkpoint that declares nothing: ``undeclared`` with BatchNorm statistics, else
    ``channel_absent``."""
    if bn:
        shown = ", ".join(bn[:3]) + (", ..." if len(bn) > 3 else "")
        return CheckpointVerdict(status="undeclared", reason=f"{plural(len(bn), 'BatchNorm layer')} with running "
                                                             f"statistics ({shown}) and no declaration")
    return CheckpointVerdict(status="channel_absent",
                             reason="no BatchNorm running statistics (channel absent), nothing declared")


def declared_verdict(header: tuple[str, Any] | None, card: Any | None, *, shapes: Mapping[str, tuple[int, ...]],
                     bn: list[str], source: str) -> tuple[CheckpointVerdict, str | None]:
    """The class of a checkpoint that declares something (in its header, or else in the card bound to it), and the
    declared convention's name: the validator's issues mapped to a class. An invalid record, a refit annotation, a
    card that differs from the header or layers that differ from the header's buffers (any error of
    :func:`~bnconvention.validation.consistency.check_consistency`) make it ``declared_inconsistent``."""
    place: Literal["header", "card"] = "header" if header is not None else "card"
    data = header[1] if header is not None else card
    record, issues = check_record(data, source=source)
    errors = _errors(issues)
    if record is None or errors:
        best = best_issue(errors or issues)
        where = f" at {best.path}" if best is not None and best.path else ""
        detail = f"{best.code}{where}: {best.message}" if best is not None else "invalid record"
        return CheckpointVerdict(status="declared_inconsistent",
                                 reason=f"the declared record ({place}) is invalid: {detail}", findings=errors), None
    stored = StoredRecord(data, record, header[0] if header is not None else CARD_NAME)
    wrong = location_issues(stored, place=place)
    if wrong:
        return CheckpointVerdict(status="declared_inconsistent", reason=f"the {place} holds a refit annotation where "
                                 "the checkpoint's own declaration belongs", findings=wrong), record.convention.name
    card_stored = None if header is None or card is None else StoredRecord(
        card, check_record(card, source="<card>")[0], CARD_NAME)
    result = check_consistency(header=stored if header is not None else None,
                               card=card_stored if header is not None else stored, shapes=shapes,
                               display="the header")
    errors = _errors(result.issues)
    name = record.convention.name
    if card_stored is not None and not result.agrees:
        first = result.differences[0] if result.differences else ""
        return CheckpointVerdict(status="declared_inconsistent", reason=f"the card's record differs from the header's "
                                 f"(first at {first or '/'}; {plural(len(result.differences), 'difference')})",
                                 findings=errors), name
    if errors:
        return CheckpointVerdict(status="declared_inconsistent", reason=f"the declaration does not match the header's "
                                 f"running buffers: {errors[0].code}: {errors[0].message}", findings=errors), name
    if bn:
        return CheckpointVerdict(status="declared_consistent",
                                 reason=f"{plural(len(bn), 'BatchNorm layer')} declared as {name} ({place}); layers "
                                 "match the header"), name
    return CheckpointVerdict(status="channel_absent",
                             reason=f"no BatchNorm running statistics (channel absent), declared as {name}"), name


def classify_checkpoint(weights: WeightsSet, *, card_record: Any | None, card_bound: bool,
                        source: str) -> CheckpointReport:
    """Classify one checkpoint from its headers and, when the card describes it, the card's record."""
    shapes = _shapes(weights.tensors())
    bn = sorted(bn_layers_from_tensor_names(shapes), key=_natural)
    report = CheckpointReport(name=weights.name, kind=weights.kind,  # type: ignore[arg-type]
                              files=[h.filename for h in weights.headers], status="unreadable", reason="",
                              bn_layers=len(bn), file_size=weights.total_size,
                              header_bytes=sum(h.header.data_offset for h in weights.headers),
                              bytes_read=weights.bytes_read)
    stamped, verdict = stamped_records([(h.filename, h.header) for h in weights.headers], source=source)
    card = card_record if card_bound else None
    if verdict is not None:
        report.declared = True
    elif not stamped and card is None:
        verdict = undeclared_verdict(bn)
    else:
        report.declared, report.record_source = True, "header" if stamped else "card"
        verdict, report.declared_convention = declared_verdict(stamped[0] if stamped else None, card,
                                                               shapes=shapes, bn=bn, source=source)
    report.status, report.reason, report.findings = verdict.status, verdict.reason, list(verdict.findings)
    return report


# --- the I/O part ------------------------------------------------------------------------------------------------


def _unreadable_checkpoint(name: str, kind: str, exc: BaseException, client: HubClient) -> CheckpointReport:
    return CheckpointReport(name=name, kind=kind, files=[], status="unreadable",  # type: ignore[arg-type]
                            reason=client.scrub(one_line(exc)))


def read_card(client: HubClient, repo_id: str, *, revision: str) -> tuple[str, Any | None, str | None, int]:
    """(card state, the bnconvention block or None, the error text when unreadable, bytes read)."""
    try:
        data = client.read_small_file(repo_id, CARD_NAME, revision=revision, max_bytes=MAX_CARD_BYTES)
    except BnConventionError as exc:
        if is_retryable(exc):
            raise
        return "unreadable", None, client.scrub(one_line(exc)), 0
    if data is None:
        return "absent", None, None, 0
    try:
        block = read_card_record(decode_card(data, source=f"{repo_id}/{CARD_NAME}"), source=f"{repo_id}/{CARD_NAME}")
    except UntrustedInputError as exc:
        return "unreadable", None, one_line(exc), len(data)
    return ("no_block" if block is None else "block"), block, None, len(data)


def _stamped_data(weights: WeightsSet) -> list[Any]:
    """The records stamped in a checkpoint's headers (those that are JSON), as data."""
    found = (header_record(h.header, source=h.filename)[0] for h in weights.headers)
    return [data for data in found if data is not None]


def _check_running(client: HubClient, repo_id: str, sha: str, weights: WeightsSet, report: CheckpointReport, *,
                   card_block: Any | None, budget: int) -> None:
    """Compare a consistent declaration's running digests with the running buffers' bytes (a few KB of ranged
    reads); a stale declaration becomes ``declared_inconsistent``. Updates ``report`` in place."""
    data = next(iter(_stamped_data(weights)), None) if report.record_source == "header" else card_block
    source = f"{repo_id}/{weights.name}"
    record, _ = check_record(data, source=source)
    if not isinstance(record, Declaration):
        return
    outcome = check_running_statistics(client, repo_id, weights, record, revision=sha, budget=budget)
    report.bytes_read += outcome.bytes_read
    if not outcome.checked:
        report.reason += (f"; running digests not checked ({plural(outcome.running_bytes, 'byte')} of running "
                          f"statistics, budget {budget})")
    elif outcome.mismatch is not None:
        report.status = "declared_inconsistent"
        report.reason = f"the declaration is stale: {outcome.mismatch}"
        report.findings = [new_issue("digests.running_mismatch", file=source, path=outcome.mismatch_path,
                                     message=outcome.mismatch)]
    else:
        report.reason += f"; running statistics match the declared digests ({plural(outcome.bytes_read, 'byte')} read)"


def read_checkpoints(client: HubClient, repo_id: str, *, sha: str, filenames: list[str],
                     speculative: int | None = None) -> list[WeightsSet | CheckpointReport]:
    """The headers of every checkpoint of the repo (sharded ones through their index, then the single files no index
    claims); a malformed one becomes an ``unreadable`` checkpoint, a Hub failure that outlasts the retries is
    raised."""
    kwargs = {} if speculative is None else {"speculative": speculative}
    indexes, singles = weights_files(filenames)
    available = set(filenames)
    sets: list[WeightsSet | CheckpointReport] = []
    claimed: set[str] = set()
    for index in indexes:
        try:
            weights = read_sharded(client, repo_id, index, revision=sha, available=available, **kwargs)
        except BnConventionError as exc:
            if is_retryable(exc):
                raise
            sets.append(_unreadable_checkpoint(index, "sharded", exc, client))
            continue
        claimed.update(h.filename for h in weights.headers)
        sets.append(weights)
    for name in singles:
        if name in claimed:
            continue
        try:
            sets.append(read_single(client, repo_id, name, revision=sha, **kwargs))
        except BnConventionError as exc:
            if is_retryable(exc):
                raise
            sets.append(_unreadable_checkpoint(name, "single", exc, client))
    return sets


def bound_checkpoint(sets: list[WeightsSet | CheckpointReport], card_block: Any | None) -> WeightsSet | None:
    """The checkpoint the card describes (:func:`~bnconvention.validation.consistency.bind_record`): the repo's only
    one, or the one whose header carries the same record (the census reads no weights, so no digest decides)."""
    readable = [s for s in sets if isinstance(s, WeightsSet)]
    single = len(sets) == 1
    if not single and card_block is None:
        return None
    return bind_record(card_block, readable, only=single, stored_forms=_stamped_data)


def classify_repo(client: HubClient, repo_id: str, *, sha: str, filenames: list[str],
                  speculative: int | None = None, running_check_bytes: int = RUNNING_CHECK_BYTES) -> RepoCensus:
    """Read the repo's headers (and card) at commit ``sha`` and classify it. Hub failures that outlast the retries
    are raised (the crawl records them and goes on); malformed files become ``unreadable`` checkpoints.

    A consistent declaration's running digests are also compared with the running buffers' bytes when those fit
    ``running_check_bytes`` (0: never), so a stale declaration is caught without downloading the weights."""
    indexes, singles = weights_files(filenames)
    if not indexes and not singles:
        others = sorted(f for f in filenames if f.endswith(FOREIGN_WEIGHTS_SUFFIXES))
        reason = "no .safetensors weights" + (f" (other weights files, never opened: {', '.join(others[:3])}; "
                                              "convert them to safetensors to have them classified and audited)"
                                              if others else "")
        return RepoCensus(repo_id=repo_id, sha=sha, status="no_weights", reason=reason)
    sets, scales = split_scales_files(read_checkpoints(client, repo_id, sha=sha, filenames=filenames,
                                                       speculative=speculative))
    card_state, card_block, card_error, card_bytes = ("absent", None, None, 0)
    if CARD_NAME in filenames:
        card_state, card_block, card_error, card_bytes = read_card(client, repo_id, revision=sha)
    bound = bound_checkpoint(sets, card_block)
    checkpoints: list[CheckpointReport] = []
    for item in sets:
        if isinstance(item, CheckpointReport):
            checkpoints.append(item)
            continue
        report = classify_checkpoint(item, card_record=card_block, card_bound=item is bound,
                                     source=f"{repo_id}/{item.name}")
        describe_quantization(report, item, scales)
        if report.status == "declared_consistent" and report.bn_layers:
            _check_running(client, repo_id, sha, item, report, card_block=card_block, budget=running_check_bytes)
        if card_state == "unreadable" and report.bn_layers and report.status != "declared_inconsistent":
            report.status = "unreadable"
            report.reason = f"{CARD_NAME} is unreadable, so the declaration cannot be checked: {card_error}"
        checkpoints.append(report)
    status = _repo_status(checkpoints)
    first = next(c for c in checkpoints if c.status == status)
    reason = first.reason if len(checkpoints) == 1 else f"{first.name}: {first.reason}"
    bytes_read = card_bytes + sum(c.bytes_read for c in checkpoints)
    return RepoCensus(repo_id=repo_id, sha=sha, status=status, reason=reason, checkpoints=checkpoints,
                      card=card_state, bytes_read=bytes_read)  # type: ignore[arg-type]


def failed_repo(repo_id: str, sha: str | None, exc: BaseException, client: HubClient) -> RepoCensus:
    """The census entry of a repo whose reading failed (after retries): unreadable, with the error."""
    return RepoCensus(repo_id=repo_id, sha=sha, status="unreadable",
                      reason=f"the Hub failed while reading it: {client.scrub(describe(exc))}")


__all__ = [
    "BN_CLASSES",
    "REPO_CLASSES",
    "SEVERITY",
    "CheckpointReport",
    "RepoCensus",
    "RepoClass",
    "CheckpointVerdict",
    "bound_checkpoint",
    "check_layers",
    "classify_checkpoint",
    "classify_repo",
    "declared_verdict",
    "failed_repo",
    "read_card",
    "read_checkpoints",
    "stamped_records",
    "undeclared_verdict",
]
