"""Iceberg tables on Spark's own Iceberg connector: read back with Spark SQL, and appended by
Spark's Iceberg writer (``commit_mode="spark"``) with the txid recorded as the Python writer
records it.

The connector is Iceberg's Spark runtime (``iceberg-spark-runtime-4.1_2.13``, docs/jvm.md); a
session runs it when ``spark.sql.extensions`` names :data:`ICEBERG_EXTENSION`.

**The catalog.** A sink's catalog (:meth:`~airflow_trident.state.iceberg.IcebergStateFactory.\
catalog_properties`: pyiceberg properties) becomes a Spark catalog of the same name
(:func:`spark_catalog_conf`): a SQL catalog on SQLite or PostgreSQL is Iceberg's
``JdbcCatalog`` over the same database (pyiceberg's ``SqlCatalog`` and Iceberg's ``JdbcCatalog``
share its tables, schema version ``V0``), a REST catalog stays one. :func:`use_catalog` sets it
on a running session (a secret goes into the session's configuration, never onto a command
line; Spark's UI redacts keys naming a password, token or secret).

**The commit.** Each commit partition's staged rows are appended by Spark's writer in one Iceberg
commit, fenced like the Python writer's (:mod:`airflow_trident.state.iceberg`):

1. the table's properties are checked as the Python writer checks them (a partition that holds
   the txid writes nothing);
2. Spark's writer appends the rows as a *staged* snapshot (Iceberg's write-audit-publish:
   ``spark.wap.id`` set for that write alone, the table's ``write.wap.enabled``), its summary
   carrying ``trident.app-id``, ``trident.txid`` and ``trident.partition``; ``main`` does not
   move;
3. one pyiceberg commit makes that snapshot ``main``'s and sets the txid properties
   (``trident.txid.<app_id>.p<i>of<n>`` and ``trident.txid.<app_id>``), on condition that
   ``main`` is still the snapshot the staged one was made on: another writer's commit in
   between (another topology, a zombie attempt of this one) refuses it, and the partition
   starts again from step 1, as the Python writer does after a lost race.

So data, summary and properties reach ``main`` at once, and either writer's retry recognises
the other's commit. A crash between steps 2 and 3 leaves only a staged snapshot that nothing
references (it goes with the table's next snapshot expiry); the retry stages the rows again.

States that qualify (the factory's ``spark_append``): appends (no ``merge_keys``) without
``evolve_schema``; the rest, and every session without the extension, are applied by the Spark
tasks of :class:`~airflow_trident.runtime.spark.commit.SparkBatchApplier` with the Python writer.
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_trident.errors import ConfigurationError, StateError
from airflow_trident.graph import PersistNode
from airflow_trident.runtime.spark.lakehouse import SparkWriter, staged_partitions, table_format
from airflow_trident.state.binding import StateBinding
from airflow_trident.state.compat import no_rebase_transaction
from airflow_trident.state.iceberg import (
    RETRIES,
    IcebergState,
    IcebergStateFactory,
    backoff_s,
)
from airflow_trident.state.iceberg_catalog import redacted

__all__ = [
    "ICEBERG",
    "ICEBERG_EXTENSION",
    "commit_with_spark_iceberg",
    "spark_catalog_conf",
    "spark_writes_iceberg",
    "table_identifier",
    "use_catalog",
]

log = logging.getLogger(__name__)

ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
_JDBC_CATALOG = "org.apache.iceberg.jdbc.JdbcCatalog"
_WAP_PROPERTY = "write.wap.enabled"
_WAP_ID = "spark.wap.id"
_STAGE_PREFIX = "trident-stage-"
"""The ``wap.id`` of Spark's staged appends (step 2): the partition's property key and a uuid."""


def spark_writes_iceberg(spark: Any) -> bool:
    """Whether ``spark`` runs Iceberg's Spark connector (its session extension is configured)."""
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:  # a session that cannot say: the Python writer, as before
        return False
    return ICEBERG_EXTENSION in [e.strip() for e in extensions.split(",")]


def spark_catalog_conf(name: str, properties: Mapping[str, str]) -> dict[str, str] | None:
    """The Spark settings (``spark.sql.catalog.<name>.*``) opening the pyiceberg catalog
    ``name`` with ``properties`` in Spark; ``None`` for a catalog Spark's connector cannot open
    from them (a SQL catalog on a database other than SQLite or PostgreSQL).

    >>> conf = spark_catalog_conf("trident", {"type": "sql", "uri": "sqlite:////data/c.db",
    ...                                       "warehouse": "file:///data/wh"})
    >>> conf["spark.sql.catalog.trident.uri"], conf["spark.sql.catalog.trident.warehouse"]
    ('jdbc:sqlite:/data/c.db', 'file:///data/wh')
    >>> pg = spark_catalog_conf("c", {"type": "sql", "uri":
    ...     "postgresql+psycopg://u:p%40ss@db:5432/cat?sslmode=require"})
    >>> pg["spark.sql.catalog.c.uri"], pg["spark.sql.catalog.c.jdbc.password"]
    ('jdbc:postgresql://db:5432/cat?sslmode=require', 'p@ss')
    >>> spark_catalog_conf("r", {"type": "rest", "uri": "https://cat:8181/api", "token": "t"})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'spark.sql.catalog.r': 'org.apache.iceberg.spark.SparkCatalog',
     'spark.sql.catalog.r.cache-enabled': 'false', 'spark.sql.catalog.r.type': 'rest',
     'spark.sql.catalog.r.uri': 'https://cat:8181/api', 'spark.sql.catalog.r.token': 't'}
    >>> spark_catalog_conf("m", {"type": "sql", "uri": "mysql+pymysql://db/cat"}) is None
    True
    """
    prefix = f"spark.sql.catalog.{name}"
    props = dict(properties)
    kind = props.pop("type", "rest")
    # no cached tables: another writer's commits (pyiceberg's) are seen at once
    conf = {prefix: _SPARK_CATALOG, f"{prefix}.cache-enabled": "false"}
    if kind == "sql":
        jdbc = _jdbc(props.pop("uri", ""))
        if jdbc is None:
            return None
        url, user, password = jdbc
        conf[f"{prefix}.catalog-impl"] = _JDBC_CATALOG
        conf[f"{prefix}.uri"] = url
        # pyiceberg's SqlCatalog tables are JdbcCatalog's schema V0 (no view column)
        conf[f"{prefix}.jdbc.schema-version"] = "V0"
        if user is not None:
            conf[f"{prefix}.jdbc.user"] = user
        if password is not None:
            conf[f"{prefix}.jdbc.password"] = password
        props.pop("echo", None)
        props.pop("pool_pre_ping", None)
        props.pop("init_catalog_tables", None)
    elif kind == "rest":
        conf[f"{prefix}.type"] = "rest"
    else:
        conf[f"{prefix}.type"] = kind
    for key, value in props.items():  # warehouse, token, s3.*: the same names in Java
        conf[f"{prefix}.{key}"] = str(value)
    return conf


def _jdbc(uri: str) -> tuple[str, str | None, str | None] | None:
    """The JDBC URL, user and password of a SQLAlchemy URL (SQLite or PostgreSQL)."""
    if uri.startswith("sqlite:///") and ":memory:" not in uri:
        return f"jdbc:sqlite:{uri[len('sqlite:///') :].split('?')[0]}", None, None
    parts = urlsplit(uri)
    if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
        return None
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    query = f"?{parts.query}" if parts.query else ""
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return f"jdbc:postgresql://{host}{port}{parts.path}{query}", user, password


def table_identifier(catalog: str, table: str) -> str:
    """The Spark identifier of ``table`` (``namespace.name``) in ``catalog``, each part quoted.

    >>> table_identifier("trident", "db.events")
    '`trident`.`db`.`events`'
    """
    parts = [catalog, *table.split(".")]
    return ".".join(f"`{p.replace('`', '``')}`" for p in parts)


def use_catalog(spark: Any, factory: IcebergStateFactory) -> str:
    """Open ``factory``'s catalog in ``spark`` (a session with Iceberg's connector) and return
    the Spark identifier of its table, e.g. ``spark.table(use_catalog(spark, factory))``.

    Raises
    ------
    ConfigurationError
        If Spark cannot open the catalog, or the session has another catalog of that name.
    """
    name, props = factory.catalog_properties()
    conf = spark_catalog_conf(name, props)
    if conf is None:
        msg = (
            f"iceberg table {factory.table!r}: Spark's Iceberg connector cannot open the "
            f"catalog {redacted(props)}; hint: a SQL catalog on SQLite or PostgreSQL, or a "
            f"REST catalog"
        )
        raise ConfigurationError(msg)
    key = f"spark.sql.catalog.{name}.uri"
    have = spark.conf.get(key, None)
    if have is not None and have != conf.get(key):
        msg = (
            f"iceberg table {factory.table!r}: this Spark session already has a catalog named "
            f"{name!r} on another database; hint: give each catalog its own 'catalog_name'"
        )
        raise ConfigurationError(msg)
    if have is None:
        for setting, value in conf.items():
            spark.conf.set(setting, value)
    return table_identifier(name, factory.table)


def _iceberg_on_spark(node: PersistNode, entry: Mapping[str, Any]) -> bool:
    """Deprecated as ``iceberg_on_spark``: :func:`~.lakehouse.table_format` is ``"iceberg"``."""
    return table_format(node, entry) == "iceberg"


def __getattr__(name: str) -> Any:
    if name != "iceberg_on_spark":
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    warnings.warn(
        f"{__name__}.iceberg_on_spark is deprecated: the state factory says which Spark writer "
        f"appends its rows (airflow_trident.state.base.AppendsOnSpark.spark_append)",
        DeprecationWarning,
        stacklevel=2,
    )
    return _iceberg_on_spark


def commit_with_spark_iceberg(
    spark: Any, node: PersistNode, entry: Mapping[str, Any], txid: int, states: StateBinding
) -> int:
    """Append every commit partition of staged state ``entry`` that the table does not hold
    yet, each in one Iceberg commit by Spark's writer; return how many were written."""
    written = 0
    for state, rows in staged_partitions(spark, node, entry, states):  # the factory's: Iceberg's
        if rows is None:  # no rows: nothing to record (as the Python writer)
            continue
        written += _append(spark, state, rows(), txid)
    return written


ICEBERG = SparkWriter("Iceberg", spark_writes_iceberg, commit_with_spark_iceberg)
"""Spark's Iceberg writer (see the module docs)."""


def _append(spark: Any, state: IcebergState, frame: Any, txid: int) -> int:
    from pyiceberg.exceptions import CommitFailedException

    factory = state.factory
    ident = use_catalog(spark, factory)
    frame = _with_txid(frame, factory.txid_column, txid)
    batch = _arrow_schema(frame)
    for attempt in range(RETRIES):
        table = factory.load_table()
        if table is not None and state.holds_in(table, txid):
            return 0
        if table is None:
            table = factory.create_table(state.plan_write(batch, None, txid).target or batch)
        plan = state.plan_write(batch, table.schema().as_arrow(), txid)  # its errors
        try:
            _enable_staging(table)
        except CommitFailedException:  # another writer's commit: look again
            continue
        base = table.current_snapshot()
        base_id = None if base is None else base.snapshot_id
        staged = _staged_append(spark, frame, ident, plan.untyped, state, txid)
        try:
            _publish(factory, state, staged, base_id, txid)
        except CommitFailedException as exc:  # main moved: look again, as the Python writer
            wait = backoff_s(attempt)
            log.info(
                "iceberg table %s: txid %d partition %d: main moved during Spark's append (%s); "
                "retrying in %.2f s", factory.table, txid, state.index, exc, wait,
            )  # fmt: skip
            time.sleep(wait)
            continue
        log.info(
            "iceberg table %s: txid %d partition %d/%d appended by Spark's Iceberg writer "
            "(snapshot %d)", factory.table, txid, state.index, state.count, staged,
        )  # fmt: skip
        return 1
    raise state.lost_races(txid)


def _enable_staging(table: Any) -> None:
    """Let Spark's writer stage snapshots in ``table`` (``write.wap.enabled``; a writer that
    sets no ``spark.wap.id`` still commits to ``main`` as before)."""
    if table.properties.get(_WAP_PROPERTY) != "true":
        table.transaction().set_properties({_WAP_PROPERTY: "true"}).commit_transaction()


def _staged_append(
    spark: Any, frame: Any, ident: str, untyped: tuple[str, ...], state: IcebergState, txid: int
) -> int:
    """Append ``frame`` as a staged snapshot of ``ident`` (not on ``main``) in the table's
    columns and types (those ``schema_evolution`` validated, widened where narrower; nulls for
    the others), and return the snapshot's id.

    Spark stages only if *its* copy of the table says ``write.wap.enabled`` (else it commits to
    ``main``), so the table is refreshed first and the property checked as Spark sees it."""
    from pyspark.sql import functions as F

    spark.sql(f"REFRESH TABLE {ident}")
    seen = spark.sql(f"SHOW TBLPROPERTIES {ident} ('{_WAP_PROPERTY}')").collect()
    if not seen or str(seen[0][1]).lower() != "true":
        msg = (
            f"iceberg table {state.factory.table!r}: Spark does not see {_WAP_PROPERTY}=true; "
            f"nothing was written"
        )
        raise StateError(msg)
    target = spark.table(ident).schema
    have = set(frame.columns) - set(untyped)
    columns = [
        (F.col(f"`{f.name}`") if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in target.fields
    ]
    wap_id = f"{_STAGE_PREFIX}{state.partition_key}-{uuid.uuid4().hex}"
    before = spark.conf.get(_WAP_ID, None)
    spark.conf.set(_WAP_ID, wap_id)
    try:
        (
            frame.select(*columns)
            .writeTo(ident)
            .option("snapshot-property.trident.app-id", state.factory.app_id)
            .option("snapshot-property.trident.txid", str(txid))
            .option("snapshot-property.trident.partition", f"{state.index}/{state.count}")
            .append()
        )
    finally:  # the session's own setting back: its later writes are the user's
        if before is None:
            spark.conf.unset(_WAP_ID)
        else:
            spark.conf.set(_WAP_ID, before)
    table = state.factory.load_table()
    found = [s.snapshot_id for s in table.snapshots() if s.summary.get("wap.id") == wap_id]
    if len(found) != 1:
        msg = f"iceberg table {state.factory.table!r}: Spark staged {len(found)} snapshots"
        raise StateError(msg)
    return int(found[0])


def _with_txid(frame: Any, column: str | None, txid: int) -> Any:
    from pyspark.sql import functions as F

    if column is None:
        return frame
    return frame.drop(column).withColumn(column, F.lit(txid).cast("long"))


def _arrow_schema(frame: Any) -> Any:
    """The staged rows' Arrow schema, as the Python writer sees them (Parquet's types)."""
    import pyarrow as pa

    from airflow_trident.runtime.spark.arrow_types import arrow_type

    return pa.schema([pa.field(f.name, arrow_type(f.dataType, "UTC")) for f in frame.schema])


def _publish(
    factory: IcebergStateFactory, state: IcebergState, staged: int, base: int | None, txid: int
) -> None:
    """Make the staged snapshot ``main``'s, with the txid properties, if ``main`` is still at
    ``base`` (else ``CommitFailedException``): one pyiceberg commit."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
    from pyiceberg.table.update import (
        AssertRefSnapshotId,
        SetPropertiesUpdate,
        SetSnapshotRefUpdate,
    )

    table = factory.load_table()
    snapshot = table.snapshot_by_id(staged)
    if snapshot is None or snapshot.parent_snapshot_id != base:
        # another writer committed to main between our look and Spark's append
        msg = f"the staged snapshot {staged} is not one append on main's snapshot {base}"
        raise CommitFailedException(msg)
    properties = {state.partition_key: str(txid), state.app_key: f"{txid}/{state.count}"}
    tx = no_rebase_transaction(table)
    tx._apply(
        (
            SetSnapshotRefUpdate.model_validate(
                {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": staged}
            ),
            SetPropertiesUpdate(updates=properties),
        ),
        (AssertRefSnapshotId.model_validate({"ref": MAIN_BRANCH, "snapshot-id": base}),),
    )
    tx.commit_transaction()
