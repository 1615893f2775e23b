"""The figures a maintainer reads the house by, measured from the source alone (nothing is imported).

    .venv/bin/python scripts/house_figures.py            # a table on stdout
    .venv/bin/python scripts/house_figures.py --json     # the same figures as JSON

- packages: each package of ``bnconvention/`` with its modules and lines (sub-packages of ``audit`` listed apart);
- ``dict[str, Any]`` per 1,000 lines of the library;
- imports inside functions per 1,000 lines (and how many name our own modules);
- modules importing each other in circles: strongly connected components of the module import graph, every import
  counted (module level, function level, ``TYPE_CHECKING``), a package's ``__init__`` importing its own
  submodules left out (that is how a package exports, not a cycle);
- history references: ``issue N`` / ``issue #N`` / ``seed 00N`` in ``bnconvention/`` and ``schema/``.

Duplicate pairs come from the ``duplicates`` tool over the whole tree, not from here.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "bnconvention"
DATA_FOLDERS = ("bnconvention/examples/files",)
HISTORY = re.compile(r"\b(?:issue\s*#?\s*\d+|seed\s+0\d\d)\b", re.IGNORECASE)
DICT_ANY = re.compile(r"dict\[str,\s*Any\]")


@dataclass
class Figures:
    modules: int = 0
    lines: int = 0
    packages: dict[str, list[int]] = field(default_factory=dict)  # package -> [modules, lines]
    dict_str_any: int = 0
    function_imports: int = 0
    function_imports_own: int = 0
    cycles: list[list[str]] = field(default_factory=list)
    history_library: int = 0
    history_schema: int = 0

    def per_thousand(self, count: int) -> float:
        return round(1000 * count / self.lines, 1) if self.lines else 0.0


def _library_files() -> dict[str, str]:
    files = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if not any(relative.startswith(folder) for folder in DATA_FOLDERS):
            files[relative] = path.read_text(encoding="utf-8")
    return files


def _module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_key(path: str) -> str:
    parts = path.split("/")
    if len(parts) == 2:
        return "(root)"
    if parts[1] == "audit" and len(parts) > 3:
        return f"audit/{parts[2]}"
    return parts[1]


class _Imports(ast.NodeVisitor):
    """Every import of one module, each marked as inside a function or not."""

    def __init__(self, path: str, modules: frozenset[str]) -> None:
        self.path, self.modules = path, modules
        self.depth = 0
        self.found: list[tuple[str, bool]] = []  # (target module, inside a function)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _resolve(self, level: int, module: str | None) -> str:
        package = _module_name(self.path).split(".")
        if not self.path.endswith("/__init__.py"):
            package = package[:-1]
        base = package[: len(package) - level + 1]
        return ".".join([*base, module] if module else base)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, self.depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node.level, node.module) if node.level else node.module or ""
        submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in self.modules]
        for target in submodules or [base]:
            self.found.append((target, self.depth > 0))


def _own_target(target: str, modules: frozenset[str]) -> str | None:
    """The module of ours an import lands in (the longest existing prefix), or None."""
    parts = target.split(".")
    if parts[0] != PACKAGE:
        return None
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    item = stack.pop()
                    on_stack.discard(item)
                    component.append(item)
                    if item == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def measure() -> Figures:
    files = _library_files()
    modules = frozenset(_module_name(path) for path in files)
    figures = Figures(modules=len(files))
    graph: dict[str, set[str]] = defaultdict(set)
    packages: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path, source in files.items():
        lines = source.count("\n")
        figures.lines += lines
        packages[_package_key(path)][0] += 1
        packages[_package_key(path)][1] += lines
        figures.dict_str_any += len(DICT_ANY.findall(source))
        figures.history_library += len(HISTORY.findall(source))
        visitor = _Imports(path, modules)
        visitor.visit(ast.parse(source, filename=path))
        name = _module_name(path)
        graph.setdefault(name, set())
        for target, inside in visitor.found:
            own = _own_target(target, modules)
            if inside:
                figures.function_imports += 1
                figures.function_imports_own += own is not None
            if own is None or own == name:
                continue
            if path.endswith("/__init__.py") and own.startswith(f"{name}."):
                continue  # a package exporting its own submodules
            graph[name].add(own)
    figures.packages = dict(sorted(packages.items()))
    figures.cycles = _cycles(graph)
    for path in sorted((ROOT / "schema").rglob("*")):
        if path.is_file() and path.suffix in {".json", ".md", ".py"}:
            figures.history_schema += len(HISTORY.findall(path.read_text(encoding="utf-8", errors="replace")))
    return figures


def render(figures: Figures) -> str:
    rows = [f"library: {figures.modules} modules, {figures.lines} lines",
            f"dict[str, Any]: {figures.dict_str_any} ({figures.per_thousand(figures.dict_str_any)} per 1,000 lines)",
            f"imports inside functions: {figures.function_imports} "
            f"({figures.per_thousand(figures.function_imports)} per 1,000 lines), "
            f"{figures.function_imports_own} of our own modules",
            f"import cycles: {len(figures.cycles)} ({sum(len(c) for c in figures.cycles)} modules)",
            f"history references: {figures.history_library} in bnconvention/, {figures.history_schema} in schema/",
            "", "| package | modules | lines |", "|---|---:|---:|"]
    rows += [f"| `{name}` | {count} | {lines} |" for name, (count, lines) in figures.packages.items()]
    if figures.cycles:
        rows += ["", "cycles:"] + [f"- {' <-> '.join(component)}" for component in figures.cycles]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure()
    print(json.dumps(asdict(figures), indent=2) if args.json else render(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
