"""Where SQL lives in the SQL backend: every statement that differs between databases has a name in the dialect
layer (``sql_dialect*.py``), and only the dialect layer and the unit of work choose by database.

* The fast path's write statement is built by named functions of ``sql_dialect_postgres.py``: ``sql_batch.py`` holds
  no SQL text outside its docstrings and comments.
* The primitives never test which database they run on (``dialect.embedded``): the unit of work picks the driver API
  of their bulk writes (``Unit.insert_all_or_none``, ``Unit.enqueue``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, List

import rollouthub.store.collection as collection

COLLECTION_DIR = Path(collection.__file__).parent
SQL_TEXT = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|WITH)\b|unnest|::")


def _docstrings(tree: ast.AST) -> Iterator[ast.AST]:
    """The docstring nodes of the module, its classes and functions, and attribute docstrings (a string statement)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.value


def _string_constants(path: Path) -> List[str]:
    """The string constants of a module that are not docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text())
    skipped = {id(node) for node in _docstrings(tree)}
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    ]


def test_the_write_batch_holds_no_sql_text() -> None:
    found = [text for text in _string_constants(COLLECTION_DIR / "sql_batch.py") if SQL_TEXT.search(text)]
    assert found == []


def test_only_the_dialect_layer_and_the_unit_test_the_database() -> None:
    allowed = {"sql_dialect.py", "sql_dialect_sqlite.py", "sql_dialect_postgres.py", "sql_engine.py"}
    offenders = []
    for path in sorted(COLLECTION_DIR.glob("*.py")):
        if path.name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "embedded":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
