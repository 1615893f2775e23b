"""A ``transformers.TrainerCallback`` that records the BatchNorm fitting convention of a ``Trainer`` run.

>>> callback = BNConventionCallback(dataset_id="sklearn/digits", subset="train split",   # doctest: +SKIP
...                                 transform=train_transform)
>>> Trainer(model, args, train_dataset=train, callbacks=[callback]).train()              # doctest: +SKIP
>>> callback.declaration().convention.name                                                 # doctest: +SKIP
'train/train/train-transform/ema-m0.1'

Each ``trainer.train()`` is one phase (:mod:`bnconvention.authoring.loop_recording`): recording starts at
``on_train_begin`` (the model as the ``Trainer`` placed it, the data its train dataloader serves) and the
declaration is written at ``on_train_end`` to ``record_path`` (default ``<output_dir>/bnconvention-declaration.json``),
and on every ``on_save`` into the checkpoint folder just saved. For an unlearning or fine-tuning phase, call
:meth:`next_phase` and train again with the same callback (in the same or a new ``Trainer``). A run that raises
never reaches ``on_train_end``: nothing is written for it, and the next ``train()`` drops its recording.

Importing this module imports transformers (``pip install 'bnconvention[transformers]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnconvention.authoring.loop_recording import RECORD_NAME, RecordingCallback
from bnconvention.extras import missing_dependency

try:
    from transformers import TrainerCallback
except ModuleNotFoundError as exc:  # the one-line error naming the extra
    raise (missing_dependency(exc, command="bnconvention's Trainer callback") or exc) from exc

__all__ = ["BNConventionCallback"]


class BNConventionCallback(RecordingCallback, TrainerCallback):
    """Record how every BatchNorm layer's buffers are written through ``Trainer`` runs, and declare it.

    ``dataset_id``, ``subset`` (and ``transform``, unless the train dataset's ``transform`` attribute is a
    torchvision pipeline) name what the recorder cannot see; ``split`` tags the phase's data (``"train"``,
    ``"retain"``, ``"forget"``...). The record count and a ``datasets`` fingerprint are read off the dataset.
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._default_path:
            self.recording.record_path = Path(args.output_dir) / RECORD_NAME
        loader = kwargs.get("train_dataloader")
        self.recording.begin(kwargs["model"], dataset=getattr(loader, "dataset", None), token=state)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recording.checkpoint(Path(args.output_dir) / f"checkpoint-{state.global_step}")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recording.end()
