"""A recorder's observation saved with everything a declaration needs, so ``bnconvention declare --from-observation``
(later, in another process, without the model or a factory) writes the record ``recorder.declaration(...)`` would.

``to_dict(recorder.observation())`` holds the events but not the layers (type, eps, momentum, affine) nor the digests
the record binds to; :meth:`BNRecorder.save_observation <bnconvention.authoring.recorder.BNRecorder.save_observation>`
writes this file instead (:class:`SavedObservation`, format ``bnconvention.observation/1``): the observation, the
BatchNorm layers as the record lists them, the tensor digests, and what the recorder itself reads when it declares
(its last split tag, the layers' configured rule, SyncBatchNorm, the last refit's own declaration). Parsing is pure
(:func:`parse_saved_observation` over bytes); reading it is untrusted input: strict JSON, a size limit, one-line
errors. :func:`check_weights` binds it to a weights file before anything is declared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from bnconvention.errors import DigestMismatchError, JSONInputError
from bnconvention.formats.canonical import loads_strict
from bnconvention.formats.digests import bn_layers_from_tensor_names, file_digests
from bnconvention.formats.name_prefix import PrefixMapping, prefix_mapping
from bnconvention.formats.safetensors_header import SafetensorsHeader, read_header
from bnconvention.formats.text import first_validation_error
from bnconvention.standard.fields import StrictModel
from bnconvention.standard.models import (
    AccumulationRule,
    BatchNormState,
    FittingConvention,
    LayerNameMapping,
    Observation,
    RefitDetails,
    TensorDigests,
)

FORMAT: Final = "bnconvention.observation/1"
OBSERVATION_NAME = "bnconvention-observation.json"  # the file the callbacks write beside their declaration
MAX_SAVED_OBSERVATION_BYTES = 16 * 1024 * 1024

__all__ = ["FORMAT", "MAX_SAVED_OBSERVATION_BYTES", "OBSERVATION_NAME", "SavedObservation", "check_weights",
           "parse_saved_observation", "read_saved_observation"]


class SavedObservation(StrictModel):
    """What a recorder saw, and what of the model a declaration describes (none of it the author's word)."""

    format: Literal["bnconvention.observation/1"]
    observation: Observation  # the events and derived mode, without the author's claims checked against it
    deployed_state: BatchNormState  # every BatchNorm layer, in module order, with its running-statistics digest
    digests: TensorDigests
    split: str  # the recorder's split tag at the end: the role of a model without BatchNorm
    configured_rule: AccumulationRule | None = None  # the rule all layers are set to (an unseen earlier fit's)
    configured_momentum: float | None = None
    sync_batchnorm: bool = False  # a SyncBatchNorm layer is among the recorded ones
    refit_convention: FittingConvention | None = None  # the last refit's own declaration, when one ran
    refit: RefitDetails | None = None

    def layer_digests(self) -> dict[str, str | None]:
        return {layer.name: layer.running_sha256 for layer in self.deployed_state.layers}


def parse_saved_observation(data: bytes, *, source: str) -> SavedObservation:
    """The saved observation in ``data`` (untrusted): strict JSON, then the model; one-line errors naming ``source``."""
    value = loads_strict(data, source=source)
    if isinstance(value, dict) and value.get("format") != FORMAT:
        what = "a recorder observation without the layers and digests" if "layers" in value else (
            "a record" if "kind" in value else "not a saved observation")
        raise JSONInputError(
            f"{source}: {what} (no \"format\": \"{FORMAT}\"); write it with recorder.save_observation(path), or "
            "declare from this file with --observation and --arch", source=source)
    try:
        return SavedObservation.model_validate(value)
    except ValidationError as exc:
        raise JSONInputError(
            f"{source}: not a valid saved observation: {first_validation_error(exc)}; write it again with "
            "recorder.save_observation(path)", source=source) from exc


def read_saved_observation(path: str | os.PathLike[str]) -> SavedObservation:
    """:func:`parse_saved_observation` of a file, refusing one over :data:`MAX_SAVED_OBSERVATION_BYTES`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"saved observation {str(path)!r} does not exist or is not a file")
    size = path.stat().st_size
    if size > MAX_SAVED_OBSERVATION_BYTES:
        raise JSONInputError(f"{path}: {size} bytes, over the {MAX_SAVED_OBSERVATION_BYTES}-byte limit for a saved "
                             "observation", source=path)
    return parse_saved_observation(path.read_bytes(), source=str(path))


def check_weights(saved: SavedObservation, weights: str | os.PathLike[str]) -> SavedObservation:
    """The saved observation bound to ``weights``, after checking they are the tensors the recorder saw
    (:class:`~bnconvention.errors.DigestMismatchError` naming the first digest, or the first layer, that differs).

    When the recorder watched a wrapper (``module.``, ``_orig_mod.``, a LightningModule's ``net.``) and the file holds
    the inner network, the layer names are mapped across the one prefix that maps them
    (:func:`~bnconvention.formats.name_prefix.prefix_mapping`), the file is checked under the run's names, and the
    result describes the file in its own names, with the mapping kept as ``observation.name_mapping``.
    """
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} does not exist or is not a file")
    header = read_header(path)
    layers = saved.layer_digests()
    tracked = [name for name, digest in layers.items() if digest is not None]
    mapping = prefix_mapping(tracked, bn_layers_from_tensor_names(
        {name: info.shape for name, info in header.tensors.items()}))
    rename = None if mapping is None else (lambda name: mapping.to_observed(name) or name)
    found = file_digests(path, bn_layers=list(layers), header=header, rename=rename)
    try:
        found.check_against(trainable_sha256=saved.digests.trainable_sha256,
                            running_sha256=saved.digests.running_sha256, layer_running_sha256=layers)
    except DigestMismatchError as exc:
        via = "" if mapping is None else f" with the layer names mapped ({mapping.describe()})"
        raise DigestMismatchError(
            f"{path}: {exc.field} is {exc.found} in the file but {exc.expected} in the saved observation{via}: these "
            "are not the tensors the recorder saw; save the weights and the observation at the same point of the run",
            field=exc.field, expected=exc.expected, found=exc.found) from exc
    return saved if mapping is None else _in_weights_names(saved, mapping, path, header)


def _in_weights_names(saved: SavedObservation, mapping: PrefixMapping, path: Path,
                      header: SafetensorsHeader) -> SavedObservation:
    """``saved`` describing the file in the file's own layer names, the mapping recorded beside the observation."""
    renamed = {layer.name: mapping.to_weights(layer.name) or layer.name for layer in saved.deployed_state.layers}
    own = file_digests(path, bn_layers=list(renamed.values()), header=header)
    layers = [layer.model_copy(update={"name": renamed[layer.name],
                                       "running_sha256": own.layer_running_sha256.get(renamed[layer.name])})
              for layer in saved.deployed_state.layers]
    observation = saved.observation.model_copy(update={"name_mapping": LayerNameMapping(
        observed_prefix=mapping.observed, weights_prefix=mapping.weights)})
    return saved.model_copy(update={
        "observation": observation, "deployed_state": saved.deployed_state.model_copy(update={"layers": layers}),
        "digests": TensorDigests(algorithm=saved.digests.algorithm, trainable_sha256=own.trainable_sha256,
                                 running_sha256=own.running_sha256)})
