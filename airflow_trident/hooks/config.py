"""The provider's ``[trident]`` configuration section, read when a task runs (never when a DAG
file is parsed), with the ``TRIDENT_*`` environment variables as documented fallbacks.

Options (declared with types and defaults in ``get_provider_info()["config"]``, so
``airflow config list`` shows them; each can be set as ``AIRFLOW__TRIDENT__<OPTION>``):

``staging_root``
    Where processed batches are staged: a directory (or ``s3://``... URL) that every Airflow
    worker *and* the Spark driver and executors read and write. Fallback: ``TRIDENT_STAGING_ROOT``.
``state_conn_id``
    The state database's Airflow connection for DAGs that give no ``state_conn_id``. Fallback:
    ``TRIDENT_STATE_URL`` (a SQLAlchemy URL).
``home``
    The single-machine default's directory (staging in ``<home>/staging``, SQLite state in
    ``<home>/state.db``). Fallback: ``TRIDENT_HOME``, else ``~/.airflow_trident``.
``embedded``
    When a task may use the single-machine default, i.e. when neither a staging root nor a state
    database is configured: ``auto`` (default) only when every task runs on this machine
    (``[core] executor`` is ``LocalExecutor``, as with ``airflow standalone`` or ``dags test``),
    ``true`` always, ``false`` never. Otherwise the task fails with a
    :class:`~airflow_trident.errors.ConfigurationError` naming the option to set: a Celery or
    Kubernetes worker would otherwise stage into, or count into, a file only it can see.
``connect_session_reuse``
    Whether the Spark Connect tasks of a topology attach to one server-side session that
    outlives them (``true``, default: its Python workers stay warm between batches; see
    :func:`~airflow_trident.runtime.spark.session.remote_session`) or each open and release a
    session of their own (``false``).
``spark_read_here_bytes``
    A batch whose source files hold at most this many bytes (default 1048576, 1 MiB) is read
    by the process step's Spark driver (a Connect task: the task itself) with the spout's own
    reader and handed to Spark as one table; larger batches are read by Spark's tasks in
    parallel. ``0``: always by Spark's tasks. See
    :mod:`~airflow_trident.runtime.spark.driver_read`.
``spark_read_here_records``
    Likewise for sources whose ranges know their records, not their bytes (Kafka offset
    ranges: ``next - first`` each): a batch of at most this many offsets (default 50000) is
    read by the driver with the spout's own consumer. ``0``: always by Spark's tasks.
``spark_jars``
    Jars every ``spark-submit`` of a batch (process step, Spark commit) adds to
    ``spark.jars`` after the DAG's own ``spark_conf["spark.jars"]``: comma-separated paths or
    URLs (Spark's Kafka connector, a JDBC driver...). See :func:`spark_jars`; docs/jvm.md.
``inline``
    Whether the Spark runtime may run a per-tuple ``Function``'s ``execute`` or a ``Filter``'s
    ``is_keep`` of the simple form as one comprehension over a batch's columns (``true``,
    default) or calls each once per tuple (``false``); a topology turns it off for itself with
    ``TridentTopology(..., inline=False)``. Values, order and errors are the same either way
    (docs/api.md).

Examples
--------
>>> import os
>>> os.environ["AIRFLOW__TRIDENT__STAGING_ROOT"] = "/mnt/shared/trident"
>>> staging_root(None)
'/mnt/shared/trident'
>>> staging_root("/given/by/the/dag")
'/given/by/the/dag'
>>> del os.environ["AIRFLOW__TRIDENT__STAGING_ROOT"]
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_trident.errors import ConfigurationError

__all__ = [
    "SECTION",
    "connect_session_reuse",
    "embedded_allowed",
    "embedded_state_url",
    "inline_user_code",
    "setting",
    "spark_jars",
    "spark_read_here_bytes",
    "spark_read_here_records",
    "staging_root",
    "state_conn_id",
]

SECTION = "trident"
_ENV = {
    "staging_root": "TRIDENT_STAGING_ROOT",
    "state_url": "TRIDENT_STATE_URL",
    "home": "TRIDENT_HOME",
}
_SINGLE_MACHINE_EXECUTORS = {"LocalExecutor", "SequentialExecutor", "DebugExecutor"}


def setting(option: str) -> str | None:
    """``[trident] option`` (``AIRFLOW__TRIDENT__OPTION``, ``airflow.cfg``), else its
    ``TRIDENT_*`` environment fallback; ``None`` when neither is set or both are empty."""
    from airflow.configuration import conf

    value = conf.get(SECTION, option, fallback=None)
    if value:
        return str(value)
    env = _ENV.get(option)
    return os.environ.get(env) or None if env else None


def home() -> Path:
    """``[trident] home``, else ``TRIDENT_HOME``, else ``~/.airflow_trident``."""
    return Path(setting("home") or Path.home() / ".airflow_trident")


def executors() -> list[str]:
    """The class names of ``[core] executor`` (a comma-separated list in Airflow 3)."""
    from airflow.configuration import conf

    given = conf.get("core", "executor", fallback="") or "LocalExecutor"
    names = [part.split(":")[-1].strip() for part in given.split(",") if part.strip()]
    return [name.rsplit(".", 1)[-1] for name in names]


def embedded_allowed() -> bool:
    """Whether a task may use the single-machine default (see ``embedded`` above).

    Raises
    ------
    ConfigurationError
        If ``[trident] embedded`` is not ``auto``, ``true`` or ``false``.
    """
    mode = (setting("embedded") or "auto").strip().lower()
    if mode in ("true", "1", "yes"):
        return True
    if mode in ("false", "0", "no"):
        return False
    if mode != "auto":
        msg = f"[{SECTION}] embedded is {mode!r}; hint: use auto, true or false"
        raise ConfigurationError(msg)
    return set(executors()) <= _SINGLE_MACHINE_EXECUTORS


def _flag(name: str, *, default: bool) -> bool:
    """``[trident] <name>`` as a boolean (true/1/yes, false/0/no), ``default`` when unset."""
    value = (setting(name) or str(default)).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    msg = f"[{SECTION}] {name} is {value!r}; hint: use true or false"
    raise ConfigurationError(msg)


def connect_session_reuse() -> bool:
    """``[trident] connect_session_reuse`` (default ``true``).

    Raises
    ------
    ConfigurationError
        If it is not ``true`` or ``false``.
    """
    return _flag("connect_session_reuse", default=True)


def inline_user_code() -> bool:
    """``[trident] inline`` (default ``true``).

    >>> import os
    >>> os.environ["AIRFLOW__TRIDENT__INLINE"] = "false"
    >>> inline_user_code()
    False
    >>> del os.environ["AIRFLOW__TRIDENT__INLINE"]

    Raises
    ------
    ConfigurationError
        If it is not ``true`` or ``false``.
    """
    return _flag("inline", default=True)


def spark_read_here_bytes() -> int:
    """``[trident] spark_read_here_bytes`` (default 1048576).

    >>> import os
    >>> os.environ["AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES"] = "0"
    >>> spark_read_here_bytes()
    0
    >>> del os.environ["AIRFLOW__TRIDENT__SPARK_READ_HERE_BYTES"]

    Raises
    ------
    ConfigurationError
        If it is not a whole number of bytes, 0 or more.
    """
    return _count("spark_read_here_bytes", 1 << 20, "bytes")


def spark_read_here_records() -> int:
    """``[trident] spark_read_here_records`` (default 50000).

    >>> import os
    >>> spark_read_here_records()
    50000
    >>> os.environ["AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS"] = "many"
    >>> try:
    ...     spark_read_here_records()
    ... except ConfigurationError as exc:
    ...     print(exc)
    [trident] spark_read_here_records is 'many'; hint: a number of records, 0 or more
    >>> del os.environ["AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS"]

    Raises
    ------
    ConfigurationError
        If it is not a whole number of records, 0 or more.
    """
    return _count("spark_read_here_records", 50_000, "records")


def _count(option: str, default: int, unit: str) -> int:
    """A whole-number option, 0 or more."""
    value = (setting(option) or str(default)).strip()
    if value.isdigit():
        return int(value)
    msg = f"[{SECTION}] {option} is {value!r}; hint: a number of {unit}, 0 or more"
    raise ConfigurationError(msg)


def spark_jars() -> list[str]:
    """``[trident] spark_jars`` as a list: comma-separated, blanks dropped (default: none).

    >>> import os
    >>> os.environ["AIRFLOW__TRIDENT__SPARK_JARS"] = "/j/a.jar, /j/b.jar,"
    >>> spark_jars()
    ['/j/a.jar', '/j/b.jar']
    >>> del os.environ["AIRFLOW__TRIDENT__SPARK_JARS"]
    >>> spark_jars()
    []
    """
    return [part.strip() for part in (setting("spark_jars") or "").split(",") if part.strip()]


def _refuse(what: str, option: str, env: str) -> ConfigurationError:
    running = ", ".join(executors())
    msg = (
        f"no {what} is configured and this deployment runs tasks with {running}, whose workers "
        f"would each use a file of their own machine; hint: set [{SECTION}] {option} "
        f"(AIRFLOW__{SECTION.upper()}__{option.upper()}, or {env}), or [{SECTION}] "
        f"embedded = true when every task and Spark run on this machine"
    )
    return ConfigurationError(msg)


def staging_root(given: str | None) -> str:
    """The staging root of a task: the DAG's ``staging_root``, else ``[trident] staging_root``,
    else ``TRIDENT_STAGING_ROOT``, else ``<home>/staging`` when :func:`embedded_allowed`.

    Raises
    ------
    ConfigurationError
        If none is configured and the single-machine default is not allowed.
    """
    if given:
        return given
    configured = setting("staging_root")
    if configured:
        return configured
    if not embedded_allowed():
        raise _refuse("staging root", "staging_root", _ENV["staging_root"])
    return str(home() / "staging")


def state_conn_id(given: str | None) -> str | None:
    """The state connection of a task: the DAG's, else ``[trident] state_conn_id``."""
    return given or setting("state_conn_id")


def embedded_state_url() -> str | None:
    """The state URL when a task names no state connection: ``TRIDENT_STATE_URL``, else the
    single-machine default's SQLite file ``<home>/state.db`` when :func:`embedded_allowed`.

    Raises
    ------
    ConfigurationError
        If neither is configured and the single-machine default is not allowed.
    """
    url = os.environ.get(_ENV["state_url"])  # no config option: a URL may hold a password
    if url:
        return url
    if not embedded_allowed():
        raise _refuse("state database", "state_conn_id", _ENV["state_url"])
    directory = home()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'state.db'}"
