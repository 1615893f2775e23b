"""The pre-commit pin the docs give works (they named `rev: v0.1.0`, a tag that did not exist),
scripts/release.sh creates the tag a later doc can name, and the hook checks the records the docs and the callbacks
write, whatever their names, in a git repository as pre-commit runs it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = "<40-hex commit sha>"
REV = re.compile(r"^\s*#?\s*rev:\s*(\S(?:.*?\S)?)\s*(?:#.*)?$", re.MULTILINE)
DOCUMENTS = [ROOT / "docs" / "quickstart-pipeline.md", ROOT / ".pre-commit-hooks.yaml"]


def documented_revs() -> list[tuple[Path, str]]:
    return [(path, rev) for path in DOCUMENTS for rev in REV.findall(path.read_text(encoding="utf-8"))]


def git(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_docs_name_a_rev() -> None:
    assert {path.name for path, _ in documented_revs()} == {"quickstart-pipeline.md", ".pre-commit-hooks.yaml"}


@pytest.mark.parametrize(("path", "rev"), documented_revs(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_documented_rev_exists_or_is_an_explained_placeholder(path: Path, rev: str) -> None:
    if rev == PLACEHOLDER:
        guide = (ROOT / "docs" / "quickstart-pipeline.md").read_text(encoding="utf-8")
        assert f"`{PLACEHOLDER}` is a placeholder" in guide  # and the guide says what to write instead
        assert "git ls-remote" in guide and "pre-commit autoupdate" in guide
        return
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the tag or commit cannot be looked up")
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        assert git("cat-file", "-e", f"{rev}^{{commit}}").returncode == 0, f"{path.name}: no commit {rev}"
    else:
        assert git("rev-parse", "-q", "--verify", f"refs/tags/{rev}").returncode == 0, f"{path.name}: no tag {rev}"


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    """A git repository holding the release script and the two files it reads the version from."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    for name in ("scripts/release.sh", "pyproject.toml", "bnconvention/_version.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "release"]):
        assert git(*args, cwd=repo).returncode == 0
    return repo


def release(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "scripts/release.sh"], cwd=repo, capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", "GIT_COMMITTER_NAME": "t", "GIT_AUTHOR_NAME": "t",
                                            "GIT_COMMITTER_EMAIL": "t@example.invalid",
                                            "GIT_AUTHOR_EMAIL": "t@example.invalid", "HOME": str(repo)})


def test_release_script_creates_an_annotated_tag_once(checkout: Path) -> None:
    from bnconvention._version import __version__

    first = release(checkout)
    assert first.returncode == 0, first.stderr
    tag = f"v{__version__}"
    assert git("cat-file", "-t", tag, cwd=checkout).stdout.strip() == "tag"  # annotated, not lightweight
    assert git("rev-parse", f"{tag}^{{commit}}", cwd=checkout).stdout == git("rev-parse", "HEAD", cwd=checkout).stdout
    assert f"git push origin {tag}" in first.stdout
    again = release(checkout)
    assert again.returncode == 1 and f"tag {tag} already exists" in again.stderr


def test_release_script_refuses_a_dirty_tree_and_a_version_mismatch(checkout: Path) -> None:
    version_file = checkout / "bnconvention" / "_version.py"
    version_file.write_text('__version__ = "9.9.9"\n', encoding="utf-8")
    mismatch = release(checkout)
    assert mismatch.returncode == 1 and "bnconvention/_version.py says '9.9.9'" in mismatch.stderr
    git("checkout", "--", "bnconvention/_version.py", cwd=checkout)
    (checkout / "notes.txt").write_text("work in progress\n", encoding="utf-8")
    dirty = release(checkout)
    assert dirty.returncode == 1 and "uncommitted changes" in dirty.stderr
    assert git("tag", "-l", cwd=checkout).stdout == ""


# --- the hook checks what the docs create ----------------------------------------------------------------------------
# The hook matched only *.bnconvention.json among records, a name no page uses: the quickstarts' record.json and the
# callbacks' bnconvention-declaration.json were skipped ("(no files to check) Skipped"). It now passes every .json
# file and `validate --skip-non-records` finds the records among them by content.


def hook() -> dict[str, object]:
    [found] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    return dict(found)


def run_hook(repo: Path) -> subprocess.CompletedProcess[str]:
    """What pre-commit does with the hook (it is not installed here): the staged files its ``files`` pattern
    matches (``re.search`` on each path), appended to its ``entry``, run from the repository's root."""
    spec = hook()
    staged = git("diff", "--cached", "--name-only", "-z", cwd=repo).stdout.split("\0")
    files = [name for name in staged if name and re.search(str(spec["files"]), name)]
    assert files, "no files to check"
    command, *entry_args = shlex.split(str(spec["entry"]))
    executable = Path(sys.executable).parent / command  # the hook's environment: bnconvention installed
    return subprocess.run([str(executable), *entry_args, *files], cwd=repo, capture_output=True, text=True,
                          timeout=120, check=False)


def status_lines(output: str) -> dict[str, str]:
    """file -> ok / warn / FAIL, from validate's text report."""
    return {parts[1].rstrip(":"): parts[0] for line in output.splitlines()
            if (parts := line.split()) and parts[0] in ("ok", "warn", "FAIL") and len(parts) > 1}


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Each record file as the docs and the callbacks write it, by their own code: ``record.json`` by the
    quickstart's ``bnconvention declare --from-observation ... -o record.json``, ``bnconvention-declaration.json``
    by the recording the Trainer and Lightning callbacks drive (begin at train start, end at train end), and the
    same record under the name the hook used to require."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from bnconvention import make_transform
    from bnconvention.authoring.loop_recording import RECORD_NAME, LoopRecording, PhaseSettings
    from bnconvention.authoring.recorder import BNRecorder
    from bnconvention.cli.main import main
    from bnconvention.zoo.models import convnet_bn

    root = tmp_path_factory.mktemp("produced")
    torch.manual_seed(0)
    model = convnet_bn(width=4)
    with BNRecorder(model, split="train") as recorder, torch.no_grad():
        model.train()
        model(torch.rand(8, 1, 16, 16))
    save_file(model.state_dict(), str(root / "model.safetensors"))
    recorder.save_observation(root / "observation.json")
    assert main(["declare", "--from-observation", str(root / "observation.json"),
                 "--weights", str(root / "model.safetensors"), "--dataset-id", "sklearn/digits", "--subset",
                 "all classes, train split", "--transform-mode", "train", "--transform-reference",
                 "train.py:train_transform", "-o", str(root / "record.json")]) == 0
    recording = LoopRecording(PhaseSettings(dataset_id="sklearn/digits", subset="all classes, train split",
                                            transform=make_transform(mode="train", reference="train.py:t")),
                              record_path=root / "run" / RECORD_NAME)
    recording.begin(model)
    with torch.no_grad():
        model.train()
        model(torch.rand(8, 1, 16, 16))
    recording.end()
    return {"record.json": (root / "record.json").read_bytes(),
            f"run/{RECORD_NAME}": (root / "run" / RECORD_NAME).read_bytes(),
            "run/bnconvention-observation.json": (root / "run" / "bnconvention-observation.json").read_bytes(),
            "release/model.bnconvention.json": (root / "record.json").read_bytes()}


NOT_RECORDS = {  # what else a model repository holds: passed over, never validated
    "release/config.json": b'{"architectures": ["ConvNet"], "model_type": "convnet", "kind": "vision"}\n',
    "tokenizer.json": b'[{"id": 0, "content": "<pad>"}]\n',
    "results.json": b'{"accuracy": 0.9,\n',  # not even JSON, and no claim to be a record
    "audit.json": json.dumps({"spec_version": "1.0", "kind": "audit_spec", "splits": {"forget_classes": [3]},
                              "cells": ["df"]}).encode(),  # an audit spec: another document of the standard
}


@pytest.fixture()
def model_repo(tmp_path: Path, produced: dict[str, bytes]) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "model-repo"
    for name, data in {**produced, **NOT_RECORDS}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    assert git("init", "-q", cwd=repo).returncode == 0
    assert git("add", ".", cwd=repo).returncode == 0
    return repo


def test_the_hook_matches_every_record_the_docs_and_callbacks_write() -> None:
    from bnconvention.authoring.loop_recording import RECORD_NAME

    spec = hook()
    assert str(spec["entry"]).split()[:2] == ["bnconvention", "validate"]
    assert "--skip-non-records" in str(spec["entry"])  # in the entry: a user's `args:` replaces the hook's args
    for name in ("record.json", RECORD_NAME, f"run/{RECORD_NAME}", "model.bnconvention.json",
                 "bnconvention/refit-0123456789ab.json", "model.safetensors", "org/model/README.md"):
        assert re.search(str(spec["files"]), name), name
    for name in ("docs/notes.md", "README.md.bak", "model.bin", "train.py"):
        assert not re.search(str(spec["files"]), name), name
    for page in ("quickstart-author.md", "quickstart-pipeline.md", "cli.md"):  # the names the pages write
        for name in re.findall(r"-o (\S+\.json)|--record (\S+\.json)", (ROOT / "docs" / page).read_text("utf-8")):
            written = next(n for n in name if n)
            assert re.search(str(spec["files"]), written), (page, written)


def test_the_hook_checks_each_produced_record_and_passes_over_other_json(model_repo: Path,
                                                                        produced: dict[str, bytes]) -> None:
    before = {p: p.read_bytes() for p in model_repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    result = run_hook(model_repo)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = status_lines(result.stdout)
    records = [name for name in produced if not name.endswith("observation.json")]
    assert {name: seen.get(name) for name in records} == dict.fromkeys(records, "ok"), result.stdout
    for name in [*NOT_RECORDS, "run/bnconvention-observation.json"]:
        assert name not in seen, result.stdout  # not validated ...
    summary = result.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{len(records)} files checked: 0 errors, 0 warnings; passed over 5 JSON files "
                              "that are not records: audit.json, release/config.json, results.json, "
                              "run/bnconvention-observation.json, tokenizer.json"), summary  # ... but said
    assert {p: p.read_bytes() for p in before} == before  # nothing written


@pytest.mark.parametrize("broken", ["record.json", "run/bnconvention-declaration.json",
                                    "release/model.bnconvention.json"])
@pytest.mark.parametrize("how", ["wrong-field", "truncated"])
def test_a_broken_record_fails_the_hook_whatever_its_name(model_repo: Path, broken: str, how: str) -> None:
    path = model_repo / broken
    if how == "truncated":  # no longer JSON, but its text still says it is a record
        path.write_bytes(path.read_bytes()[:200])
        code, expected = 2, "json.invalid"
    else:
        record = json.loads(path.read_text(encoding="utf-8"))
        record["convention"]["name"] = "frozen/train/train-transform/ema-m0.1"  # not what its fields give
        path.write_text(json.dumps(record, indent=2), encoding="utf-8")
        code, expected = 1, ""
    git("add", broken, cwd=model_repo)
    result = run_hook(model_repo)
    assert result.returncode == code, result.stdout + result.stderr
    assert status_lines(result.stdout)[broken] == "FAIL", result.stdout
    assert expected in result.stdout
    assert [f for f, s in status_lines(result.stdout).items() if s == "FAIL"] == [broken]


def test_explicit_validate_keeps_validating_what_it_is_named(tmp_path: Path) -> None:
    """Without the hook's flag a .json named is a record to validate, as before: a config.json named by mistake
    fails and says why."""
    from bnconvention.validation import validate_paths

    config = tmp_path / "config.json"
    config.write_bytes(NOT_RECORDS["release/config.json"])
    assert validate_paths([str(config)]).exit_code == 1
    quiet = validate_paths([str(config)], skip_non_records=True)
    assert (quiet.exit_code, quiet.issues, quiet.skipped) == (0, [], [config.as_posix()])
