"""Cells and criteria of an audit spec as small arithmetic expressions, parsed with :mod:`ast`, never ``eval``-ed.

A *cell* is a number computed from the base cells ``df`` (forget accuracy), ``dr`` (retain accuracy) and ``dt`` (test
accuracy), e.g. ``df``, ``abs(df - dt)`` or ``max(df, dt) - min(df, dt)``. A *criterion* compares cells with
numbers, e.g. ``abs(df - dt) <= 0.05`` or ``dr >= 0.95 and df < 0.1``. The grammar is a whitelist: names of cells,
numbers, ``+ - * /``, unary minus, ``abs``/``min``/``max``, comparisons (chained too) and ``and``/``or``/``not`` in
criteria. Anything else (attributes, subscripts, ``**``, lambdas, other calls) is refused when the spec is loaded,
so a spec is data, not code.

Every expression has one canonical text (``ast.unparse`` of the parsed tree), used as the cell's ``metric`` in the
annotation: ``abs( df-dt )`` and ``abs(df - dt)`` are the same cell.

>>> cell = parse_cell("abs( df-dt )")
>>> cell.text, cell.names
('abs(df - dt)', ('df', 'dt'))
>>> cell.evaluate({"df": 0.0414, "dt": 0.0828})
0.0414
>>> crit = parse_criterion("abs(df - dt) <= 0.05")
>>> crit.evaluate({"df": 0.0414, "dt": 0.0828}), [o.text for o in crit.operands]
(True, ['abs(df - dt)'])
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from bnconvention.errors import AuditSpecError
from bnconvention.formats.text import elide

BASE_CELLS: tuple[str, ...] = ("df", "dr", "dt")
MAX_EXPRESSION_CHARS = 300
MAX_DEPTH = 24

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCTIONS: dict[str, tuple[Callable[..., float], int, int | None]] = {
    # name -> (function, min args, max args)
    "abs": (abs, 1, 1),
    "min": (min, 2, None),
    "max": (max, 2, None),
}


def _fail(message: str, field: str | None) -> AuditSpecError:
    return AuditSpecError(message, field=field)


def _parse(text: object, *, field: str | None, what: str) -> ast.expr:
    if not isinstance(text, str):
        raise _fail(f"{what} must be a string such as 'abs(df - dt)', found {type(text).__name__} {text!r}", field)
    if not text.strip():
        raise _fail(f"{what} is empty; write an expression over the cells {', '.join(BASE_CELLS)}", field)
    if len(text) > MAX_EXPRESSION_CHARS:
        raise _fail(f"{what} is {len(text)} characters long, over the {MAX_EXPRESSION_CHARS}-character limit",
                    field)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise _fail(f"{what} {text!r} is not a valid expression ({exc.msg} at column {exc.offset}); "
                    "write e.g. 'abs(df - dt) <= 0.05'", field) from exc
    return tree.body


class _Checker:
    """Walks a parsed tree and refuses every node outside the whitelist."""

    def __init__(self, *, text: str, field: str | None, names: Sequence[str], what: str) -> None:
        self.text = text
        self.field = field
        self.allowed = tuple(names)
        self.what = what
        self.used: list[str] = []

    def refuse(self, node: ast.AST, why: str) -> AuditSpecError:
        snippet = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        return _fail(f"{self.what} {self.text!r}: {why} (at {snippet!r}); allowed: cell names "
                     f"{', '.join(self.allowed)}, numbers, + - * /, abs/min/max and comparisons", self.field)

    def number(self, node: ast.expr, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise self.refuse(node, "nested too deeply")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.refuse(node, f"only numbers are allowed as constants, found {node.value!r}")
            if not math.isfinite(node.value):
                raise self.refuse(node, "numbers must be finite")
        elif isinstance(node, ast.Name):
            if node.id not in self.allowed:
                raise self.refuse(node, f"unknown cell {node.id!r}")
            if node.id not in self.used:
                self.used.append(node.id)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise self.refuse(node, f"operator {type(node.op).__name__} is not allowed")
            self.number(node.left, depth + 1)
            self.number(node.right, depth + 1)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            self.number(node.operand, depth + 1)
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name not in _FUNCTIONS:
                raise self.refuse(node, "only abs, min and max may be called")
            if node.keywords:
                raise self.refuse(node, f"{name}() takes no keyword arguments")
            for arg in node.args:
                if isinstance(arg, ast.Starred):
                    raise self.refuse(arg, "starred arguments are not allowed")
            _, low, high = _FUNCTIONS[name]
            if len(node.args) < low or (high is not None and len(node.args) > high):
                raise self.refuse(node, f"{name}() takes {low} argument{'s' if low > 1 else ''}"
                                        f"{'' if high == low else ' or more'}, found {len(node.args)}")
            for arg in node.args:
                self.number(arg, depth + 1)
        elif isinstance(node, (ast.Compare, ast.BoolOp)) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            raise self.refuse(node, "a comparison is not a number here")
        else:
            raise self.refuse(node, f"{type(node).__name__} is not allowed")

    def boolean(self, node: ast.expr, depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise self.refuse(node, "nested too deeply")
        if isinstance(node, ast.Compare):
            for op in node.ops:
                if type(op) not in _COMPARE:
                    raise self.refuse(node, f"comparison {type(op).__name__} is not allowed")
            self.number(node.left, depth + 1)
            for comparator in node.comparators:
                self.number(comparator, depth + 1)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self.boolean(value, depth + 1)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.boolean(node.operand, depth + 1)
        else:
            raise self.refuse(node, "a criterion must be a comparison such as 'dr >= 0.95'")


class NonFiniteError(ArithmeticError):
    """An expression's value left the finite floats on finite inputs (``df * 1e308 * 10`` overflows to inf);
    ``expression`` is the canonical text of the part that did. Callers report it as they report a division by
    zero: one line naming the cell or criterion."""

    def __init__(self, expression: str) -> None:
        super().__init__(f"{expression!r} is not a finite number (it overflows)")
        self.expression = expression


def _finite(value: float, node: ast.expr) -> float:
    if not math.isfinite(value):
        raise NonFiniteError(ast.unparse(node))
    return value


def _number(node: ast.expr, values: Mapping[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return float(cast("float", node.value))  # the parser admits numeric constants only
    if isinstance(node, ast.Name):
        return float(values[node.id])
    if isinstance(node, ast.BinOp):
        left, right = _number(node.left, values), _number(node.right, values)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ZeroDivisionError(f"division by zero in {ast.unparse(node)!r}")
        try:
            return _finite(float(_BINARY[type(node.op)](left, right)), node)
        except OverflowError as exc:  # Python floats overflow to inf in * and /, but say so in some cases
            raise NonFiniteError(ast.unparse(node)) from exc
    if isinstance(node, ast.UnaryOp):
        value = _number(node.operand, values)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call):
        function = _FUNCTIONS[node.func.id][0]  # type: ignore[attr-defined]
        return float(function(*(_number(arg, values) for arg in node.args)))
    raise TypeError(f"unchecked node {type(node).__name__}")  # unreachable after _Checker


def _boolean(node: ast.expr, operands: Callable[[ast.expr], float]) -> bool:
    if isinstance(node, ast.Compare):
        left = operands(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = operands(comparator)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        results = (_boolean(v, operands) for v in node.values)
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.UnaryOp):
        return not _boolean(node.operand, operands)
    raise TypeError(f"unchecked node {type(node).__name__}")  # unreachable after _Checker


@dataclass(frozen=True)
class CellExpression:
    """A checked numeric expression over cell names."""

    text: str  # canonical text
    names: tuple[str, ...]  # cell names used, in order of first use
    tree: ast.expr

    @property
    def is_constant(self) -> bool:
        return not self.names

    @property
    def base_split(self) -> str | None:
        """The split a base cell is measured on (``df`` → forget), None for any other expression."""
        return {"df": "forget", "dr": "retain", "dt": "test"}.get(self.text)

    def evaluate(self, values: Mapping[str, float]) -> float:
        """The value for ``values`` of the cells; ``ZeroDivisionError`` when a divisor is 0,
        :class:`NonFiniteError` when a part overflows."""
        return _number(self.tree, values)

    def value_in(self, values: Mapping[str, float]) -> float | None:
        """This cell's value in a mapping of cells (published ones, say): listed itself, else computed from the
        cells it reads; None when one is missing or a divisor is 0."""
        if self.text in values:
            return float(values[self.text])
        if not all(name in values for name in self.names):
            return None
        try:
            return self.evaluate(values)
        except (ZeroDivisionError, NonFiniteError):
            return None


@dataclass(frozen=True)
class Criterion:
    """A checked pass/fail rule; ``operands`` are the non-constant numeric sides of its comparisons."""

    text: str
    names: tuple[str, ...]
    operands: tuple[CellExpression, ...]
    tree: ast.expr

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The constant sides of its comparisons, in order: ``abs(df - dt) <= 0.05`` has (0.05,)."""
        sides = [side for node in ast.walk(self.tree) if isinstance(node, ast.Compare)
                 for side in (node.left, *node.comparators)]
        return tuple(_number(side, {}) for side in sides
                     if not any(isinstance(n, ast.Name) for n in ast.walk(side)))

    def evaluate(self, values: Mapping[str, float]) -> bool:
        """Pass or fail on one set of base-cell values."""
        return _boolean(self.tree, lambda node: _number(node, values))

    def evaluate_operands(self, operand_values: Mapping[str, float]) -> bool:
        """Pass or fail given a value per operand text (e.g. the mean over replicates of each operand)."""

        def lookup(node: ast.expr) -> float:
            text = ast.unparse(node)
            if text in operand_values:
                return float(operand_values[text])
            return _number(node, {})  # a constant side

        return _boolean(self.tree, lookup)


def parse_cell(text: object, *, field: str | None = None, names: Sequence[str] = BASE_CELLS) -> CellExpression:
    """Parse and check a cell expression; :class:`AuditSpecError` naming ``field`` when it is not allowed."""
    tree = _parse(text, field=field, what="cell")
    checker = _Checker(text=str(text), field=field, names=names, what="cell")
    checker.number(tree)
    if not checker.used:
        raise _fail(f"cell {text!r} uses no cell name; a cell must depend on {', '.join(names)}", field)
    return CellExpression(text=ast.unparse(tree), names=tuple(checker.used), tree=tree)


def parse_criterion(text: object, *, field: str | None = None, names: Sequence[str] = BASE_CELLS) -> Criterion:
    """Parse and check a criterion; :class:`AuditSpecError` naming ``field`` when it is not allowed."""
    tree = _parse(text, field=field, what="criterion")
    checker = _Checker(text=str(text), field=field, names=names, what="criterion")
    checker.boolean(tree)
    if not checker.used:
        raise _fail(f"criterion {text!r} uses no cell name, so it cannot depend on the checkpoint", field)
    operands: list[CellExpression] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                sub = _Checker(text=str(text), field=field, names=names, what="criterion")
                sub.number(side)
                if sub.used and ast.unparse(side) not in {o.text for o in operands}:
                    operands.append(CellExpression(text=ast.unparse(side), names=tuple(sub.used), tree=side))
                elif not sub.used:
                    try:
                        _number(side, {})
                    except (ZeroDivisionError, NonFiniteError) as exc:
                        raise _fail(f"criterion {elide(text)!r} compares with {ast.unparse(side)!r}, which is not a "
                                    f"finite number ({exc}); write the threshold as a number", field) from exc
    return Criterion(text=ast.unparse(tree), names=tuple(checker.used), operands=tuple(operands), tree=tree)


def canonical_text(text: Any) -> str:
    """The canonical text of a cell expression (for matching published cells to computed ones)."""
    return parse_cell(text).text
