"""The recorder around a training loop it does not own: Lightning's ``Trainer.fit``, as Lightning's docs run it.

What the recorder declares is checked against what happened to the tensors, read independently of the recorder:
``num_batches_tracked`` (how many training-mode forwards wrote the buffers), the running buffers and the weights
before and after each stage.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from bnconvention import BNRecorder, make_transform
from bnconvention.errors import RecordError
from bnconvention.standard.models import parse_record, to_dict
from bnconvention.validation.records import check_record

lightning = pytest.importorskip("lightning")

TRANSFORM = make_transform(mode="train", reference="tests:generated", augmentations=["none"])


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(4, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.body(x))))


class Module(lightning.LightningModule):  # type: ignore[misc]
    """A LightningModule holding the network as ``self.net``, as Lightning's docs write one."""

    def __init__(self, net: Net, *, freeze_bn: bool = False) -> None:
        super().__init__()
        self.net = net
        self.freeze_bn = freeze_bn

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_epoch_start(self) -> None:
        if self.freeze_bn:
            self.net.bn.eval()  # Lightning calls train() before each epoch: freeze BatchNorm after it


class GradientProbe(lightning.Callback):  # type: ignore[misc]
    """An unlearning library's diagnostic: after training, the cosine between the gradients of two batches, computed
    in eval mode with autograd on; it steps no optimizer."""

    def __init__(self) -> None:
        self.cosine: float | None = None

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        pl_module.eval()
        grads = []
        for seed in (1, 2):
            x, y = _batch(seed)
            pl_module.zero_grad()
            torch.nn.functional.cross_entropy(pl_module.net(x), y).backward()
            grads.append(torch.cat([p.grad.flatten() for p in pl_module.parameters()]))
        pl_module.zero_grad()
        self.cosine = float(torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0))


def _batch(seed: int, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def _loader(seed: int, n: int = 32) -> torch.utils.data.DataLoader[Any]:
    x, y = _batch(seed, n)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def _fit(module: Module, root: Path, *, steps: int, callbacks: list[Any] | None = None, seed: int = 0) -> None:
    trainer = lightning.Trainer(max_steps=steps, callbacks=callbacks or [], default_root_dir=str(root),
                                enable_progress_bar=False, logger=False, enable_checkpointing=False,
                                accelerator="cpu", enable_model_summary=False)
    trainer.fit(module, _loader(seed))


def _state(net: Net) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


# --- a forward that writes no buffer and precedes no weight change does not change the mode -----------------------


@pytest.mark.slow
def test_a_gradient_probe_after_training_leaves_the_mode_train(tmp_path: Path) -> None:
    net = Net()
    module = Module(net)
    probe = GradientProbe()
    with BNRecorder(module, split="retain") as rec:
        _fit(module, tmp_path, steps=4, callbacks=[probe])
    obs = rec.observation()
    assert probe.cosine is not None  # the probe ran: eval-mode forwards with autograd, after the last update
    assert obs.frozen_forwards == 2 and obs.buffer_updates == 4
    assert int(net.bn.num_batches_tracked) == 4  # independently: four training-mode writes
    assert (obs.mode, obs.last_update_split) == ("train", "retain")


@pytest.mark.slow
def test_frozen_steps_after_training_that_move_the_weights_are_mixed(tmp_path: Path) -> None:
    net = Net()
    module = Module(net)
    with BNRecorder(module, split="retain") as rec:
        _fit(module, tmp_path / "a", steps=2)
        after_training = _state(net)
        module.freeze_bn = True
        _fit(module, tmp_path / "b", steps=2, seed=1)
    obs = rec.observation()
    after = _state(net)
    assert torch.equal(after["bn.running_mean"], after_training["bn.running_mean"])  # the buffers were frozen ...
    assert not torch.equal(after["body.weight"], after_training["body.weight"])  # ... while the weights moved
    assert obs.mode == "mixed"


@pytest.mark.slow
def test_a_weight_write_after_the_probe_that_version_counters_miss_is_seen(tmp_path: Path) -> None:
    net = Net()
    module = Module(net)
    with BNRecorder(module, split="retain") as rec:
        _fit(module, tmp_path, steps=2, callbacks=[GradientProbe()])
        version = net.body.weight._version
        net.body.weight.data.add_(0.5)  # a library stepping by hand through .data: no version counter moves
        assert net.body.weight._version == version
    assert rec.observation().mode == "mixed"


# --- an override is recorded beside what was observed -----------------------------------------------------------


def _mixed_run() -> tuple[Net, BNRecorder]:
    net = Net()
    with BNRecorder(net, split="retain") as rec:
        x, y = _batch(0)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
        net.eval()  # a frozen step that moves the weights after the last buffer write
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
    return net, rec


def test_declared_mode_without_override_stays_a_contradiction() -> None:
    _, rec = _mixed_run()
    record = rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM, declared_mode="train")
    assert record.convention.buffer_update_mode == "mixed"
    assert record.spec_version == "1.0"  # no field of 1.1 filled: no override
    assert [c.code for c in record.observation.contradictions] == ["declared-mode-mismatch"]


def test_an_override_puts_the_author_mode_in_the_convention_beside_the_observed_one() -> None:
    _, rec = _mixed_run()
    record = rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM, declared_mode="train",
                             override_by="A. Author", override_reason="the last step only probed the gradients")
    assert record.convention.buffer_update_mode == "train"
    observation = record.observation
    assert observation is not None and observation.mode == "mixed"
    assert observation.override is not None
    assert (observation.override.mode, observation.override.observed, observation.override.by) == (
        "train", "mixed", "A. Author")
    assert observation.contradictions == []  # the override answers the declared-mode contradiction
    _, issues = check_record(to_dict(record), source="record.json")
    assert [(i.code, i.severity, i.path) for i in issues] == [
        ("record.mode_override", "warning", "/observation/override")]
    assert "A. Author" in issues[0].message and '"mixed"' in issues[0].message


def test_a_convention_mode_edited_away_from_the_observed_one_is_an_error() -> None:
    _, rec = _mixed_run()
    data = to_dict(rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM))
    data["convention"]["buffer_update_mode"] = "train"
    data["convention"]["name"] = data["convention"]["name"].replace("mixed/", "train/", 1)
    codes = [(i.code, i.path) for i in check_record(data, source="record.json")[1]]
    assert ("record.observation_mode_mismatch", "/convention/buffer_update_mode") in codes


def test_an_override_of_another_record_is_an_error() -> None:
    _, rec = _mixed_run()
    data = to_dict(rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM,
                                   declared_mode="train", override_by="A", override_reason="probe"))
    data["observation"]["override"]["observed"] = "frozen"
    codes = [(i.code, i.path) for i in check_record(data, source="record.json")[1]]
    assert ("record.observation_mode_mismatch", "/observation/override") in codes


def test_an_override_needs_who_and_why_and_a_different_mode() -> None:
    _, rec = _mixed_run()
    with pytest.raises(RecordError, match="who overrides and why"):
        rec.declaration(dataset_id="d", subset="s", transform=TRANSFORM, declared_mode="train", override_reason="x")
    with pytest.raises(RecordError, match="nothing to override"):
        rec.declaration(dataset_id="d", subset="s", transform=TRANSFORM, declared_mode="mixed", override_by="A",
                        override_reason="x")


def test_declare_cli_records_the_override(tmp_path: Path) -> None:
    net, rec = _mixed_run()
    rec.save_observation(tmp_path / "observation.json")
    save_file(net.state_dict(), str(tmp_path / "model.safetensors"))
    base = [sys.executable, "-m", "bnconvention", "declare", "--from-observation", str(tmp_path / "observation.json"),
            "--weights", str(tmp_path / "model.safetensors"), "--dataset-id", "generated/tiny", "--subset", "all",
            "--transform-mode", "train", "--mode", "train"]
    done = subprocess.run([*base, "--override", "gradient probe", "--override-by", "A. Author",
                           "-o", str(tmp_path / "record.json")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    record = parse_record(json.loads((tmp_path / "record.json").read_text()))
    assert record.convention.buffer_update_mode == "train"
    assert record.observation is not None and record.observation.override is not None
    assert record.observation.override.reason == "gradient probe"
    half = subprocess.run([*base, "--override", "gradient probe", "-o", str(tmp_path / "other.json")],
                          capture_output=True, text=True, check=False)
    assert half.returncode != 0 and "who overrides and why" in half.stderr
    assert len(half.stderr.strip().splitlines()) == 1 and not (tmp_path / "other.json").exists()


# --- wrapped models: layer names mapped across the wrapper's prefix, and said ----------------------------------------


def _declare(observation: Path, weights: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bnconvention", "declare", "--from-observation", str(observation),
                           "--weights", str(weights), "--dataset-id", "generated/tiny", "--subset", "all",
                           "--transform-mode", "train", "-o", str(out)], capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def lightning_wrapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Module]:
    """A Lightning fit recorded on the LightningModule (layer names ``net.*``), the observation saved beside the
    inner network's weights (names without ``net.``), as a user releasing ``module.net`` does."""
    root = tmp_path_factory.mktemp("wrapped")
    module = Module(Net())
    with BNRecorder(module, split="retain") as rec:
        _fit(module, root, steps=3)
    rec.save_observation(root / "observation.json")
    save_file(module.net.state_dict(), str(root / "model.safetensors"))
    return root, module


@pytest.mark.slow
def test_declare_from_an_observation_of_a_wrapper_maps_the_prefix(lightning_wrapped: tuple[Path, Module]) -> None:
    root, _ = lightning_wrapped
    done = _declare(root / "observation.json", root / "model.safetensors", root / "record.json")
    assert done.returncode == 0, done.stderr
    assert "'net.<name>' in the run is '<name>' in the weights" in done.stderr  # the mapping used is said
    record = parse_record(json.loads((root / "record.json").read_text()))
    assert [layer.name for layer in record.deployed_state[0].layers] == ["bn"]  # the file's own names
    assert record.observation is not None and record.observation.name_mapping is not None
    assert (record.observation.name_mapping.observed_prefix, record.observation.name_mapping.weights_prefix) == (
        "net.", "")
    assert [layer.name for layer in record.observation.layers] == ["net.bn"]  # what the recorder saw, as it saw it
    stamped = subprocess.run([sys.executable, "-m", "bnconvention", "stamp", str(root / "model.safetensors"),
                              "--record", str(root / "record.json")], capture_output=True, text=True, check=False)
    assert stamped.returncode == 0, stamped.stderr  # the record binds to the released file's tensors


@pytest.mark.slow
def test_a_real_layer_mismatch_names_the_first_layer(lightning_wrapped: tuple[Path, Module],
                                                     tmp_path: Path) -> None:
    root, module = lightning_wrapped
    other = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    save_file(other.state_dict(), str(tmp_path / "other.safetensors"))
    done = _declare(root / "observation.json", tmp_path / "other.safetensors", tmp_path / "record.json")
    assert done.returncode != 0 and not (tmp_path / "record.json").exists()
    assert "'net.bn'" in done.stderr and "same point of the run" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_recorder_declares_the_released_network_of_a_wrapper(lightning_wrapped: tuple[Path, Module]) -> None:
    _, module = lightning_wrapped
    net = Net()
    wrapped = Module(net)
    with BNRecorder(wrapped, split="retain") as rec:
        _fit(wrapped, Path(lightning_wrapped[0]) / "again", steps=2)
    record = rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM, released=net)
    from bnconvention.formats.digests import model_digests

    assert record.digests.trainable_sha256 == model_digests(net).trainable_sha256
    assert [layer.name for layer in record.deployed_state[0].layers] == ["bn"]
    assert record.observation is not None and record.observation.name_mapping is not None
    assert record.observation.name_mapping.observed_prefix == "net."
    with pytest.raises(Exception, match="submodule of the recorded model"):
        rec.declaration(dataset_id="d", subset="s", transform=TRANSFORM, released=Net())


def test_data_parallel_and_compile_wrappers_are_taken_off() -> None:
    net = Net()
    wrapped = torch.nn.DataParallel(net)  # on CPU it calls the module itself
    with BNRecorder(wrapped, split="train") as rec:
        wrapped(_batch(0)[0])
    record = rec.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    assert [layer.name for layer in record.deployed_state[0].layers] == ["bn"]
    assert record.observation is not None and record.observation.name_mapping is not None
    assert record.observation.name_mapping.observed_prefix == "module."
    assert record.convention.buffer_update_mode == "train"


# --- which data the statistics saw, matched by content -------------------------------------------------------------


class Distill(lightning.LightningModule):  # type: ignore[misc]
    """A distillation-style unlearning step inside Lightning's loop: each step runs the train-mode student on a
    forget batch, then on a retain batch (the last write of every step is a retain batch)."""

    def __init__(self, net: Net, forget: torch.utils.data.Dataset[Any]) -> None:
        super().__init__()
        self.net = net
        self.forget = forget

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        fx, fy = (torch.stack(t) for t in zip(*[self.forget[(index * 4 + k) % len(self.forget)] for k in range(4)],
                                                strict=True))
        away = -torch.nn.functional.cross_entropy(self.net(fx), fy)  # forget batch first
        return away + torch.nn.functional.cross_entropy(self.net(x), y)  # retain batch last

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _datasets() -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    rx, ry = _batch(10, 32)
    fx, fy = _batch(11, 16)
    return torch.utils.data.TensorDataset(rx, ry), torch.utils.data.TensorDataset(fx, fy)


@pytest.mark.slow
def test_a_step_that_mixes_splits_is_recorded_with_each_share(tmp_path: Path) -> None:
    retain, forget = _datasets()
    net = Net()
    module = Distill(net, forget)
    with BNRecorder(module, split="retain", splits={"retain": retain, "forget": forget}) as rec:
        trainer = lightning.Trainer(max_steps=4, default_root_dir=str(tmp_path), enable_progress_bar=False,
                                    logger=False, enable_checkpointing=False, accelerator="cpu",
                                    enable_model_summary=False)
        trainer.fit(module, torch.utils.data.DataLoader(retain, batch_size=8))
    obs = rec.observation()
    assert int(net.bn.num_batches_tracked) == 8  # independently: two writes per step, four steps
    assert obs.last_update_split == "retain"  # the tag alone says retain ...
    matching = obs.split_matching
    assert matching is not None
    # ... by content: 4 steps x (4 forget rows, then 8 retain rows), every row matched
    assert [(s.split, s.records) for s in matching.splits] == [("retain", 32), ("forget", 16)]
    assert matching.unmatched_records == 0
    # each write weighted as ema 0.1 weights it: forget writes at 1, 3, 5, 7 of 8, retain at 2, 4, 6, 8
    forget_share = sum(0.1 * 0.9 ** (8 - k) for k in (1, 3, 5, 7))
    retain_share = sum(0.1 * 0.9 ** (8 - k) for k in (2, 4, 6, 8))
    assert matching.splits[1].share == pytest.approx(forget_share, rel=1e-12)  # float64 sums of 8 terms
    assert matching.splits[0].share == pytest.approx(retain_share, rel=1e-12)
    assert matching.initial_share == pytest.approx(0.9 ** 8, rel=1e-12)
    assert "mixed-split" in [c.code for c in obs.contradictions]
    record = rec.declaration(dataset_id="generated/tiny", subset="retain and forget", transform=TRANSFORM,
                             released=net)
    assert record.spec_version == "1.1" and record.observation is not None
    assert "mixed-split" in [c.code for c in record.observation.contradictions]


def test_a_single_split_run_is_not_mixed_and_augmented_rows_are_counted_unmatched() -> None:
    retain, forget = _datasets()
    net = Net()
    with BNRecorder(net, split="retain", splits={"retain": retain, "forget": forget}) as rec:
        for start in (0, 8, 16):
            x = torch.stack([retain[i][0] for i in range(start, start + 8)])
            net(x)
        net(x + 1e-3)  # an augmented batch: no record matches
    obs = rec.observation()
    assert obs.split_matching is not None
    assert [(s.split, s.records) for s in obs.split_matching.splits] == [("retain", 24), ("forget", 0)]
    assert obs.split_matching.unmatched_records == 8
    assert obs.split_matching.unmatched_share == pytest.approx(0.1, rel=1e-12)
    codes = [c.code for c in obs.contradictions]
    assert "mixed-split" not in codes and "unmatched-records" in codes


def test_a_declared_role_against_the_content_is_a_contradiction() -> None:
    retain, forget = _datasets()
    net = Net()
    with BNRecorder(net, split="retain", splits={"retain": retain, "forget": forget}) as rec:
        net(torch.stack([forget[i][0] for i in range(8)]))  # tagged retain, but forget data
    record = rec.declaration(dataset_id="generated/tiny", subset="s", transform=TRANSFORM)
    assert record.convention.data.role == "forget"  # the role defaults to the split the content shows
    declared = rec.declaration(dataset_id="generated/tiny", subset="s", transform=TRANSFORM, role="retain")
    assert declared.observation is not None
    assert "split-mismatch" in [c.code for c in declared.observation.contradictions]


def test_splits_that_cannot_be_indexed_are_refused_in_one_line() -> None:
    from bnconvention.errors import UsageError

    with pytest.raises(UsageError, match="record 0: a str"):
        BNRecorder(Net(), splits={"retain": ["not a tensor"]})
    with pytest.raises(UsageError, match="no length"):
        BNRecorder(Net(), splits={"retain": iter([])})


def test_a_forward_through_several_batchnorm_layers_counts_its_rows_once() -> None:
    retain, forget = _datasets()
    deep = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                               torch.nn.Linear(6, 6), torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 3))
    with BNRecorder(deep, split="retain", splits={"retain": retain, "forget": forget}) as rec:
        deep(torch.stack([retain[i][0] for i in range(8)]))
        deep(torch.stack([forget[i][0] for i in range(8)]))
    obs = rec.observation()
    assert obs.split_matching is not None and obs.buffer_updates == 2
    assert [(s.split, s.records) for s in obs.split_matching.splits] == [("retain", 8), ("forget", 8)]
    assert obs.split_matching.unmatched_records == 0  # the second layer's write is the same rows, not new ones
    assert obs.split_matching.splits[1].share == pytest.approx(0.1, rel=1e-12)
    assert obs.split_matching.splits[0].share == pytest.approx(0.1 * 0.9, rel=1e-12)
