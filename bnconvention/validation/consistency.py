"""The one rule for whether a declaration is consistent with a checkpoint, shared by validate, the census and publish.

A declaration may live in a safetensors header, in a model card's ``bnconvention`` block, or in both.
:func:`check_consistency` decides, without any I/O, whether what is declared there agrees with a checkpoint:

1. card and header, when both hold a record, carry the *same* record (:func:`records_equal` on the
   :func:`normalized` forms; every differing JSON pointer is listed);
2. the declaration (the header's when it holds one, else the card's) names the checkpoint's BatchNorm layers as its
   header shows them: names, ``num_features``, the affine tensors (:func:`layer_issues`);
3. when digests of the tensors are given, its trainable, running and per-layer digests are theirs
   (:func:`digest_issues`).

Everything comes back as :class:`~bnconvention.validation.issues.Issue` with the validator's stable codes
(``release.card_header_mismatch``, ``layers.*``, ``digests.*``), in check order. ``bnconvention validate`` reports
them; the Hub census maps them to its repo classes (it reads headers only, so it passes no trainable digest);
``publish`` binds a record to the weights file for which there are none. :func:`bind_record` is the one rule for which
checkpoint of a release a card's record (or a record handed to ``publish``) describes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from bnconvention.errors import CanonicalJSONError
from bnconvention.formats.canonical import canonical_sha256
from bnconvention.formats.digests import bn_layers_from_tensor_names
from bnconvention.standard.models import BatchNormLayer, BatchNormState, Declaration, RefitAnnotation, to_dict
from bnconvention.validation.issues import Issue, join_pointer, make_pointer, new_issue
from bnconvention.validation.schema_errors import show
from bnconvention.validation.semantics import short

MAX_DIFF_ISSUES = 20  # card/header differences listed one by one; the rest are counted in one more issue

Shapes = Mapping[str, tuple[int, ...]]
C = TypeVar("C")


# --- record equality ------------------------------------------------------------------------------------------------


def records_equal(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same record: equal canonical JSON (RFC 8785), so key order, spacing and number
    spelling do not matter; values canonical JSON cannot hold (NaN, huge integers) are compared as they are."""
    try:
        return canonical_sha256(a) == canonical_sha256(b)
    except CanonicalJSONError:
        return bool(a == b)


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


# --- where a record was found -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRecord:
    """A record as found in one place: its JSON data, the parsed record (``None`` when it fails the schema) and the
    display name of the file holding it (issues about the record are filed under it)."""

    data: Any
    record: Declaration | RefitAnnotation | None
    file: str

    @property
    def form(self) -> Any:
        return normalized(self.data, self.record)


def location_issues(stored: StoredRecord, *, place: Literal["header", "card"]) -> list[Issue]:
    """``location.wrong_kind`` when a refit annotation sits where a declaration belongs (a header or a card)."""
    if not isinstance(stored.record, RefitAnnotation):
        return []
    if place == "header":
        message = (f"\"refit_annotation\" is stamped in {stored.file}, where the file's own declaration belongs; "
                   "store refit annotations as bnconvention/refit-<sha>.json in the release")
    else:
        message = (f"\"refit_annotation\" is the bnconvention block of {stored.file}, where the release's "
                   "declaration belongs; store refit annotations as bnconvention/refit-<sha>.json")
    return [new_issue("location.wrong_kind", file=stored.file, path="/kind", message=message)]


def bind_record(form: Any, checkpoints: Sequence[C], *, only: bool,
                stored_forms: Callable[[C], Iterable[Any]] | None = None,
                tensors_match: Callable[[C], bool] | None = None) -> C | None:
    """The checkpoint a record describes, or ``None``: a card's record, or a record handed to ``publish``.

    ``only``: the release has a single checkpoint, which the record describes (its consistency is checked next).
    Otherwise the first checkpoint whose stored records (``stored_forms``) include the same record
    (:func:`records_equal`), else the first whose tensors the record describes (``tensors_match``, when the caller
    can read them: the census cannot, ``validate`` and ``publish`` can).
    """
    if only:
        return checkpoints[0] if checkpoints else None
    if stored_forms is not None:
        same = next((c for c in checkpoints if any(records_equal(f, form) for f in stored_forms(c))), None)
        if same is not None:
            return same
    if tensors_match is not None:
        return next((c for c in checkpoints if tensors_match(c)), None)
    return None


# --- the declaration against the checkpoint ---------------------------------------------------------------------------


class DigestView(Protocol):
    """The digests a declaration is compared with (:class:`~bnconvention.formats.digests.DigestSet` is one)."""

    @property
    def trainable_sha256(self) -> str | None: ...  # None: unknown (a census reads no weights), not compared

    @property
    def running_sha256(self) -> str | None: ...

    @property
    def layer_running_sha256(self) -> Mapping[str, str | None]: ...


@dataclass(frozen=True)
class RunningDigests:
    """Digests of the running buffers alone (a census reads their bytes by ranged requests); the trainable digest is
    unknown, so it is not compared."""

    running_sha256: str | None
    layer_running_sha256: Mapping[str, str | None]
    trainable_sha256: None = None


def _bn_layers(record: Declaration) -> tuple[str, list[BatchNormLayer]]:
    """The JSON pointer of the declaration's BatchNorm layers (``/deployed_state`` when it has no BatchNorm state,
    where a missing layer would be added) and the layers."""
    found = next(((i, s) for i, s in enumerate(record.deployed_state) if isinstance(s, BatchNormState)), None)
    if found is None:
        return "/deployed_state", []
    index, state = found
    return join_pointer("", "deployed_state", index, "layers"), state.layers


def layer_issues(record: Declaration, shapes: Shapes, *, display: str, source: str) -> tuple[list[Issue], list[str]]:
    """The declared BatchNorm layers against a header's tensor shapes alone (names, lengths, affine tensors).

    Pure and cheap: it needs no tensor bytes, so the header-only census and the stamping pre-check use it too.
    Returns the issues and the declared layer names (for the digest checks that follow).
    """
    issues: list[Issue] = []
    declared: list[str] = []
    layers_pointer, layers = _bn_layers(record)
    for j, layer in enumerate(layers):
        declared.append(layer.name)
        where = join_pointer(layers_pointer, j)
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
    for name in bn_layers_from_tensor_names(shapes):
        if name not in declared:
            issues.append(new_issue("layers.undeclared", file=source, path=layers_pointer, message=(
                f"{show(name)} has running buffers in {display} but is not among the declared layers; declare "
                "every BatchNorm layer (bnconvention declare lists them)")))
    return issues, declared


def _layers_without_buffers(record: Declaration, shapes: Shapes) -> set[str]:
    """Declared tracking layers whose buffers the header lacks: they have a layer issue already, so their per-layer
    digest is not compared again."""
    return {layer.name for layer in _bn_layers(record)[1] if layer.track_running_stats
            and not all((f"{layer.name}.{suffix}" if layer.name else suffix) in shapes
                        for suffix in ("running_mean", "running_var"))}


def digest_issues(record: Declaration, digests: DigestView, *, display: str, source: str,
                  skip: Iterable[str] = ()) -> list[Issue]:
    """The declared digests against the tensors' (trainable, all running statistics, then per layer; layers in
    ``skip`` are not compared). A trainable digest of ``None`` is unknown and not compared."""
    issues: list[Issue] = []
    if digests.trainable_sha256 is not None and record.digests.trainable_sha256 != digests.trainable_sha256:
        issues.append(new_issue("digests.trainable_mismatch", file=source, path="/digests/trainable_sha256", message=(
            f"{show(short(record.digests.trainable_sha256))} does not match {display}: its trainable tensors "
            f"give {digests.trainable_sha256}; the record describes other weights: rebuild it from this file "
            "(bnconvention declare) instead of copying it")))
    if record.digests.running_sha256 != digests.running_sha256:
        issues.append(new_issue("digests.running_mismatch", file=source, path="/digests/running_sha256", message=(
            f"{show(short(record.digests.running_sha256))} does not match {display}: its running statistics "
            f"give {digests.running_sha256 or 'no digest (no running buffers)'}; the buffers changed after the "
            "record was written: declare the state as shipped (or refit and re-declare)")))
    skipped = set(skip)
    layers_pointer, layers = _bn_layers(record)
    for j, layer in enumerate(layers):
        found = digests.layer_running_sha256.get(layer.name)
        if layer.name in skipped or layer.running_sha256 is None or found == layer.running_sha256:
            continue
        issues.append(new_issue("digests.layer_mismatch", file=source,
                                path=join_pointer(layers_pointer, j, "running_sha256"), message=(
            f"{show(short(layer.running_sha256))} does not match the running buffers of layer {show(layer.name)} in "
            f"{display}, which give {found}; this layer's statistics changed after the record was written")))
    return issues


def tensor_issues(record: Declaration, shapes: Shapes, *, display: str, source: str,
                  digests: Callable[[list[str]], DigestView] | None = None) -> list[Issue]:
    """The declared layers against the header's shapes, then (when ``digests`` is given: the digests of the tensors
    for the declared layer names) the declared digests against the tensors'."""
    issues, declared = layer_issues(record, shapes, display=display, source=source)
    if digests is not None:
        issues += digest_issues(record, digests(declared), display=display, source=source,
                                skip=_layers_without_buffers(record, shapes))
    return issues


def _shown(value: Any) -> str:
    return "absent" if value is ... else show(value)


def card_header_issues(card: StoredRecord, header: StoredRecord,
                       differences: list[tuple[str, Any, Any]]) -> list[Issue]:
    """``release.card_header_mismatch`` for each of the first :data:`MAX_DIFF_ISSUES` differences, then one counting
    the rest."""
    issues = [new_issue("release.card_header_mismatch", file=card.file, path=pointer, message=(
        f"{_shown(card_value)} in the card, {_shown(header_value)} in the record stamped in {header.file}: card and "
        f"weights must carry the same record; re-render the card from the weights (bnconvention card {card.file} "
        f"--from {header.file})")) for pointer, card_value, header_value in differences[:MAX_DIFF_ISSUES]]
    if len(differences) > MAX_DIFF_ISSUES:
        issues.append(new_issue("release.card_header_mismatch", file=card.file, message=(
            f"{len(differences) - MAX_DIFF_ISSUES} more differences from {header.file} not listed")))
    return issues


@dataclass(frozen=True)
class Consistency:
    """The outcome of :func:`check_consistency`.

    ``issues``: card/header differences, then layer issues, then digest issues (check order, not sorted).
    ``declaration``: the declaration checked against the checkpoint (``None`` when neither place holds a valid one),
    ``declaration_file`` the file it came from. ``differences``: every JSON pointer where card and header differ.
    ``agrees``: both places hold a record and it is the same record.
    """

    issues: list[Issue] = field(default_factory=list)
    declaration: Declaration | None = None
    declaration_file: str = ""
    differences: list[str] = field(default_factory=list)
    agrees: bool = False


def declared_record(header: StoredRecord | None, card: StoredRecord | None) -> tuple[Declaration | None, str]:
    """The declaration to check against the tensors, and its file: the header's when it holds a valid one; the card's
    only when the header holds no record at all (a header record that is invalid, or an annotation, stays the one
    that counts, and its issues are reported where it was read)."""
    if header is not None:
        return (header.record, header.file) if isinstance(header.record, Declaration) else (None, "")
    if card is not None and isinstance(card.record, Declaration):
        return card.record, card.file
    return None, ""


def check_consistency(*, header: StoredRecord | None, card: StoredRecord | None, shapes: Shapes, display: str,
                      digests: Callable[[list[str]], DigestView] | None = None) -> Consistency:
    """Whether what a checkpoint's header and its card (``card``: only when the card describes this checkpoint)
    declare agrees with the checkpoint: see the module docstring. Pure; ``digests`` is called at most once, with the
    declared layer names, and only when there is a declaration to compare."""
    issues: list[Issue] = []
    differences: list[tuple[str, Any, Any]] = []
    agrees = False
    if header is not None and card is not None:
        agrees = records_equal(card.form, header.form)
        if not agrees:
            differences = diff_pointers(card.form, header.form)
            issues += card_header_issues(card, header, differences)
    declaration, declaration_file = declared_record(header, card)
    if declaration is not None:
        issues += tensor_issues(declaration, shapes, display=display, source=declaration_file, digests=digests)
    return Consistency(issues=issues, declaration=declaration, declaration_file=declaration_file,
                       differences=[pointer for pointer, _, _ in differences], agrees=agrees)


__all__ = [
    "MAX_DIFF_ISSUES",
    "Consistency",
    "DigestView",
    "RunningDigests",
    "StoredRecord",
    "bind_record",
    "card_header_issues",
    "check_consistency",
    "declared_record",
    "diff_pointers",
    "digest_issues",
    "layer_issues",
    "location_issues",
    "normalized",
    "records_equal",
    "tensor_issues",
]
