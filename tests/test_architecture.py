"""The layer order of ``bnconvention/`` (docs/architecture.md): imports only go down the layers, or sideways inside
one, so a module's folder says what it may depend on.

Every import counts: module-level and function-level ``import``/``from ... import`` (``TYPE_CHECKING`` blocks
included), relative ones resolved, ``from bnconvention import X`` as an import of ``X`` when ``X`` is a module, and
string literals naming an existing module (the lazy-export tables and the CLI's command table import by name).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "bnconvention"
# The package's data files: written out by ``bnconvention examples write``, never imported.
DATA_FOLDERS = ("examples/files",)

# Lowest first. Each top-level entry of bnconvention/ (module or package) is in exactly one layer; a new entry
# goes here and in docs/architecture.md.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("formats", frozenset({"formats", "errors", "extras", "_version", "_lazy"})),
    ("standard", frozenset({"standard"})),
    ("validation", frozenset({"validation"})),
    ("authoring/refitting", frozenset({"authoring", "refitting", "data", "architectures"})),
    ("hub", frozenset({"hub"})),
    ("audit", frozenset({"audit"})),
    ("hub_audit", frozenset({"hub_audit"})),
    ("report/cli/demo", frozenset({"report_html", "cli", "demo", "zoo", "hubserver", "examples"})),
    ("package root", frozenset({"__init__", "__main__"})),
)
LAYER_OF: dict[str, int] = {entry: rank for rank, (_, entries) in enumerate(LAYERS) for entry in entries}
# Applications at the top: imported only by the entry points (the CLI, and the demo that drives the others).
APPLICATIONS = frozenset({"zoo", "demo", "hubserver", "examples"})
ENTRY_POINTS = frozenset({"cli", "demo", "__main__"})
# Folders of the checkout that are not part of the installed library.
CHECKOUT_ONLY = frozenset({"hub_scripts", "tests", "benchmarks", "scripts"})
# Inside the audit, its sub-packages in the order a census runs, lowest first: each imports only its own and lower
# ones; the rest of the package imports a sub-package (its __init__), never one of its modules.
AUDIT = f"{PACKAGE}.audit"
AUDIT_LAYERS: tuple[str, ...] = ("core", "spec", "measure", "scales", "diagnostics", "run", "population", "render",
                                 "census")
AUDIT_RANK: dict[str, int] = {name: rank for rank, name in enumerate(AUDIT_LAYERS)}


@dataclass(frozen=True)
class Import:
    """One import in one file: ``target`` is the dotted module name as written (resolved when relative)."""

    path: str  # relative to the package's parent, e.g. "bnconvention/data/pools.py"
    line: int
    target: str
    by_name: bool = False  # a string naming the module (a lazy-export or command table), loaded when asked for

    @property
    def source_entry(self) -> str:
        return top_level_entry(self.path)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def top_level_entry(path: str) -> str:
    """``bnconvention/data/pools.py`` -> ``data``; ``bnconvention/errors.py`` -> ``errors``."""
    parts = path.split("/")
    return parts[1].removesuffix(".py")


def module_name(path: str) -> str:
    """``bnconvention/data/__init__.py`` -> ``bnconvention.data``; ``bnconvention/errors.py`` ->
    ``bnconvention.errors``."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve_relative(path: str, level: int, module: str | None) -> str:
    package = module_name(path).split(".")
    if not path.endswith("/__init__.py"):
        package = package[:-1]
    base = package[: len(package) - level + 1]
    return ".".join([*base, module] if module else base)


def imports_in(path: str, source: str, *, modules: frozenset[str]) -> Iterator[Import]:
    """Every import of ``source`` (the text of ``path``) that names a module of this package or a checkout folder;
    ``modules`` is the set of the package's dotted module names (to tell a submodule from a name, and a module
    named in a string from any other string)."""
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(path, node.level, node.module) if node.level else node.module or ""
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            targets = submodules or [base]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in modules:  # a bare "bnconvention" is the tool's name, not an import
            targets = [node.value]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in {PACKAGE, *CHECKOUT_ONLY}:
                yield Import(path, node.lineno, target, by_name=isinstance(node, ast.Constant))


def target_entry(target: str) -> str:
    """The top-level entry an import lands in; a bare ``bnconvention`` is the package root (``__init__``)."""
    parts = target.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(found: Iterable[Import]) -> list[str]:
    """Imports that go up the layers."""
    problems = []
    for item in found:
        if item.target.split(".")[0] != PACKAGE:
            continue
        source, target = item.source_entry, target_entry(item.target)
        if source in LAYER_OF and target in LAYER_OF and LAYER_OF[target] > LAYER_OF[source]:
            problems.append(f"{item} (layer {LAYERS[LAYER_OF[source]][0]} may not import layer "
                            f"{LAYERS[LAYER_OF[target]][0]})")
    return problems


def application_violations(found: Iterable[Import]) -> list[str]:
    """Imports of zoo, demo, hubserver or examples from anything but the entry points (or themselves)."""
    problems = []
    for item in found:
        source, target = item.source_entry, target_entry(item.target)
        if item.target.startswith(f"{PACKAGE}.") and target in APPLICATIONS and source != target \
                and source not in ENTRY_POINTS:
            problems.append(f"{item} ({target} is imported only by {', '.join(sorted(ENTRY_POINTS))})")
    return problems


def audit_subpackage(dotted: str) -> str | None:
    """``bnconvention.audit.run.stages`` -> ``run``; None outside the audit's sub-packages."""
    parts = dotted.split(".")
    return parts[2] if parts[:2] == [PACKAGE, "audit"] and len(parts) > 2 else None


def audit_layer_violations(found: Iterable[Import]) -> list[str]:
    """Imports from one audit sub-package into a higher one (AUDIT_LAYERS), or from an audit module that is in no
    sub-package of the table."""
    problems = []
    for item in found:
        source = audit_subpackage(module_name(item.path))
        if item.source_entry != "audit" or item.path == "bnconvention/audit/__init__.py":
            continue
        if source not in AUDIT_RANK:
            problems.append(f"{item} (bnconvention/audit/ holds sub-packages only; put the module in one of "
                            f"{', '.join(AUDIT_LAYERS)})")
            continue
        target = audit_subpackage(item.target)
        if target in AUDIT_RANK and AUDIT_RANK[target] > AUDIT_RANK[source]:
            problems.append(f"{item} (audit.{source} may not import audit.{target})")
    return problems


def audit_reach_in_violations(found: Iterable[Import]) -> list[str]:
    """Imports from outside the audit of an audit sub-package's module instead of the sub-package itself."""
    return [f"{item} (import bnconvention.audit.{audit_subpackage(item.target)}, which exports it)"
            for item in found
            if item.source_entry != "audit" and item.target.split(".")[0] == PACKAGE
            and audit_subpackage(item.target) is not None and len(item.target.split(".")) > 3]


def import_cycles(found: Iterable[Import], modules: frozenset[str]) -> list[list[str]]:
    """Modules importing each other in a circle: the strongly connected components (more than one module) of the
    graph of every import, each landing in the longest module name it starts with; a package's ``__init__``
    importing its own submodules is how it exports, not a cycle, and a table naming a module by string (the CLI's
    commands, lazy exports) loads it when asked for, after both modules are imported."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for item in found:
        source, parts = module_name(item.path), item.target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        target = ".".join(parts)
        own_export = item.path.endswith("/__init__.py") and target.startswith(f"{source}.")
        if target and target != source and not own_export and not item.by_name:
            graph[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(cycles)


# --- the package on disk ----------------------------------------------------------------------------------------


def _is_data(path: Path, package_dir: Path) -> bool:
    relative = path.relative_to(package_dir).as_posix()
    return any(relative == folder or relative.startswith(f"{folder}/") for folder in DATA_FOLDERS)


def package_files(package_dir: Path) -> dict[str, str]:
    """``"bnconvention/x/y.py" -> source`` for every module of the package (data folders left out)."""
    return {path.relative_to(package_dir.parent).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(package_dir.rglob("*.py")) if not _is_data(path, package_dir)}


def top_level_entries(package_dir: Path) -> set[str]:
    """Top-level modules and packages (folders holding Python files) of the package."""
    entries = {path.stem for path in package_dir.glob("*.py")}
    entries |= {path.name for path in package_dir.iterdir()
                if path.is_dir() and path.name != "__pycache__" and any(path.rglob("*.py"))}
    return entries


@pytest.fixture(scope="module")
def package_dir(repo_root: Path) -> Path:
    return repo_root / PACKAGE


@pytest.fixture(scope="module")
def all_imports(package_dir: Path) -> list[Import]:
    files = package_files(package_dir)
    modules = frozenset(module_name(path) for path in files)
    return [item for path, source in files.items() for item in imports_in(path, source, modules=modules)]


def test_every_top_level_entry_has_exactly_one_layer(package_dir: Path) -> None:
    on_disk = top_level_entries(package_dir)
    unknown = sorted(on_disk - set(LAYER_OF))
    assert not unknown, (f"bnconvention/ has top-level entries without a layer: {unknown}; add each to LAYERS in "
                         "tests/test_architecture.py and to the table in docs/architecture.md")
    gone = sorted(set(LAYER_OF) - on_disk)
    assert not gone, f"LAYERS in tests/test_architecture.py names entries that no longer exist: {gone}"
    assert sum(len(entries) for _, entries in LAYERS) == len(LAYER_OF)  # no entry in two layers


def test_imports_only_go_down_the_layers(all_imports: list[Import]) -> None:
    assert layer_violations(all_imports) == []


def test_zoo_demo_hubserver_examples_are_imported_only_by_entry_points(all_imports: list[Import]) -> None:
    assert application_violations(all_imports) == []


def test_data_never_imports_the_zoo(all_imports: list[Import]) -> None:
    # Regression: the digits pool lived in zoo/data.py, so the data layer depended on the zoo.
    assert [str(item) for item in all_imports
            if item.source_entry == "data" and target_entry(item.target) == "zoo"] == []


def test_library_never_imports_checkout_folders(all_imports: list[Import]) -> None:
    # hub_scripts/, tests/, benchmarks/ are not installed: the library runs without them.
    assert [str(item) for item in all_imports if item.target.split(".")[0] in CHECKOUT_ONLY] == []


def test_audit_sub_packages_import_only_their_own_or_lower_ones(all_imports: list[Import]) -> None:
    assert audit_layer_violations(all_imports) == []


def test_every_audit_sub_package_has_a_rank(package_dir: Path) -> None:
    on_disk = {path.name for path in (package_dir / "audit").iterdir() if (path / "__init__.py").is_file()}
    assert on_disk == set(AUDIT_LAYERS), ("bnconvention/audit/ sub-packages and AUDIT_LAYERS in "
                                          "tests/test_architecture.py (and docs/architecture.md) differ")
    assert [path.name for path in (package_dir / "audit").glob("*.py")] == ["__init__.py"]


def test_other_packages_import_audit_sub_packages_not_their_modules(all_imports: list[Import]) -> None:
    assert audit_reach_in_violations(all_imports) == []


def test_no_import_cycles(all_imports: list[Import], package_dir: Path) -> None:
    modules = frozenset(module_name(path) for path in package_files(package_dir))
    assert import_cycles(all_imports, modules) == []


TORCH_FREE_CLAIM = "does not import torch"
# The torch borders (docs/architecture.md#torch-borders): packages whose modules may import torch at their top, and
# the command modules of the commands that need a torch extra. Every other module imports without torch.
TORCH_BORDER_PACKAGES = frozenset({"refitting", "audit", "zoo", "architectures", "data", "authoring", "demo",
                                   "hub_audit"})
TORCH_EXTRAS = frozenset({"refit", "audit"})


def torch_border_modules() -> frozenset[str]:
    """The command modules of the commands whose extra brings torch (the CLI imports one only when it runs)."""
    from bnconvention.cli.commands import COMMANDS

    return frozenset(command.module for command in COMMANDS.values() if command.extra in TORCH_EXTRAS)


def in_torch_border(module: str) -> bool:
    parts = module.split(".")
    return (len(parts) > 1 and parts[1] in TORCH_BORDER_PACKAGES) or module in torch_border_modules()


def first_to_import_torch(modules: Iterable[str], repo_root: Path) -> str:
    """The first of ``modules`` that loads torch when one fresh interpreter imports them in turn; ``""`` when none."""
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
            "    if 'torch' in sys.modules:\n        print(name)\n        break\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=repo_root, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_modules_that_say_they_do_not_import_torch_do_not(package_dir: Path, repo_root: Path) -> None:
    # A deferred import says why once per module; where the reason is "importing this module does not import
    # torch", it must stay true.
    files = package_files(package_dir)
    claimed = sorted(module_name(path) for path, source in files.items() if TORCH_FREE_CLAIM in source)
    # the device names of --device, the staleness band the population's readings use, the Hub push of a library's
    # model, ...
    assert {"bnconvention.refitting.devices", "bnconvention.audit.diagnostics.band",
            "bnconvention.hub.library_push"} <= set(claimed)
    loader = first_to_import_torch(claimed, repo_root)
    assert loader == "", f"{loader} says it does not import torch, but importing it does"


def outside_the_borders(package_dir: Path) -> list[str]:
    """Every module outside the torch borders: each imports without torch."""
    return sorted(name for name in map(module_name, package_files(package_dir))
                  if not in_torch_border(name) and not name.endswith(".__main__"))


def modules_loaded_by(modules: Iterable[str], repo_root: Path) -> frozenset[str]:
    """Every module of the package that one fresh interpreter holds after importing ``modules`` in turn."""
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
            "print('\\n'.join(name for name in sys.modules if name.split('.')[0] == 'bnconvention'))\n")
    done = subprocess.run([sys.executable, "-c", code, *modules], cwd=repo_root, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return frozenset(done.stdout.split())


def unreached_claims(claimed: Iterable[str], reached: frozenset[str]) -> list[str]:
    """Border modules that say they do not import torch although no torch-free path imports them: with no path to
    keep clear, such a module imports torch at its top, and its claim is stale."""
    return sorted(name for name in claimed if in_torch_border(name) and name not in reached)


def test_modules_outside_the_torch_borders_do_not_import_torch(package_dir: Path, repo_root: Path) -> None:
    outside = outside_the_borders(package_dir)
    assert {"bnconvention", "bnconvention.hub.crawl", "bnconvention.cli.hub_cmd",
            "bnconvention.validation"} <= set(outside)
    loader = first_to_import_torch(outside, repo_root)
    assert loader == "", (f"{loader} is outside the torch borders (docs/architecture.md#torch-borders) but "
                          "importing it imports torch")


def test_border_modules_that_say_they_do_not_import_torch_are_on_a_torch_free_path(package_dir: Path,
                                                                                  repo_root: Path) -> None:
    claimed = [module_name(path) for path, source in package_files(package_dir).items() if TORCH_FREE_CLAIM in source]
    reached = modules_loaded_by(outside_the_borders(package_dir), repo_root)
    assert unreached_claims(claimed, reached) == [], (
        "no torch-free path imports these any more: import torch at their top and drop the claim "
        "(docs/architecture.md#torch-borders)")


def test_the_claim_check_sees_a_module_no_torch_free_path_reaches(repo_root: Path) -> None:
    # --device reaches the device names, not the engine; a module outside the borders is never a stale claim
    reached = modules_loaded_by(["bnconvention.cli.device_option"], repo_root)
    assert "bnconvention.refitting.devices" in reached and "bnconvention.refitting.engine" not in reached
    claimed = ["bnconvention.refitting.devices", "bnconvention.refitting.engine", "bnconvention.formats.text"]
    assert unreached_claims(claimed, reached) == ["bnconvention.refitting.engine"]


def deferred_torch_imports(source: str) -> list[int]:
    """The lines where ``source`` imports torch (or ``safetensors.torch``, which imports it) inside a function."""
    lines: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [alias.name for alias in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if any(name.split(".")[0] == "torch" or name == "safetensors.torch" for name in names):
                    lines.append(child.lineno)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), False)
    return lines


def deferred_torch_violations(files: dict[str, str]) -> list[str]:
    """Border modules that import torch inside a function but do not say that importing them does not import torch:
    a border module that no torch-free path imports has no reason to defer torch, and imports it at its top."""
    return [f"{path}:{line} imports torch inside a function without saying {TORCH_FREE_CLAIM!r}"
            for path, source in files.items()
            if in_torch_border(module_name(path)) and TORCH_FREE_CLAIM not in source
            for line in deferred_torch_imports(source)]


def test_border_modules_defer_torch_only_when_they_say_they_do_not_import_torch(package_dir: Path) -> None:
    assert deferred_torch_violations(package_files(package_dir)) == [], (
        "import torch at the module's top, or name in a comment the torch-free path that imports the module "
        "(docs/architecture.md#torch-borders)")


@pytest.mark.parametrize(("path", "source", "lines"), [
    pytest.param("bnconvention/data/pools.py", "def f():\n    import torch\n", [2], id="deferred"),
    pytest.param("bnconvention/data/pools.py", "class A:\n    def f(self):\n        from torch.nn import Module\n", [3],
                 id="in-a-method"),
    pytest.param("bnconvention/data/pools.py", "def f():\n    from safetensors.torch import save\n", [2],
                 id="safetensors-torch"),
    pytest.param("bnconvention/data/pools.py", "# importing this module does not import torch.\ndef f():\n"
                 "    import torch\n", [], id="claimed"),
    pytest.param("bnconvention/data/pools.py", "import torch\n\ndef f():\n    import torchvision\n", [],
                 id="at-the-top-and-not-torch"),
    pytest.param("bnconvention/formats/text.py", "def f():\n    import torch\n", [], id="outside-the-borders"),
])
def test_checker_sees_a_border_module_deferring_torch(path: str, source: str, lines: list[int]) -> None:
    found = deferred_torch_violations({path: source})
    assert found == [f"{path}:{line} imports torch inside a function without saying {TORCH_FREE_CLAIM!r}"
                     for line in lines]


def test_the_torch_border_check_sees_torch(repo_root: Path) -> None:
    # the mechanism sees torch when a border module that imports it at its top is among the modules
    assert in_torch_border("bnconvention.refitting.observers") and in_torch_border("bnconvention.cli.refit_cmd")
    assert not in_torch_border("bnconvention.hub.crawl") and not in_torch_border("bnconvention.cli.validate_cmd")
    modules = ["bnconvention.errors", "bnconvention.refitting.observers", "bnconvention.formats"]
    assert first_to_import_torch(modules, repo_root) == "bnconvention.refitting.observers"


def test_docs_name_every_layer_entry(repo_root: Path) -> None:
    text = (repo_root / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = sorted(entry for entry in LAYER_OF if f"`{entry}" not in text)
    assert missing == [], f"docs/architecture.md does not name {missing}"



# --- one definition per name ------------------------------------------------------------------------------------

# One typed model per concept, one definition per name: a public class or function (a top-level name not starting
# with ``_``) is defined in one module of the package. A name here may be defined in several, for the reason given.
PROTOCOL_NAMES: dict[str, str] = {
    "register": "every cli/<name>_cmd.py adds its parser with it; cli/main.py calls it on the module "
                "cli/commands.py names",
    "run": "every cli/<name>_cmd.py runs its command with it (the parser's func)",
    "main": "the entry point of a module run with python -m (cli/main.py, cli/reference.py, validation/docgen.py)",
    "BNConventionCallback": "one per training framework, in the framework's own module (callbacks_lightning, "
                            "callbacks_transformers), as docs/quickstart-author.md imports it: the module names the "
                            "framework, as safetensors.torch and safetensors.numpy each have save_file",
}


def public_definitions(files: dict[str, str]) -> dict[str, list[str]]:
    """``name -> [path, ...]``: where each public top-level class or function is defined (methods, nested
    functions and names starting with ``_`` left out)."""
    found: dict[str, list[str]] = {}
    for path, source in sorted(files.items()):
        for node in ast.parse(source, filename=path).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                    and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(path)
    return found


def duplicate_definitions(files: dict[str, str]) -> list[str]:
    """Public names defined in more than one module, protocol names aside."""
    return [f"{name} is defined in {', '.join(paths)}" for name, paths in public_definitions(files).items()
            if len(paths) > 1 and name not in PROTOCOL_NAMES]


def test_every_public_name_is_defined_in_one_module(package_dir: Path) -> None:
    assert duplicate_definitions(package_files(package_dir)) == [], (
        "rename each to what it is, or keep one definition (in the lowest layer) and import it")


def test_the_names_allowed_twice_are_defined_twice(package_dir: Path) -> None:
    # an allowed name that is defined once no longer needs its entry
    found = public_definitions(package_files(package_dir))
    assert sorted(name for name in PROTOCOL_NAMES if len(found.get(name, [])) < 2) == []


def test_checker_sees_a_name_defined_twice() -> None:
    files = {"bnconvention/hub/crawl.py": "class CensusRun:\n    def run(self): ...\n",
             "bnconvention/audit/population/summary.py": "def _helper(): ...\nclass CensusRun:\n    pass\n",
             "bnconvention/cli/a_cmd.py": "def register(parser): ...\ndef run(args):\n    def inner(): ...\n",
             "bnconvention/cli/b_cmd.py": "def register(parser): ...\ndef run(args): ...\ndef _helper(): ...\n"
                                          "async def inner(): ...\n"}
    assert duplicate_definitions(files) == [
        "CensusRun is defined in bnconvention/audit/population/summary.py, bnconvention/hub/crawl.py"]
    assert public_definitions(files)["inner"] == ["bnconvention/cli/b_cmd.py"]  # a nested function is not counted

# --- the checker itself -----------------------------------------------------------------------------------------

MODULES = frozenset({"bnconvention", "bnconvention.zoo", "bnconvention.zoo.build", "bnconvention.data",
                     "bnconvention.data.pools", "bnconvention.hub", "bnconvention.formats",
                     "bnconvention.formats.text"})


@pytest.mark.parametrize(("source", "target"), [
    pytest.param("import bnconvention.zoo.build\n", "bnconvention.zoo.build", id="import"),
    pytest.param("def f():\n    from bnconvention.zoo import build_zoo\n", "bnconvention.zoo", id="in-a-function"),
    pytest.param("from bnconvention import zoo\n", "bnconvention.zoo", id="submodule-from-the-package"),
    pytest.param("from ..zoo import build\n", "bnconvention.zoo.build", id="relative"),
    pytest.param("EXPORTS = {'build_zoo': 'bnconvention.zoo.build'}\n", "bnconvention.zoo.build", id="by-name"),
])
def test_checker_sees_every_form_of_import(source: str, target: str) -> None:
    found = list(imports_in("bnconvention/data/pools.py", source, modules=MODULES))
    assert [item.target for item in found] == [target]
    assert layer_violations(found) == [
        f"bnconvention/data/pools.py:{found[0].line} imports {target} "
        "(layer authoring/refitting may not import layer report/cli/demo)"]
    assert application_violations(found) == [
        f"bnconvention/data/pools.py:{found[0].line} imports {target} (zoo is imported only by __main__, cli, demo)"]


def test_checker_allows_down_and_sideways_and_ignores_other_strings() -> None:
    source = ("from bnconvention.formats.text import plural\nfrom bnconvention.data import pools\n"
              "NAME, TOOL = 'bnconvention.record', 'bnconvention'\nfrom bnconvention import Declaration\n")
    found = list(imports_in("bnconvention/hub/crawl.py", source, modules=MODULES))
    assert [item.target for item in found] == ["bnconvention.formats.text", "bnconvention.data.pools",
                                               "bnconvention"]
    # the package root holds the lazy public names, and sits above every layer
    assert layer_violations(found) == ["bnconvention/hub/crawl.py:4 imports bnconvention "
                                       "(layer hub may not import layer package root)"]


AUDIT_MODULES = frozenset({"bnconvention.audit", "bnconvention.audit.core", "bnconvention.audit.core.result",
                           "bnconvention.audit.run", "bnconvention.audit.run.stages",
                           "bnconvention.audit.population", "bnconvention.audit.population.story"})


@pytest.mark.parametrize(("source", "ok"), [
    pytest.param("from bnconvention.audit.population.story import headline\n", False, id="up"),
    pytest.param("def f():\n    from bnconvention.audit.population import story\n", False, id="up-in-a-function"),
    pytest.param("from ..population import story\n", False, id="up-relative"),
    pytest.param("from bnconvention.audit.core.result import AuditResult\n", True, id="down"),
    pytest.param("from bnconvention.audit.run import stages\n", True, id="sideways"),
])
def test_checker_sees_an_audit_sub_package_importing_a_higher_one(source: str, ok: bool) -> None:
    found = list(imports_in("bnconvention/audit/run/runner.py", source, modules=AUDIT_MODULES))
    assert len(found) == 1
    expected = [] if ok else [f"{found[0]} (audit.run may not import audit.population)"]
    assert audit_layer_violations(found) == expected


def test_checker_refuses_an_audit_module_outside_the_sub_packages() -> None:
    found = list(imports_in("bnconvention/audit/loose.py", "from bnconvention.audit.core import result\n",
                            modules=AUDIT_MODULES))
    assert len(audit_layer_violations(found)) == 1


@pytest.mark.parametrize(("source", "ok"), [
    pytest.param("from bnconvention.audit.population.story import headline\n", False, id="module"),
    pytest.param("def f():\n    from bnconvention.audit.population import story\n", False,
                 id="module-from-the-sub-package"),
    pytest.param("EXPORTS = {'headline': 'bnconvention.audit.population.story'}\n", False, id="by-name"),
    pytest.param("from bnconvention.audit.population import headline\n", True, id="sub-package"),
])
def test_checker_sees_a_reach_into_an_audit_sub_package(source: str, ok: bool) -> None:
    found = list(imports_in("bnconvention/hub_audit/audit.py", source, modules=AUDIT_MODULES))
    assert len(found) == 1
    expected = [] if ok else [f"{found[0]} (import bnconvention.audit.population, which exports it)"]
    assert audit_reach_in_violations(found) == expected
    # the audit itself may import its modules
    inside = list(imports_in("bnconvention/audit/census/run.py", source, modules=AUDIT_MODULES))
    assert audit_reach_in_violations(inside) == []


def test_checker_finds_cycles_through_function_level_imports_but_not_exports() -> None:
    sources = {
        "bnconvention/audit/run/stages.py": "from bnconvention.audit.core.result import AuditResult\n",
        "bnconvention/audit/core/result.py": "def f():\n    from bnconvention.audit.run import stages\n",
        "bnconvention/audit/population/__init__.py": "from bnconvention.audit.population.story import headline\n",
        "bnconvention/audit/population/story.py": "from bnconvention.audit.population import headline\n",
    }
    found = [item for path, source in sources.items()
             for item in imports_in(path, source, modules=AUDIT_MODULES)]
    assert import_cycles(found, AUDIT_MODULES) == [["bnconvention.audit.core.result",
                                                    "bnconvention.audit.run.stages"]]


def test_checker_reads_a_table_naming_a_module_as_on_demand_not_as_a_cycle() -> None:
    # the CLI's command table names each command module by string, and each command module imports the table
    sources = {"bnconvention/audit/run/stages.py": "COMMANDS = {'story': 'bnconvention.audit.population.story'}\n",
               "bnconvention/audit/population/story.py": "from bnconvention.audit.run import stages\n"}
    found = [item for path, source in sources.items() for item in imports_in(path, source, modules=AUDIT_MODULES)]
    assert [item.by_name for item in found] == [True, False]
    assert import_cycles(found, AUDIT_MODULES) == []
    written = [Import(item.path, item.line, item.target) for item in found]  # the same, imported as statements
    assert import_cycles(written, AUDIT_MODULES) == [["bnconvention.audit.population.story",
                                                      "bnconvention.audit.run.stages"]]
