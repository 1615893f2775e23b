"""The core install is light (the pre-commit hook's environment pulled 5.8 GB of torch to validate
headers): validate, inspect, stamp, card and schema run with torch & co. unimportable, and the commands that need
them stop with one line naming the extra. The heavy modules are blocked by a meta-path finder that a
``sitecustomize`` installs, put first on PYTHONPATH of a subprocess."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from bnconvention.extras import EXTRA_INCLUDES, MODULE_EXTRAS, extras_for, missing_dependency

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "torchvision", "numpy", "sklearn", "scipy", "matplotlib")
BLOCKER = f"""
import importlib.abc, sys

BLOCKED = {set(HEAVY)!r}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Blocker())
"""


@pytest.fixture(scope="module")
def light_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    blocker = tmp_path_factory.mktemp("blocker")
    (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)])}


def run(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("module", HEAVY)
def test_the_blocker_blocks(light_env: dict[str, str], module: str) -> None:
    result = run(light_env, "-c", f"import {module}")
    assert result.returncode == 1 and "blocked by the test" in result.stderr


def test_validate_runs_without_torch(light_env: dict[str, str]) -> None:
    result = run(light_env, "-m", "bnconvention", "validate", "examples/releases")
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("4 files checked: 0 errors, 0 warnings\n")
    broken = run(light_env, "-m", "bnconvention", "validate", "examples/broken", "--format", "json")
    assert broken.returncode == 1 and '"digests.running_mismatch"' in broken.stdout, broken.stderr


def test_pipeline_commands_run_without_torch(light_env: dict[str, str], tmp_path: Path) -> None:
    release = tmp_path / "release"
    shutil.copytree(ROOT / "examples" / "releases" / "convnet-bn", release)
    weights, card = release / "model.safetensors", release / "README.md"
    assert run(light_env, "-m", "bnconvention", "inspect", str(weights)).returncode == 0
    record = tmp_path / "record.json"
    dumped = run(light_env, "-c", "import json, sys; from bnconvention.authoring.stamp import read_stamped_record; "
                 "from bnconvention.standard.models import to_dict; "
                 f"sys.stdout.write(json.dumps(to_dict(read_stamped_record({str(weights)!r}))))")
    assert dumped.returncode == 0, dumped.stderr
    record.write_text(dumped.stdout, encoding="utf-8")
    stamped = run(light_env, "-m", "bnconvention", "stamp", str(weights), "--record", str(record), "--card", str(card))
    assert stamped.returncode == 0, stamped.stderr
    assert "digests match" in stamped.stdout
    assert run(light_env, "-m", "bnconvention", "card", str(card), "--from", str(weights), "--check").returncode == 0
    assert run(light_env, "-m", "bnconvention", "schema").returncode == 0


@pytest.mark.parametrize(("argv", "extra"), [
    pytest.param(["refit", "w.safetensors", "--arch", "zoo/convnet-bn", "--pool", "p.npz", "--out", "o.safetensors",
                  "--report", "r.json"], "refit", id="refit"),
    pytest.param(["declare", "--arch", "zoo/convnet-bn", "--weights", "examples/releases/convnet-bn/model.safetensors",
                  "--mode", "frozen", "--role", "train", "--rule", "exact", "--dataset-id", "x", "--subset", "all",
                  "--transform-mode", "eval"], "refit", id="declare"),
    pytest.param(["zoo", "build", "--out", "{tmp}/zoo"], "refit", id="zoo-build"),
    pytest.param(["audit", "examples/releases/convnet-bn/model.safetensors", "--spec", "examples/audit/digits-zoo.yaml",
                  "--out", "{tmp}/audit"], "audit", id="audit"),
    pytest.param(["census", "examples/releases", "--spec", "examples/audit/digits-zoo.yaml", "--out",
                  "{tmp}/census"], "audit", id="census"),
])
def test_commands_that_need_torch_name_the_extra(light_env: dict[str, str], tmp_path: Path, argv: list[str],
                                                 extra: str) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    result = run(light_env, "-m", "bnconvention", *argv)
    assert result.returncode == 1
    command = " ".join(argv[:2] if argv[0] == "zoo" else argv[:1])
    assert re.fullmatch(rf"bnconvention: missing dependency: bnconvention {command} needs ({'|'.join(HEAVY)}|"
                        rf"scikit-learn), which is not installed; install the extra: pip install "
                        rf"'bnconvention\[{extra}\]'\n", result.stderr), result.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[;! ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_core_dependencies_are_light_and_extras_hold_the_rest() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = _requirement_names(project["dependencies"])
    extras = {name: _requirement_names(reqs) for name, reqs in project["optional-dependencies"].items()}
    from bnconvention.extras import _DISTRIBUTIONS as distributions

    heavy = {distributions.get(m, m).lower() for m in MODULE_EXTRAS}
    assert not core & heavy, core & heavy
    for module, extra in MODULE_EXTRAS.items():
        assert distributions.get(module, module).lower() in extras[extra], (module, extra)
    assert "bnconvention" in extras["audit"]  # the audit extra includes the refit extra
    assert project["optional-dependencies"]["audit"][0] == "bnconvention[refit]"


def _locked() -> dict[str, str]:
    """requirements/lock.txt as normalised name -> version."""
    lines = (ROOT / "requirements" / "lock.txt").read_text(encoding="utf-8").splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    return {_normalise(name): version for name, version in pins}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_lock_file_still_installs_everything() -> None:
    """The README's commands install requirements/lock.txt, then bnconvention with --no-deps: every extra's
    requirement must be pinned there (timm, transformers and datasets too)."""
    locked = set(_locked())
    project = _project()
    wanted = _requirement_names(project["dependencies"])
    for requirements in project["optional-dependencies"].values():
        wanted |= _requirement_names(requirements)
    assert {"timm", "transformers", "datasets"} <= wanted
    assert {_normalise(n) for n in wanted} - {"bnconvention"} <= locked, wanted - locked


def test_locked_versions_satisfy_the_extras() -> None:
    """A pin outside an extra's range would install a version the extra refuses."""
    from packaging.requirements import Requirement

    locked = _locked()
    project = _project()
    for requirement in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]:
        parsed = Requirement(requirement)
        if parsed.name != "bnconvention":
            assert parsed.specifier.contains(locked[_normalise(parsed.name)], prereleases=True), (requirement,
                                                                                                  locked)


def test_the_lock_holds_every_dependency_of_what_it_pins() -> None:
    """Closed under requirements: pip installs the lock as given, so a dependency left out (e.g.
    transformers' tokenizers, datasets' pyarrow) would be fetched unpinned, or missing offline. Read from the
    installed distributions' metadata, for the pins installed in this environment."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement

    locked = _locked()
    checked, missing = 0, set()
    for name, version in locked.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for raw in dist.requires or []:
            requirement = Requirement(raw)
            applies = requirement.marker is None or requirement.marker.evaluate({"extra": ""})
            if applies and _normalise(requirement.name) not in locked:
                missing.add(f"{requirement.name} (needed by {name})")
    assert checked >= len(locked) // 2, f"only {checked} of {len(locked)} pins are installed here"
    assert not missing, sorted(missing)


def _self_references(requirements: list[str]) -> set[str]:
    extras: set[str] = set()
    for requirement in requirements:
        match = re.fullmatch(r"bnconvention\[([a-z,]+)\]", requirement)
        if match:
            extras |= set(match.group(1).split(","))
    return extras


def test_extra_includes_follows_pyproject() -> None:
    """extras_for leaves out an extra another one installs: that table must be pyproject's own nesting."""
    extras = _project()["optional-dependencies"]
    for name in EXTRA_INCLUDES:
        closure, todo = set(), list(_self_references(extras[name]))
        while todo:
            included = todo.pop()
            if included not in closure:
                closure.add(included)
                todo.extend(_self_references(extras[included]))
        assert EXTRA_INCLUDES[name] == closure, name
    assert set(MODULE_EXTRAS.values()) <= set(EXTRA_INCLUDES)


def test_missing_dependency_names_the_larger_extra() -> None:
    torch_missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert missing_dependency(torch_missing).extra == "refit"
    assert missing_dependency(torch_missing, extra="audit").extra == "audit"
    scipy_missing = ModuleNotFoundError("No module named 'scipy.stats'", name="scipy.stats")
    error = missing_dependency(scipy_missing, extra="refit", command="bnconvention refit")
    assert (error.module, error.extra) == ("scipy", "audit")
    assert str(error) == ("bnconvention refit needs scipy, which is not installed; install the extra: pip install "
                          "'bnconvention[audit]'")
    assert missing_dependency(ModuleNotFoundError("No module named 'mypkg'", name="mypkg")) is None


@pytest.mark.parametrize(("module", "extra", "brackets"), [
    pytest.param("timm", "audit", "audit,timm", id="timm-under-audit"),
    pytest.param("timm", "refit", "timm", id="timm-under-refit"),
    pytest.param("transformers", "audit", "audit,transformers", id="transformers-under-audit"),
    pytest.param("transformers", None, "transformers", id="transformers-alone"),
    pytest.param("datasets", "audit", "audit,datasets", id="datasets-under-audit"),
    pytest.param("datasets", "ray", "ray,datasets", id="datasets-under-ray"),
])
def test_a_missing_library_extra_is_named_with_the_commands(module: str, extra: str | None, brackets: str) -> None:
    """Without timm/transformers/datasets the one-line error names the extra that installs it, together
    with the command's own when that one is not included in it."""
    error = missing_dependency(ModuleNotFoundError(f"No module named '{module}.models'", name=f"{module}.models"),
                               extra=extra, command="bnconvention hub audit")
    assert (error.module, error.extra) == (module, brackets)
    assert str(error) == (f"bnconvention hub audit needs {module}, which is not installed; install the extra: "
                          f"pip install 'bnconvention[{brackets}]'")


def test_extras_for_keeps_only_what_no_other_extra_installs() -> None:
    assert extras_for("refit", "audit") == "audit"
    assert extras_for("audit", "ray") == "ray"
    assert extras_for("timm", "transformers", "audit") == "audit,timm,transformers"
    assert extras_for("refit", None) == "refit"
    assert extras_for("audit", "mine") == "audit,mine"  # an extra we do not know is kept, never dropped
