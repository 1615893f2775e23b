"""``bnconvention push-to-hub`` against the local Hub: a folder a library saved is pushed with its record in
one commit, validated first; a failure (a record that does not fit, an upload the Hub refuses) commits nothing and
leaves the folder as it was."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.local_hub import lab_hub
from huggingface_hub import HfApi
from safetensors.torch import load_file, save_file

from bnconvention import BNRecorder, make_transform, validate_paths
from bnconvention.authoring.publish import publish
from bnconvention.cli.main import main
from bnconvention.errors import UsageError
from bnconvention.standard.models import to_dict

TOKEN = "hf_push_to_hub_cmd_token"
TRANSFORM = make_transform(mode="train", reference="tests:generated")


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with lab_hub(tmp_path_factory, token=TOKEN) as server:
        yield server


def _recorded(model: torch.nn.Module, shape: tuple[int, ...], path: Path) -> Any:
    """Two SGD steps under the recorder; the declaration written to ``path``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with BNRecorder(model) as recorder:
        model.train()
        for _ in range(2):
            optimizer.zero_grad()
            model(torch.randn(4, *shape)).square().mean().backward()
            optimizer.step()
    record = recorder.declaration(dataset_id="generated/tiny", subset="all", transform=TRANSFORM)
    path.write_text(json.dumps(to_dict(record)), encoding="utf-8")
    return record


def _tree(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _push(hub: Any, folder: Path, repo_id: str, *extra: str | Path) -> int:
    return main(["push-to-hub", str(folder), repo_id, "--endpoint", hub.endpoint, "--token-env", "BNC_TEST_TOKEN",
                 *[str(e) for e in extra]])


def _readback(hub: Any, repo_id: str, into: Path) -> tuple[int, Path]:
    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    for name in api.list_repo_files(repo_id):
        if not name.startswith("."):
            api.hf_hub_download(repo_id, name, local_dir=into)
    return len(api.list_repo_commits(repo_id)), into


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BNC_TEST_TOKEN", TOKEN)


def _plain_folder(tmp_path: Path) -> tuple[Path, Path, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    record = _recorded(model, (4,), tmp_path / "record.json")
    folder = tmp_path / "saved"
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# mine\n", encoding="utf-8")
    return folder, tmp_path / "record.json", record


def test_a_safetensors_folder_is_pushed_in_one_commit_and_validates(
        local_hub: Any, token: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bnconvention.authoring.stamp import read_stamped_record

    folder, record_path, record = _plain_folder(tmp_path)
    before = _tree(folder)
    assert _push(local_hub, folder, "lab/plain", "--record", record_path) == 0
    out = capsys.readouterr().out
    assert f"{folder}: saved by safetensors" in out and f"model.safetensors: {record.convention.name}" in out
    assert "committed: " in out and TOKEN not in out
    commits, downloaded = _readback(local_hub, "lab/plain", tmp_path / "dl")
    assert commits == 2  # the repo's creation, then one commit: the weights, their header and the card stamped
    assert read_stamped_record(downloaded / "model.safetensors") == record
    assert "license: mit" in (downloaded / "README.md").read_text()  # the author's card, stamped, not replaced
    report = validate_paths([downloaded], require_declaration=True)
    assert report.exit_code == 0 and not report.warnings, report.issues
    assert _tree(folder) == before  # the author's folder is not touched


def test_a_record_that_does_not_fit_commits_nothing(local_hub: Any, token: None, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    folder, record_path, _ = _plain_folder(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    state["0.weight"] += 1.0  # the weights moved after the record was made
    save_file(state, str(folder / "model.safetensors"))
    before = _tree(folder)
    assert _push(local_hub, folder, "lab/never", "--record", record_path) == 1
    assert capsys.readouterr().err.startswith("bnconvention: digest mismatch: ")
    assert _tree(folder) == before
    assert not HfApi(endpoint=local_hub.endpoint, token=TOKEN).repo_exists("lab/never")


def test_an_upload_the_hub_refuses_commits_nothing(local_hub: Any, token: None, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from bnconvention.hubserver.faults import FaultRule

    folder, record_path, _ = _plain_folder(tmp_path)
    before = _tree(folder)
    rule = local_hub.faults.add(FaultRule(kind="status", status=500, method="POST", path="/commit/"))
    try:
        assert _push(local_hub, folder, "lab/refused", "--record", record_path) == 1
    finally:
        local_hub.faults.remove(rule)
    err = capsys.readouterr().err
    assert err.startswith("bnconvention: error: ") and TOKEN not in err, err
    assert _tree(folder) == before
    api = HfApi(endpoint=local_hub.endpoint, token=TOKEN)
    assert len(api.list_repo_commits("lab/refused")) == 1  # the repo's creation, and no commit of the release
    assert api.list_repo_files("lab/refused") == [".gitattributes"]


def test_dry_run_and_bad_usage_upload_nothing(local_hub: Any, token: None, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    folder, record_path, _ = _plain_folder(tmp_path)
    assert _push(local_hub, folder, "lab/dry", "--record", record_path, "--dry-run") == 0
    assert "not uploaded (--dry-run)" in capsys.readouterr().out
    assert not HfApi(endpoint=local_hub.endpoint, token=TOKEN).repo_exists("lab/dry")
    assert _push(local_hub, tmp_path / "missing", "lab/dry") == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["push-to-hub", str(folder), "lab/dry", "--token-env", "BNC_UNSET_VARIABLE"]) == 2


@pytest.mark.slow
def test_a_timm_saved_folder_is_pushed_and_reads_back_with_timm(local_hub: Any, token: None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import timm
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=3)
    _recorded(model, (3, 32, 32), tmp_path / "record.json")
    folder = tmp_path / "timm-saved"
    save_for_hf(model, str(folder), safe_serialization=True)  # what timm's push_to_hf_hub uploads
    assert _push(local_hub, folder, "lab/timm-cli", "--record", tmp_path / "record.json") == 0
    assert f"{folder}: saved by timm" in capsys.readouterr().out
    commits, downloaded = _readback(local_hub, "lab/timm-cli", tmp_path / "dl")
    assert commits == 2
    config = json.loads((downloaded / "config.json").read_text())
    again = timm.create_model(config["architecture"], pretrained=False, num_classes=config["num_classes"])
    again.load_state_dict(load_file(str(downloaded / "model.safetensors")))
    assert validate_paths([downloaded], require_declaration=True).exit_code == 0


def _folder_with_links(tmp_path: Path) -> tuple[Path, Path]:
    folder, record_path, _ = _plain_folder(tmp_path)
    (folder / "zeros.bin").symlink_to("/dev/zero")  # a copy that follows it fills the disk
    (folder / "hostname.txt").symlink_to("/etc/hostname")  # a file of this machine
    (folder / "etc").symlink_to("/etc", target_is_directory=True)
    (folder / "notes").mkdir()
    (folder / "notes" / "passwd").symlink_to("/etc/passwd")
    (folder / "notes" / "kept.txt").write_text("mine\n", encoding="utf-8")
    return folder, record_path


@pytest.fixture
def bounded_file_size():  # type: ignore[no-untyped-def]
    """Files this process writes are bounded (Python ignores SIGXFSZ: a write past it fails with EFBIG), so a
    regression that copies /dev/zero fails the test instead of filling the disk."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024 * 1024, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


SKIPPED = ["etc -> /etc", "hostname.txt -> /etc/hostname", "notes/passwd -> /etc/passwd", "zeros.bin -> /dev/zero"]


@pytest.mark.parametrize("command", ["push-to-hub", "publish"])
def test_links_in_the_folder_are_not_followed_and_are_said(local_hub: Any, token: None, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str], command: str,
                                                           bounded_file_size: None) -> None:
    # Regression: push-to-hub followed links when it copied the folder: a link to /dev/zero
    # filled the disk, a link to /etc/hostname uploaded that file
    folder, record_path = _folder_with_links(tmp_path)
    repo_id = f"lab/links-{command}"
    common = ["--endpoint", local_hub.endpoint, "--token-env", "BNC_TEST_TOKEN", "--record", str(record_path)]
    args = [command, str(folder), repo_id, *common] if command == "push-to-hub" else \
        [command, str(folder), "--repo", repo_id, *common]
    assert main(args) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert said == [f"skipped {entry}: links are not followed (copy the file into the folder to publish it)"
                    for entry in SKIPPED]
    files = set(HfApi(endpoint=local_hub.endpoint, token=TOKEN).list_repo_files(repo_id))
    assert {"model.safetensors", "README.md", "notes/kept.txt"} <= files
    assert not files & {"zeros.bin", "hostname.txt", "notes/passwd"} and not any(f.startswith("etc/") for f in files)


def test_a_weights_file_that_is_a_link_is_not_published(local_hub: Any, token: None, tmp_path: Path) -> None:
    folder, record_path, _ = _plain_folder(tmp_path)
    (folder / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    (folder / "model.safetensors").symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(UsageError, match=r"holds no \.safetensors file at its top level \(model\.safetensors: links "
                                         r"are not followed; copy the file in\)"):
        publish(folder, repo_id="lab/linked-weights", records=[record_path], dry_run=True)


def test_the_folder_walk_never_follows_a_link(tmp_path: Path) -> None:
    from bnconvention.formats.links import copy_folder, folder_files

    folder, _ = _folder_with_links(tmp_path)
    os.mkfifo(folder / "pipe")  # a reader of a FIFO waits forever
    found = folder_files(folder)
    assert found.files == ("README.md", "model.safetensors", "notes/kept.txt")
    assert found.skipped == ("etc", "hostname.txt", "notes/passwd", "pipe", "zeros.bin")
    copied = copy_folder(folder, tmp_path / "copy")
    assert copied == found
    assert sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*")) == [
        "README.md", "model.safetensors", "notes", "notes/kept.txt"]
