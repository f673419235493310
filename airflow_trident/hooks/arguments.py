"""Checks of the arguments a DAG file gives :func:`~airflow_trident.dag.trident_dag` and
:func:`~airflow_trident.dag.trident_batch`, run when the DAG is built (parsed).

A mistyped argument (``max_active_batches="3"``, ``deferrable="yes"``, ``keep_txids=0``,
``spark_conf=[...]``) would otherwise reach Airflow or a task as it is: a string compared with an
int, any non-empty string meaning ``True``, metadata deleted as soon as it is written, a list
turned into ``--conf`` arguments. Each is a :class:`~airflow_trident.errors.ConfigurationError`
naming the argument, what arrived and what is expected, so ``airflow dags list-import-errors``
shows it.

Examples
--------
>>> check_dag_arguments({"max_active_batches": 3, "keep_txids": 16, "deferrable": None})
>>> check_dag_arguments({"deferrable": "yes"})
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: trident_dag: deferrable must be True, False or None ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_trident.errors import ConfigurationError

__all__ = ["check_dag_arguments"]

_POSITIVE_INTS = {
    "max_active_batches": "runs processing at once (Trident's max spout pending)",
    "keep_txids": "txids whose batch metadata ZooKeeper keeps; 0 would delete a batch's "
    "metadata as it is written",
}
_NON_NEGATIVE_INTS = {
    "spark_commit_min_rows": "staged rows from which commit_mode='auto' commits on Spark",
    "retries": "task retries",
}
_OPTIONAL_BOOLS = {
    "deferrable": "Airflow's [operators] default_deferrable",
    "ready_deferrable": "Airflow's [operators] default_deferrable",
}
_OPTIONAL_STRINGS = ("staging_root", "state_conn_id", "py_files", "group_id", "dag_id")
_STRINGS = ("spark_conn_id", "zookeeper_conn_id", "spark_connect_conn_id")


def check_dag_arguments(arguments: Mapping[str, Any], *, where: str = "trident_dag") -> None:
    """Refuse an argument of the wrong type or out of range (the names above; others pass).

    Raises
    ------
    ConfigurationError
        Naming the argument, the value and its type, and what is expected.
    """
    for name, value in arguments.items():
        if name in _POSITIVE_INTS or name in _NON_NEGATIVE_INTS:
            least = 1 if name in _POSITIVE_INTS else 0
            about = _POSITIVE_INTS.get(name) or _NON_NEGATIVE_INTS[name]
            if name == "retries" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                _refuse(where, name, value, f"an int >= {least} ({about})")
        elif name in _OPTIONAL_BOOLS:
            if value is not None and not isinstance(value, bool):
                _refuse(
                    where, name, value, f"True, False or None (None: {_OPTIONAL_BOOLS[name]})",
                    hint="a Python bool, not a string",
                )  # fmt: skip
        elif name == "spark_conf":
            _check_spark_conf(where, value)
        elif name in _OPTIONAL_STRINGS:
            if value is not None and not isinstance(value, str):
                _refuse(where, name, value, "a string or None")
        elif name in _STRINGS and (not isinstance(value, str) or not value):
            _refuse(where, name, value, "a non-empty string (an Airflow connection id)")


def _check_spark_conf(where: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        _refuse(
            where, "spark_conf", value, "a dict of Spark properties or None",
            hint='spark_conf={"spark.executor.memory": "2g"}',
        )  # fmt: skip
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            _refuse(where, "spark_conf", value, "a dict whose keys are Spark property names")
        if not isinstance(item, str | int | float | bool):
            msg = (
                f"{where}: spark_conf[{key!r}] must be a string, number or bool, got {item!r} "
                f"({type(item).__name__}); hint: Spark properties are single values"
            )
            raise ConfigurationError(msg)


def _refuse(where: str, name: str, value: Any, expected: str, *, hint: str | None = None) -> None:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    plain = expected.split(" (")[0]
    msg = (
        f"{where}: {name} must be {expected}, got {shown} ({type(value).__name__}); "
        f"hint: {hint or f'pass {name} as {plain}'}"
    )
    raise ConfigurationError(msg)
