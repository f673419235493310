"""A database table as a partitioned transactional source: incremental by a monotonically
increasing column, one high-water mark per partition.

:class:`DatabaseTableSpout` reads a PostgreSQL or SQLite table (any SQLAlchemy URL) in batches.
The table is split into partitions — ``partitions=4`` with ``partition_column="user_id"`` gives
``p0..p3`` by ``user_id % 4``; a mapping gives named SQL predicates — and each partition keeps
its own high-water mark of ``order_column`` (an id or a sequence). The first emit of a txid fixes,
per partition, the range ``(low, high]`` of ``order_column`` it reads (at most
``max_rows_per_batch`` rows, plus any rows tied with the last one) and its row count; that
metadata is stored with the batch and every replay reads exactly that range again, so a
transactional state can skip a replayed txid. ``low`` is the previous txid's ``high``.

A batch's range is a :class:`~airflow_trident.spout.ranges.SourceRange` (Spark-native emit):
in-process (tests, DRPC, rebuild, the local runtime) it is read through SQLAlchemy; on Spark a
PostgreSQL range is read by the executors in parallel through JDBC (:meth:`TableRange.read_spec`:
Debian's ``libpostgresql-jdbc-java``, ``/usr/share/java/postgresql.jar``), split into
``spark_partitions`` Spark partitions of ``order_column``. SQLite ranges are read on the driver.

The column must only grow: a row committed later with a value at or below a partition's
high-water mark is never read (use an id assigned at commit, or read with a lag). A replay
whose range no longer holds the rows counted at first emit (rows deleted or inserted below the
mark) fails with :class:`~airflow_trident.errors.SpoutEmitError` naming the range.

Examples
--------
>>> import sqlalchemy as sa, tempfile
>>> from airflow_trident.spout.base import ListCollector
>>> url = f"sqlite:///{tempfile.mkdtemp()}/source.db"
>>> with sa.create_engine(url).begin() as conn:
...     _ = conn.execute(sa.text("CREATE TABLE events (id INTEGER PRIMARY KEY, word TEXT)"))
...     _ = conn.execute(sa.text("INSERT INTO events (word) VALUES ('a'), ('b'), ('c')"))
>>> spout = DatabaseTableSpout(url, "events", ["id", "word"], max_rows_per_batch=2)
>>> emitter = spout.get_partitioned_emitter()
>>> collector = ListCollector()
>>> meta = emitter.emit_partition_batch_new(None, collector, "all", None)
>>> meta, collector.tuples
({'low': None, 'high': 2, 'count': 2}, [(1, 'a'), (2, 'b')])
>>> collector = ListCollector()
>>> emitter.emit_partition_batch_new(None, collector, "all", meta), collector.tuples
({'low': 2, 'high': 3, 'count': 1}, [(3, 'c')])
>>> emitter.emit_partition_batch_new(None, ListCollector(), "all", {"low": 2, "high": 3}) is None
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from airflow_trident.connections import database_url, declare
from airflow_trident.errors import ConfigurationError, SpoutEmitError
from airflow_trident.names import validate_name
from airflow_trident.spout.base import Collector
from airflow_trident.spout.ranges import ReadSpec, emit_range
from airflow_trident.state.base import StateType

__all__ = ["DatabaseTableSpout", "TableRange", "jdbc_url"]

JDBC_JAR = "/usr/share/java/postgresql.jar"
"""Debian's PostgreSQL JDBC driver (``libpostgresql-jdbc-java``), for Spark's ``spark.jars``."""

_ENGINES: dict[str, sa.Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(url: str) -> sa.Engine:
    """One engine (connection pool) per URL in this process."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            engine = _ENGINES[url] = sa.create_engine(url, pool_pre_ping=True)
        return engine


def jdbc_url(url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection properties (user, password, driver) of a PostgreSQL
    SQLAlchemy URL.

    >>> url, props = jdbc_url("postgresql+psycopg://u:pw@db:5433/sales")
    >>> url, props["user"], props["driver"]
    ('jdbc:postgresql://db:5433/sales', 'u', 'org.postgresql.Driver')
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "postgresql":
        msg = (
            f"a JDBC read needs a PostgreSQL URL, got {parsed.get_backend_name()!r}; hint: "
            f"SQLite tables are read in-process"
        )
        raise ConfigurationError(msg)
    props = {"user": parsed.username or "", "password": parsed.password or ""}
    props["driver"] = "org.postgresql.Driver"
    port = f":{parsed.port}" if parsed.port else ""
    return f"jdbc:postgresql://{parsed.host or 'localhost'}{port}/{parsed.database}", props


@dataclass(frozen=True)
class TableRange:
    """Rows of one partition with ``low < order_column <= high`` (``low=None``: from the
    start): what one batch reads from one partition, in-process or on Spark."""

    spout: DatabaseTableSpout
    partition: str
    low: int | None
    high: int
    count: int

    def _where(self, table: sa.Table) -> list[Any]:
        col = table.c[self.spout.order_column]
        where = [*self.spout.predicate(table, self.partition), col <= self.high]
        if self.low is not None:
            where.append(col > self.low)
        return where

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The range's rows, in ``order_column`` order, read through SQLAlchemy.

        Raises
        ------
        SpoutEmitError
            If the range no longer holds :attr:`count` rows (the table changed below the mark).
        ConnectionError
            If the database cannot be reached (the batch is retried).
        """
        table = self.spout.table_object()
        query = (
            sa.select(*(table.c[f] for f in self.spout.output_fields))
            .where(*self._where(table))
            .order_by(table.c[self.spout.order_column])
        )
        with self.spout.connect() as conn:
            rows = [tuple(r) for r in conn.execute(query)]
        self.check_count(len(rows))
        yield from rows

    def check_count(self, found: int) -> None:
        """Raise :class:`SpoutEmitError` unless ``found`` is the count fixed at first emit."""
        if found != self.count:
            msg = (
                f"database table {self.spout.table!r} partition {self.partition!r}: range "
                f"{self.spout.order_column} in ({self.low}, {self.high}] holds {found} rows, "
                f"{self.count} when the batch was planned: rows were inserted or deleted below "
                f"the high-water mark, so the batch cannot be replayed exactly; hint: "
                f"{self.spout.order_column} must only grow and rows must not be deleted"
            )
            raise SpoutEmitError(msg)

    @property
    def where(self) -> str:
        """Where the range is, for errors."""
        return f"database table {self.spout.table!r} partition {self.partition!r}"

    def jdbc_query(self) -> str:
        """The range as a ``dbtable`` subquery for Spark's JDBC reader (literal values): the
        spout's fields, and ``order_column`` (the column Spark splits the read by)."""
        table = self.spout.table_object()
        names = dict.fromkeys([*self.spout.output_fields, self.spout.order_column])
        query = sa.select(*(table.c[f] for f in names)).where(*self._where(table))
        from sqlalchemy.dialects import postgresql

        # named paramstyle: a literal SQL string, with no "%" doubled for a driver
        dialect: Any = postgresql.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
        sql = query.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
        return f"({sql}) AS trident_range"

    def read_spec(self) -> ReadSpec:
        """How Spark reads the range: JDBC (format ``"jdbc"``) in ``spark_partitions`` parallel
        reads split on ``order_column``; the fields typed as the table's columns."""
        url, props = jdbc_url(self.spout.url)
        options = {"url": url, "dbtable": self.jdbc_query(), **props}
        n = max(1, min(self.spout.spark_partitions, self.count))
        if n > 1:
            low = (self.low if self.low is not None else self.high - self.count) + 1
            options |= {
                "partitionColumn": self.spout.order_column,
                "lowerBound": str(low),
                "upperBound": str(self.high + 1),
                "numPartitions": str(n),
            }
        driver = None if self.spout.jdbc_jar is None else (props["driver"], self.spout.jdbc_jar)
        return ReadSpec("jdbc", (), self.spout.spark_schema(), options=options, driver=driver)


class _Coordinator:
    def __init__(self, spout: DatabaseTableSpout) -> None:
        self._spout = spout
        self._progress: Callable[[str, int], Any] | None = None

    def get_partitions_for_batch(self) -> list[str]:
        return list(self._spout.partitions)

    def use_progress(self, progress: Callable[[str, int], Any]) -> None:
        """Called by the executor: each partition's newest batch before a txid (its mark)."""
        self._progress = progress

    def is_ready(self, txid: int) -> bool:
        """True when some partition has a row beyond its high-water mark (one query)."""
        marks: dict[str, int | None] = {}
        for partition in self._spout.partitions:
            meta = self._progress(partition, txid) if self._progress is not None else None
            marks[partition] = None if meta is None else meta.get("high")
        return self._spout.has_rows_after(marks)

    def close(self) -> None:
        return None


class _Emitter:
    def __init__(self, spout: DatabaseTableSpout) -> None:
        self._spout = spout

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        return list(all_partition_info)

    def emit_partition_batch_new(
        self, attempt: Any, collector: Collector, partition: str, last_partition_meta: Any
    ) -> Any:
        low = None if last_partition_meta is None else last_partition_meta.get("high")
        planned = self._spout.plan(partition, low)
        if planned is None:
            return None
        self._emit(collector, planned)
        return {"low": planned.low, "high": planned.high, "count": planned.count}

    def emit_partition_batch(
        self, attempt: Any, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        meta = partition_meta
        self._emit(collector, self._spout.range(partition, meta))

    def _emit(self, collector: Collector, source: TableRange) -> None:
        if self._spout.spark_native:
            emit_range(collector, source)  # Spark reads it through JDBC, in parallel
            return
        for row in source.rows():
            collector.emit(row)

    def close(self) -> None:
        return None


class DatabaseTableSpout:
    """A partitioned transactional spout over a database table (see the module docs).

    Parameters
    ----------
    url:
        SQLAlchemy URL of the database (``sqlite:///...``); prefer ``conn_id`` for a database
        with a password (a URL in a DAG file puts it in the file).
    table:
        The table (or view) to read.
    fields:
        The columns each tuple carries, in order (the spout's output fields).
    order_column:
        The monotonically increasing integer column (an id, a sequence).
    partitions:
        ``1`` (one partition, ``"all"``); ``n > 1``: ``p0..p<n-1>`` by
        ``partition_column % n``; or a mapping of partition name -> SQL predicate
        (``{"eu": "region = 'eu'", "us": "region = 'us'"}``) — predicates must not overlap
        and must cover the rows to read.
    partition_column:
        The integer column of ``n`` partitions (default ``order_column``).
    max_rows_per_batch:
        Rows per partition per batch, at most (rows tied on ``order_column`` with the last one
        come too).
    spark_partitions:
        Spark partitions of one range read through JDBC.
    spark_native:
        Whether the Spark runtime reads the ranges itself, through JDBC; default: for
        PostgreSQL. Otherwise (SQLite) the driver reads them and Spark gets the rows.
    jdbc_jar:
        The JDBC driver's jar, added to a Spark session that cannot load the driver (default
        Debian's :data:`JDBC_JAR`); ``None``: never added (the session's ``spark.jars`` has it).
    conn_id:
        An Airflow connection id (``postgres``, ``sqlite`` or ``trident_state``) instead of
        ``url``: read when the source first touches the database (in the task, in the Spark
        job, which gets it from its task as a secret), never when the DAG file is parsed
        (:mod:`airflow_trident.connections`).
    """

    kind = StateType.TRANSACTIONAL

    def __init__(
        self,
        url: str | None = None,
        table: str = "",
        fields: Sequence[str] = (),
        *,
        conn_id: str | None = None,
        order_column: str = "id",
        partitions: int | Mapping[str, str] = 1,
        partition_column: str | None = None,
        max_rows_per_batch: int = 10_000,
        spark_partitions: int = 4,
        spark_native: bool | None = None,
        jdbc_jar: str | None = JDBC_JAR,
    ) -> None:
        if (url is None) == (conn_id is None):
            msg = (
                f"database table {table!r}: give conn_id (an Airflow connection id) or url, "
                f"exactly one; hint: DatabaseTableSpout(conn_id='analytics_pg', table=...)"
            )
            raise ConfigurationError(msg)
        self._url = url
        self.conn_id = None if conn_id is None else declare(conn_id)
        self.jdbc_jar = jdbc_jar
        self._spark_native = spark_native
        if url is not None:
            self._check_spark_native(table)
        self.table = validate_name(table, kind="source table")
        self.output_fields = tuple(validate_name(f, kind="source column") for f in fields)
        if not self.output_fields:
            msg = f"database table {table!r}: fields is empty; hint: fields=['id', 'word']"
            raise ConfigurationError(msg)
        self.order_column = validate_name(order_column, kind="order column")
        self.partition_column = validate_name(
            partition_column or order_column, kind="partition column"
        )
        if max_rows_per_batch < 1 or spark_partitions < 1:
            msg = (
                f"database table {table!r}: max_rows_per_batch and spark_partitions must be "
                f">= 1, got {max_rows_per_batch} and {spark_partitions}"
            )
            raise ConfigurationError(msg)
        self.max_rows_per_batch = max_rows_per_batch
        self.spark_partitions = spark_partitions
        self.partitions = _partitions(table, partitions)
        self._modulo = partitions if isinstance(partitions, int) else 0
        self._table: sa.Table | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (Spark closures): the reflected table is not carried."""
        return {**self.__dict__, "_table": None}

    def __repr__(self) -> str:
        if self._url is None:
            where = f"conn_id={self.conn_id!r}"
        else:
            where = repr(sa.make_url(self._url).render_as_string(hide_password=True))
        return f"DatabaseTableSpout({where}, {self.table!r}, partitions={list(self.partitions)})"

    @property
    def url(self) -> str:
        """The database's SQLAlchemy URL: ``url``, or ``conn_id`` resolved now (it holds the
        password: never log it)."""
        if self._url is not None:
            return self._url
        assert self.conn_id is not None
        return database_url(self.conn_id)

    @property
    def spark_native(self) -> bool:
        """Whether Spark reads the ranges through JDBC (default: for PostgreSQL)."""
        return self._check_spark_native(self.table)

    def _check_spark_native(self, table: str) -> bool:
        backend = sa.make_url(self.url).get_backend_name()
        native = backend == "postgresql" if self._spark_native is None else self._spark_native
        if native and backend != "postgresql":
            msg = (
                f"database table {table!r}: spark_native needs PostgreSQL (JDBC), got "
                f"{backend!r}; hint: leave spark_native unset"
            )
            raise ConfigurationError(msg)
        return native

    # -- Trident spout ------------------------------------------------------------------
    def get_partitioned_coordinator(self) -> _Coordinator:
        return _Coordinator(self)

    def get_partitioned_emitter(self) -> _Emitter:
        return _Emitter(self)

    # -- reading ------------------------------------------------------------------------
    def connect(self) -> sa.Connection:
        """A connection; an unreachable database raises ``ConnectionError`` (retryable)."""
        try:
            return _engine(self.url).connect()
        except sa.exc.OperationalError as exc:
            msg = f"database table {self.table!r}: cannot connect: {str(exc).splitlines()[0]}"
            raise ConnectionError(msg) from exc

    def table_object(self) -> sa.Table:
        """The table, reflected once per process.

        Raises
        ------
        ConfigurationError
            If a field, the order or the partition column is not a column of the table.
        """
        if self._table is None:
            with self.connect() as conn:
                table = sa.Table(self.table, sa.MetaData(), autoload_with=conn)
            wanted = {*self.output_fields, self.order_column, self.partition_column}
            missing = sorted(wanted - set(table.c.keys()))
            if missing:
                msg = (
                    f"database table {self.table!r} has no column(s) {missing}; it has "
                    f"{list(table.c.keys())}"
                )
                raise ConfigurationError(msg)
            self._table = table
        return self._table

    def spark_schema(self) -> tuple[tuple[str, str], ...]:
        """Each field with the Spark type of its column."""
        table = self.table_object()
        return tuple((f, _spark_type(table.c[f].type)) for f in self.output_fields)

    def predicate(self, table: sa.Table, partition: str) -> list[Any]:
        """The WHERE clauses selecting ``partition``'s rows."""
        if partition not in self.partitions:
            msg = (
                f"database table {self.table!r}: no partition {partition!r} (partitions "
                f"{list(self.partitions)}); hint: the partitions changed since this batch began"
            )
            raise SpoutEmitError(msg)
        if self._modulo > 1:
            return [table.c[self.partition_column] % self._modulo == int(partition[1:])]
        text = self.partitions[partition]
        return [sa.text(f"({text})")] if text else []

    def plan(self, partition: str, low: int | None) -> TableRange | None:
        """The next range of ``partition`` after ``low`` (``None``: nothing new)."""
        table = self.table_object()
        col = table.c[self.order_column]
        where = self.predicate(table, partition)
        if low is not None:
            where.append(col > low)
        limited = sa.select(col.label("o")).where(*where).order_by(col)
        limited_sub = limited.limit(self.max_rows_per_batch).subquery()
        with self.connect() as conn:
            high = conn.execute(sa.select(sa.func.max(limited_sub.c.o))).scalar()
            if high is None:
                return None
            count = conn.execute(
                sa.select(sa.func.count()).select_from(table).where(*where, col <= high)
            ).scalar_one()
        return TableRange(self, partition, low, int(high), int(count))

    def has_rows_after(self, marks: Mapping[str, int | None]) -> bool:
        """Whether some partition has a row with ``order_column`` above its mark (``None``:
        any row of it); one ``SELECT 1 ... LIMIT 1``."""
        table = self.table_object()
        col = table.c[self.order_column]
        beyond = [
            sa.and_(sa.true(), *self.predicate(table, p), *([] if m is None else [col > m]))
            for p, m in marks.items()
        ]
        query = sa.select(sa.literal(1)).select_from(table).where(sa.or_(*beyond)).limit(1)
        with self.connect() as conn:
            return conn.execute(query).first() is not None

    def range(self, partition: str, meta: Mapping[str, Any]) -> TableRange:
        """The range a batch's metadata fixed for ``partition``."""
        return TableRange(self, partition, meta["low"], int(meta["high"]), int(meta["count"]))


def _spark_type(column_type: Any) -> str:
    """The Spark SQL type a column's values are read as."""
    if isinstance(column_type, sa.Boolean):
        return "boolean"
    if isinstance(column_type, sa.Integer):
        return "bigint"
    if isinstance(column_type, sa.Float | sa.Numeric):
        return "double"
    if isinstance(column_type, sa.DateTime):
        return "timestamp"
    if isinstance(column_type, sa.Date):
        return "date"
    return "string"


def _partitions(table: str, partitions: int | Mapping[str, str]) -> dict[str, str]:
    if isinstance(partitions, bool) or not isinstance(partitions, int | Mapping):
        msg = f"database table {table!r}: partitions is an int or a mapping, got {partitions!r}"
        raise ConfigurationError(msg)
    if isinstance(partitions, int):
        if partitions < 1:
            msg = f"database table {table!r}: partitions must be >= 1, got {partitions}"
            raise ConfigurationError(msg)
        if partitions == 1:
            return {"all": ""}
        return {f"p{i}": "" for i in range(partitions)}
    if not partitions:
        msg = f"database table {table!r}: no partitions; hint: {{'eu': \"region = 'eu'\"}}"
        raise ConfigurationError(msg)
    return {validate_name(k, kind="partition"): str(v) for k, v in partitions.items()}
