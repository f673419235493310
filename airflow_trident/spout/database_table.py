"""A database table as a partitioned transactional source: incremental by a monotonically
increasing column, one high-water mark per partition.

Long on purpose: one source with three readers that must agree row for row (SQLAlchemy in-process,
PostgreSQL's own digest, JDBC on Spark), its transactional and opaque forms, and the range digest
that makes a retry see the rows its first attempt saw; split, the three readers' shared rules would
live apart.

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
the driver ``org.postgresql:postgresql`` on the session's ``spark.jars``, else the spout's
``jdbc_jar``, by default Debian's ``/usr/share/java/postgresql.jar``), split into
``spark_partitions`` Spark partitions of ``order_column``. SQLite ranges are read on the driver.

The column must only grow: a row committed later with a value at or below a partition's
high-water mark is never read (use an id assigned at commit, or read with a lag).

Rows that change before their batch commits: each range's metadata also holds the *digest* of
the rows the batch read (the sum of a per-row hash: ``md5`` of the row's text computed by
PostgreSQL, for the in-process read and inside every JDBC read on Spark alike; on SQLite, of the
row's Python ``repr``). Every later read of the range checks its count and digest: a replay
whose rows were updated, deleted or inserted below the mark since the batch first read them
fails with :class:`~airflow_trident.errors.SpoutEmitError` naming the range, rather than hand
a transactional state other rows for a txid it may partly hold (an updated row was counted
twice). To take such changes, read the table as an *opaque* source
(:meth:`DatabaseTableSpout.as_opaque`, into opaque states): every attempt reads the rows as
they are, and the opaque state recomputes and reverts the keys of a replayed txid.

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
({'low': None, 'high': 2, 'count': 2, 'digest': '...'}, [(1, 'a'), (2, 'b')])
>>> first = meta
>>> collector = ListCollector()
>>> emitter.emit_partition_batch_new(None, collector, "all", meta), collector.tuples
({'low': 2, 'high': 3, 'count': 1, 'digest': '...'}, [(3, 'c')])

A replay after a row of its range changed fails (the state may hold part of the batch):

>>> with sa.create_engine(url).begin() as conn:
...     _ = conn.execute(sa.text("UPDATE events SET word = 'B' WHERE id = 2"))
>>> from airflow_trident.errors import SpoutEmitError
>>> try:
...     emitter.emit_partition_batch(None, ListCollector(), "all", first)
... except SpoutEmitError as exc:
...     print(str(exc)[:74])
database table 'events' partition 'all': the rows of range id in (None, 2]
>>> emitter.emit_partition_batch_new(None, ListCollector(), "all", {"low": 2, "high": 3}) is None
True
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa

from airflow_trident.connections import database_url, declare
from airflow_trident.errors import ConfigurationError, SpoutEmitError, failure_text
from airflow_trident.names import Dataset, table_dataset, validate_name
from airflow_trident.spout.base import Collector
from airflow_trident.spout.ranges import ReadSpec, emit_range
from airflow_trident.state.base import StateType

__all__ = ["DatabaseTableSpout", "OpaqueTableSpout", "TableRange", "jdbc_url"]

JDBC_JAR = "/usr/share/java/postgresql.jar"
"""Debian's PostgreSQL JDBC driver (``libpostgresql-jdbc-java``): the spout's default
``jdbc_jar``, added to a session whose ``spark.jars`` lacks the driver (this project's own
Sparks get ``org.postgresql:postgresql`` from ``jvm/pom.xml`` on ``spark.jars``; docs/jvm.md)."""

_DIGEST_MOD = 1 << 60
"""A range's digest is the sum of its rows' 60-bit hashes modulo this."""

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
    digest: str | None = None
    """The rows' digest fixed when the batch first read them (``None``: not known yet, or a
    batch planned before digests were recorded: only the count is checked)."""

    def meta(self) -> dict[str, Any]:
        """The range as batch metadata."""
        return {"low": self.low, "high": self.high, "count": self.count, "digest": self.digest}

    def _where(self, table: Any) -> list[Any]:
        col = table.c[self.spout.order_column]
        where = [*self.spout.predicate(table, self.partition), col <= self.high]
        if self.low is not None:
            where.append(col > self.low)
        return where

    def _columns(self) -> list[str]:
        """The columns read: the spout's fields, then ``order_column`` if it is not one."""
        return list(dict.fromkeys([*self.spout.output_fields, self.spout.order_column]))

    def read(self) -> tuple[list[tuple[Any, ...]], str]:
        """The range's rows (the spout's fields, in ``order_column`` order) and their digest,
        in one query through SQLAlchemy (no check).

        Raises
        ------
        ConnectionError
            If the database cannot be reached (the batch is retried).
        """
        table = self.spout.table_object()
        names = self._columns()
        postgres = self.spout.postgresql
        hashed = [_pg_row_hash(names).label("trident_row_hash")] if postgres else []
        query = (
            sa.select(*(table.c[n] for n in names), *hashed)
            .where(*self._where(table))
            .order_by(table.c[self.spout.order_column])
        )
        with self.spout.connect() as conn:
            got = [tuple(r) for r in conn.execute(query)]
        if postgres:
            total = sum(int(r[-1]) for r in got)
        else:
            total = sum(_py_row_hash(r[: len(names)]) for r in got)
        width = len(self.spout.output_fields)
        return [r[:width] for r in got], _digest(total)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The range's rows, in ``order_column`` order, read through SQLAlchemy.

        Raises
        ------
        SpoutEmitError
            If the range no longer holds the rows the batch first read (:meth:`check`).
        ConnectionError
            If the database cannot be reached (the batch is retried).
        """
        rows, digest = self.read()
        self.check(len(rows), digest)
        yield from rows

    def check(self, found: int, digest: str | None = None) -> None:
        """Raise :class:`SpoutEmitError` unless ``found`` rows with ``digest`` are what the
        batch first read (its :attr:`count` and :attr:`digest`)."""
        if found != self.count:
            raise SpoutEmitError(self._count_changed(str(found)))
        if self.digest is not None and digest is not None and digest != self.digest:
            raise SpoutEmitError(self._changed(f"digest {digest}"))

    def check_count(self, found: int) -> None:
        """:meth:`check` of the count alone."""
        self.check(found)

    def _count_changed(self, found: str) -> str:
        return (
            f"{self.where}: range {self.spout.order_column} in ({self.low}, {self.high}] "
            f"holds {found} rows, {self.count} when the batch first read it: rows were "
            f"inserted or deleted below the high-water mark, so the batch cannot be replayed "
            f"exactly; nothing is committed. {self._hint()}"
        )

    def _changed(self, now: str) -> str:
        return (
            f"{self.where}: the rows of range {self.spout.order_column} in ({self.low}, "
            f"{self.high}] changed since the batch first read them (digest {self.digest} of "
            f"{self.count} rows, now {now}): a row was updated or deleted, so the batch cannot "
            f"be replayed exactly and nothing is committed. {self._hint()}"
        )

    def _hint(self) -> str:
        return (
            f"Hint: rows must not change until their batch committed; restore them, or read "
            f"the table as an opaque source (spout.as_opaque(), opaque states) to take changes; "
            f"{self.spout.order_column} must only grow"
        )

    @property
    def where(self) -> str:
        """Where the range is, for errors."""
        return f"database table {self.spout.table!r} partition {self.partition!r}"

    def jdbc_query(self) -> str:
        """The range as a ``dbtable`` subquery for Spark's JDBC reader (literal values): the
        spout's fields, and ``order_column`` (the column Spark splits the read by).

        With a :attr:`digest`, every query Spark sends (one per Spark partition, each in its
        own snapshot) first checks, once, that the whole range still holds :attr:`count` rows
        of that digest (an uncorrelated ``WHERE (SELECT ...)``: PostgreSQL's one-time filter);
        otherwise PostgreSQL fails the read with this range's :class:`SpoutEmitError`, which
        the Spark runtime raises on the driver. So the rows Spark reads are the batch's."""
        table = self.spout.table_object()
        names = self._columns()
        query = sa.select(*(table.c[f] for f in names)).where(*self._where(table))
        if self.digest is not None:
            query = query.where(self._still_same(table, names))
        from sqlalchemy.dialects import postgresql

        # named paramstyle: a literal SQL string, with no "%" doubled for a driver
        dialect: Any = postgresql.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
        sql = query.compile(dialect=dialect, compile_kwargs={"literal_binds": True})
        return f"({sql}) AS trident_range"

    def _still_same(self, table: sa.Table, names: Sequence[str]) -> Any:
        """True when the range holds :attr:`count` rows of :attr:`digest`; else a cast that
        fails the query with this range's error (tagged for the Spark runtime): the error
        :meth:`check` gives in process (rows inserted or deleted when the count differs, else
        a row updated)."""
        inner = table.alias("trident_check")
        found = sa.func.count()
        total = sa.func.coalesce(sa.func.sum(sa.cast(_pg_row_hash(names), sa.Numeric)), 0)
        digest = total % _DIGEST_MOD
        head, tail = failure_text(SpoutEmitError("\x00")).split("\x00")

        def failing(text: str, value: Any) -> Any:  # the error, ``value`` at "\x01"
            before, after = (head + text + tail).split("\x01")
            return sa.cast(sa.literal(before) + value + sa.literal(after), sa.Boolean)

        now = sa.cast(found, sa.Text) + " rows, digest sum " + sa.cast(digest, sa.Text)
        ok = sa.and_(found == self.count, digest == int(str(self.digest), 16))
        check = sa.case(
            (ok, sa.true()),
            (found != self.count, failing(self._count_changed("\x01"), sa.cast(found, sa.Text))),
            else_=failing(self._changed("\x01"), now),
        )
        return sa.select(check).select_from(inner).where(*self._where(inner)).scalar_subquery()

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
        return _emit(self._spout, collector, planned, first=True).meta()

    def emit_partition_batch(
        self, attempt: Any, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        meta = partition_meta
        _emit(self._spout, collector, self._spout.range(partition, meta), first=False)

    def close(self) -> None:
        return None


def _emit(
    spout: DatabaseTableSpout, collector: Collector, source: TableRange, *, first: bool
) -> TableRange:
    """Emit ``source``; return it as the batch's metadata has it. In this process the rows are
    read now: a first read fixes the count and digest (the rows this attempt emits), a later one
    is checked against them. On Spark (JDBC) the range's read checks them itself."""
    if spout.spark_native:
        emit_range(collector, source)  # Spark reads it through JDBC, in parallel
        return source
    rows, digest = source.read()
    if first:
        source = replace(source, count=len(rows), digest=digest)
    else:
        source.check(len(rows), digest)
    for row in rows:
        collector.emit(row)
    return source


class _OpaqueEmitter(_Emitter):
    def emit_partition_batch(
        self, attempt: Any, collector: Collector, partition: str, last_partition_meta: Any
    ) -> Any:
        low = None if last_partition_meta is None else last_partition_meta.get("high")
        planned = self._spout.plan(partition, low)
        if planned is None:  # nothing new: the next batch starts where this one did
            return {"low": low, "high": low, "count": 0, "digest": None}
        return _emit(self._spout, collector, planned, first=True).meta()


class OpaqueTableSpout:
    """A :class:`DatabaseTableSpout` read as an *opaque* partitioned spout
    (:meth:`DatabaseTableSpout.as_opaque`): every attempt of a txid plans its ranges from the
    last committed batch and reads the rows as they are then, so rows updated or deleted
    before a replay are taken as they are (an opaque state recomputes the replayed txid's keys
    from their previous values and reverts those only the failed attempt wrote). Into a
    transactional state it is refused at build time (not exactly-once)."""

    kind = StateType.OPAQUE

    def __init__(self, spout: DatabaseTableSpout) -> None:
        self.spout = spout

    def __repr__(self) -> str:
        return f"{self.spout!r}.as_opaque()"

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The table read (:meth:`DatabaseTableSpout.openlineage_datasets`)."""
        return self.spout.openlineage_datasets(state_url)

    @property
    def output_fields(self) -> tuple[str, ...]:
        """The spout's fields."""
        return self.spout.output_fields

    def pending(self, partition: str, partition_meta: Any) -> int:
        """Rows beyond the batch's mark (:meth:`DatabaseTableSpout.pending`)."""
        return self.spout.pending(partition, partition_meta)

    def get_opaque_coordinator(self) -> _Coordinator:
        return _Coordinator(self.spout)

    def get_opaque_emitter(self) -> _OpaqueEmitter:
        return _OpaqueEmitter(self.spout)


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

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The table read, as OpenLineage names it (``postgres://host:port`` and
        ``database.schema.table``...; ``conn_id`` resolved now, the password left out).

        >>> DatabaseTableSpout("sqlite:////data/shop.db", "orders", ["id"]).openlineage_datasets()
        [('sqlite:///data/shop.db', 'orders')]
        """
        return [table_dataset(self.url, self.table)]

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

    def as_opaque(self) -> OpaqueTableSpout:
        """This table as an opaque source: replays read the rows as they are (updates and
        deletes of a failed batch's rows are taken), for opaque states (see the module docs)."""
        return OpaqueTableSpout(self)

    @property
    def postgresql(self) -> bool:
        """Whether the table is in PostgreSQL (its rows' digests are computed there)."""
        return bool(sa.make_url(self.url).get_backend_name() == "postgresql")

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
            if not self.spark_native:  # read in this process: the read fixes count and digest
                count = conn.execute(
                    sa.select(sa.func.count()).select_from(table).where(*where, col <= high)
                ).scalar_one()
                return TableRange(self, partition, low, int(high), int(count))
            names = dict.fromkeys([*self.output_fields, self.order_column])
            row_hash = sa.cast(_pg_row_hash(list(names)), sa.Numeric)
            total = sa.func.coalesce(sa.func.sum(row_hash), 0)
            count, digest = conn.execute(
                sa.select(sa.func.count(), total).select_from(table).where(*where, col <= high)
            ).one()
        return TableRange(self, partition, low, int(high), int(count), _digest(int(digest)))

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

    def pending(self, partition: str, partition_meta: Any) -> int:
        """Rows of ``partition`` beyond the high-water mark of its batch ``partition_meta``
        (every row of it before its first batch): the lag ``airflow-trident status`` shows
        (:mod:`airflow_trident.spout.lag`); one ``SELECT count(*)``."""
        table = self.table_object()
        where = self.predicate(table, partition)
        high = partition_meta.get("high") if isinstance(partition_meta, Mapping) else None
        if high is not None:
            where.append(table.c[self.order_column] > high)
        with self.connect() as conn:
            query = sa.select(sa.func.count()).select_from(table).where(*where)
            return int(conn.execute(query).scalar_one())

    def range(self, partition: str, meta: Mapping[str, Any]) -> TableRange:
        """The range a batch's metadata fixed for ``partition``."""
        digest = meta.get("digest")
        return TableRange(
            self, partition, meta["low"], int(meta["high"]), int(meta["count"]), digest
        )


def _pg_row_hash(names: Sequence[str]) -> Any:
    """PostgreSQL's 60-bit hash of a row's columns ``names`` (the first 15 hex digits of the
    ``md5`` of the row's text), as a ``bigint`` expression."""
    row = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
    return sa.literal_column(
        f"('x' || substr(md5(CAST(ROW({row}) AS text)), 1, 15))::bit(60)::bigint"
    )


def _py_row_hash(row: Sequence[Any]) -> int:
    """A row's 60-bit hash from its Python ``repr`` (SQLite ranges, always read in Python)."""
    return int(hashlib.md5(repr(tuple(row)).encode()).hexdigest()[:15], 16)


def _digest(total: int) -> str:
    """A range's digest: the sum of its rows' hashes modulo 2**60, in hex."""
    return f"{total % _DIGEST_MOD:015x}"


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
