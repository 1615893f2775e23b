"""Validate a model release: its weights files, its model card and its refit annotations, and cross-check them.

Cross-checks: the card's record and the record stamped in the weights must be the same record; a declaration's
digests must match the tensors of the file it describes, and its BatchNorm layers must match the running buffers
in the header (names and ``num_features``); a weights file with running buffers and no declaration is flagged;
refit annotations must describe a file of the release.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bnconvention.errors import BnConventionError, CanonicalJSONError, JSONInputError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.digests import DigestSet, bn_layers_from_tensor_names, file_digests
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.formats.safetensors_index import MAX_INDEX_BYTES, index_mismatch, index_missing_shards, parse_index
from bnconvention.formats.text import plural
from bnconvention.standard.locations import annotation_filename
from bnconvention.standard.models import BatchNormState, Declaration, RefitAnnotation, to_dict
from bnconvention.validation.issues import Issue, join_pointer, make_pointer, new_issue
from bnconvention.validation.records import check_record
from bnconvention.validation.schema_errors import show
from bnconvention.validation.semantics import short
from bnconvention.validation.sources import header_record, load_card, load_header, load_json_record, read_bytes

MAX_DIFF_ISSUES = 20


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
class _Weights:
    display: str
    path: Path
    header: SafetensorsHeader | None = None
    record_data: Any | None = None
    record_present: bool = False
    record: Declaration | RefitAnnotation | None = None
    digests: dict[tuple[str, ...], DigestSet] = field(default_factory=dict)
    card_bound: bool = False
    notes: list[str] = field(default_factory=list)

    def digest_set(self, layers: list[str]) -> DigestSet:
        key = tuple(layers)
        if key not in self.digests:
            if self.header is None:
                raise RuntimeError(f"{self.display}: digests requested for a file whose header is unreadable")
            self.digests[key] = file_digests(self.path, bn_layers=layers, header=self.header)
        return self.digests[key]

    def header_bn_layers(self) -> list[str]:
        if self.header is None:
            return []
        return bn_layers_from_tensor_names({n: t.shape for n, t in self.header.tensors.items()})


def describe_record(record: Declaration | RefitAnnotation) -> str:
    if isinstance(record, Declaration):
        layers = sum(len(s.layers) for s in record.deployed_state if isinstance(s, BatchNormState))
        state = plural(layers, "BatchNorm layer") if layers else (
            "no BatchNorm layers: channel absent")
        return f"declaration {record.convention.name} ({state})"
    return (f"refit annotation of {record.subject.filename} under {record.convention.name} "
            f"({len(record.cells)} cell{'s' if len(record.cells) != 1 else ''}, channel {record.channel})")


def normalized(data: Any, record: Declaration | RefitAnnotation | None) -> Any:
    """The form two records are compared in: the model's JSON dump when it parses (absent == null), else as is."""
    return to_dict(record) if record is not None else data


def diff_pointers(a: Any, b: Any, tokens: tuple[str | int, ...] = ()) -> list[tuple[str, Any, Any]]:
    """JSON pointers where two JSON values differ, with the two values there (missing keys as ``...``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += diff_pointers(a.get(key, ...), b.get(key, ...), (*tokens, key))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff_pointers(x, y, (*tokens, index))
        return out
    if type(a) is type(b) and a == b:
        return []
    return [(make_pointer(tokens), a, b)]


def _shown(value: Any) -> str:
    return "absent" if value is ... else show(value)


def layer_issues(record: Declaration, shapes: Mapping[str, tuple[int, ...]], *, display: str,
                 source: str) -> tuple[list[Issue], list[str]]:
    """The declared BatchNorm layers against a header's tensor shapes alone (names, lengths, affine tensors).

    Pure and cheap: it needs no tensor bytes, so the header-only census and the stamping pre-check use it too.
    Returns the issues and the declared layer names (for the digest checks that follow in ``validate``).
    """
    issues: list[Issue] = []
    declared: list[str] = []
    state_index = next((i for i, s in enumerate(record.deployed_state) if isinstance(s, BatchNormState)), None)
    if state_index is not None:
        state = record.deployed_state[state_index]
        for j, layer in enumerate(state.layers):
            declared.append(layer.name)
            where = join_pointer("", "deployed_state", state_index, "layers", j)
            prefix = f"{layer.name}." if layer.name else ""
            mean, var = shapes.get(prefix + "running_mean"), shapes.get(prefix + "running_var")
            if layer.track_running_stats:
                if mean is None or var is None:
                    issues.append(new_issue("layers.missing_in_file", file=source, path=where, message=(
                        f"layer {show(layer.name)} is declared with running statistics but {display} has no "
                        f"{prefix}running_mean/{prefix}running_var; the record describes another model "
                        "(check the layer name)")))
                elif tuple(mean) != (layer.num_features,) or tuple(var) != (layer.num_features,):
                    issues.append(new_issue("layers.num_features_mismatch", file=source,
                                            path=join_pointer(where, "num_features"), message=(
                        f"{layer.num_features} is not the length of {prefix}running_mean in {display}: "
                        f"its shape is {list(mean)}; set num_features to the buffer length")))
            elif mean is not None or var is not None:
                issues.append(new_issue("layers.unexpected_running_stats", file=source,
                                        path=join_pointer(where, "track_running_stats"), message=(
                    f"false contradicts {display}, which stores running buffers for layer {show(layer.name)}; "
                    "set track_running_stats to true and add the layer's running digest")))
            if layer.affine != (prefix + "weight" in shapes and prefix + "bias" in shapes):
                issues.append(new_issue("layers.affine_mismatch", file=source, path=join_pointer(where, "affine"),
                                        message=(
                    f"{str(layer.affine).lower()} contradicts {display}: it "
                    f"{'lacks' if layer.affine else 'holds'} {prefix}weight/{prefix}bias; fix the affine flag")))
    layers_pointer = (join_pointer("", "deployed_state", state_index, "layers") if state_index is not None
                      else "/deployed_state")
    for name in bn_layers_from_tensor_names(shapes):
        if name not in declared:
            issues.append(new_issue("layers.undeclared", file=source, path=layers_pointer, message=(
                f"{show(name)} has running buffers in {display} but is not among the declared layers; declare "
                "every BatchNorm layer (bnconvention declare lists them)")))
    return issues, declared


def _check_layers(record: Declaration, weights: _Weights, *, source: str) -> list[Issue]:
    """The declared BatchNorm layers against the header's tensors, then the digests against the tensor bytes."""
    header = weights.header
    if header is None:
        raise RuntimeError(f"{weights.display}: layers checked for a file whose header is unreadable")
    shapes = {n: t.shape for n, t in header.tensors.items()}
    issues, declared = layer_issues(record, shapes, display=weights.display, source=source)
    state_index = next((i for i, s in enumerate(record.deployed_state) if isinstance(s, BatchNormState)), None)
    # layers without buffers in the file already have an issue; their per-layer digest is not compared again
    layers = record.deployed_state[state_index].layers if state_index is not None else []
    missing = {layer.name for layer in layers if layer.track_running_stats and not all(
        (f"{layer.name}.{suffix}" if layer.name else suffix) in shapes for suffix in ("running_mean", "running_var"))}
    digests = weights.digest_set(declared)
    if record.digests.trainable_sha256 != digests.trainable_sha256:
        issues.append(new_issue("digests.trainable_mismatch", file=source, path="/digests/trainable_sha256", message=(
            f"{show(short(record.digests.trainable_sha256))} does not match {weights.display}: its trainable tensors "
            f"give {digests.trainable_sha256}; the record describes other weights: rebuild it from this file "
            "(bnconvention declare) instead of copying it")))
    if record.digests.running_sha256 != digests.running_sha256:
        issues.append(new_issue("digests.running_mismatch", file=source, path="/digests/running_sha256", message=(
            f"{show(short(record.digests.running_sha256))} does not match {weights.display}: its running statistics "
            f"give {digests.running_sha256 or 'no digest (no running buffers)'}; the buffers changed after the "
            "record was written: declare the state as shipped (or refit and re-declare)")))
    if state_index is not None:
        for j, layer in enumerate(record.deployed_state[state_index].layers):
            found = digests.layer_running_sha256.get(layer.name)
            if layer.name in missing or layer.running_sha256 is None or found == layer.running_sha256:
                continue
            issues.append(new_issue("digests.layer_mismatch", file=source,
                                    path=join_pointer("", "deployed_state", state_index, "layers", j,
                                                      "running_sha256"), message=(
                f"{show(short(layer.running_sha256))} does not match the running buffers of layer "
                f"{show(layer.name)} in "
                f"{weights.display}, which give {found}; this layer's statistics changed after the record was "
                "written")))
    return issues


def _records_equal(a: Any, b: Any) -> bool:
    try:
        return canonical_sha256(a) == canonical_sha256(b)
    except CanonicalJSONError:
        return a == b


def validate_release(release: Release, *, require_declaration: bool = False) -> tuple[list[Issue], list[FileSummary]]:
    """Every issue of a release, and one summary line per file."""
    issues: list[Issue] = []
    summaries: list[FileSummary] = []
    weights_list: list[_Weights] = []

    for display, path in release.weights:
        weights = _Weights(display=display, path=path)
        weights_list.append(weights)
        weights.header, found = load_header(path, source=display)
        issues += found
        if weights.header is None:
            continue
        weights.record_data, weights.record_present, found = header_record(weights.header, source=display)
        issues += found
        if weights.record_data is not None:
            weights.record, found = check_record(weights.record_data, source=display)
            issues += found
            if isinstance(weights.record, RefitAnnotation):
                issues.append(new_issue("location.wrong_kind", file=display, path="/kind", message=(
                    f"\"refit_annotation\" is stamped in {display}, where the file's own declaration belongs; "
                    "store refit annotations as bnconvention/refit-<sha>.json in the release")))

    card_record: Declaration | RefitAnnotation | None = None
    card_data: Any | None = None
    card_display = release.card[0] if release.card else None
    if release.card is not None:
        card = load_card(release.card[1], source=release.card[0])
        issues += card.issues
        card_data = card.block
        if card.block is not None:
            card_record, found = check_record(card.block, source=release.card[0])
            issues += found
            if isinstance(card_record, RefitAnnotation):
                issues.append(new_issue("location.wrong_kind", file=release.card[0], path="/kind", message=(
                    f"\"refit_annotation\" is the bnconvention block of {release.card[0]}, where the release's "
                    "declaration belongs; store refit annotations as bnconvention/refit-<sha>.json")))
        if card_record is not None:
            note = describe_record(card_record)
        elif not card.readable:
            note = "unreadable"
        else:
            note = "bnconvention block invalid" if card.has_block else "no bnconvention block"
        summaries.append(FileSummary(release.card[0], "card", note))
        if card.readable and not card.has_block:
            stamped = [w.display for w in weights_list if w.record_present]
            if stamped:
                issues.append(new_issue("release.card_missing_record", file=release.card[0], message=(
                    f"{release.card[0]} has no {show('bnconvention')} block although {', '.join(stamped)} carries a "
                    "stamped record; add the record to the card (bnconvention card README.md --from <weights>)")))
            elif release.card_explicit and not release.weights:
                issues.append(new_issue("card.no_record", file=release.card[0], message=(
                    f"{release.card[0]} carries no {show('bnconvention')} block in its YAML front matter: nothing was "
                    "declared; stamp the card (bnconvention card)")))

    # Bind the card's record to the weights file it describes.
    bound: _Weights | None = None
    readable = [w for w in weights_list if w.header is not None]
    if isinstance(card_record, Declaration) and readable:
        if len(release.weights) == 1:
            bound = readable[0]
        else:
            card_form = normalized(card_data, card_record)
            bound = next((w for w in readable if w.record_data is not None
                          and _records_equal(normalized(w.record_data, w.record), card_form)), None)
            if bound is None:
                layers = [layer.name for s in card_record.deployed_state if isinstance(s, BatchNormState)
                          for layer in s.layers]
                bound = next((w for w in readable
                              if w.digest_set(layers).trainable_sha256 == card_record.digests.trainable_sha256), None)
            if bound is None:
                issues.append(new_issue("release.card_unbound", file=card_display or "",
                                        path="/digests/trainable_sha256",
                                        message=(
                    f"{show(short(card_record.digests.trainable_sha256))} matches none of the release's weights files "
                    f"({', '.join(w.display for w in weights_list)}); the card describes weights that are not "
                    "here: rebuild its record from the released file")))
        if bound is not None:
            bound.card_bound = True

    for weights in weights_list:
        if weights.header is None:
            summaries.append(FileSummary(weights.display, "weights", "unreadable"))
            continue
        # card vs header: the same record, compared in normalized form
        if weights.card_bound and weights.record_data is not None and card_data is not None:
            a = normalized(card_data, card_record)
            b = normalized(weights.record_data, weights.record)
            if not _records_equal(a, b):
                diffs = diff_pointers(a, b)
                for pointer, card_value, header_value in diffs[:MAX_DIFF_ISSUES]:
                    issues.append(new_issue("release.card_header_mismatch", file=card_display or "", path=pointer,
                                            message=(
                        f"{_shown(card_value)} in the card, {_shown(header_value)} in the record stamped in "
                        f"{weights.display}: card and weights must carry the same record; re-render the card from "
                        f"the weights (bnconvention card {card_display} --from {weights.display})")))
                if len(diffs) > MAX_DIFF_ISSUES:
                    issues.append(new_issue("release.card_header_mismatch", file=card_display or "", message=(
                        f"{len(diffs) - MAX_DIFF_ISSUES} more differences from {weights.display} not listed")))
            else:
                weights.notes.append(f"agrees with {card_display}")
        # the declaration to check against the tensors: the stamped one if valid, else the card's
        declaration: Declaration | None = None
        declaration_file = weights.display
        if isinstance(weights.record, Declaration):
            declaration = weights.record
        elif weights.card_bound and isinstance(card_record, Declaration) and weights.record_data is None:
            declaration, declaration_file = card_record, card_display or weights.display
        bn_layers = weights.header_bn_layers()
        if declaration is not None:
            found = _check_layers(declaration, weights, source=declaration_file)
            issues += found
            mismatch = any(i.code.startswith("digests.") for i in found)
            if declaration_file == weights.display:
                where, status = "", "digests do not match the tensors" if mismatch else "digests match the tensors"
            else:
                # A mismatch is an issue of the file holding the record (its pointers point into that record) and
                # is listed under it; this file's own line, "ok" (the weights are not what is wrong), must not
                # report it as its note.
                where = f" in {declaration_file}"
                status = "checked there (see its issues)" if mismatch else "digests match the tensors"
            agrees = "".join(f"; {note}" for note in weights.notes)
            summaries.append(FileSummary(weights.display, "weights",
                                         f"{describe_record(declaration)}{where}; {status}{agrees}"))
        elif weights.record_present or (weights.card_bound and card_data is not None):
            summaries.append(FileSummary(weights.display, "weights", "declaration present but invalid"))
        elif bn_layers:
            severity = "error" if require_declaration else "warning"
            issues.append(new_issue("declaration.missing", file=weights.display, severity=severity, message=(
                f"{weights.display} has running statistics of {plural(len(bn_layers), 'BatchNorm layer')} "
                f"({', '.join(bn_layers[:3])}{', ...' if len(bn_layers) > 3 else ''}) and no declaration of how "
                "they were fitted; declare it (bnconvention declare) and stamp the file and its card")))
            summaries.append(FileSummary(weights.display, "weights",
                                         f"{plural(len(bn_layers), 'BatchNorm layer')}, no declaration"))
        else:
            summaries.append(FileSummary(weights.display, "weights",
                                         "no BatchNorm running statistics (channel absent), nothing to declare"))

    for display, path in release.annotations:
        found, summary = _check_annotation(display, path, release, weights_list)
        issues += found
        summaries.append(summary)
    headers = {w.path.resolve(): w.header for w in weights_list}
    for display, path in release.indexes:
        found, summary = check_index(display, path, headers=headers)
        issues += found
        summaries.append(summary)
    return issues, summaries


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
                      weights_list: list[_Weights]) -> tuple[list[Issue], FileSummary]:
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


__all__ = ["FileSummary", "Release", "describe_record", "diff_pointers", "validate_release"]
