"""Every Airflow connection the provider reads is read here: through Airflow's own API
(``BaseHook.get_connection``, any secrets backend), never by parsing ``AIRFLOW_CONN_*`` by
hand, and refused loudly, naming the connection id, when it is malformed.

Airflow itself is quiet about two kinds of malformed connection: an ``AIRFLOW_CONN_<ID>`` that
is not valid JSON is logged and reported as "isn't defined", and an extra that is not valid
JSON reads as ``{}`` (``Connection.extra_dejson``), which would turn a connection's TLS or SASL
settings off without a word. :func:`get_connection` and :func:`extra_of` raise
:class:`~airflow_trident.errors.ConfigurationError` instead; their messages name the
connection and where the text breaks, never its value (it may hold a password).

Examples
--------
>>> import os
>>> os.environ["AIRFLOW_CONN_READER_DOC"] = '{"conn_type": "iceberg", "host": '
>>> get_connection("reader_doc")
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: connection 'reader_doc': AIRFLOW_CONN_READER_DOC is set
but Airflow cannot read it: not valid JSON (Expecting value: line 1 column 34); hint: ...
>>> os.environ["AIRFLOW_CONN_READER_DOC"] = '{"conn_type": "iceberg", "extra": "[1, 2]"}'
>>> extra_of(get_connection("reader_doc"), "Iceberg catalog connection 'reader_doc'")
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: Iceberg catalog connection 'reader_doc': its extra is a
JSON array, not an object; hint: the extra is a JSON object of settings, e.g. {"key": "value"}
>>> del os.environ["AIRFLOW_CONN_READER_DOC"]
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_trident.errors import ConfigurationError

__all__ = ["extra_of", "get_connection"]

_EXTRA_HINT = 'hint: the extra is a JSON object of settings, e.g. {"key": "value"}'
_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}  # fmt: skip


def get_connection(conn_id: str) -> Any:
    """Airflow connection ``conn_id`` (``BaseHook.get_connection``).

    Raises
    ------
    ConfigurationError
        If Airflow does not find it because its ``AIRFLOW_CONN_<ID>`` variable is malformed
        (Airflow says only "isn't defined"); the message names the connection and what is
        wrong (a JSON error's position), never the value.
    AirflowNotFoundException
        If it is not defined, as Airflow raises it (callers add their hints).
    """
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        _refuse_malformed_variable(conn_id)
        raise


def _refuse_malformed_variable(conn_id: str) -> None:
    """Raise if ``AIRFLOW_CONN_<ID>`` is set but Airflow's own reader refuses it."""
    from airflow.sdk.definitions.connection import Connection

    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    value = os.environ.get(name)
    if value is None:
        return
    try:
        if value.lstrip().startswith("{"):
            Connection.from_json(value, conn_id=conn_id)
        else:
            Connection.from_uri(value, conn_id=conn_id)
    except json.JSONDecodeError as exc:
        reason = f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})"
    except Exception as exc:  # any refusal of Airflow's: its type only (its text may quote it)
        reason = f"{type(exc).__name__}"
    else:
        return  # Airflow can read it: not found for another reason (a team namespace, ...)
    msg = (
        f"connection {conn_id!r}: {name} is set but Airflow cannot read it: {reason}; hint: "
        f"give the connection as a JSON object, e.g. "
        f'\'{{"conn_type": "...", "host": "...", "extra": {{...}}}}\', or as a URI'
    )
    raise ConfigurationError(msg) from None


def extra_of(conn: Any, where: str) -> dict[str, Any]:
    """The extra of connection ``conn`` as a dict (``{}`` when it has none), its secrets
    masked in task logs as ``Connection.extra_dejson`` masks them.

    Parameters
    ----------
    where:
        How messages name the connection, e.g. ``"ZooKeeper connection 'zk'"``.

    Raises
    ------
    ConfigurationError
        If the extra is not valid JSON, or is JSON but not an object (where Airflow's
        ``extra_dejson`` logs an error and gives ``{}``, or gives the list).
    """
    text = conn.extra
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if isinstance(text, str):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = (
                f"{where}: its extra is not valid JSON ({exc.msg}: line {exc.lineno} column "
                f"{exc.colno}); {_EXTRA_HINT}"
            )
            raise ConfigurationError(msg) from None
    else:
        parsed = text
    if not isinstance(parsed, dict):
        kind = _JSON_TYPES.get(type(parsed), type(parsed).__name__)
        msg = f"{where}: its extra is a JSON {kind}, not an object; {_EXTRA_HINT}"
        raise ConfigurationError(msg)
    extra: dict[str, Any] = conn.extra_dejson  # masks the secrets in it, as Airflow does
    return extra
