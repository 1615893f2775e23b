"""A Lightning ``Callback`` that records the BatchNorm fitting convention of a ``Trainer.fit`` run.

>>> callback = BNConventionCallback(dataset_id="sklearn/digits", subset="train split",   # doctest: +SKIP
...                                 transform=train_transform)
>>> lightning.Trainer(max_steps=20, callbacks=[callback]).fit(module, loader)            # doctest: +SKIP

Each ``fit`` is one phase (:mod:`bnconvention.authoring.loop_recording`): recording starts at ``on_train_start``
(after the sanity-check validation, which runs without gradients anyway) and the declaration is written at
``on_train_end`` to ``record_path`` (default ``<default_root_dir>/bnconvention-declaration.json``); every saved
checkpoint carries it too, as ``checkpoint["bnconvention"]``. ``on_exception`` drops the phase unwritten. For an
unlearning or fine-tuning phase, call :meth:`next_phase` and fit again with the same callback.

Importing this module imports lightning (``pip install 'bnconvention[lightning]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnconvention.authoring.loop_recording import RECORD_NAME, RecordingCallback
from bnconvention.extras import missing_dependency
from bnconvention.standard.models import to_dict

try:
    from lightning.pytorch.callbacks import Callback
except ModuleNotFoundError as exc:  # the one-line error naming the extra
    raise (missing_dependency(exc, command="bnconvention's Lightning callback") or exc) from exc

__all__ = ["CHECKPOINT_KEY", "BNConventionCallback"]

CHECKPOINT_KEY = "bnconvention"


class BNConventionCallback(RecordingCallback, Callback):
    """Record how every BatchNorm layer's buffers are written through Lightning fits, and declare it.

    Arguments as for the ``transformers`` callback: ``dataset_id``, ``subset``, ``split``, ``transform`` name what
    the recorder cannot see; the record count and transform are read off the train dataloader's dataset.
    """

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._default_path:
            self.recording.record_path = Path(trainer.default_root_dir) / RECORD_NAME
        loader = trainer.train_dataloader
        self.recording.begin(pl_module, dataset=getattr(loader, "dataset", None), token=trainer)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self.recording.active:
            checkpoint[CHECKPOINT_KEY] = to_dict(self.recording.declaration())

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.recording.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.recording.abort()
