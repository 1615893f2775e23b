"""What the training-loop callbacks share: one :class:`~bnconvention.authoring.recorder.BNRecorder` per phase of a
run (training, then any unlearning or fine-tuning phase), the data each phase's loop sees, and the declaration
written, atomically, when a phase ends or a checkpoint is saved, with the phase's saved observation beside it
(:func:`observation_path`; ``bnconvention declare --from-observation`` declares it again later, without the model).

The library-specific callbacks (:mod:`~bnconvention.authoring.callbacks_transformers`,
:mod:`~bnconvention.authoring.callbacks_lightning`) only translate their library's events into :meth:`begin`,
:meth:`checkpoint`, :meth:`end` and :meth:`abort`; a plain loop can call them itself.

Why phases: the record describes the deployed state, i.e. whatever wrote the buffers *last*. An unlearning phase
with BatchNorm frozen (eval mode while the weights move) writes nothing, so its record's split, rule, momentum,
batch size and data are those of the phase that did write them: the tracker keeps that phase's fit and completes
the frozen phase's declaration with it. A write the tracker did not see between two phases (``load_state_dict`` of
other buffers) breaks that chain: the earlier fit no longer describes the buffers, and a phase that writes nothing
after it cannot be declared without the author naming ``role=``/``rule=``.

What the loop sees of the data (:func:`loop_data`): the number of records (``len(dataset)``), the ``datasets``
fingerprint of a Hugging Face dataset (recorded as the dataset revision ``datasets-fingerprint:<hex>`` unless a
revision is given) and the dataset's ``transform`` attribute when it is a torchvision pipeline (described by
:func:`~bnconvention.authoring.transforms.describe_transform`); a transform given to the tracker wins.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bnconvention.authoring.recorder import BNRecorder
from bnconvention.authoring.saved_observation import OBSERVATION_NAME
from bnconvention.authoring.transforms import as_standard_transform
from bnconvention.errors import BnConventionError, RecordError, UsageError
from bnconvention.formats.atomic import atomic_write_text
from bnconvention.formats.digests import model_digests
from bnconvention.standard.models import AccumulationRule, Declaration, SplitRole, Transform, to_dict

if TYPE_CHECKING:
    import torch

RECORD_NAME = "bnconvention-declaration.json"  # the default file a callback writes, beside the run's outputs
WRITTEN = ("train", "refit", "mixed")

__all__ = ["OBSERVATION_NAME", "RECORD_NAME", "LoopData", "LoopRecording", "PhaseSettings", "RecordingCallback",
           "loop_data",
           "observation_path"]


def observation_path(record_path: Path) -> Path:
    """Where the saved observation goes beside a declaration: ``bnconvention-observation.json`` beside the default
    record name, ``<stem>.observation.json`` beside any other."""
    if record_path.name == RECORD_NAME:
        return record_path.with_name(OBSERVATION_NAME)
    return record_path.with_name(f"{record_path.stem}.observation.json")


@dataclass(frozen=True)
class LoopData:
    """The data split as the loop sees it."""

    record_count: int | None = None
    fingerprint: str | None = None
    transform: Transform | None = None


@dataclass(frozen=True)
class PhaseSettings:
    """What the author names for a phase (the recorder cannot see which dataset and subset feed the loop)."""

    dataset_id: str
    subset: str
    split: str = "train"
    transform: Any = None
    dataset_revision: str | None = None


@dataclass(frozen=True)
class _Fit:
    """The last phase that wrote the buffers: what a later phase that wrote none inherits."""

    role: SplitRole | None
    rule: AccumulationRule | None
    momentum: float | None
    batch_size: int | None
    num_batches: int | None
    settings: PhaseSettings
    data: LoopData
    running_sha256: str | None


def loop_data(dataset: Any) -> LoopData:
    """The record count, ``datasets`` fingerprint and describable transform of ``dataset`` (None where it has
    none); never iterates it."""
    try:
        count: int | None = len(dataset)
    except TypeError:
        count = None
    fingerprint = getattr(dataset, "_fingerprint", None)
    transform = None
    raw = getattr(dataset, "transform", None)
    if raw is not None:
        try:
            transform = as_standard_transform(raw)
        except BnConventionError:
            transform = None  # not describable (a Lambda, a plain function): the author names it
    return LoopData(record_count=count, fingerprint=fingerprint if isinstance(fingerprint, str) else None,
                    transform=transform)


class LoopRecording:
    """One recorder per phase of a training run, and the declaration of the model's deployed state."""

    def __init__(self, settings: PhaseSettings, *, record_path: str | os.PathLike[str] | None = None,
                 reporting_line: str | None = None) -> None:
        self.settings = settings
        self.record_path = None if record_path is None else Path(record_path)
        self.reporting_line = reporting_line
        self._recorder: BNRecorder | None = None
        self._token: object = None
        self._data = LoopData()
        self._fit: _Fit | None = None
        self._end_sha256: str | None = None
        self.declarations: list[Declaration] = []  # one per finished phase

    @property
    def active(self) -> bool:
        return self._recorder is not None

    def next_phase(self, *, split: str | None = None, dataset_id: str | None = None, subset: str | None = None,
                   transform: Any = None, dataset_revision: str | None = None) -> None:
        """Name the data of the next phase (e.g. ``split="retain"`` before fine-tuning on the retained data)."""
        if self.active:
            raise UsageError("a phase is running; name the next phase after this one ends")
        updates = {k: v for k, v in (("split", split), ("dataset_id", dataset_id), ("subset", subset),
                                     ("transform", transform), ("dataset_revision", dataset_revision))
                   if v is not None}
        self.settings = replace(self.settings, **updates)

    def begin(self, model: torch.nn.Module, *, dataset: Any = None, token: object = None) -> None:
        """Start recording a phase. The same event delivered twice (a callback attached twice: same ``token``) starts
        one phase; a phase that never ended (the run crashed) is dropped unwritten."""
        if self._recorder is not None:
            if token is not None and token is self._token and self._recorder.model is model:
                return
            self.abort()
        now = model_digests(model).running_sha256
        if self._fit is not None and now != self._end_sha256:
            self._fit = None  # written between phases, unseen: the earlier fit no longer describes the buffers
        self._data = loop_data(dataset) if dataset is not None else LoopData()
        recorder = BNRecorder(model, split=self.settings.split)
        recorder.__enter__()
        self._recorder, self._token = recorder, token

    def abort(self) -> None:
        """The run failed: stop recording, write nothing."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.__exit__(None, None, None)

    def declaration(self) -> Declaration:
        """The declaration of the model's state now (inside a phase: as far as it has run)."""
        if self._recorder is None:
            if self.declarations:
                return self.declarations[-1]
            raise UsageError("no phase has been recorded yet")
        return self._declare(self._recorder)

    def checkpoint(self, folder: str | os.PathLike[str]) -> Path | None:
        """Write the declaration into a checkpoint folder just saved (atomically); ``None`` outside a phase."""
        if self._recorder is None:
            return None
        path = Path(folder) / RECORD_NAME
        self._write(path, self._declare(self._recorder), self._recorder)
        return path

    def end(self) -> Declaration | None:
        """End the phase: the declaration, written to ``record_path`` if one is set; ``None`` if none was running
        (the end event delivered twice)."""
        recorder = self._recorder
        if recorder is None:
            return None
        recorder.__exit__(None, None, None)
        self._recorder = None
        record = self._declare(recorder)
        observation = recorder.observation()
        if observation.mode in WRITTEN:
            self._fit = _Fit(role=record.convention.data.role, rule=record.convention.accumulation.rule,
                             momentum=getattr(record.convention.accumulation, "momentum", None),
                             batch_size=record.convention.accumulation.batch_size,
                             num_batches=record.convention.accumulation.num_batches, settings=self.settings,
                             data=self._data, running_sha256=record.digests.running_sha256)
        self._end_sha256 = record.digests.running_sha256
        self.declarations.append(record)
        if self.record_path is not None:
            self._write(self.record_path, record, recorder)
        return record

    def _declare(self, recorder: BNRecorder) -> Declaration:
        observation = recorder.observation()
        fit = self._fit if observation.mode not in WRITTEN else None
        settings, data = (fit.settings, fit.data) if fit is not None else (self.settings, self._data)
        inherited: dict[str, Any] = {}
        if fit is not None:
            inherited = {"role": fit.role, "rule": fit.rule, "momentum": fit.momentum, "batch_size": fit.batch_size,
                         "num_batches": fit.num_batches}
        revision = settings.dataset_revision or (
            f"datasets-fingerprint:{data.fingerprint}" if data.fingerprint else None)
        transform = settings.transform if settings.transform is not None else data.transform
        try:
            return recorder.declaration(
                dataset_id=settings.dataset_id, subset=settings.subset, transform=transform,
                record_count=data.record_count, dataset_revision=revision, reporting_line=self.reporting_line,
                **inherited)
        except RecordError as exc:
            if observation.mode in WRITTEN or self._fit is not None:
                raise
            raise RecordError(f"{exc} (this phase wrote no buffers, and no earlier phase recorded here wrote the "
                              "ones it ended with)") from exc

    @staticmethod
    def _write(path: Path, record: Declaration, recorder: BNRecorder) -> None:
        """The saved observation, then the declaration, each atomically (a crash between the two leaves an
        observation that can be declared, never a declaration without its evidence beside it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        recorder.save_observation(observation_path(path))
        atomic_write_text(path, json.dumps(to_dict(record), indent=2, ensure_ascii=False) + "\n")


class RecordingCallback:
    """What the Trainer and Lightning callbacks share: one :class:`LoopRecording` named by the data the recorder
    cannot see, :meth:`next_phase` and :meth:`declaration`. Listed first among a callback's bases, so its
    ``__init__`` runs and hands on to the library's own callback class."""

    def __init__(self, *, dataset_id: str, subset: str, split: str = "train", transform: Any = None,
                 dataset_revision: str | None = None, record_path: str | os.PathLike[str] | None = None,
                 reporting_line: str | None = None) -> None:
        super().__init__()
        self.recording = LoopRecording(
            PhaseSettings(dataset_id=dataset_id, subset=subset, split=split, transform=transform,
                          dataset_revision=dataset_revision),
            record_path=record_path, reporting_line=reporting_line)
        self._default_path = record_path is None

    def next_phase(self, **settings: Any) -> None:
        """Name the next phase's data: ``split=``, ``dataset_id=``, ``subset=``, ``transform=``."""
        self.recording.next_phase(**settings)

    def declaration(self) -> Declaration:
        return self.recording.declaration()
