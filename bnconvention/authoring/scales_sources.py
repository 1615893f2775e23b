"""Where a quantized release declares its activation scales: ``declaration.json``, the weights header, the card.

A statically quantized release carries a 1.1 declaration with an ``activation_scales`` deployed state. The author
may keep it in a ``declaration.json`` beside the weights (as the zoo's quantized variants and the population do),
stamp it into the safetensors header (``bnconvention stamp``: key ``bnconvention.record`` of ``__metadata__``) or
write it into the model card's ``bnconvention`` block (``README.md`` beside the weights). Those places are read in
that order; a place *declares the scales* when its record holds a deployed state of kind ``activation_scales`` (a
BatchNorm-only record, a refit annotation, or a place with no record says nothing about them and is passed over; an
unreadable one is passed over too, and named if no place declares the scales).

Every place that declares them is validated (schema and semantic rules) like any record; the first is the
declaration, and every later one must hold the same record (:func:`~bnconvention.validation.consistency
.records_equal`), else :class:`QuantizationError` names both places and the first field where they differ. The
scales file is the state's ``filename`` beside the weights (default ``activation_scales.safetensors``; a name
leaving the folder is refused). Binding to the weights and the scales
(digests) is the caller's check, the same for every place: :func:`bnconvention.audit.scales.stage
.check_shipped_scales`.

Only a single-file checkpoint has a header of its own to read; for a sharded one (an index) the header is passed
over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bnconvention.authoring.activation_scales import scales_state_of, shipped_scales
from bnconvention.errors import BnConventionError, QuantizationError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.card import CARD_NAME, read_card_record, read_card_text
from bnconvention.formats.safetensors_header import read_header
from bnconvention.refitting.scales import ScaleSet
from bnconvention.standard.locations import record_from_header
from bnconvention.standard.models import SCALES_FILENAME, ActivationScalesState, Declaration, to_dict
from bnconvention.validation.consistency import diff_pointers, records_equal
from bnconvention.validation.records import ensure_valid_record

DECLARATION_FILE = "declaration.json"
MAX_DECLARATION_BYTES = 1_000_000


@dataclass(frozen=True)
class ScalesDeclaration:
    """The declaration of a release's activation scales: the record, where it was read, its scales state and the
    scales file it names."""

    record: Declaration
    source: str
    state: ActivationScalesState
    scales_path: Path


@dataclass(frozen=True)
class _Place:
    source: str
    data: Any | None  # the decoded record (not yet validated); None: nothing there, or unreadable
    unreadable: str | None = None


def declares_scales(data: Any) -> bool:
    """Whether decoded record ``data`` holds a deployed state of kind ``activation_scales``."""
    states = data.get("deployed_state") if isinstance(data, dict) else None
    return isinstance(states, list) and any(isinstance(s, dict) and s.get("kind") == "activation_scales"
                                            for s in states)


def _read_place(source: str, read: Any) -> _Place:
    try:
        return _Place(source=source, data=read())
    except (BnConventionError, OSError, ValueError) as exc:
        return _Place(source=source, data=None, unreadable=str(exc))


def _declaration_file(path: Path) -> Any | None:
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        data = handle.read(MAX_DECLARATION_BYTES + 1)
    if len(data) > MAX_DECLARATION_BYTES:
        raise QuantizationError(f"{path}: over the {MAX_DECLARATION_BYTES}-byte limit for a declaration", site=None)
    return loads_strict(data, source=str(path))


def _header_record(weights: Path) -> Any | None:
    if not weights.name.endswith(".safetensors"):
        return None  # a sharded checkpoint's index has no header of its own
    return record_from_header(read_header(weights), source=str(weights))


def _card_record(card: Path) -> Any | None:
    if not card.is_file():
        return None
    return read_card_record(read_card_text(card), source=str(card))


def read_places(weights: Path) -> list[_Place]:
    """The three places beside ``weights``, in reading order, each decoded (never raises)."""
    folder = weights.parent
    return [_read_place(str(folder / DECLARATION_FILE), lambda: _declaration_file(folder / DECLARATION_FILE)),
            _read_place(f"{weights} header", lambda: _header_record(weights)),
            _read_place(str(folder / CARD_NAME), lambda: _card_record(folder / CARD_NAME))]


def scales_path_of(state: ActivationScalesState, weights: Path, *, source: str) -> Path:
    """The scales file a state names, beside the weights; a name that leaves the folder is refused."""
    name = state.filename or SCALES_FILENAME
    folder = weights.parent
    path = folder / name
    if Path(name).is_absolute() or path.resolve().parent != folder.resolve():
        raise QuantizationError(f"{source} names scales file {name!r}, which is not a file in {folder}: filename is "
                                "a name beside the weights file", site=None)
    return path


def declares_scales_beside(weights: Path) -> bool:
    """Whether any place beside ``weights`` declares activation scales (no validation, never raises)."""
    return any(declares_scales(place.data) for place in read_places(weights))


def _checked(place: _Place) -> Declaration:
    record = ensure_valid_record(place.data, source=place.source)
    if not isinstance(record, Declaration):
        raise QuantizationError(f"{place.source} is a refit annotation, not a declaration", site=None)
    return record


def _check_agree(chosen: tuple[_Place, Declaration], other: tuple[_Place, Declaration]) -> None:
    first, second = to_dict(chosen[1]), to_dict(other[1])
    if records_equal(first, second):
        return
    where = diff_pointers(first, second)[0][0]
    raise QuantizationError(f"{chosen[0].source} and {other[0].source} declare different activation-scales records "
                            f"(first difference at {where or '/'}); the two places must carry the same record: "
                            "re-stamp one from the other", site=None)


def find_scales_declaration(weights: Path) -> ScalesDeclaration | None:
    """The declaration of the activation scales beside ``weights`` (see the module docstring), validated; None when
    no place declares them."""
    places = [(place, _checked(place)) for place in read_places(weights) if declares_scales(place.data)]
    if not places:
        return None
    for other in places[1:]:
        _check_agree(places[0], other)
    chosen, record = places[0]
    state = scales_state_of(record)
    return ScalesDeclaration(record=record, source=chosen.source, state=state,
                             scales_path=scales_path_of(state, weights, source=chosen.source))


def read_quantized_release(weights: Path) -> tuple[ScalesDeclaration, ScaleSet]:
    """The declaration of a quantized release and its shipped scales, checked against each other (sites, values and
    digest) before anything uses them; QuantizationError when no place declares them."""
    found = find_scales_declaration(weights)
    if found is None:
        unreadable = [f"{p.source}: {p.unreadable}" for p in read_places(weights) if p.unreadable]
        why = f" (unreadable: {'; '.join(unreadable)})" if unreadable else ""
        raise QuantizationError(f"{weights.parent} ships activation scales but neither {DECLARATION_FILE}, the "
                                f"header of {weights.name} nor {CARD_NAME} declares them (an activation_scales "
                                f"deployed state){why}; declare them with declare_quantized", site=None)
    return found, shipped_scales(found.state, found.scales_path, source=found.source)


__all__ = ["DECLARATION_FILE", "ScalesDeclaration", "declares_scales", "declares_scales_beside",
           "find_scales_declaration", "read_places", "read_quantized_release", "scales_path_of"]
