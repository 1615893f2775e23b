"""The training-loop callbacks on real loops: a transformers ``Trainer`` and a Lightning ``Trainer``, a few
CPU steps on a tiny BatchNorm model and generated data, a training phase then an unlearning phase with BatchNorm
frozen; the record is checked against what happened, and the bad inputs: a callback attached twice, a crash
mid-training (nothing written), buffers written between phases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from bnconvention import make_transform, validate_paths
from bnconvention.authoring.loop_recording import RECORD_NAME
from bnconvention.standard.models import parse_record

TRANSFORM = make_transform(mode="train", reference="tests:generated", augmentations=["none"])


class TinyNet(torch.nn.Module):
    """Linear + BatchNorm + head; ``freeze_bn`` keeps BatchNorm in eval mode whatever ``train()`` is called with
    (how an unlearning run freezes it under a loop that calls ``model.train()`` itself)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.head = torch.nn.Linear(6, 3)
        self.freeze_bn = False

    def train(self, mode: bool = True) -> TinyNet:
        super().train(mode)
        if self.freeze_bn:
            self.bn.eval()
        return self

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        logits = self.head(torch.relu(self.bn(self.body(x))))
        if labels is None:
            return logits
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class Generated(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, generator=g)
        self.y = torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


# --- transformers ---------------------------------------------------------------------------------------------------


def _hf_train(model: TinyNet, data: Generated, out: Path, callbacks: list[Any], *, steps: int = 3,
              save_steps: int | None = None) -> None:
    """A real ``transformers.Trainer`` (with ``accelerate``, pinned in the test extra) for ``steps`` steps on CPU."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=8, use_cpu=True,
                             report_to=[], save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                             logging_strategy="no", learning_rate=0.05, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks).train()


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Train (BatchNorm updating), then unlearn on the retained data with BatchNorm frozen, one callback."""
    from bnconvention.authoring.callbacks_transformers import BNConventionCallback

    out = tmp_path_factory.mktemp("hf")
    model = TinyNet()
    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all 40 records", transform=TRANSFORM)
    _hf_train(model, Generated(40, 0), out / "train", [callback], save_steps=2)
    trained = json.loads((out / "train" / RECORD_NAME).read_text())
    checkpoint = json.loads((out / "train" / "checkpoint-2" / RECORD_NAME).read_text())
    model.freeze_bn = True
    callback.next_phase(split="retain", subset="24 retained records")
    _hf_train(model, Generated(24, 1), out / "unlearn", [callback])
    return {"model": model, "callback": callback, "trained": trained, "checkpoint": checkpoint, "out": out,
            "unlearned": json.loads((out / "unlearn" / RECORD_NAME).read_text())}


def test_trainer_callback_records_the_training_phase(hf_run: dict[str, Any]) -> None:
    record = parse_record(hf_run["trained"])
    convention = record.convention
    assert convention.name == "train/train/train-transform/ema-m0.1"
    assert convention.accumulation.batch_size == 8 and convention.accumulation.num_batches == 3
    assert convention.data.record_count == 40 and convention.data.subset == "all 40 records"
    assert record.observation is not None and record.observation.buffer_updates == 3
    # the checkpoint saved after 2 steps carries the record as it stood then
    assert parse_record(hf_run["checkpoint"]).observation.buffer_updates == 2  # type: ignore[union-attr]


def test_trainer_callback_records_a_frozen_unlearning_phase(hf_run: dict[str, Any]) -> None:
    record = parse_record(hf_run["unlearned"])
    convention = record.convention
    # BatchNorm frozen while the weights moved: the buffers are the training phase's (split, rule, batch, data)
    assert convention.name == "frozen/train/train-transform/ema-m0.1"
    assert convention.accumulation.batch_size == 8 and convention.data.record_count == 40
    assert record.observation is not None and record.observation.buffer_updates == 0
    assert record.observation.frozen_forwards == 3 and record.observation.trainable_changed is True
    # and it describes the model as it is
    from bnconvention.formats.digests import model_digests

    assert record.digests.trainable_sha256 == model_digests(hf_run["model"]).trainable_sha256


def test_trainer_callback_record_stamps_and_validates(hf_run: dict[str, Any], tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from bnconvention import stamp_file

    path = tmp_path / "model.safetensors"
    save_file(hf_run["model"].state_dict(), str(path))
    stamp_file(path, hf_run["unlearned"])
    assert validate_paths([path], require_declaration=True).exit_code == 0


def test_trainer_callback_saves_its_observation_to_declare_again(hf_run: dict[str, Any], tmp_path: Path) -> None:
    # beside each declaration the callback saves the observation; `declare --from-observation` gives the same record
    from safetensors.torch import save_file

    from bnconvention.authoring.loop_recording import OBSERVATION_NAME
    from bnconvention.cli.main import main

    out, saved = hf_run["out"], hf_run["out"] / "unlearn" / OBSERVATION_NAME
    assert (out / "train" / "checkpoint-2" / OBSERVATION_NAME).is_file()
    weights = tmp_path / "model.safetensors"
    save_file(hf_run["model"].state_dict(), str(weights))
    again = tmp_path / "again.json"
    # the frozen phase wrote no buffers: its split and rule are the training phase's, named here as the callback did
    assert main(["declare", "--from-observation", str(saved), "--weights", str(weights), "--dataset-id",
                 "generated/tiny", "--subset", "all 40 records", "--transform-mode", "train", "--transform-reference",
                 "tests:generated", "--augmentation", "none", "--role", "train", "--rule", "ema", "--momentum", "0.1",
                 "--batch-size", "8", "--num-batches", "3", "--record-count", "40", "-o", str(again)]) == 0
    assert json.loads(again.read_text()) == hf_run["unlearned"]


def test_trainer_callback_attached_twice_records_once(tmp_path: Path) -> None:
    from bnconvention.authoring.callbacks_transformers import BNConventionCallback

    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    _hf_train(TinyNet(), Generated(16, 0), tmp_path, [callback, callback], steps=2)
    record = parse_record(json.loads((tmp_path / RECORD_NAME).read_text()))
    assert record.observation is not None and record.observation.buffer_updates == 2
    assert len(callback.recording.declarations) == 1


def test_trainer_crash_mid_training_writes_nothing(tmp_path: Path) -> None:
    from transformers import TrainerCallback

    from bnconvention.authoring.callbacks_transformers import BNConventionCallback

    class Crash(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            raise RuntimeError("power cut")

    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    model = TinyNet()
    with pytest.raises(RuntimeError, match="power cut"):
        _hf_train(model, Generated(16, 0), tmp_path, [callback, Crash()], steps=2)
    assert not (tmp_path / RECORD_NAME).exists() and not list(tmp_path.glob("*.tmp"))
    _hf_train(model, Generated(16, 0), tmp_path, [callback], steps=2)  # the next run drops the broken phase
    record = parse_record(json.loads((tmp_path / RECORD_NAME).read_text()))
    assert record.observation is not None and record.observation.buffer_updates == 2


def test_buffers_loaded_between_phases_are_not_inherited(tmp_path: Path) -> None:
    from bnconvention.authoring.callbacks_transformers import BNConventionCallback
    from bnconvention.errors import RecordError

    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    model = TinyNet()
    _hf_train(model, Generated(16, 0), tmp_path / "a", [callback], steps=2)
    other = TinyNet()
    model.load_state_dict(other.state_dict())  # someone else's buffers, between the phases
    model.freeze_bn = True
    with pytest.raises(RecordError, match="no earlier phase recorded here wrote"):
        _hf_train(model, Generated(16, 1), tmp_path / "b", [callback], steps=2)
    assert not (tmp_path / "b" / RECORD_NAME).exists()


# --- Lightning ------------------------------------------------------------------------------------------------------


def _lightning_module(model: TinyNet) -> Any:
    import lightning

    class Module(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
            return self.net(batch["x"], batch["labels"])["loss"]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

        def on_train_epoch_start(self) -> None:
            if self.net.freeze_bn:
                self.net.bn.eval()  # Lightning calls train() before each epoch: freeze BatchNorm after it

    return Module()


def _fit(module: Any, data: Generated, callbacks: list[Any], root: Path, *, steps: int = 3) -> None:
    import lightning

    trainer = lightning.Trainer(max_steps=steps, callbacks=callbacks, default_root_dir=str(root),
                                enable_progress_bar=False, logger=False, enable_checkpointing=False,
                                accelerator="cpu", enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))


@pytest.mark.slow
def test_lightning_callback_records_training_then_frozen_unlearning(tmp_path: Path) -> None:
    from bnconvention.authoring.callbacks_lightning import BNConventionCallback

    net = TinyNet()
    module = _lightning_module(net)
    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all 40 records", transform=TRANSFORM)
    _fit(module, Generated(40, 0), [callback], tmp_path / "train")
    trained = parse_record(json.loads((tmp_path / "train" / RECORD_NAME).read_text()))
    assert trained.convention.name == "train/train/train-transform/ema-m0.1"
    assert trained.observation is not None and trained.observation.buffer_updates == 3
    assert trained.convention.data.record_count == 40
    assert [layer.name for layer in trained.deployed_state[0].layers] == ["net.bn"]

    net.freeze_bn = True
    callback.next_phase(split="retain", subset="24 retained records")
    _fit(module, Generated(24, 1), [callback], tmp_path / "unlearn")
    unlearned = parse_record(json.loads((tmp_path / "unlearn" / RECORD_NAME).read_text()))
    assert unlearned.convention.name == "frozen/train/train-transform/ema-m0.1"
    assert unlearned.observation is not None and unlearned.observation.frozen_forwards == 3
    assert unlearned.digests.running_sha256 == trained.digests.running_sha256  # frozen: the same buffers
    assert unlearned.digests.trainable_sha256 != trained.digests.trainable_sha256


@pytest.mark.slow
def test_lightning_crash_writes_nothing(tmp_path: Path) -> None:
    import lightning

    from bnconvention.authoring.callbacks_lightning import BNConventionCallback

    class Crash(lightning.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any) -> None:
            raise RuntimeError("power cut")

    callback = BNConventionCallback(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    module = _lightning_module(TinyNet())
    with pytest.raises(RuntimeError, match="power cut"):
        _fit(module, Generated(16, 0), [callback, Crash()], tmp_path)
    assert not (tmp_path / RECORD_NAME).exists() and not callback.recording.active
