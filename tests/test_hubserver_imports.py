"""Where the local Hub server's pieces live: its own error type, and an acyclic import graph inside the package.

``HubRequestError`` sat in ``bnconvention.errors`` though only the server raises it; ``storage`` and
``discussions`` imported each other (one class split across a mixin), and ``handlers`` imported the endpoint modules
that import it. These tests fail if either comes back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import bnconvention.errors
import bnconvention.hubserver
from bnconvention.errors import BnConventionError
from bnconvention.hubserver.errors import HubRequestError


def test_hub_request_error_lives_in_the_server_package() -> None:
    assert not hasattr(bnconvention.errors, "HubRequestError")
    assert "HubRequestError" not in bnconvention.errors.__all__
    exc = HubRequestError("gone", status=404, code="RepoNotFound", repo_id="org/m", headers={"X-Repo-Commit": "a"})
    assert isinstance(exc, BnConventionError)
    assert isinstance(exc, ValueError)
    assert (exc.status, exc.code, exc.repo_id, exc.headers, str(exc)) == (
        404, "RepoNotFound", "org/m", {"X-Repo-Commit": "a"}, "gone")
    with pytest.raises(BnConventionError, match="gone"):
        raise exc


# --- the package's internal import graph ------------------------------------------------------------------------

PACKAGE = "bnconvention.hubserver"
PACKAGE_DIR = Path(bnconvention.hubserver.__file__).parent


def _module_name(path: Path) -> str:
    return PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"


def _imported_modules(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in the file.

    Function-level and ``TYPE_CHECKING`` imports count too: a cycle hidden there is still two modules that each
    need the other (the old handlers -> endpoints import sat in a function, discussions -> storage under
    ``TYPE_CHECKING``). ``from bnconvention.hubserver import x`` names the submodule ``x`` when there is one, else
    the package's ``__init__``.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package (its modules sit at one level)
                base = f"{PACKAGE}.{base}".rstrip(".")
            if base == PACKAGE:
                names = [f"{PACKAGE}.{a.name}" if (PACKAGE_DIR / f"{a.name}.py").exists() else PACKAGE
                         for a in node.names]
            else:
                names = [base]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                found.add(".".join(name.split(".")[:3]))
    return found


def _import_graph() -> dict[str, set[str]]:
    graph = {_module_name(path): _imported_modules(path) for path in sorted(PACKAGE_DIR.glob("*.py"))}
    return {module: targets - {module} for module, targets in graph.items()}


def _find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or ``None`` when the graph is acyclic (depth-first search)."""
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target in on_stack:
                return stack[stack.index(target):] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        stack.pop()
        on_stack.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def test_cycle_finder_finds_a_cycle_and_accepts_a_dag() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_hubserver_form_no_cycle() -> None:
    graph = _import_graph()
    # The graph really is read: these edges exist, and every module of the package is a node.
    assert f"{PACKAGE}.dispatch" in graph and f"{PACKAGE}.storage" in graph[PACKAGE]
    assert f"{PACKAGE}.repo_endpoints" in graph[f"{PACKAGE}.dispatch"]
    assert f"{PACKAGE}.repos" in graph[f"{PACKAGE}.discussions"]
    assert len(graph) == len(list(PACKAGE_DIR.glob("*.py")))
    assert _find_cycle(graph) is None, " -> ".join(_find_cycle(graph) or [])


@pytest.mark.parametrize("shared", ["handlers", "routes", "repos", "storage", "discussions", "errors"])
def test_shared_modules_never_import_the_endpoints(shared: str) -> None:
    imported = _import_graph()[f"{PACKAGE}.{shared}"]
    endpoint_modules = {f"{PACKAGE}.{name}" for name in ("repo_endpoints", "write_endpoints", "discussion_endpoints",
                                                         "dispatch", "server")}
    assert imported.isdisjoint(endpoint_modules), sorted(imported & endpoint_modules)
