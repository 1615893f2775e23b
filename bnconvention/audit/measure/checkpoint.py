"""Load a checkpoint for an audit: an allowlisted architecture, the weights loaded strictly, digests bound to the file.

The checkpoint is a ``.safetensors`` file, a sharded checkpoint's ``*.safetensors.index.json``, or a folder holding one
(:mod:`bnconvention.formats.checkpoint_files`); its tensors are loaded by :mod:`bnconvention.refitting.weights` (names
of timm/transformers wrappers and base models mapped, float16/bfloat16 read exactly into float32).

Published cells, for anchoring, come from the spec (``published_source: spec``) or from the files beside the weights,
by one rule (:func:`published_places`, which ``hub audit`` follows too): the checkpoint's sidecar ``<name>.json``,
the folder's ``config.json`` (``published`` or the zoo's ``shipped_accuracy`` in either), the folder's ``README.md``
(its model-index, through the spec's ``model_index_metrics``); the first that holds any is read, the one
``published_source`` names first. When none does, one error names every place looked at and what was looked for.

The architecture comes from the spec's ``model`` section (in a local audit the spec is the user's own file, as
explicit as the command line) or, when the spec names none, from the files beside the weights, in the order of
:mod:`bnconvention.architectures.resolve`: the checkpoint's sidecar ``<name>.json`` (as the digits zoo writes
them), then the folder's ``config.json`` (timm's or transformers' own). A factory name goes through the allowlist
and a timm or transformers name through that library's registry, so what is not known is refused before anything
is imported. Weights are read with the safetensors parser (no pickle); every tensor name (after the mapping) and
shape must match the model's ``state_dict`` exactly, otherwise :class:`~bnconvention.errors.CheckpointMismatchError`
lists the differences. The header is checked first with our own strict parser, so a malformed file is an
:class:`~bnconvention.errors.UntrustedInputError` naming the file.
"""

from __future__ import annotations

import filecmp
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from bnconvention.architectures.resolve import (
    CONFIG_NAME,
    Architecture,
    Resolution,
    read_config,
    resolve_architecture,
)
from bnconvention.architectures.sizing import build_fitting, build_sized
from bnconvention.audit.measure.published import (
    JSON_PUBLISHED_KEYS,
    card_published_cells,
    json_published_cells,
    merge_published,
)
from bnconvention.audit.spec.audit_spec import AuditSpec
from bnconvention.errors import (
    AuditSpecError,
    CheckpointMismatchError,
    PublishedCellsNotFoundError,
    UntrustedInputError,
)
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_NAME, parse_card_metadata, read_card_text
from bnconvention.formats.checkpoint_files import (
    CheckpointFiles,
    checkpoint_name,
    open_checkpoint,
    resolve_checkpoint_path,
)
from bnconvention.formats.digests import DigestSet, checkpoint_digests
from bnconvention.formats.model_index import MODEL_INDEX_KEY
from bnconvention.formats.running_values import ensure_possible_statistics
from bnconvention.formats.safetensors_header import SafetensorsHeader
from bnconvention.refitting.weights import LoadedWeights, load_checkpoint_weights
from bnconvention.standard.locations import record_from_header

MAX_SIDECAR_BYTES = 1_000_000


# which factory builds the architecture, with its arguments, and where that choice came from ("spec" or a file)
ModelChoice = Architecture


@dataclass
class LoadedCheckpoint:
    path: Path  # the .safetensors file, or the index of a sharded checkpoint
    name: str  # file name without .safetensors (.safetensors.index.json)
    header: SafetensorsHeader
    choice: ModelChoice
    model: torch.nn.Module
    file_digests: DigestSet
    declared_convention: str | None
    published: dict[str, float] | None
    warnings: list[str]
    weights: LoadedWeights | None = None  # how the file was loaded (layout, names, dtypes)


def sidecar_path(path: Path) -> Path:
    return path.with_name(checkpoint_name(path) + ".json")


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """The checkpoint's sidecar ``<name>.json`` decoded strictly, or None when there is none."""
    sidecar = sidecar_path(path)
    if not sidecar.is_file():
        return None
    data = sidecar.read_bytes()
    if len(data) > MAX_SIDECAR_BYTES:
        raise UntrustedInputError(f"{sidecar}: {len(data)} bytes, over the {MAX_SIDECAR_BYTES}-byte limit for a "
                                  "sidecar", source=sidecar)
    decoded = loads_strict(data, source=str(sidecar))
    if not isinstance(decoded, dict):
        raise UntrustedInputError(f"{sidecar}: a sidecar is a JSON object, found {type(decoded).__name__}",
                                  source=sidecar)
    return decoded


def resolve_model(path: Path, spec: AuditSpec, sidecar: dict[str, Any] | None) -> Resolution:
    """The spec's model, else the first of the sidecar and the folder's ``config.json`` that names a usable
    architecture (with the refusals of those passed over)."""
    if spec.model is not None:
        return Resolution(ModelChoice(factory=spec.model.factory, kwargs=dict(spec.model.kwargs),
                                      source=spec.model.source))
    where = sidecar_path(path)
    files: list[tuple[dict[str, Any] | None, str]] = [(sidecar, str(where))]
    config_path = path.parent / CONFIG_NAME
    if config_path != where:
        files.append((read_config(config_path), str(config_path)))
    resolution = resolve_architecture(files)
    if resolution is None:
        raise AuditSpecError(
            f"the spec names no model and neither {where.name} nor {CONFIG_NAME} beside {path.name} names an "
            "architecture; add model: {factory: ...} to the spec", field="/model")
    return resolution


def choose_model(path: Path, spec: AuditSpec, sidecar: dict[str, Any] | None) -> ModelChoice:
    """The architecture of :func:`resolve_model`."""
    return resolve_model(path, spec, sidecar).architecture


def card_path(path: Path) -> Path:
    """The model card of a checkpoint: the release folder's ``README.md``."""
    return path.parent / CARD_NAME


# --- published cells: one rule for audit and census of local files and for hub audit ----------------------------

PlaceKind = Literal["sidecar", "config", "card"]

# the places read for published cells, in order, by the spec's published_source: the one it names first
PLACE_ORDER: dict[str, tuple[PlaceKind, ...]] = {"sidecar": ("sidecar", "config", "card"),
                                                 "model_index": ("card", "sidecar", "config")}


@dataclass(frozen=True)
class PublishedPlace:
    """A file beside a checkpoint where its published cells may be: its sidecar ``<name>.json``, the folder's
    ``config.json`` (``published`` or ``shipped_accuracy``) or the folder's ``README.md`` (its model-index)."""

    kind: PlaceKind
    path: Path

    def keys(self, spec: AuditSpec) -> str:
        """What is looked for in it."""
        if self.kind == "card":
            labels = ", ".join(repr(label) for label in spec.model_index_metrics)
            return f"model-index metrics {labels} (model_index_metrics)"
        return " or ".join(repr(key) for key in JSON_PUBLISHED_KEYS)


def _same_bytes(first: Path, second: Path) -> bool:
    return first.is_file() and second.is_file() and filecmp.cmp(first, second, shallow=False)


def published_places(path: Path, source: str) -> list[PublishedPlace]:
    """Where the published cells of the checkpoint at ``path`` are read, in order: with ``published_source:
    sidecar`` its sidecar ``<name>.json``, the folder's ``config.json``, the folder's ``README.md`` model-index;
    with ``model_index`` the card first, then the other two. The one rule of ``audit`` and ``census`` of local
    files and of ``hub audit``, which lays each repo out the same way in its download folder (the repo's
    ``config.json`` also as the sidecar, for the sidecar's other readers: a ``config.json`` with the sidecar's very
    bytes is that copy, read once)."""
    sidecar, config = sidecar_path(path), path.parent / CONFIG_NAME
    files: dict[PlaceKind, Path] = {"sidecar": sidecar, "card": card_path(path)}
    if config != sidecar and not _same_bytes(sidecar, config):
        files["config"] = config
    return [PublishedPlace(kind, files[kind]) for kind in PLACE_ORDER[source] if kind in files]


def read_published_place(place: PublishedPlace, path: Path, spec: AuditSpec) -> tuple[dict[str, float], str]:
    """The published cells one place holds (empty when none), and what was there when it holds none. A place that
    is there but malformed raises (:class:`~bnconvention.errors.UntrustedInputError`, a card's
    :class:`~bnconvention.errors.CardError`), naming the file."""
    if not place.path.is_file():
        return {}, "no such file"
    if place.kind == "card":
        metadata = parse_card_metadata(read_card_text(place.path), source=str(place.path))
        cells = card_published_cells(metadata, spec.model_index_metrics, source=str(place.path))
        return cells, ("none of them in its model-index" if MODEL_INDEX_KEY in metadata else "no model-index")
    document = read_sidecar(path) if place.kind == "sidecar" else read_config(place.path)
    found = json_published_cells(document or {}, source=str(place.path))
    return found or {}, "neither key"


def published_cells(path: Path, spec: AuditSpec, *, notes: list[str] | None = None) -> dict[str, float] | None:
    """Published cells (canonical cell text -> value) for this checkpoint: the spec's with ``published_source:
    spec``, else those of the first place of :func:`published_places` that holds any, completed by the spec's own
    (whose values win; with ``model_index`` the spec's alone when no file holds any). ``notes`` collects what the
    reader should know (a file and the spec that disagree). When no place holds them,
    :class:`~bnconvention.errors.PublishedCellsNotFoundError` names every place looked at and what it looked for."""
    name = checkpoint_name(path)
    own = spec.published_for(name)
    if spec.published_source == "spec":
        return own
    looked: list[str] = []
    for place in published_places(path, spec.published_source):
        found, missing = read_published_place(place, path, spec)
        if found:
            cells, disagreements = merge_published(found, own, found_in=(
                "the card's model-index" if place.kind == "card" else place.path.name))
            if notes is not None:
                notes.extend(disagreements)
            return cells
        looked.append(f"{place.path} ({place.keys(spec)}: {missing})")
    if own:
        if notes is not None:
            notes.append(f"published cells: only the spec's, no file beside {path.name} holds any")
        return own
    raise PublishedCellsNotFoundError(
        f"no published cells for {path.name}; looked in {'; '.join(looked)}. Write them in one of these files (read "
        f"in this order with published_source: {spec.published_source}), or list them in the spec (published: "
        "{cell: value} with published_source: spec)", checkpoint=str(path), places=looked)


def build_architecture(choice: ModelChoice, files: CheckpointFiles | None = None) -> torch.nn.Module:
    """Build the allowlisted architecture (random initialisation) in eval mode. With the checkpoint's ``files``,
    its sizes are checked against their header first, with nothing allocated, and a config that sizes it otherwise
    is refused naming its field (:func:`bnconvention.architectures.sizing.build_fitting`)."""
    return build_sized(choice) if files is None else build_fitting(choice, files)


def header_mismatches(header: SafetensorsHeader, expected: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Differences between a file's tensors and a model's ``state_dict`` names and shapes (empty: they fit)."""
    found = {name: info.shape for name, info in header.tensors.items()}
    problems = []
    missing = [n for n in expected if n not in found]
    unexpected = [n for n in found if n not in expected]
    if missing:
        problems.append(f"missing from the file: {_names(missing)}")
    if unexpected:
        problems.append(f"not in the model: {_names(unexpected)}")
    for name, shape in expected.items():
        if name in found and tuple(found[name]) != tuple(shape):
            problems.append(f"{name!r} has shape {list(found[name])} in the file but {list(shape)} in the model")
    return problems


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def model_shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_fits(path: Path, header: SafetensorsHeader, choice: ModelChoice, shapes: Mapping[str, tuple[int, ...]]
               ) -> None:
    problems = header_mismatches(header, shapes)
    if problems:
        raise CheckpointMismatchError(
            f"{path}: the tensors do not fit the model built by factory {choice.factory!r} "
            f"(from {choice.source}): {'; '.join(problems)}; name the right architecture (and kwargs) in the "
            f"{'spec' if choice.source == 'spec' else 'sidecar or the spec'}'s model section")


def declared_convention(header: SafetensorsHeader, *, source: str) -> tuple[str | None, list[str]]:
    """The canonical convention name stamped in the header, if any (never trusted beyond being a string)."""
    try:
        record = record_from_header(header, source=source)
    except UntrustedInputError as exc:
        return None, [f"the stamped record is unreadable and was ignored: {exc}"]
    if not isinstance(record, dict):
        return None, []
    convention = record.get("convention")
    name = convention.get("name") if isinstance(convention, dict) else None
    if isinstance(name, str) and name:
        return name, []
    return None, []


NOT_EVALUATED = ("the shipped state cannot be evaluated as it is, so it is not audited: refit the statistics "
                 "(bnconvention refit) and audit the refit file, or obtain the state the authors meant to ship")


def check_shipped_statistics(path: Path, files: CheckpointFiles | None = None) -> None:
    """Refuse a checkpoint whose running statistics cannot be (NaN or infinite, a negative variance) with one
    :class:`~bnconvention.errors.ImpossibleStatisticsError` naming the file, layer and buffer, before any model is
    built: its shipped cells would be numbers computed through NaN."""
    ensure_possible_statistics(files or open_checkpoint(path), source=str(path), consequence=NOT_EVALUATED)


def load_checkpoint(path: str | Path, spec: AuditSpec) -> LoadedCheckpoint:
    """Everything an audit needs from one checkpoint (file, shard index or folder), checked before any computation.

    The tensors are loaded by :func:`bnconvention.refitting.weights.load_checkpoint_weights` (every layout, names
    mapped, half precision read exactly into float32); the digests are the file's own, over every shard, and the
    model's tensors converted back to the file's names and dtypes must give them (else a warning: θ is then
    proved unchanged in memory only)."""
    path = resolve_checkpoint_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist or is not a file")
    check_shipped_statistics(path)
    sidecar = read_sidecar(path) if (spec.model is None or spec.published_source == "sidecar") else None
    resolution = resolve_model(path, spec, sidecar)
    choice = resolution.architecture
    notes: list[str] = []
    published = published_cells(path, spec, notes=notes)
    model = build_architecture(choice, open_checkpoint(path))  # sized against the header before allocating
    loaded = load_checkpoint_weights(model, path, factory=f"factory {choice.factory!r} (from {choice.source})")
    model.eval()
    declared, header_notes = declared_convention(loaded.header, source=str(path))
    warnings = [*notes, *(f"architecture passed over: {note}" for note in resolution.passed_over), *loaded.notes,
                *header_notes]
    digests = checkpoint_digests(loaded.files)
    if loaded.stored_digests(model).trainable_sha256 != digests.trainable_sha256:
        warnings.append("the model's trainable tensors, converted back to the file's names and dtypes, do not give "
                        "the file's digest; theta is checked in memory")
    return LoadedCheckpoint(path=path, name=checkpoint_name(path), header=loaded.header, choice=choice, model=model,
                            file_digests=digests, declared_convention=declared, published=published,
                            warnings=warnings, weights=loaded)
