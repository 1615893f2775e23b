"""The pre-commit pin the docs give works (issue 10: they named `rev: v0.1.0`, a tag that did not exist), and
scripts/release.sh creates the tag a later doc can name."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
