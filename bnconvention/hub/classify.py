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

Digests bind a record to tensor *bytes*. The census reads no weights, but it does read the running buffers of a
consistent declaration (a few KB, :mod:`bnconvention.hub.running`) and compares their digests, so a stale
declaration (buffers changed after it was written) is ``declared_inconsistent``; the trainable digest needs every
weight and is left to ``hub validate``, which downloads. A repo with several checkpoints takes the most severe class of its checkpoints
(:data:`SEVERITY`), and every checkpoint's own class is kept in the report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from bnconvention.errors import BnConventionError, CanonicalJSONError, UntrustedInputError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.card import decode_card, read_card_record
from bnconvention.formats.digests import bn_layers_from_tensor_names
from bnconvention.formats.safetensors_header import TensorInfo
from bnconvention.formats.text import plural
from bnconvention.hub.client import HubClient
from bnconvention.hub.headers import WeightsSet, read_sharded, read_single, weights_files
from bnconvention.hub.retry import describe, is_retryable
from bnconvention.hub.running import RUNNING_CHECK_BYTES, check_running_statistics
from bnconvention.standard.locations import record_from_header
from bnconvention.standard.models import Declaration, to_dict
from bnconvention.validation import best_issue, check_record
from bnconvention.validation.release import diff_pointers, layer_issues

RepoClass: TypeAlias = Literal["no_weights", "channel_absent", "declared_consistent", "declared_inconsistent",
                               "undeclared", "unreadable"]
REPO_CLASSES: tuple[RepoClass, ...] = ("no_weights", "channel_absent", "declared_consistent",
                                       "declared_inconsistent", "undeclared", "unreadable")
# Most severe first: a repo takes the first class any of its checkpoints has.
SEVERITY: tuple[RepoClass, ...] = ("unreadable", "declared_inconsistent", "undeclared", "declared_consistent",
                                   "channel_absent", "no_weights")
BN_CLASSES: frozenset[str] = frozenset({"declared_consistent", "declared_inconsistent", "undeclared"})
CARD_NAME = "README.md"
MAX_CARD_BYTES = 4 * 1024 * 1024  # the validator's bound for a model card


class Finding(BaseModel):
    """One problem found in a declaration, with the validator's code and a JSON pointer into the record."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    path: str = ""
    message: str


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
    findings: list[Finding] = Field(default_factory=list)
    file_size: int = 0
    header_bytes: int = Field(default=0, description="8-byte length fields plus headers, all files.")
    bytes_read: int = Field(default=0, description="Body bytes of the successful responses while reading it.")


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


def _same(a: Any, b: Any) -> bool:
    try:
        return canonical_sha256(a) == canonical_sha256(b)
    except CanonicalJSONError:
        return bool(a == b)


def check_layers(record: Declaration, tensors: Mapping[str, TensorInfo]) -> list[Finding]:
    """The declared BatchNorm layers against the running buffers a header holds (names, lengths, affine tensors).

    The validator's own header-only check (``layer_issues``, codes ``layers.*``); the digest checks that follow it
    in ``bnconvention validate`` need the tensor bytes and are left to ``hub validate``.
    """
    shapes = {name: info.shape for name, info in tensors.items()}
    issues, _ = layer_issues(record, shapes, display="the header", source="")
    return [Finding(code=issue.code, path=issue.path, message=issue.message) for issue in issues]


def classify_checkpoint(weights: WeightsSet, *, card_record: Any | None, card_bound: bool,
                        source: str) -> CheckpointReport:
    """Classify one checkpoint from its headers and, when the card describes it, the card's record."""
    tensors = weights.tensors()
    bn = sorted(bn_layers_from_tensor_names({name: info.shape for name, info in tensors.items()}), key=_natural)
    report = CheckpointReport(name=weights.name, kind=weights.kind,  # type: ignore[arg-type]
                              files=[h.filename for h in weights.headers], status="unreadable", reason="",
                              bn_layers=len(bn), file_size=weights.total_size,
                              header_bytes=sum(h.header.data_offset for h in weights.headers),
                              bytes_read=weights.bytes_read)

    def verdict(status: RepoClass, reason: str, findings: list[Finding] | None = None) -> CheckpointReport:
        report.status, report.reason = status, reason
        report.findings = list(findings or [])
        return report

    header_records: list[tuple[str, Any]] = []
    for item in weights.headers:
        try:
            data = record_from_header(item.header, source=f"{source}/{item.filename}")
        except UntrustedInputError as exc:
            report.declared = True
            return verdict("declared_inconsistent", f"{item.filename}: the stamped record is not valid JSON",
                           [Finding(code="safetensors.record_not_json", message=" ".join(str(exc).split()))])
        if data is not None:
            header_records.append((item.filename, data))
    if len(header_records) > 1 and not all(_same(header_records[0][1], d) for _, d in header_records[1:]):
        report.declared = True
        return verdict("declared_inconsistent", "the shards carry different records",
                       [Finding(code="release.card_header_mismatch",
                                message=f"{header_records[0][0]} and {header_records[1][0]} differ")])
    header_record = header_records[0][1] if header_records else None
    card_data = card_record if card_bound else None
    data = header_record if header_record is not None else card_data
    if data is None:
        if bn:
            shown = ", ".join(bn[:3]) + (", ..." if len(bn) > 3 else "")
            return verdict("undeclared", f"{plural(len(bn), 'BatchNorm layer')} with running statistics ({shown}) and no "
                                         "declaration")
        return verdict("channel_absent", "no BatchNorm running statistics (channel absent), nothing declared")

    report.declared = True
    report.record_source = "header" if header_record is not None else "card"
    record, issues = check_record(data, source=source)
    errors = [i for i in issues if i.severity == "error"]
    if record is None or errors:
        best = best_issue(errors or issues)
        where = f" at {best.path}" if best is not None and best.path else ""
        detail = f"{best.code}{where}: {best.message}" if best is not None else "invalid record"
        return verdict("declared_inconsistent", f"the declared record ({report.record_source}) is invalid: "
                                                f"{detail}",
                       [Finding(code=i.code, path=i.path, message=i.message) for i in errors])
    report.declared_convention = record.convention.name
    if not isinstance(record, Declaration):
        return verdict("declared_inconsistent", f"the {report.record_source} holds a refit annotation where the "
                                                "checkpoint's own declaration belongs",
                       [Finding(code="location.wrong_kind", path="/kind", message="refit_annotation found")])
    if header_record is not None and card_data is not None and not _same(to_dict(record), _normalized(card_data)):
        diffs = diff_pointers(_normalized(card_data), to_dict(record))
        pointer = diffs[0][0] if diffs else ""
        return verdict("declared_inconsistent", f"the card's record differs from the header's (first at "
                                                f"{pointer or '/'}; {plural(len(diffs), 'difference')})",
                       [Finding(code="release.card_header_mismatch", path=p, message="card and header differ")
                        for p, _, _ in diffs[:20]])
    findings = check_layers(record, tensors)
    if findings:
        return verdict("declared_inconsistent", f"the declaration does not match the header's running buffers: "
                                                f"{findings[0].code}: {findings[0].message}", findings)
    if bn:
        return verdict("declared_consistent", f"{plural(len(bn), 'BatchNorm layer')} declared as {record.convention.name} "
                                              f"({report.record_source}); layers match the header")
    return verdict("channel_absent", f"no BatchNorm running statistics (channel absent), declared as "
                                     f"{record.convention.name}")


def _normalized(data: Any) -> Any:
    """A card record in the form headers are compared in: the model's dump when it parses, else as is."""
    record, _ = check_record(data, source="<card>")
    return to_dict(record) if record is not None else data


# --- the I/O part ------------------------------------------------------------------------------------------------


def _unreadable_checkpoint(name: str, kind: str, exc: BaseException, client: HubClient) -> CheckpointReport:
    reason = client.scrub(" ".join(str(exc).split()))
    return CheckpointReport(name=name, kind=kind, files=[], status="unreadable",  # type: ignore[arg-type]
                            reason=reason)


def read_card(client: HubClient, repo_id: str, *, revision: str) -> tuple[str, Any | None, str | None, int]:
    """(card state, the bnconvention block or None, the error text when unreadable, bytes read)."""
    try:
        data = client.read_small_file(repo_id, CARD_NAME, revision=revision, max_bytes=MAX_CARD_BYTES)
    except BnConventionError as exc:
        if is_retryable(exc):
            raise
        return "unreadable", None, client.scrub(" ".join(str(exc).split())), 0
    if data is None:
        return "absent", None, None, 0
    try:
        block = read_card_record(decode_card(data, source=f"{repo_id}/{CARD_NAME}"), source=f"{repo_id}/{CARD_NAME}")
    except UntrustedInputError as exc:
        return "unreadable", None, " ".join(str(exc).split()), len(data)
    return ("no_block" if block is None else "block"), block, None, len(data)


def _check_running(client: HubClient, repo_id: str, sha: str, weights: WeightsSet, report: CheckpointReport, *,
                   card_block: Any | None, budget: int) -> None:
    """Compare a consistent declaration's running digests with the running buffers' bytes (a few KB of ranged
    reads); a stale declaration becomes ``declared_inconsistent``. Updates ``report`` in place."""
    if report.record_source == "header":
        records = (record_from_header_safe(h.header) for h in weights.headers)
        data = next((r for r in records if r is not None), None)
    else:
        data = card_block
    record, _ = check_record(data, source=f"{repo_id}/{weights.name}")
    if not isinstance(record, Declaration):
        return
    outcome = check_running_statistics(client, repo_id, weights, record, revision=sha, budget=budget)
    report.bytes_read += outcome.bytes_read
    if not outcome.checked:
        report.reason += (f"; running digests not checked ({plural(outcome.running_bytes, 'byte')} of running statistics, "
                          f"budget {budget})")
    elif outcome.mismatch is not None:
        report.status = "declared_inconsistent"
        report.reason = f"the declaration is stale: {outcome.mismatch}"
        report.findings = [Finding(code="digests.running_mismatch", path=outcome.mismatch_path,
                                   message=outcome.mismatch)]
    else:
        report.reason += f"; running statistics match the declared digests ({plural(outcome.bytes_read, 'byte')} read)"


def classify_repo(client: HubClient, repo_id: str, *, sha: str, filenames: list[str],
                  speculative: int | None = None, running_check_bytes: int = RUNNING_CHECK_BYTES) -> RepoCensus:
    """Read the repo's headers (and card) at commit ``sha`` and classify it. Hub failures that outlast the retries
    are raised (the crawl records them and goes on); malformed files become ``unreadable`` checkpoints.

    A consistent declaration's running digests are also compared with the running buffers' bytes when those fit
    ``running_check_bytes`` (0: never), so a stale declaration is caught without downloading the weights."""
    kwargs = {} if speculative is None else {"speculative": speculative}
    indexes, singles = weights_files(filenames)
    if not indexes and not singles:
        others = sorted(f for f in filenames if f.endswith((".bin", ".pt", ".pth", ".ckpt", ".h5", ".pkl")))
        reason = "no .safetensors weights" + (f" (other weights files, never opened: {', '.join(others[:3])})"
                                              if others else "")
        return RepoCensus(repo_id=repo_id, sha=sha, status="no_weights", reason=reason)

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

    card_state, card_block, card_error, card_bytes = ("absent", None, None, 0)
    if CARD_NAME in available:
        card_state, card_block, card_error, card_bytes = read_card(client, repo_id, revision=sha)
    readable = [s for s in sets if isinstance(s, WeightsSet)]
    # The card describes the release's checkpoint: the only one, or the one whose header carries the same record.
    bound: WeightsSet | None = readable[0] if len(sets) == 1 and readable else None
    if bound is None and card_block is not None:
        for weights in readable:
            records = [record_from_header_safe(h.header) for h in weights.headers]
            if any(r is not None and _same(r, card_block) for r in records):
                bound = weights
                break

    checkpoints: list[CheckpointReport] = []
    for item in sets:
        if isinstance(item, CheckpointReport):
            checkpoints.append(item)
            continue
        report = classify_checkpoint(item, card_record=card_block, card_bound=item is bound,
                                     source=f"{repo_id}/{item.name}")
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


def record_from_header_safe(header: Any) -> Any | None:
    try:
        return record_from_header(header)
    except UntrustedInputError:
        return None


def failed_repo(repo_id: str, sha: str | None, exc: BaseException, client: HubClient) -> RepoCensus:
    """The census entry of a repo whose reading failed (after retries): unreadable, with the error."""
    return RepoCensus(repo_id=repo_id, sha=sha, status="unreadable",
                      reason=f"the Hub failed while reading it: {client.scrub(describe(exc))}")


__all__ = [
    "BN_CLASSES",
    "REPO_CLASSES",
    "SEVERITY",
    "CheckpointReport",
    "Finding",
    "RepoCensus",
    "RepoClass",
    "check_layers",
    "classify_checkpoint",
    "classify_repo",
    "failed_repo",
    "read_card",
]
