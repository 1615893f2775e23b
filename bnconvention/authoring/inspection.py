"""What a weights file, a model card or a release folder declares, for people and programs (``bnconvention inspect``).

Everything that is *checked* here is checked by the validator (:mod:`bnconvention.validation`): this module runs
it, reads the files through the validator's own readers (:mod:`bnconvention.validation.sources`) and adds what a
reader wants to see next to the verdict: the BatchNorm layers found from the header alone, the declared convention
and the canonical name its fields give, whether the digests match the tensors and whether card and header agree.

Statuses, per file:

- ``digests``: ``match`` / ``mismatch`` (the validator reported a ``digests.*``, ``layers.missing_in_file`` or
  ``release.card_unbound`` issue for the declaration) / ``not-checked`` (no weights to check against, or the card's
  record differs from the one stamped in the weights, which is what was checked) / ``null`` (nothing declared).
- ``card_agrees`` (weights files): ``true`` / ``false`` when the release's card and the header both carry a record,
  compared the validator's way (:func:`bnconvention.validation.diff_pointers` on normalized records); ``null`` when
  one of them carries none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from bnconvention.errors import BnConventionError
from bnconvention.formats.digests import bn_layers_from_tensor_names
from bnconvention.formats.json_types import JsonObject
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.formats.text import plural
from bnconvention.standard.locations import SAFETENSORS_METADATA_KEY
from bnconvention.standard.models import BatchNormState, Declaration, RefitAnnotation
from bnconvention.standard.naming import canonical_name
from bnconvention.validation import Issue, ValidationReport, check_record, diff_pointers, validate_paths
from bnconvention.validation.release import normalized
from bnconvention.validation.sources import header_record, load_card, load_header, load_json_record

DigestStatus: TypeAlias = Literal["match", "mismatch", "not-checked"]
_DIGEST_FAILURES = ("digests.", "layers.missing_in_file", "release.card_unbound")


@dataclass
class RecordView:
    """A record as found in one file: enough to say what it declares."""

    valid: bool
    kind: str | None = None
    convention: str | None = None  # the name the record carries
    canonical_name: str | None = None  # the name its fields give
    buffer_update_mode: str | None = None
    role: str | None = None
    rule: str | None = None
    layers: int | None = None
    contradictions: list[str] = field(default_factory=list)
    reporting_line: str | None = None
    data: Any = field(default=None, repr=False)
    parsed: Declaration | RefitAnnotation | None = field(default=None, repr=False)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"valid": self.valid, "kind": self.kind, "convention": self.convention,
                               "canonical_name": self.canonical_name,
                               "name_matches": (self.convention == self.canonical_name
                                                if self.canonical_name is not None else None)}
        if self.kind == "declaration":
            out.update({"buffer_update_mode": self.buffer_update_mode, "role": self.role, "rule": self.rule,
                        "layers": self.layers, "contradictions": [*self.contradictions],
                        "reporting_line": self.reporting_line})
        return out


@dataclass(frozen=True)
class HeaderLayer:
    """A BatchNorm layer found from a header alone: its module name and its running buffers' length."""

    name: str
    num_features: int

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "num_features": self.num_features}


@dataclass
class FileView:
    """One inspected file."""

    file: str
    kind: Literal["weights", "card", "record", "index"]
    readable: bool = True
    tensors: int | None = None
    header_bytes: int | None = None
    padding: int | None = None
    data_bytes: int | None = None
    metadata_keys: list[str] = field(default_factory=list)
    batchnorm_layers: list[HeaderLayer] = field(default_factory=list)
    record: RecordView | None = None
    digests: DigestStatus | None = None
    card_agrees: bool | None = None
    issues: list[Issue] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"file": self.file, "kind": self.kind, "readable": self.readable}
        if self.kind == "weights":
            out.update({"tensors": self.tensors, "header_bytes": self.header_bytes, "padding": self.padding,
                        "data_bytes": self.data_bytes, "metadata_keys": [*self.metadata_keys],
                        "batchnorm_layers": [layer.to_dict() for layer in self.batchnorm_layers]})
        out["record"] = self.record.to_dict() if self.record is not None else None
        out["digests"] = self.digests
        if self.kind == "weights":
            out["card_agrees"] = self.card_agrees
        out["issues"] = [issue.to_dict() for issue in self.issues]
        return out


@dataclass
class Inspection:
    """Every file found under the inspected path, and the validator's verdict."""

    path: str
    files: list[FileView]
    report: ValidationReport

    @property
    def exit_code(self) -> int:
        """The validator's: 0 no errors, 1 errors, 2 some input unreadable."""
        return self.report.exit_code

    def to_dict(self) -> JsonObject:
        return {"path": self.path, "files": [f.to_dict() for f in self.files],
                "errors": len(self.report.errors), "warnings": len(self.report.warnings),
                "exit_code": self.exit_code}


def record_view(data: Any, *, source: str) -> RecordView:
    """What a decoded record declares (``valid`` false when it fails the schema or the models)."""
    record, _ = check_record(data, source=source)
    if record is None:
        kind = data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None
        return RecordView(valid=False, kind=kind, data=data)
    try:
        derived: str | None = canonical_name(record.convention)
    except BnConventionError:
        derived = None
    view = RecordView(valid=True, kind=record.kind, convention=record.convention.name, canonical_name=derived,
                      data=data, parsed=record)
    if isinstance(record, Declaration):
        view.buffer_update_mode = record.convention.buffer_update_mode
        view.role = record.convention.data.role
        view.rule = record.convention.accumulation.rule
        view.layers = sum(len(s.layers) for s in record.deployed_state if isinstance(s, BatchNormState))
        view.contradictions = [c.code for c in record.observation.contradictions] if record.observation else []
        view.reporting_line = record.reporting_line
    return view


def _header_layers(header: SafetensorsHeader) -> list[HeaderLayer]:
    shapes = {name: info.shape for name, info in header.tensors.items()}
    layers = []
    for name in bn_layers_from_tensor_names(shapes):
        mean = shapes[f"{name}.running_mean" if name else "running_mean"]
        layers.append(HeaderLayer(name=name, num_features=int(mean[0]) if mean else 0))
    return layers


def _weights_view(display: str, path: Path) -> FileView:
    view = FileView(file=display, kind="weights")
    header, _ = load_header(path, source=display)
    if header is None:
        view.readable = False
        return view
    view.tensors = len(header.tensors)
    view.header_bytes = header.header_size
    view.padding = header.padding
    view.data_bytes = header.data_size
    view.metadata_keys = sorted(k for k in (header.metadata or {}) if k != SAFETENSORS_METADATA_KEY)
    view.batchnorm_layers = _header_layers(header)
    data, present, _ = header_record(header, source=display)
    if present:
        view.record = record_view(data, source=display) if data is not None else RecordView(valid=False)
    return view


def _card_view(display: str, path: Path) -> FileView:
    view = FileView(file=display, kind="card")
    card = load_card(path, source=display)
    view.readable = card.readable
    if card.has_block:
        view.record = record_view(card.block, source=display) if card.block is not None else RecordView(valid=False)
    return view


def _record_file_view(display: str, path: Path) -> FileView:
    view = FileView(file=display, kind="record")
    data, readable, _ = load_json_record(path, source=display)
    view.readable = readable
    if data is not None:
        view.record = record_view(data, source=display)
    return view


def _failed(issues: list[Issue], file: str) -> bool:
    return any(i.file == file and i.code.startswith(_DIGEST_FAILURES) for i in issues)


def _same(a: RecordView, b: RecordView) -> bool:
    return not diff_pointers(normalized(a.data, a.parsed), normalized(b.data, b.parsed))


def _settle(views: list[FileView], issues: list[Issue]) -> None:
    """Digest statuses and card agreement, release by release (a folder is one release, as for the validator)."""
    by_dir: dict[str, list[FileView]] = {}
    for view in views:
        by_dir.setdefault(os.path.dirname(view.file), []).append(view)
    for group in by_dir.values():
        weights = [v for v in group if v.kind == "weights" and v.readable]
        cards = [v for v in group if v.kind == "card"]
        card = cards[0] if cards else None
        card_record = card.record if card is not None and card.record is not None and card.record.valid else None
        for view in weights:
            own = view.record
            if own is not None and own.valid and own.kind == "declaration":
                view.digests = "mismatch" if _failed(issues, view.file) else "match"
            elif own is None and card_record is not None and card_record.kind == "declaration" and len(weights) == 1:
                # the card's declaration is what the validator checked this file against
                view.digests = "mismatch" if _failed(issues, card.file) else "match"  # type: ignore[union-attr]
            if card_record is not None and own is not None and own.valid:
                view.card_agrees = _same(card_record, own)
        if card is not None and card_record is not None and card_record.kind == "declaration":
            stamped = [v for v in weights if v.record is not None and v.record.valid]
            if not weights:
                card.digests = "not-checked"
            elif _failed(issues, card.file):
                card.digests = "mismatch"
            elif stamped and not any(_same(card_record, v.record) for v in stamped if v.record is not None):
                card.digests = "not-checked"
            else:
                card.digests = "match"
    for view in views:
        if view.kind == "record" and view.record is not None and view.record.valid:
            view.digests = "not-checked"


def inspect_path(path: str | os.PathLike[str]) -> Inspection:
    """Inspect a weights file, a model card, a record or a release folder (walked like ``bnconvention validate``)."""
    report = validate_paths([path])
    views: list[FileView] = []
    for summary in report.files:
        file_path = Path(summary.file)
        if summary.kind == "weights":
            views.append(_weights_view(summary.file, file_path))
        elif summary.kind == "card":
            views.append(_card_view(summary.file, file_path))
        elif summary.kind == "index":  # a shard index: the validator's issues say all there is to say
            views.append(FileView(file=summary.file, kind="index", readable=summary.note != "unreadable"))
        else:
            views.append(_record_file_view(summary.file, file_path))
    _settle(views, report.issues)
    known = {view.file for view in views}
    for issue in report.issues:
        target = next((v for v in views if v.file == issue.file), None)
        if target is not None:
            target.issues.append(issue)
    orphans = [issue for issue in report.issues if issue.file not in known]
    if orphans:  # e.g. a path that does not exist: no file view to hang the issue on
        for issue in orphans:
            views.append(FileView(file=issue.file, kind="record", readable=False, issues=[issue]))
    named = Path(os.path.normpath(os.fspath(path))).as_posix()
    views.sort(key=lambda view: view.file != named)  # the file asked about first, the rest in the validator's order
    return Inspection(path=os.fspath(path), files=views, report=report)


def inspection_text(inspection: Inspection) -> str:
    """A few lines per file: what it holds, what it declares, and the validator's issues."""
    lines: list[str] = []
    for view in inspection.files:
        lines.append(f"{view.file} ({view.kind})")
        if not view.readable:
            lines.append("  unreadable")
        if view.kind == "weights" and view.tensors is not None and view.data_bytes is not None \
                and view.header_bytes is not None:  # all three come from the header, when it could be read
            lines.append(f"  {plural(view.tensors, 'tensor')}, {plural(view.data_bytes, 'data byte')}, header "
                         f"{plural(view.header_bytes, 'byte')} "
                         f"({view.padding} spare)")
            if view.metadata_keys:
                lines.append(f"  other metadata keys: {', '.join(view.metadata_keys)}")
            if view.batchnorm_layers:
                shown = ", ".join(f"{layer.name} ({layer.num_features})" for layer in view.batchnorm_layers)
                lines.append(f"  BatchNorm layers from the header: {len(view.batchnorm_layers)}: {shown}")
            else:
                lines.append("  BatchNorm layers from the header: none (channel absent)")
        record = view.record
        if record is None:
            if view.readable and view.kind != "index":
                lines.append("  record: none")
        elif not record.valid:
            lines.append(f"  record: present but invalid ({record.kind or 'unknown kind'})")
        else:
            same = "" if record.convention == record.canonical_name else (
                f" (its fields give {record.canonical_name!r})")
            lines.append(f"  record: {record.kind}, convention {record.convention}{same}")
            if record.kind == "declaration" and record.layers is not None:
                lines.append(f"  buffer-update mode {record.buffer_update_mode}, split {record.role}, rule "
                             f"{record.rule}, {plural(record.layers, 'BatchNorm layer')} declared")
                if record.contradictions:
                    lines.append(f"  recorder contradictions: {', '.join(record.contradictions)}")
                if record.reporting_line:
                    lines.append(f"  reporting line: {record.reporting_line}")
        if view.digests is not None:
            lines.append(f"  digests: {view.digests}")
        if view.card_agrees is not None:
            lines.append(f"  card and header: {'agree' if view.card_agrees else 'DISAGREE'}")
        for issue in view.issues:
            where = f" at {issue.path}" if issue.path else ""
            lines.append(f"  {issue.severity} {issue.code}{where}: {issue.message}")
    report = inspection.report
    lines.append(f"{plural(len(report.errors), 'error')}, {plural(len(report.warnings), 'warning')}")
    return "\n".join(lines) + "\n"


__all__ = ["FileView", "HeaderLayer", "Inspection", "RecordView", "inspect_path", "inspection_text", "record_view"]
