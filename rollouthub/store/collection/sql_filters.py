"""Compilation of ``FilterOptions`` to SQL ``WHERE`` clauses with bound parameters.

Every condition binds its operands as parameters named ``p0, p1, ...`` in a fixed traversal order, and records a
*shape* tag describing which SQL it produces. Two filters with the same shape compile to the same SQL text, so
the SQL backend compiles each shape once (:class:`Binder` in *dry* mode only collects values and shape) and reuses
the SQL string afterwards.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import sqlalchemy as sa

from .base import NormalizedFilter
from .sql_dialect import SqlDialect
from .sql_schema import TableSpec

__all__ = ["Binder", "bp", "compile_where", "FALSE", "TRUE"]


class _Const:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FALSE = _Const("FALSE")
TRUE = _Const("TRUE")
_DRY = _Const("DRY")


def bp(name: str, type_: Any = None) -> Any:
    """A bind parameter whose value is supplied at execution time."""
    return sa.bindparam(name, None, type_=type_, required=False)


class Binder:
    """Names parameters ``p0, p1, ...``, collects their values and the filter's shape; ``dialect`` builds the
    database-specific conditions."""

    def __init__(self, dialect: SqlDialect, dry: bool) -> None:
        self.dialect = dialect
        self.dry = dry
        self.values: Dict[str, Any] = {}
        self.shape: List[Any] = []
        self._n = 0

    def p(self, value: Any, type_: Any = None) -> Any:
        """Bind ``value``; returns the bind parameter (``None`` in dry mode)."""
        name = f"p{self._n}"
        self._n += 1
        self.values[name] = value
        return None if self.dry else bp(name, type_)


def _coerce(kind: str, value: Any) -> Optional[Any]:
    """Coerce ``value`` for a column of ``kind``; ``None`` when it can never compare equal."""
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "int":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return None
    if kind == "float":
        return float(value) if isinstance(value, (int, float)) else None
    return value


def _json_equals(b: Binder, col: Any, expected: Any) -> Any:
    param = b.dialect.json_param(b, expected)
    if b.dry:
        return _DRY
    return b.dialect.json_equals(col, param)


def _json_category(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "num"
    if isinstance(value, str):
        return "str"
    return "other"


def _json_contains(b: Binder, col: Any, expected: Any) -> Any:
    """Python ``expected in value`` for a JSON value: array element, object key, or substring of a JSON string."""
    category = _json_category(expected)
    b.shape.append(("cj", category))
    clause = b.dialect.json_contains(b, col, expected, category)
    return _DRY if clause is None else clause


def _condition(spec: TableSpec, field: str, op: str, expected: Any, b: Binder) -> Any:
    """One operator on one field: a clause (``_DRY`` in dry mode), ``TRUE``/``FALSE``, or ``None`` (ignored)."""
    if op not in ("exact", "within", "contains"):
        raise ValueError(f"Unsupported filter operator '{op}' for field '{field}'")
    if expected is None:
        return None
    col: Any = None if b.dry else spec.column(field)
    if field not in spec.kinds:  # a missing field reads as None
        result = FALSE
        if op == "within":
            try:
                result = TRUE if any(v is None for v in expected) else FALSE
            except TypeError:
                pass
        b.shape.append(("m", result.name))
        return result
    kind = spec.kinds[field]
    if op == "exact":
        if kind == "json":
            b.shape.append(("xj", field))
            return _json_equals(b, col, expected)
        value = _coerce(kind, expected)
        if value is None:
            b.shape.append(("xf",))
            return FALSE
        b.shape.append(("x", field))
        param = b.p(value)
        return _DRY if b.dry else col == param
    if op == "within":
        if isinstance(expected, str):
            b.shape.append(("ws", field, kind == "str"))
            if kind != "str":
                return FALSE
            param = b.p(expected)
            return _DRY if b.dry else sa.and_(col.is_not(None), b.dialect.text_contains(param, col))
        try:
            values = list(expected)
        except TypeError:
            b.shape.append(("wn",))
            return FALSE
        has_none = any(v is None for v in values)
        parts: List[Any] = []
        if kind == "json":
            present = [v for v in values if v is not None]
            b.shape.append(("wj", field, len(present), has_none))
            parts.extend(_json_equals(b, col, v) for v in present)
        else:
            coerced = [c for c in (_coerce(kind, v) for v in values if v is not None) if c is not None]
            b.shape.append(("wl", field, len(coerced), has_none))
            if coerced:
                params = [b.p(v) for v in coerced]
                parts.append(_DRY if b.dry else col.in_(params))
        if has_none:
            parts.append(_DRY if b.dry else col.is_(None))
        if not parts:
            return FALSE
        return _DRY if b.dry else sa.or_(*parts)
    # contains
    if kind == "str":
        ok = isinstance(expected, str)
        b.shape.append(("cs", field, ok))
        if not ok:
            return FALSE
        param = b.p(expected)
        return _DRY if b.dry else b.dialect.text_contains(col, param)
    if kind == "json":
        return _json_contains(b, col, expected)
    b.shape.append(("cf",))
    return FALSE


def compile_where(spec: TableSpec, nf: NormalizedFilter, b: Binder) -> Any:
    """The ``WHERE`` clause of a normalized filter: a clause, ``None`` (match all), ``FALSE`` (match nothing), or
    ``_DRY``-ish placeholders in dry mode. ``b.shape`` and ``b.values`` are filled either way."""

    def conditions(filters: Dict[str, Dict[str, Any]]) -> List[Any]:
        out = []
        for field_name, ops in filters.items():
            for op, expected in ops.items():
                cond = _condition(spec, field_name, op, expected, b)
                if cond is not None and cond is not TRUE:
                    out.append(cond)
        return out

    clauses = conditions(nf.must)
    b.shape.append("|")
    if nf.regular:
        pool = conditions(nf.regular)
        had_true = any(tag == ("m", "TRUE") for tag in b.shape[b.shape.index("|") + 1 :] if isinstance(tag, tuple))
        if nf.aggregate == "and":
            clauses.extend(pool)
        else:
            alive = [c for c in pool if c is not FALSE]
            if had_true:
                pass  # one condition is always true: the OR holds
            elif alive:
                clauses.append(_DRY if b.dry else (sa.or_(*alive) if len(alive) > 1 else alive[0]))
            else:
                clauses.append(FALSE)
    b.shape.append(nf.aggregate)
    if not clauses:
        return None
    if any(c is FALSE for c in clauses):
        return FALSE
    if b.dry:
        return _DRY
    return sa.and_(*clauses) if len(clauses) > 1 else clauses[0]
