"""The inside of the house, counted (issue 54's done-when): forwarding public methods per class
and our classes in each operator's MRO.

    python scripts/house_metrics.py [ROOT]      # ROOT: a checkout (default: this one)

A *forward* is a public method or property of a class of ``airflow_trident`` whose body (its
docstring aside) is one statement that calls or reads an attribute of an attribute of
``self`` (``return self.part.method(...)``, ``self.part.method(...)``, ``return self.ctx.x``)
passing on its own parameters unchanged. The MRO count is, for each operator and sensor class
a DAG uses, the classes of ``airflow_trident`` in its MRO other than itself.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

OPERATORS = (
    "airflow_trident.sensors.ready:BatchReadySensor",
    "airflow_trident.sensors.begin:BeginWhenReadySensor",
    "airflow_trident.operators.batch:BeginBatchOperator",
    "airflow_trident.operators.batch:CommitBatchOperator",
    "airflow_trident.operators.batch:BatchSuccessOperator",
    "airflow_trident.operators.connect:ConnectProcessBatchOperator",
    "airflow_trident.operators.process:ProcessBatchOperator",
    "airflow_trident.operators.express:ExpressBatchOperator",
)


def _is_forward(fn: ast.FunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1:
        return False
    stmt = body[0]
    value = stmt.value if isinstance(stmt, ast.Return | ast.Expr) else None
    if value is None:
        return False
    params = {a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs}
    target = value.func if isinstance(value, ast.Call) else value
    # self.<part>.<name> (or deeper): an attribute of an attribute of self
    depth, node = 0, target
    while isinstance(node, ast.Attribute):
        depth, node = depth + 1, node.value
    if not (isinstance(node, ast.Name) and node.id == "self" and depth >= 2):
        return False
    if isinstance(value, ast.Call):
        passed = [a.id for a in value.args if isinstance(a, ast.Name)]
        passed += [k.value.id for k in value.keywords if isinstance(k.value, ast.Name)]
        if len(passed) != len(value.args) + len(value.keywords) or set(passed) != params:
            return False
    return True


def forwards(root: Path) -> list[tuple[int, str]]:
    """(forwarding public methods, ``path::Class``) of every class with at least one."""
    found = []
    for path in sorted((root / "airflow_trident").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            count = sum(
                1
                for fn in cls.body
                if isinstance(fn, ast.FunctionDef)
                and not fn.name.startswith("_")
                and not any(
                    isinstance(d, ast.Attribute) and d.attr == "setter" for d in fn.decorator_list
                )
                and _is_forward(fn)
            )
            if count:
                found.append((count, f"{path.relative_to(root)}::{cls.name}"))
    return sorted(found, reverse=True)


def ours_in_mro(root: Path) -> list[tuple[int, str, list[str]]]:
    """(our classes besides itself, operator, their names) for each operator class."""
    sys.path.insert(0, str(root))
    rows = []
    for ref in OPERATORS:
        module, _, name = ref.partition(":")
        cls = getattr(importlib.import_module(module), name)
        ours = [
            c.__qualname__ for c in cls.__mro__[1:] if c.__module__.startswith("airflow_trident")
        ]
        rows.append((len(ours), name, ours))
    return rows


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    rows = forwards(root)
    print(f"forwarding public methods per class (top 8 of {len(rows)} classes with any):")
    for count, where in rows[:8]:
        print(f"  {count:3d}  {where}")
    print(f"classes above 15: {sum(1 for c, _ in rows if c > 15)}")
    print("classes of ours in each operator's MRO besides itself:")
    for count, name, ours in ours_in_mro(root):
        print(f"  {count:3d}  {name}: {', '.join(ours) or '-'}")


if __name__ == "__main__":
    main()
