"""Load a checkpoint for an audit: an allowlisted architecture, the weights loaded strictly, digests bound to the file.

The checkpoint is a ``.safetensors`` file, a sharded checkpoint's ``*.safetensors.index.json``, or a folder holding one
(:mod:`bnconvention.formats.checkpoint_files`); its tensors are loaded by :mod:`bnconvention.refit.weights` (names
of timm/transformers wrappers and base models mapped, float16/bfloat16 read exactly into float32).

Published cells, for anchoring, come from the spec, the sidecar or the model card's ``model-index`` beside the
weights (``published_source``).

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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnconvention.architectures.resolve import (
    CONFIG_NAME,
    Architecture,
    Resolution,
    read_config,
    resolve_architecture,
)
from bnconvention.errors import AuditSpecError, CheckpointMismatchError, UntrustedInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.safetensors_header import SafetensorsHeader

# torch and safetensors.torch are imported inside the functions that use them: importing this module does not
# import torch.
if TYPE_CHECKING:
    import torch

    from bnconvention.audit.spec import AuditSpec
    from bnconvention.formats.digests import DigestSet
    from bnconvention.refit.weights import LoadedWeights

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


def checkpoint_name(path: Path) -> str:
    """The file name without ``.safetensors`` (or ``.safetensors.index.json`` for a sharded checkpoint)."""
    from bnconvention.formats.checkpoint_files import checkpoint_name as name_of

    return name_of(path)


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
        return Resolution(ModelChoice(factory=spec.model.factory, kwargs=dict(spec.model.kwargs), source="spec"))
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


_ZOO_ACCURACY_CELLS = {"forget": "df", "retain": "dr", "test": "dt"}


def card_path(path: Path) -> Path:
    """The model card of a checkpoint: the release folder's ``README.md``."""
    from bnconvention.formats.card import CARD_NAME

    return path.parent / CARD_NAME


def model_index_published(path: Path, spec: AuditSpec) -> tuple[dict[str, float], list[str]]:
    """Published cells from the card's model-index (:mod:`bnconvention.audit.published`), completed by the spec's
    own (whose values win), and a note for each cell the two give differently."""
    from bnconvention.audit.published import card_published_cells, merge_published
    from bnconvention.formats.card import parse_card_metadata, read_card_text

    card = card_path(path)
    if not card.is_file():
        raise AuditSpecError(f"published_source is 'model_index' but {path.name} has no model card {card.name} "
                             "beside it", field="/published_source")
    metadata = parse_card_metadata(read_card_text(card), source=str(card))
    cells, notes = merge_published(card_published_cells(metadata, spec.model_index_metrics, source=str(card)),
                                   spec.published_for(checkpoint_name(path)))
    if not cells:
        raise UntrustedInputError(f"{card}: its model-index publishes none of the metrics "
                                  f"{sorted(spec.model_index_metrics)}; map the card's metric names to cells in "
                                  "the spec's model_index_metrics", source=card)
    return cells, notes


def published_cells(path: Path, spec: AuditSpec, sidecar: dict[str, Any] | None, *,
                    notes: list[str] | None = None) -> dict[str, float] | None:
    """Published cells (canonical cell text -> value) for this checkpoint, from the spec, its sidecar or its card's
    model-index; ``notes`` collects what the reader should know (a card and spec that disagree)."""
    from bnconvention.audit.expressions import parse_cell

    name = checkpoint_name(path)
    if spec.published_source == "spec":
        return spec.published_for(name)
    if spec.published_source == "model_index":
        from_card, found = model_index_published(path, spec)
        if notes is not None:
            notes.extend(found)
        return from_card
    where = sidecar_path(path)
    if sidecar is None:
        raise AuditSpecError(f"published_source is 'sidecar' but {path.name} has no sidecar {where.name}",
                             field="/published_source")
    raw = sidecar.get("published")
    if raw is None and isinstance(sidecar.get("shipped_accuracy"), dict):
        raw = {_ZOO_ACCURACY_CELLS[k]: v for k, v in sidecar["shipped_accuracy"].items() if k in _ZOO_ACCURACY_CELLS}
    if not isinstance(raw, dict) or not raw:
        raise UntrustedInputError(f"{where}: no published cells found (expected 'published': {{cell: value}} or "
                                  "'shipped_accuracy': {forget, retain, test})", source=where)
    cells: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UntrustedInputError(f"{where}: published cell {key!r} is {value!r}, not a number", source=where)
        try:
            text = parse_cell(key).text
        except AuditSpecError as exc:
            raise UntrustedInputError(f"{where}: published cell {key!r} is not a cell expression: {exc}",
                                      source=where) from exc
        cells[text] = float(value)
    return cells


def build_architecture(choice: ModelChoice) -> torch.nn.Module:
    """Build the allowlisted architecture (random initialisation) in eval mode."""
    from bnconvention.architectures.factories import build_model

    model = build_model(choice.factory, choice.kwargs, source=None if choice.source == "spec" else choice.source)
    model.eval()
    return model


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
    from bnconvention.standard.locations import record_from_header

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


def load_checkpoint(path: str | Path, spec: AuditSpec) -> LoadedCheckpoint:
    """Everything an audit needs from one checkpoint (file, shard index or folder), checked before any computation.

    The tensors are loaded by :func:`bnconvention.refit.weights.load_checkpoint_weights` (every layout, names
    mapped, half precision read exactly into float32); the digests are the file's own, over every shard, and the
    model's tensors converted back to the file's names and dtypes must give them (else a warning: θ is then
    proved unchanged in memory only)."""
    from bnconvention.formats.checkpoint_files import resolve_checkpoint_path
    from bnconvention.formats.digests import checkpoint_digests
    from bnconvention.refit.weights import load_checkpoint_weights

    path = resolve_checkpoint_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist or is not a file")
    sidecar = read_sidecar(path) if (spec.model is None or spec.published_source == "sidecar") else None
    resolution = resolve_model(path, spec, sidecar)
    choice = resolution.architecture
    notes: list[str] = []
    published = published_cells(path, spec, sidecar, notes=notes)
    model = build_architecture(choice)
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
