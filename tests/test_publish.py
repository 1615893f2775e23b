"""``bnconvention publish`` up to the upload call: stamping as needed, validation gate, the HfApi calls, the token."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from helpers.local_hub import lab_hub
from safetensors.torch import save_file

from bnconvention.authoring.card_stamp import stamp_card_file
from bnconvention.authoring.declaration import make_transform
from bnconvention.authoring.publish import (
    PublishResult,
    assign_records,
    check_release,
    choose_record,
    plan_card,
    plan_records,
    publish,
    record_matches,
    release_weights,
    stamp_release,
    upload_release,
)
from bnconvention.authoring.recorder import BNRecorder
from bnconvention.authoring.stamp import read_stamped_record, stamp_file
from bnconvention.cli.main import main
from bnconvention.errors import CardError, DigestMismatchError, HubError, RecordError, UsageError
from bnconvention.formats.atomic import TEMP_GLOBS
from bnconvention.formats.card import read_card_record
from bnconvention.standard.models import parse_record, to_dict
from bnconvention.zoo.models import convnet_bn

TOKEN = "hf_secretTOKENvalue1234567890"


class FakeApi:
    """Records the HfApi calls publish makes and what the folder held at upload time."""

    def __init__(self, *, fail: Exception | None = None, **init: Any) -> None:
        self.init = init
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.uploaded: dict[str, bytes] = {}

    def create_repo(self, **kwargs: Any) -> str:
        self.calls.append(("create_repo", kwargs))
        return f"https://hub.test/{kwargs['repo_id']}"

    def upload_folder(self, **kwargs: Any) -> SimpleNamespace:
        self.calls.append(("upload_folder", kwargs))
        if self.fail is not None:
            raise self.fail
        folder = Path(kwargs["folder_path"])
        self.uploaded = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
                         if p.is_file()}
        pr = "https://hub.test/org/model/discussions/1" if kwargs.get("create_pr") else None
        return SimpleNamespace(commit_url="https://hub.test/org/model/commit/abc123", pr_url=pr)


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return convnet_bn(width=4)


def _record(model: torch.nn.Module, split: str = "retain") -> dict[str, Any]:
    with BNRecorder(model, split=split) as rec, torch.no_grad():
        model.train()
        model(torch.rand(8, 1, 16, 16))
    return to_dict(rec.declaration(dataset_id="sklearn/digits", subset=split, transform=make_transform(mode="train")))


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two models' weights files (unstamped) and their declarations."""
    root = tmp_path_factory.mktemp("publish")
    out: dict[str, Any] = {}
    for name, seed, split in (("a", 0, "retain"), ("b", 1, "train")):
        model = _model(seed)
        record = _record(model, split)
        path = root / f"{name}.safetensors"
        save_file(model.state_dict(), str(path), metadata={"format": "pt"})
        (root / f"{name}.json").write_text(json.dumps(record), encoding="utf-8")
        out[name] = {"weights": path, "record": record, "record_path": root / f"{name}.json"}
    return out


@pytest.fixture
def release(tmp_path: Path, parts: dict[str, Any]) -> Path:
    folder = tmp_path / "release"
    folder.mkdir()
    shutil.copyfile(parts["a"]["weights"], folder / "model.safetensors")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_publish_stamps_weights_and_card_then_uploads(release: Path, parts: dict[str, Any]) -> None:
    api = FakeApi()
    result = publish(release, repo_id="org/model", records=[parts["a"]["record_path"]], api=api)
    assert (result.stamped, result.card, result.uploaded) == (["model.safetensors", "README.md"], "created", True)
    assert result.records == {"model.safetensors": "train/retain/train-transform/ema-m0.1"}
    assert result.commit_url == "https://hub.test/org/model/commit/abc123" and result.pr_url is None
    assert [name for name, _ in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][1] == {"repo_id": "org/model", "repo_type": "model", "exist_ok": True}
    upload = api.calls[1][1]
    assert (upload["repo_id"], upload["repo_type"], upload["folder_path"], upload["create_pr"]) == (
        "org/model", "model", str(release), False)
    assert upload["commit_message"] == "Publish with bnconvention declaration train/retain/train-transform/ema-m0.1"
    # what was uploaded is the stamped release
    assert sorted(api.uploaded) == ["README.md", "model.safetensors"]
    assert to_dict(read_stamped_record(release / "model.safetensors")) == parts["a"]["record"]
    assert read_card_record((release / "README.md").read_text(encoding="utf-8")) == parts["a"]["record"]
    assert api.uploaded == snapshot(release)


def test_publishing_again_changes_nothing(release: Path, parts: dict[str, Any]) -> None:
    publish(release, repo_id="org/model", records=[parts["a"]["record"]], api=FakeApi())
    before = snapshot(release)
    result = publish(release, repo_id="org/model", api=FakeApi())
    assert (result.stamped, result.card, result.uploaded) == ([], "unchanged", True)
    assert snapshot(release) == before


def test_a_pull_request_does_not_create_the_repo(release: Path, parts: dict[str, Any]) -> None:
    api = FakeApi()
    result = publish(release, repo_id="org/model", records=[parts["a"]["record"]], create_pr=True, api=api)
    assert [name for name, _ in api.calls] == ["upload_folder"]
    assert api.calls[0][1]["create_pr"] is True
    assert result.pr_url == "https://hub.test/org/model/discussions/1"


def test_the_cards_record_stamps_the_weights(release: Path, parts: dict[str, Any]) -> None:
    stamp_card_file(release / "README.md", parts["a"]["record"])
    result = publish(release, repo_id="org/model", api=FakeApi())
    assert (result.stamped, result.card) == (["model.safetensors"], "unchanged")
    assert to_dict(read_stamped_record(release / "model.safetensors")) == parts["a"]["record"]


def test_the_weights_record_stamps_the_card(release: Path, parts: dict[str, Any]) -> None:
    stamp_file(release / "model.safetensors", parts["a"]["record"])
    result = publish(release, repo_id="org/model", api=FakeApi())
    assert (result.stamped, result.card) == (["README.md"], "created")


def test_the_record_that_matches_the_tensors_wins(release: Path, parts: dict[str, Any]) -> None:
    stamp_file(release / "model.safetensors", parts["a"]["record"])
    stamp_card_file(release / "README.md", parts["b"]["record"])  # another model's record in the card
    result = publish(release, repo_id="org/model", api=FakeApi())
    assert (result.stamped, result.card) == (["README.md"], "updated")
    assert read_card_record((release / "README.md").read_text(encoding="utf-8")) == parts["a"]["record"]


def test_two_matching_records_are_ambiguous(release: Path, parts: dict[str, Any]) -> None:
    other = dict(parts["a"]["record"], reporting_line="a different sentence")
    stamp_file(release / "model.safetensors", parts["a"]["record"])
    stamp_card_file(release / "README.md", other)
    before = snapshot(release)
    api = FakeApi()
    with pytest.raises(UsageError, match="carry different records that both match its tensors"):
        publish(release, repo_id="org/model", api=api)
    assert snapshot(release) == before and api.calls == []
    # naming the record resolves it
    result = publish(release, repo_id="org/model", records=[other], api=api)
    assert result.stamped == ["model.safetensors"]


def test_each_record_goes_to_the_file_it_describes(release: Path, parts: dict[str, Any]) -> None:
    shutil.copyfile(parts["b"]["weights"], release / "second.safetensors")
    result = publish(release, repo_id="org/model", records=[parts["b"]["record"], parts["a"]["record"]],
                     api=FakeApi())
    assert result.records == {"model.safetensors": "train/retain/train-transform/ema-m0.1",
                              "second.safetensors": "train/train/train-transform/ema-m0.1"}
    assert result.card is None  # several weights files: the card is the author's to bind
    assert to_dict(read_stamped_record(release / "second.safetensors")) == parts["b"]["record"]


def test_a_record_of_other_tensors_is_refused_before_anything_is_written(release: Path,
                                                                         parts: dict[str, Any]) -> None:
    before = snapshot(release)
    api = FakeApi()
    with pytest.raises(DigestMismatchError, match=r"record #1 \(train/train/train-transform/ema-m0.1\) describes none"):
        publish(release, repo_id="org/model", records=[parts["b"]["record"]], api=api)
    assert snapshot(release) == before and api.calls == []


def test_nothing_declared_is_refused(release: Path) -> None:
    with pytest.raises(RecordError, match="no declaration: neither it nor README.md carries one"):
        publish(release, repo_id="org/model", api=FakeApi())


def test_a_malformed_card_stops_before_the_weights_are_touched(release: Path, parts: dict[str, Any],
                                                                fixtures_dir: Path) -> None:
    shutil.copyfile(fixtures_dir / "inspect" / "malformed_card" / "README.md", release / "README.md")
    before = snapshot(release)
    with pytest.raises(CardError, match="invalid YAML front matter"):
        publish(release, repo_id="org/model", records=[parts["a"]["record"]], api=FakeApi())
    assert snapshot(release) == before


def test_validation_errors_stop_the_upload(release: Path, parts: dict[str, Any]) -> None:
    extra = release / "extra"
    extra.mkdir()
    shutil.copyfile(parts["b"]["weights"], extra / "undeclared.safetensors")  # BN buffers, no declaration
    api = FakeApi()
    with pytest.raises(RecordError, match="does not validate, nothing uploaded: .*declaration.missing"):
        publish(release, repo_id="org/model", records=[parts["a"]["record"]], api=api)
    assert api.calls == []


def test_dry_run_stamps_and_validates_only(release: Path, parts: dict[str, Any]) -> None:
    api = FakeApi()
    result = publish(release, repo_id="org/model", records=[parts["a"]["record"]], dry_run=True, api=api)
    assert (result.uploaded, result.stamped, api.calls) == (False, ["model.safetensors", "README.md"], [])


@pytest.mark.parametrize(("repo", "message"), [
    pytest.param("model", "needs its owner", id="no-owner"),
    pytest.param("a/b/c", "not a Hub repository id", id="too-deep"),
    pytest.param("org/bad name", "not a Hub repository id", id="space"),
])
def test_bad_repo_ids_are_refused(release: Path, repo: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        publish(release, repo_id=repo, api=FakeApi())


def test_a_folder_without_weights_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="holds no .safetensors file"):
        publish(tmp_path, repo_id="org/model", api=FakeApi())
    with pytest.raises(UsageError, match="is not a folder"):
        publish(tmp_path / "missing", repo_id="org/model", api=FakeApi())


def test_a_hub_failure_never_shows_the_token(release: Path, parts: dict[str, Any]) -> None:
    api = FakeApi(fail=RuntimeError(f"401 Unauthorized for token {TOKEN}"))
    with pytest.raises(HubError) as caught:
        publish(release, repo_id="org/model", records=[parts["a"]["record"]], token=TOKEN, api=api)
    assert TOKEN not in str(caught.value)
    assert "uploading" in str(caught.value) and "401 Unauthorized for token ***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# --- the stages, each on its own --------------------------------------------------------------------------------------


def test_release_weights_lists_the_top_level_files(release: Path, parts: dict[str, Any]) -> None:
    (release / "nested").mkdir()
    shutil.copyfile(parts["b"]["weights"], release / "nested" / "deeper.safetensors")
    shutil.copyfile(parts["b"]["weights"], release / "second.safetensors")
    folder, weights = release_weights(str(release), repo_id="org/model")
    assert (folder, [p.name for p in weights]) == (release, ["model.safetensors", "second.safetensors"])


def test_record_matches_by_the_consistency_rule(release: Path, parts: dict[str, Any]) -> None:
    own, other = (parse_record(parts[name]["record"]) for name in ("a", "b"))
    assert record_matches(release / "model.safetensors", own)
    assert not record_matches(release / "model.safetensors", other)


def test_assign_records_takes_each_file_once(release: Path, parts: dict[str, Any]) -> None:
    shutil.copyfile(parts["a"]["weights"], release / "copy.safetensors")  # the same tensors twice
    weights = sorted(release.glob("*.safetensors"))
    loaded = [(parse_record(parts["a"]["record"]), parts["a"]["record"])] * 2
    assert assign_records(release, weights, loaded) == {weights[0]: 0, weights[1]: 1}
    with pytest.raises(DigestMismatchError, match="record #3"):
        assign_records(release, weights, [*loaded, loaded[0]])


def test_choose_record_prefers_what_fits_the_tensors(release: Path, parts: dict[str, Any]) -> None:
    own = (parse_record(parts["a"]["record"]), parts["a"]["record"])
    other = (parse_record(parts["b"]["record"]), parts["b"]["record"])
    path = release / "model.safetensors"
    assert choose_record(path, stamped=other, card=own, single=True) == own
    assert choose_record(path, stamped=own, card=own, single=True) == own  # the same record in both counts once
    with pytest.raises(DigestMismatchError, match="the record in its header describes other tensors"):
        choose_record(path, stamped=other, card=None, single=True)
    with pytest.raises(RecordError, match="each needs its own"):
        choose_record(path, stamped=None, card=None, single=False)


def test_plan_card_is_for_a_one_file_release_and_checks_the_card_first(release: Path, parts: dict[str, Any],
                                                                       fixtures_dir: Path) -> None:
    choices = plan_records(release, [release / "model.safetensors"], [parts["a"]["record"]])
    assert plan_card(release, choices) == parts["a"]["record"]
    assert plan_card(release, choices * 2) is None
    shutil.copyfile(fixtures_dir / "inspect" / "malformed_card" / "README.md", release / "README.md")
    with pytest.raises(CardError, match="invalid YAML front matter"):
        plan_card(release, choices)


def test_stamp_release_then_again_changes_nothing(release: Path, parts: dict[str, Any]) -> None:
    choices = plan_records(release, [release / "model.safetensors"], [parts["a"]["record"]])
    first = stamp_release(release, choices, card_data=parts["a"]["record"], repo_id="org/model")
    assert (first.stamped, first.card) == (["model.safetensors", "README.md"], "created")
    again = plan_records(release, [release / "model.safetensors"], [])
    assert [c.stamped for c in again] == [True]
    second = stamp_release(release, again, card_data=parts["a"]["record"], repo_id="org/model")
    assert (second.stamped, second.card) == ([], "unchanged")


def test_check_release_returns_warnings_or_raises_with_the_errors(release: Path, parts: dict[str, Any]) -> None:
    with pytest.raises(RecordError) as caught:
        check_release(release)  # nothing declared yet, and publish requires a declaration
    assert [i.code for i in caught.value.issues] == ["declaration.missing"]
    stamp_file(release / "model.safetensors", parts["a"]["record"])
    stamp_card_file(release / "README.md", parts["a"]["record"])
    assert check_release(release) == []  # valid, and nothing to warn about


def test_upload_release_fills_in_the_result(release: Path) -> None:
    api = FakeApi()
    result = PublishResult(directory=release, repo_id="org/model", records={"model.safetensors": "x"})
    upload_release(result, api=api, create_pr=False, commit_message=None, token=None)
    assert (result.uploaded, result.commit_url) == (True, "https://hub.test/org/model/commit/abc123")
    assert api.calls[1][1]["commit_message"] == "Publish with bnconvention declaration x"
    assert api.calls[1][1]["ignore_patterns"] == list(TEMP_GLOBS)


# --- the command line -------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_hfapi(monkeypatch: pytest.MonkeyPatch) -> list[FakeApi]:
    """Replace huggingface_hub.HfApi by the fake; the list collects every instance the command builds."""
    import huggingface_hub

    made: list[FakeApi] = []

    def factory(**kwargs: Any) -> FakeApi:
        api = FakeApi(**kwargs)
        made.append(api)
        return api

    monkeypatch.setattr(huggingface_hub, "HfApi", factory)
    return made


def test_cli_passes_endpoint_and_token_to_hfapi_and_never_prints_the_token(
        release: Path, parts: dict[str, Any], fake_hfapi: list[FakeApi], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PUBLISH_TOKEN", TOKEN)
    code = main(["publish", str(release), "--repo", "org/model", "--record", str(parts["a"]["record_path"]),
                 "--endpoint", "http://127.0.0.1:9", "--token-env", "PUBLISH_TOKEN", "--create-pr"])
    assert code == 0
    (api,) = fake_hfapi
    assert api.init == {"endpoint": "http://127.0.0.1:9", "token": TOKEN}
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    assert captured.out.splitlines() == [
        "model.safetensors: train/retain/train-transform/ema-m0.1",
        "stamped: model.safetensors, README.md",
        "pull request: https://hub.test/org/model/discussions/1",
    ]


def test_cli_hub_failure_is_one_line_without_the_token(release: Path, parts: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi",
                        lambda **kw: FakeApi(fail=RuntimeError(f"server said no to {TOKEN}"), **kw))
    monkeypatch.setenv("PUBLISH_TOKEN", TOKEN)
    code = main(["--traceback", "publish", str(release), "--repo", "org/model", "--record",
                 str(parts["a"]["record_path"]), "--token-env", "PUBLISH_TOKEN"])
    assert code == 1
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    assert "bnconvention: error: uploading" in captured.err
    assert "Traceback" in captured.err  # even the full traceback does not carry it


def test_cli_token_variable_must_be_set(release: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("UNSET_TOKEN_VAR", raising=False)
    assert main(["publish", str(release), "--repo", "org/model", "--token-env", "UNSET_TOKEN_VAR"]) == 2
    assert "--token-env UNSET_TOKEN_VAR: that environment variable is not set" in capsys.readouterr().err


def test_cli_dry_run(release: Path, parts: dict[str, Any], fake_hfapi: list[FakeApi],
                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["publish", str(release), "--repo", "org/model", "--record", str(parts["a"]["record_path"]),
                 "--dry-run"]) == 0
    assert fake_hfapi == []
    assert capsys.readouterr().out.splitlines()[-1] == "validated; not uploaded (--dry-run)"


# --- the real client against the local Hub server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with lab_hub(tmp_path_factory, token=TOKEN) as server:
        yield server


def test_cli_publishes_to_a_hub_with_the_real_client(release: Path, parts: dict[str, Any], local_hub: Any,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from huggingface_hub import HfApi

    monkeypatch.setenv("PUBLISH_TOKEN", TOKEN)
    common = ["--endpoint", local_hub.endpoint, "--token-env", "PUBLISH_TOKEN"]
    assert main(["publish", str(release), "--repo", "lab/model", "--record", str(parts["a"]["record_path"]),
                 *common]) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert out.out.splitlines()[-1].startswith(f"committed: {local_hub.endpoint}/lab/model/commit/")
    api = HfApi(endpoint=local_hub.endpoint, token=TOKEN)
    assert sorted(api.list_repo_files("lab/model")) == [".gitattributes", "README.md", "model.safetensors"]
    downloaded = Path(api.hf_hub_download("lab/model", "model.safetensors", local_dir=tmp_path / "dl"))
    assert downloaded.read_bytes() == (release / "model.safetensors").read_bytes()
    assert to_dict(read_stamped_record(downloaded)) == parts["a"]["record"]

    # a changed reporting line, proposed as a pull request
    changed = dict(parts["a"]["record"], reporting_line="deployed state as shipped")
    record_path = tmp_path / "changed.json"
    record_path.write_text(json.dumps(changed), encoding="utf-8")
    assert main(["publish", str(release), "--repo", "lab/model", "--record", str(record_path), "--create-pr",
                 *common]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"pull request: {local_hub.endpoint}/lab/model/discussions/1"
    (pr,) = [d for d in api.get_repo_discussions("lab/model") if d.is_pull_request]
    on_pr = Path(api.hf_hub_download("lab/model", "model.safetensors", revision=pr.git_reference,
                                     local_dir=tmp_path / "pr"))
    assert to_dict(read_stamped_record(on_pr)) == changed


def test_our_temporary_files_are_never_uploaded(release: Path, parts: dict[str, Any], local_hub: Any) -> None:
    # Regression: publish committed the 101 MB copy a killed stamp had left in the release folder
    import fcntl
    import os

    from huggingface_hub import HfApi

    stale = release / ".model.safetensors.7sl1bkq0.bnc-stamp.tmp"  # a killed stamp's copy: the stamp removes it
    stale.write_bytes(b"half a copy")
    live = release / ".model.safetensors.abcd1234.bnc-stamp.tmp"  # a concurrent stamp's copy: it stays, unsent
    live.write_bytes(b"a copy in progress")
    card_temp = release / ".README.md.q8w7e6r5.bnc-write.tmp"
    card_temp.write_bytes(b"half a card")
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        api = HfApi(endpoint=local_hub.endpoint, token=TOKEN)
        result = publish(release, repo_id="lab/temps", records=[parts["a"]["record"]], api=api)
    finally:
        os.close(fd)
    assert result.uploaded
    assert sorted(api.list_repo_files("lab/temps")) == [".gitattributes", "README.md", "model.safetensors"]
    assert live.exists() and not stale.exists() and not card_temp.exists()
