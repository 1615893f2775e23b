"""Validate a model release: its weights files, its model card and its refit annotations, and cross-check them.

Cross-checks: the card's record and the record stamped in the weights must be the same record; a declaration's
digests must match the tensors of the file it describes, and its BatchNorm layers must match the running buffers
in the header (names and ``num_features``): the rule of :mod:`bnconvention.validation.consistency`, which the Hub
census and ``publish`` apply too. A weights file with running buffers and no declaration is flagged; refit
annotations must describe a file of the release, and the refit results the card's model-index copies must agree
with them (:mod:`bnconvention.validation.model_index`); shard indexes must agree with their shards, and the shards of
a readable index are checked as one checkpoint (:func:`merge_shards`).

:func:`validate_release` runs named stages, each usable alone: :func:`read_weights_file`,
:func:`read_release_card`, :func:`bind_release_card`, :func:`check_weights_file`, then the annotations, the
card's model-index refit results and :func:`check_index`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.errors import BnConventionError, JSONInputError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.checkpoint_files import CheckpointFiles, open_checkpoint
from bnconvention.formats.digests import DigestSet, bn_layers_from_tensor_names, checkpoint_digests, file_digests
from bnconvention.formats.running_values import impossible_statistics
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.formats.safetensors_index import MAX_INDEX_BYTES, index_mismatch, index_missing_shards, parse_index
from bnconvention.formats.text import plural
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import BatchNormState, Declaration, RefitAnnotation
from bnconvention.validation.consistency import (
    StoredRecord,
    bind_record,
    check_consistency,
    diff_pointers,
    layer_issues,
    location_issues,
    normalized,
    records_equal,
)
from bnconvention.validation.issues import Issue, Severity, new_issue
from bnconvention.validation.model_index import check_model_index_refits
from bnconvention.validation.records import check_record
from bnconvention.validation.schema_errors import show
from bnconvention.validation.semantics import short
from bnconvention.validation.signatures import check_signature, release_signatures
from bnconvention.validation.sources import header_record, load_card, load_header, load_json_record, read_bytes


@dataclass
class FileSummary:
    """One line of the text report for one file: what it holds."""

    file: str
    kind: str  # "weights", "card", "record", "index"
    note: str


@dataclass
class Release:
    """A folder's files to validate together. ``(display, path)`` pairs; display names go into the report."""

    directory: Path
    weights: list[tuple[str, Path]] = field(default_factory=list)
    card: tuple[str, Path] | None = None
    card_explicit: bool = False
    annotations: list[tuple[str, Path]] = field(default_factory=list)
    indexes: list[tuple[str, Path]] = field(default_factory=list)  # *.safetensors.index.json of sharded weights


@dataclass
class WeightsFile:
    """One weights file of a release as read: its header, the record stamped in it, and its digests (computed once
    per set of BatchNorm layer names, on demand: streaming the tensors is the expensive part)."""

    display: str
    path: Path
    header: SafetensorsHeader | None = None
    record_data: Any | None = None
    record_present: bool = False
    record: Declaration | RefitAnnotation | None = None
    digests: dict[tuple[str, ...], DigestSet] = field(default_factory=dict)
    shards: CheckpointFiles | None = None  # a sharded checkpoint, checked as one (path: its index)

    def digest_set(self, layers: list[str]) -> DigestSet:
        key = tuple(layers)
        if key not in self.digests:
            if self.header is None:
                raise RuntimeError(f"{self.display}: digests requested for a file whose header is unreadable")
            self.digests[key] = (checkpoint_digests(self.shards, bn_layers=layers) if self.shards is not None
                                 else file_digests(self.path, bn_layers=layers, header=self.header))
        return self.digests[key]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {} if self.header is None else {n: t.shape for n, t in self.header.tensors.items()}

    def header_bn_layers(self) -> list[str]:
        return bn_layers_from_tensor_names(self.shapes())

    def stored(self) -> StoredRecord | None:
        """The stamped record where the consistency core takes it (``None`` when nothing readable is stamped)."""
        return None if self.record_data is None else StoredRecord(self.record_data, self.record, self.display)


@dataclass
class ReleaseCard:
    """The release's model card as read: its bnconvention block (``stored``, ``None`` when it has none or it cannot
    be read as JSON data), the issues found reading it and its summary line."""

    display: str
    stored: StoredRecord | None = None
    issues: list[Issue] = field(default_factory=list)
    summary: FileSummary | None = None
    metadata: dict[str, Any] | None = None  # the whole front matter (the model-index check reads it)

    @property
    def declaration(self) -> Declaration | None:
        record = self.stored.record if self.stored is not None else None
        return record if isinstance(record, Declaration) else None


def describe_record(record: Declaration | RefitAnnotation) -> str:
    if isinstance(record, Declaration):
        layers = sum(len(s.layers) for s in record.deployed_state if isinstance(s, BatchNormState))
        state = plural(layers, "BatchNorm layer") if layers else (
            "no BatchNorm layers: channel absent")
        return f"declaration {record.convention.name} ({state})"
    return (f"refit annotation of {record.subject.filename} under {record.convention.name} "
            f"({len(record.cells)} cell{'s' if len(record.cells) != 1 else ''}, channel {record.channel})")


# --- the stages of validate_release ---------------------------------------------------------------------------------


def read_weights_file(display: str, path: Path) -> tuple[WeightsFile, list[Issue]]:
    """Stage 1: one weights file's header and stamped record, with the issues of reading and checking the record."""
    weights = WeightsFile(display=display, path=path)
    weights.header, issues = load_header(path, source=display)
    if weights.header is None:
        return weights, issues
    weights.record_data, weights.record_present, found = header_record(weights.header, source=display)
    issues += found
    if weights.record_data is not None:
        weights.record, found = check_record(weights.record_data, source=display)
        issues += found
        issues += location_issues(StoredRecord(weights.record_data, weights.record, display), place="header")
    return weights, issues


def read_release_card(display: str, path: Path, *, weights: Sequence[WeightsFile], explicit: bool,
                      has_weights: bool) -> ReleaseCard:
    """Stage 2: the card and its record, and whether it lacks a record that the weights or the command line
    expected."""
    content = load_card(path, source=display)
    card = ReleaseCard(display=display, issues=list(content.issues), metadata=content.metadata)
    if content.block is not None:
        record, found = check_record(content.block, source=display)
        card.stored = StoredRecord(content.block, record, display)
        card.issues += found + location_issues(card.stored, place="card")
    if card.stored is not None and card.stored.record is not None:
        note = describe_record(card.stored.record)
    elif not content.readable:
        note = "unreadable"
    else:
        note = "bnconvention block invalid" if content.has_block else "no bnconvention block"
    card.summary = FileSummary(display, "card", note)
    if content.readable and not content.has_block:
        stamped = [w.display for w in weights if w.record_present]
        if stamped:
            card.issues.append(new_issue("release.card_missing_record", file=display, message=(
                f"{display} has no {show('bnconvention')} block although {', '.join(stamped)} carries a "
                "stamped record; add the record to the card (bnconvention card README.md --from <weights>)")))
        elif explicit and not has_weights:
            card.issues.append(new_issue("card.no_record", file=display, message=(
                f"{display} carries no {show('bnconvention')} block in its YAML front matter: nothing was "
                "declared; stamp the card (bnconvention card)")))
    return card


def bind_release_card(card: ReleaseCard, weights: Sequence[WeightsFile], *,
                      single: bool) -> tuple[WeightsFile | None, list[Issue]]:
    """Stage 3: the weights file the card's declaration describes (:func:`bind_record`: the only one, the one whose
    stamped record is the card's, or the one whose trainable digest is the card's), or a ``release.card_unbound``
    issue."""
    declaration, readable = card.declaration, [w for w in weights if w.header is not None]
    if declaration is None or card.stored is None or not readable:
        return None, []
    layers = [layer.name for s in declaration.deployed_state if isinstance(s, BatchNormState) for layer in s.layers]
    bound = bind_record(card.stored.form, readable, only=single,
                        stored_forms=lambda w: [] if (own := w.stored()) is None else [own.form],
                        tensors_match=lambda w: w.digest_set(layers).trainable_sha256
                        == declaration.digests.trainable_sha256)
    if bound is not None:
        return bound, []
    return None, [new_issue("release.card_unbound", file=card.display, path="/digests/trainable_sha256", message=(
        f"{show(short(declaration.digests.trainable_sha256))} matches none of the release's weights files "
        f"({', '.join(w.display for w in weights)}); the card describes weights that are not "
        "here: rebuild its record from the released file"))]


def check_weights_file(weights: WeightsFile, card: ReleaseCard | None, *,
                       require_declaration: bool) -> tuple[list[Issue], FileSummary]:
    """Stage 4: one weights file against its declaration (:func:`check_consistency`: the card's record when the card
    is bound to this file, the header's, the tensors), or the issue of a file with running buffers and none."""
    if weights.header is None:
        return [], FileSummary(weights.display, "weights", "unreadable")
    result = check_consistency(header=weights.stored(), card=card.stored if card is not None else None,
                               shapes=weights.shapes(), display=weights.display, digests=weights.digest_set)
    issues = list(result.issues) + statistics_issues(weights, result.declaration)
    if card is not None and card.declaration is not None and weights.stored() is None and not weights.record_present:
        issues.append(new_issue("release.header_missing_record", file=weights.display, message=(
            f"{card.display} declares {card.declaration.convention.name} for {weights.display}, but its header "
            "carries no record (never stamped, or re-saved by another tool, e.g. a library's save_pretrained or "
            "push_to_hub); "
            f"restore it: bnconvention stamp {weights.display} --from-card {card.display}")))
    bn_layers = weights.header_bn_layers()
    if result.declaration is not None:
        mismatch = any(i.code.startswith("digests.") for i in result.issues)
        if result.declaration_file == weights.display:
            where, status = "", "digests do not match the tensors" if mismatch else "digests match the tensors"
        else:
            # A mismatch is an issue of the file holding the record (its pointers point into that record) and
            # is listed under it; this file's own line, "ok" (the weights are not what is wrong), must not
            # report it as its note.
            where = f" in {result.declaration_file}"
            status = "checked there (see its issues)" if mismatch else "digests match the tensors"
        agrees = f"; agrees with {card.display}" if result.agrees and card is not None else ""
        note = f"{describe_record(result.declaration)}{where}; {status}{agrees}"
    elif weights.record_present:
        note = "declaration present but invalid"
    elif bn_layers:
        severity: Severity = "error" if require_declaration else "warning"
        issues.append(new_issue("declaration.missing", file=weights.display, severity=severity, message=(
            f"{weights.display} has running statistics of {plural(len(bn_layers), 'BatchNorm layer')} "
            f"({', '.join(bn_layers[:3])}{', ...' if len(bn_layers) > 3 else ''}) and no declaration of how "
            "they were fitted; declare it (bnconvention declare) and stamp the file and its card")))
        note = f"{plural(len(bn_layers), 'BatchNorm layer')}, no declaration"
    else:
        note = "no BatchNorm running statistics (channel absent), nothing to declare"
    return issues, FileSummary(weights.display, "weights", note)


def statistics_issues(weights: WeightsFile, declaration: Declaration | None = None) -> list[Issue]:
    """The running statistics that cannot be, as issues of the weights file: NaN or infinite means and variances
    (``statistics.nonfinite``), negative variances (``statistics.negative_variance``), in every BatchNorm layer the
    header shows or ``declaration`` names (:mod:`bnconvention.formats.running_values`)."""
    if weights.header is None:
        return []
    layers = weights.header_bn_layers()
    if declaration is not None:
        layers += [layer.name for s in declaration.deployed_state if isinstance(s, BatchNormState)
                   for layer in s.layers if layer.name not in layers]
    try:
        found = impossible_statistics(weights.shards if weights.shards is not None else (weights.path, weights.header),
                                      layers=layers)
    except (BnConventionError, OSError):  # data cut short: the digests' reading reports it
        return []
    fix = ("the shipped state cannot be evaluated as it is; refit the statistics (bnconvention refit) or release "
           "the state they had before they broke")
    return [new_issue(item.code, file=weights.display, message=f"{item.describe()}: {fix}") for item in found]


def merge_shards(release: Release, weights_list: list[WeightsFile]) -> tuple[list[WeightsFile], list[Issue]]:
    """Stage 1b: the shards of each readable index as one checkpoint (display and path: the index), checked against
    the one record its shards carry (``docs/standard.md``: a record in a shard describes the whole checkpoint, and
    its digests are those of the merged file). Shards whose records differ are a ``release.card_header_mismatch``;
    an index that cannot be opened leaves its shards as they are (:func:`check_index` reports it)."""
    issues: list[Issue] = []
    by_path = {w.path.resolve(): w for w in weights_list}
    for display, path in release.indexes:
        try:
            files = open_checkpoint(path)
        except (BnConventionError, OSError):
            continue
        shards = [by_path.get(shard.path.resolve()) for shard in files.shards]
        if any(shard is None or shard.header is None for shard in shards):
            continue
        present = [w for w in shards if w is not None]
        stored = [w for w in present if w.record_data is not None]
        merged = WeightsFile(display=display, path=path, header=_merged_header(files), shards=files,
                             record_present=any(w.record_present for w in present))
        if stored:
            merged.record_data, merged.record = stored[0].record_data, stored[0].record
            other = next((w for w in stored[1:] if not records_equal(stored[0].record_data, w.record_data)), None)
            if other is not None:
                issues.append(new_issue("release.card_header_mismatch", file=display, message=(
                    f"{stored[0].display} and {other.display} carry different records; every shard of a checkpoint "
                    "carries the same one (stamp the checkpoint again)")))
        keep = {id(w) for w in present}
        weights_list = [w for w in weights_list if id(w) not in keep] + [merged]
    return weights_list, issues


def _merged_header(files: CheckpointFiles) -> SafetensorsHeader:
    """A header listing every tensor of a sharded checkpoint (names, dtypes, shapes; offsets are each shard's)."""
    first = files.header
    return SafetensorsHeader(tensors=files.tensors(), metadata=first.metadata, header_size=first.header_size,
                             data_size=files.data_size())


def validate_release(release: Release, *, require_declaration: bool = False) -> tuple[list[Issue], list[FileSummary]]:
    """Every issue of a release, and one summary line per file: read the weights and the card, bind the card to the
    file it describes, check each file against its declaration, then the refit annotations and shard indexes."""
    issues: list[Issue] = []
    summaries: list[FileSummary] = []
    weights_list: list[WeightsFile] = []
    for display, path in release.weights:
        weights, found = read_weights_file(display, path)
        weights_list.append(weights)
        issues += found
    shard_headers = {w.path.resolve(): w.header for w in weights_list}
    weights_list, found = merge_shards(release, weights_list)
    issues += found
    bound: WeightsFile | None = None
    card: ReleaseCard | None = None
    if release.card is not None:
        card = read_release_card(*release.card, weights=weights_list, explicit=release.card_explicit,
                                 has_weights=bool(release.weights))
        issues += card.issues
        summaries += [card.summary] if card.summary is not None else []
        bound, found = bind_release_card(card, weights_list, single=len(weights_list) == 1)
        issues += found
    for weights in weights_list:
        found, summary = check_weights_file(weights, card if weights is bound else None,
                                            require_declaration=require_declaration)
        issues += found
        summaries.append(summary)
    for display, path in release.annotations:
        found, summary = _check_annotation(display, path, release, weights_list)
        issues += found
        summaries.append(summary)
    if card is not None and card.metadata is not None:
        issues += check_model_index_refits(card.metadata, card=card.display, lookup=_annotation_lookup(release))
    for display, path in release.indexes:
        found, summary = check_index(display, path, headers=shard_headers)
        issues += found
        summaries.append(summary)
    beside = [d for d, _ in release.weights] + ([release.card[0]] if release.card is not None else [])
    for display, path in release_signatures(release.directory, beside, release.annotations):
        found, note = check_signature(display, path)
        issues += found
        summaries.append(FileSummary(display, "signature", note))
    return issues, _one_line_per_file(summaries)


def _one_line_per_file(summaries: list[FileSummary]) -> list[FileSummary]:
    """The index's own line and its sharded checkpoint's line (the same display), joined: the index first."""
    joined: dict[str, FileSummary] = {}
    for summary in summaries:
        seen = joined.get(summary.file)
        if seen is None:
            joined[summary.file] = summary
        else:
            first, second = (summary, seen) if summary.kind == "index" else (seen, summary)
            joined[summary.file] = FileSummary(summary.file, first.kind, f"{first.note}; {second.note}")
    return list(joined.values())


def _annotation_lookup(release: Release) -> Callable[[str], tuple[str, Any] | None]:
    """Find a refit annotation by its path in the repo: one of the release's, or the file beside its card (a card
    validated on its own); ``None`` when the release does not hold it."""
    def lookup(path: str) -> tuple[str, Any] | None:
        if path.startswith("/") or ".." in path.split("/"):
            return None
        target = (release.directory / path).resolve()
        display = next((d for d, p in release.annotations if p.resolve() == target), None)
        if display is None and not target.is_file():
            return None
        data, _, _ = load_json_record(target, source=display or path)
        return None if data is None else (display or path, data)

    return lookup


def check_index(display: str, path: Path, *, headers: Mapping[Path, SafetensorsHeader | None]
                ) -> tuple[list[Issue], FileSummary]:
    """A shard index checked by the census's rule (:mod:`bnconvention.formats.safetensors_index`): parsed, its shards in
    the folder, and in agreement with their headers. ``headers``: shard headers the release already read (by
    resolved path); other shards are read here, and their problems reported."""
    data, issues = read_bytes(path, source=display, limit=MAX_INDEX_BYTES)
    if data is None:
        return issues, FileSummary(display, "index", "unreadable")
    fix = "regenerate the index with the weights (save_pretrained, or safetensors' sharding) or remove it"
    try:
        index = parse_index(data, filename=path.name, source=display)
    except JSONInputError as exc:
        return [new_issue("safetensors.invalid_index", file=display, message=f"{exc}; {fix}")], FileSummary(
            display, "index", "unreadable")
    present = [shard for shard in index.shards if (path.parent / shard).is_file()]
    problems = [problem for problem in [index_missing_shards(index, present, holder="the folder")] if problem]
    shard_tensors: dict[str, list[str]] = {}
    for shard in present:
        shard_path = (path.parent / shard).resolve()
        header = headers.get(shard_path)
        if shard_path not in headers:
            header, found = load_header(shard_path, source=posixpath.join(posixpath.dirname(display), shard))
            issues += found
        if header is not None:
            shard_tensors[shard] = list(header.tensors)
    if not problems and len(shard_tensors) == len(index.shards):
        problems += [problem for problem in [index_mismatch(index, shard_tensors)] if problem]
    issues += [new_issue("safetensors.invalid_index", file=display, message=f"{display}: {problem}; {fix}")
               for problem in problems]
    note = (f"index of {plural(len(index.weight_map), 'tensor')} in {plural(len(index.shards), 'shard')}"
            + ("" if problems else "; agrees with the shards' headers" if len(shard_tensors) == len(index.shards)
               else ""))
    return issues, FileSummary(display, "index", note)


def _check_annotation(display: str, path: Path, release: Release,
                      weights_list: list[WeightsFile]) -> tuple[list[Issue], FileSummary]:
    data, _, issues = load_json_record(path, source=display)
    if data is None:
        return issues, FileSummary(display, "record", "unreadable")
    record, found = check_record(data, source=display)
    issues += found
    if record is None:
        return issues, FileSummary(display, "record", "invalid record")
    if isinstance(record, RefitAnnotation):
        try:
            expected = Path(annotation_filename(canonical_sha256(data))).name
        except BnConventionError:
            expected = None
        if expected is not None and path.name != expected:
            issues.append(new_issue("annotation.filename_mismatch", file=display, message=(
                f"{show(path.name)} is not the annotation's content address: its canonical JSON gives "
                f"{show(expected)}; "
                "rename it so two annotations never collide")))
        subject_path = (release.directory / record.subject.filename).resolve()
        subject = next((w for w in weights_list if w.path.resolve() == subject_path and w.header is not None), None)
        if subject is None:
            issues.append(new_issue("annotation.subject_missing", file=display, path="/subject/filename", message=(
                f"{show(record.subject.filename)} is not a readable weights file of this release; the annotation "
                "cannot be checked against the tensors it audited")))
        else:
            if isinstance(subject.record, Declaration):
                layers = [layer.name for s in subject.record.deployed_state if isinstance(s, BatchNormState)
                          for layer in s.layers]
            else:
                layers = subject.header_bn_layers()
            digests = subject.digest_set(layers)
            if digests.trainable_sha256 != record.subject.trainable_sha256:
                issues.append(new_issue("annotation.subject_mismatch", file=display,
                                        path="/subject/trainable_sha256", message=(
                    f"{show(short(record.subject.trainable_sha256))} does not match {subject.display}, whose trainable "
                    f"tensors give {digests.trainable_sha256}; the annotation audited other weights")))
            elif record.subject.running_sha256 is not None and digests.running_sha256 != record.subject.running_sha256:
                issues.append(new_issue("annotation.subject_running_changed", file=display,
                                        path="/subject/running_sha256", message=(
                    f"{show(short(record.subject.running_sha256))} is not the running digest of {subject.display} now "
                    f"({short(digests.running_sha256)}): the annotation audited an earlier deployed state")))
    return issues, FileSummary(display, "record", describe_record(record))


__all__ = [  # diff_pointers, layer_issues and normalized live in validation.consistency; importable here as before
    "FileSummary",
    "ReleaseCard",
    "Release",
    "WeightsFile",
    "bind_release_card",
    "check_index",
    "check_weights_file",
    "describe_record",
    "diff_pointers",
    "layer_issues",
    "normalized",
    "read_release_card",
    "read_weights_file",
    "statistics_issues",
    "validate_release",
]
