"""Errors that say what and where: each case ended in "internal error", named an in-memory
object, echoed a megabyte or named the wrong source before; each is now one line naming the input (layer;
criterion and cell; dataset, split and row; config file), with long values elided."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import save_file

from bnconvention.cli.main import _report, main
from bnconvention.errors import UnsupportedModelError
from bnconvention.zoo.models import convnet_bn

LAZY_FACTORY = '''
import torch

def build():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.LazyBatchNorm2d(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 14 * 14, 10))
'''


def _one_line(capsys: pytest.CaptureFixture[str], prefix: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith(prefix), err[:500]
    return err


def _weights(path: Path, *, width: int = 4) -> Path:
    torch.manual_seed(0)
    save_file(convnet_bn(width=width).state_dict(), str(path))
    return path


def _spec(path: Path, **changes: object) -> Path:
    spec = {"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
            "criteria": ["df <= 0.05"], "published_source": "spec", "replicates": 2, "refit": {"pool_size": 64},
            "recoverability": None, **changes}
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


# --- (a) a lazy BatchNorm layer -------------------------------------------------------------------------------------


def test_a_lazy_batchnorm_refit_is_one_line_naming_the_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # was: "internal error: RuntimeError: Can't access the shape of an uninitialized parameter or buffer ..."
    (tmp_path / "lazy_factory_i24.py").write_text(LAZY_FACTORY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 14 * 14, 10))
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    np.savez(tmp_path / "pool.npz", x=np.random.default_rng(0).random((8, 1, 16, 16), dtype=np.float32))
    code = main(["refit", str(tmp_path / "w.safetensors"), "--allow-factory", "lazy_factory_i24:build", "--arch",
                 "lazy_factory_i24:build", "--pool", str(tmp_path / "pool.npz"), "--out",
                 str(tmp_path / "o.safetensors"), "--report", str(tmp_path / "r.json")])
    assert code == 1
    err = _one_line(capsys, "bnconvention: error: model factory 'lazy_factory_i24:build': ")
    assert "lazy BatchNorm layer '1' (LazyBatchNorm2d) not materialised" in err
    assert "must be materialised (one forward" in err and "run one forward in the factory" in err
    assert not (tmp_path / "o.safetensors").exists()
    sys.modules.pop("lazy_factory_i24", None)


def test_the_library_refit_names_the_lazy_layer() -> None:
    from bnconvention.refitting import refit

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.LazyBatchNorm2d())
    with pytest.raises(UnsupportedModelError, match=r"^refit: lazy BatchNorm layer '1' \(LazyBatchNorm2d\) not "):
        refit(model, [torch.randn(8, 3, 6, 6)])
    model(torch.randn(2, 3, 6, 6))  # one forward materialises it: the refit runs
    assert refit(model, [torch.randn(8, 3, 6, 6)]).channel == "present"


# --- (b) a criterion overflowing to inf -----------------------------------------------------------------------------


def test_a_criterion_overflowing_is_one_line_naming_criterion_and_cell(zoo, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path / "spec.yaml", criteria=["dr * 1e300 * 1e300 >= 1"],
                 model={"factory": "zoo/convnet-bn"})
    out = tmp_path / "out"
    code = main(["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec), "--out", str(out),
                 "--no-progress"])
    assert code == 2
    err = _one_line(capsys, "bnconvention: invalid audit spec: ")
    assert "criterion 'dr * 1e+300 * 1e+300 >= 1' overflows to inf in the cell 'dr * 1e+300 * 1e+300'" in err
    assert "on the measured values {df: " in err and "/criteria/0" not in err


def test_verdicts_and_thresholds_that_overflow_name_the_criterion() -> None:
    from bnconvention.audit.measure.decisions import verdict
    from bnconvention.audit.spec.expressions import parse_criterion
    from bnconvention.errors import AuditSpecError

    cells = {"df": 0.5, "dr": 0.9, "dt": 0.8}
    criterion = parse_criterion("dr * 1e300 - df * 1e300 * 1e10 <= 1")
    with pytest.raises(AuditSpecError, match=r"overflows to inf in the cell 'df \* 1e\+300 \* 10000000000.0' on the "
                                             r"shipped cells \{df: 0.5, dr: 0.9, dt: 0.8\}") as caught:
        verdict(criterion, cells, [cells, cells], field="/criteria/0")
    assert caught.value.field == "/criteria/0"
    with pytest.raises(AuditSpecError, match=r"compares with '1e\+300 \* 1e\+300', which is not a finite number"):
        parse_criterion("df <= 1e300 * 1e300", field="/criteria/1")


# --- (c) a non-image in a datasets image column ---------------------------------------------------------------------


def test_a_non_image_in_a_datasets_column_names_dataset_split_and_row(zoo, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    features = datasets.Features({"img": datasets.Image(decode=False), "fine": datasets.ClassLabel(num_classes=10)})
    good = Image.fromarray(np.zeros((8, 8), np.uint8))
    import io

    buffer = io.BytesIO()
    good.save(buffer, format="PNG")
    rows = [{"bytes": buffer.getvalue(), "path": None} for _ in range(6)]
    rows[4] = {"bytes": b"this is not an image", "path": None}
    split = datasets.Dataset.from_dict({"img": rows, "fine": list(range(6))}, features=features)
    split = split.cast_column("img", datasets.Image())
    datasets.DatasetDict({"train": split, "test": split.select(range(4))}).save_to_disk(str(tmp_path / "ds"))
    capsys.readouterr()  # datasets' own progress lines
    spec = _spec(tmp_path / "spec.yaml", model={"factory": "zoo/convnet-bn"},
                 dataset={"kind": "hf_disk", "path": str(tmp_path / "ds"), "image_column": "img",
                          "label_column": "fine"})
    code = main(["audit", str(zoo.root / "bn-retrain.safetensors"), "--spec", str(spec), "--out",
                 str(tmp_path / "out"), "--no-progress"])
    assert code == 2
    err = _one_line(capsys, "bnconvention: ")
    # was: "cannot identify image file <_io.BytesIO object at 0x7f...>"
    assert f"dataset {tmp_path / 'ds'} split 'train' row 4: column 'img' does not hold a readable image " in err
    assert "BytesIO" not in err and " at 0x" not in err


# --- (d) a long architecture string ---------------------------------------------------------------------------------


def test_a_long_architecture_string_is_elided_in_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _weights(repo / "model.safetensors")
    (repo / "config.json").write_text(json.dumps({"architecture": "resnet" + "x" * 990_000, "num_classes": 10}))
    code = main(["audit", str(repo / "model.safetensors"), "--spec", str(_spec(tmp_path / "spec.yaml")), "--out",
                 str(tmp_path / "out"), "--no-progress"])
    assert code == 2
    err = _one_line(capsys, "bnconvention: architecture refused: ")
    assert len(err) < 1000  # was 990,206 characters
    assert "... (990,006 characters)' is not in timm's model registry" in err


def test_a_factory_name_and_a_journal_reason_are_bounded() -> None:
    from bnconvention.architectures.factories import check_allowed
    from bnconvention.errors import FactoryNotAllowedError
    from bnconvention.hub_audit.entries import MAX_REASON, FileAudit, RepoAudit

    with pytest.raises(FactoryNotAllowedError) as caught:
        check_allowed("evil/" + "y" * 500_000)
    assert len(str(caught.value)) < 1000
    reason = "z" * 990_000
    stored = FileAudit(filename="model.safetensors", status="failed", reason=reason)
    repo = RepoAudit(repo_id="o/m", revision="r", spec_sha256="s", status="failed", reason=reason, files=[stored])
    reread = RepoAudit.model_validate_json(repo.model_dump_json())
    assert reread == repo and len(reread.reason) <= MAX_REASON and len(reread.files[0].reason) <= MAX_REASON
    assert reread.reason.endswith("... (990,000 characters)")


def test_the_cli_bounds_any_one_line() -> None:
    from bnconvention.cli.main import MAX_MESSAGE, _classify

    assert len(_classify(ValueError("w" * 2_000_000))[2]) < MAX_MESSAGE + 100


# --- (e) an architecture read from a repo's config.json -------------------------------------------------------------


def test_an_architecture_from_config_json_is_reported_from_there(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from bnconvention.audit.measure.checkpoint import load_checkpoint
    from bnconvention.audit.spec.audit_spec import parse_spec
    from bnconvention.hub_audit.audit_task import choose_repo_spec

    spec = parse_spec(yaml.safe_load(_spec(tmp_path / "spec.yaml").read_text()))
    config = {"architecture": {"factory": "zoo/convnet-bn", "kwargs": {"width": 8}}}
    repo_spec, source, _ = choose_repo_spec(spec, repo_id="org/m", config=config)
    assert source == "repo" and repo_spec.model is not None and repo_spec.model.source == "org/m/config.json"
    assert repo_spec.sha256() == parse_spec({**yaml.safe_load((tmp_path / "spec.yaml").read_text()),
                                             "model": config["architecture"]}).sha256()  # the digest is the spec's
    weights = _weights(tmp_path / "model.safetensors", width=4)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - the CLI's table decides how it is shown
        load_checkpoint(weights, repo_spec)
    code = _report(caught.value, extra=None, command="hub", show_traceback=False)
    err = _one_line(capsys, "bnconvention: ")
    assert code in (1, 2)
    # was: "... the model built by factory 'zoo/convnet-bn' (from spec)"
    assert "org/m/config.json" in err and "from spec" not in err
