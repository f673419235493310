"""Exactly-once into an Apache Iceberg table, with pyiceberg.

Long on purpose: the factory, the state and the writer of one sink share the exactness rules (txid
in the snapshot summary and table properties, rebase on a lost race); its catalog resolution is
:mod:`~airflow_trident.state.iceberg_catalog` and its schema rules
:mod:`~airflow_trident.state.schema_evolution`.

``stream.partition_persist(iceberg_state("db.events", app_id), fields, IcebergWriter())``
appends (or, with ``merge_keys``, upserts) each batch's rows into an Iceberg table. Each commit
partition's rows of batch ``txid`` go in *one* Iceberg commit that also

* puts ``trident.app-id``, ``trident.txid`` and ``trident.partition`` (``i/n``) in the summary of
  the snapshot it adds (as Flink's Iceberg sink records its checkpoint id), for lineage;
* sets the table properties ``trident.txid.<app_id>.p<i>of<n>`` = the last txid this partition
  wrote and ``trident.txid.<app_id>`` = ``<txid>/<n>`` (the last txid and its partition count).

The properties are the record the sink checks: before writing, a partition skips a txid below
the app's last one (complete in the table: txids commit in order), whatever its partition count,
and a txid at or below its own property, so a replayed txid (a commit whose compare-and-set in
ZooKeeper failed after the Iceberg commit, a cleared Airflow run, a backfill over committed
txids) adds nothing; the app's last txid replayed with another partition count is refused.
Properties live in the table's metadata, not in a snapshot, so expiring snapshots and
compaction keep them. A commit refused because another writer committed first (two topologies,
or two partitions of one txid) is retried from the start — the property read again — after a
backoff (exponential, jittered); pyiceberg's own rebase of the same commit is not used, since
it would not re-check the txid (turned off per pyiceberg version in ``state/compat.py``). It is
a *transactional* state: a replay of a txid must carry the same rows, as transactional spouts
guarantee.

Examples
--------
>>> import tempfile
>>> tmp = tempfile.mkdtemp()
>>> catalog = {"type": "sql", "uri": f"sqlite:///{tmp}/catalog.db", "warehouse": f"file://{tmp}"}
>>> factory = iceberg_state("doc.events", "doc_topology.events", catalog=catalog)
>>> sink = factory.make_state()
>>> for txid in (1, 2, 2):  # txid 2 is replayed
...     sink.begin_commit(txid)
...     sink.write([{"word": "w", "n": txid}])
...     sink.commit(txid)
>>> rows = factory.load_table().scan().to_arrow().to_pylist()
>>> sorted((r["n"], r["trident_txid"]) for r in rows)
[(1, 1), (2, 2)]
>>> factory.load_table().current_snapshot().summary["trident.txid"]
'2'
"""

from __future__ import annotations

import copy
import logging
import random
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError, StateError
from airflow_trident.names import Dataset, iceberg_dataset, validate_name
from airflow_trident.operation.base import StateUpdater
from airflow_trident.state.base import StateType
from airflow_trident.state.compat import no_rebase_transaction  # pyiceberg, per version
from airflow_trident.state.iceberg_catalog import load_catalog, redacted, resolve_connection
from airflow_trident.state.schema_evolution import SchemaPlan, align, plan_schema
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["IcebergState", "IcebergStateFactory", "IcebergWriter", "iceberg_state"]

log = logging.getLogger(__name__)

PROPERTY_PREFIX = "trident.txid."
RETRIES = 12
"""Commit attempts of one partition against concurrent writers."""
BACKOFF_S = (0.05, 2.0)
"""The first and the largest wait between attempts (doubling, times 0.5-1.5)."""

PartitionField = str | tuple[str, str]


class IcebergStateFactory:
    """Makes the :class:`IcebergState` of each commit partition (see :func:`iceberg_state`)."""

    state_type = StateType.TRANSACTIONAL
    txids_by_partition = True
    """The table records the txid each commit partition wrote, not a txid per key: a txid's
    replay must spread its rows over the partitions as its first commit did
    (:mod:`airflow_trident.runtime.shape`)."""

    def __init__(
        self,
        table: str,
        app_id: str,
        *,
        catalog: Mapping[str, str] | None = None,
        iceberg_conn_id: str | None = None,
        warehouse: str | None = None,
        merge_keys: Sequence[str] = (),
        partition_by: Sequence[PartitionField] = (),
        schema: pa.Schema | None = None,
        txid_column: str | None = "trident_txid",
        evolve_schema: bool = False,
        catalog_conn_id: str | None = None,
    ) -> None:
        if not isinstance(table, str) or "." not in table.strip("."):
            msg = f"iceberg_state({table!r}): name the table with its namespace, e.g. 'db.events'"
            raise ConfigurationError(msg)
        if not isinstance(app_id, str) or not app_id.strip():
            msg = (
                f"iceberg_state({table!r}): app_id must be a non-empty string, "
                f"e.g. 'topology.state'"
            )
            raise ConfigurationError(msg)
        iceberg_conn_id = _renamed_conn_id(table, iceberg_conn_id, catalog_conn_id)
        if catalog is not None and iceberg_conn_id is not None:
            msg = f"iceberg_state({table!r}): give catalog or iceberg_conn_id, not both"
            raise ConfigurationError(msg)
        for what, names in (("merge_keys", merge_keys), ("partition_by", partition_by)):
            if isinstance(names, str):
                msg = f"iceberg_state({table!r}): {what} is a sequence, not {names!r}"
                raise ConfigurationError(msg)
        self.table = table
        self.app_id = app_id
        self.catalog = None if catalog is None else dict(catalog)
        self.iceberg_conn_id = (
            None if iceberg_conn_id is None else connections.declare_iceberg(iceberg_conn_id)
        )  # declared (no I/O): a Spark task's closure carries the catalog it names
        self.warehouse = warehouse
        self.merge_keys = tuple(validate_name(k, kind="merge key") for k in merge_keys)
        self.partition_by = tuple(_partition_field(p, table) for p in partition_by)
        self.schema = schema
        self.txid_column = (
            None if txid_column is None else validate_name(txid_column, kind="txid column")
        )
        self.evolve_schema = evolve_schema
        self.state_url: str | None = None

    def __repr__(self) -> str:
        mode = f"merge on {list(self.merge_keys)}" if self.merge_keys else "append"
        return f"IcebergStateFactory({self.table!r}, {self.app_id!r}, {mode})"

    @property
    def catalog_conn_id(self) -> str | None:
        """Deprecated name of :attr:`iceberg_conn_id`."""
        return self.iceberg_conn_id

    def spark_append(self, updater: Any) -> str | None:
        """``"iceberg"`` when Spark's Iceberg writer can append what ``updater`` stages
        (:mod:`airflow_trident.runtime.spark.iceberg`): the plain :class:`IcebergWriter`,
        appending (no ``merge_keys``, no ``evolve_schema``); else ``None`` (the Python writer).
        """
        plain = not (self.merge_keys or self.evolve_schema)
        return "iceberg" if isinstance(updater, IcebergWriter) and plain else None

    def located_at(self, url: str) -> IcebergStateFactory:
        """This factory with the run's state database as its SQL catalog, when it names no
        catalog of its own (else itself)."""
        if self.catalog is not None or self.iceberg_conn_id is not None:
            return self
        located = copy.copy(self)
        located.state_url = url
        return located

    def catalog_properties(self) -> tuple[str, dict[str, str]]:
        """The catalog's name and pyiceberg properties (see ``state/iceberg_catalog.py``)."""
        if self.catalog is not None:
            props = dict(self.catalog)
            return props.pop("catalog_name", "trident"), props
        if self.iceberg_conn_id is not None:
            name, props = resolve_connection(self.iceberg_conn_id)
        else:
            from airflow_trident.state.sql.factory import default_state_url

            url = self.state_url or default_state_url()
            name, props = "trident", {"type": "sql", "uri": url}
        if self.warehouse is not None:
            props["warehouse"] = self.warehouse
        elif props.get("type") == "sql" and "warehouse" not in props:
            beside = _sqlite_dir(props.get("uri", ""))
            if beside is not None:  # the embedded default: the warehouse beside the catalog
                props["warehouse"] = f"file://{beside}/iceberg_warehouse"
        if props.get("type") == "sql" and "warehouse" not in props:
            msg = (
                f"iceberg_state({self.table!r}): the SQL catalog {redacted(props)} has no "
                f"warehouse; hint: iceberg_state(..., warehouse='file:///data/warehouse'), or a "
                f"'warehouse' extra on the catalog connection"
            )
            raise ConfigurationError(msg)
        return name, props

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The table written, as OpenLineage names it: its catalog (a REST catalog's URI, a
        Hive metastore, else the warehouse location; the catalog connection resolved now)
        and ``namespace.table`` (:func:`~airflow_trident.names.iceberg_dataset`).

        >>> iceberg_state("db.events", "wc.events", catalog={"type": "sql",
        ...     "uri": "sqlite:////data/catalog.db", "warehouse": "s3://lake/wh"}
        ...     ).openlineage_datasets()
        [('s3://lake/wh', 'db.events')]
        """
        located = self.located_at(state_url) if state_url else self
        return [iceberg_dataset(*located.catalog_properties(), self.table)]

    def load_catalog(self) -> Any:
        """The pyiceberg catalog holding the table."""
        return load_catalog(*self.catalog_properties())

    def load_table(self) -> Any:
        """The pyiceberg table, or ``None`` before the first commit created it."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.load_catalog().load_table(self.table)
        except NoSuchTableError:
            return None

    def create_table(self, schema: pa.Schema) -> Any:
        """Create the table (namespace, schema, partition spec) unless another writer did.

        Commit partitions run as parallel Spark tasks, so two may create the table at once:
        the loser sees ``TableAlreadyExistsError`` or, from the SQL catalog's requirement check,
        ``CommitFailedException("Table already exists")``; either way it loads the winner's table.
        Two may create its namespace at once too: the SQL catalog's loser gets the database's
        unique-key error (not ``NamespaceAlreadyExistsError``) and goes on when the namespace
        is there.
        """
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
        from pyiceberg.transforms import parse_transform

        catalog = self.load_catalog()
        namespace = self.table.rsplit(".", 1)[0]
        try:
            catalog.create_namespace_if_not_exists(namespace)
        except Exception:
            if not catalog.namespace_exists(namespace):
                raise
        try:
            tx = catalog.create_table_transaction(self.table, schema=schema)
            if self.partition_by:
                with tx.update_spec() as spec:
                    for column, transform in self.partition_by:
                        name = column if transform == "identity" else f"{column}_{transform}"
                        spec.add_field(
                            column, parse_transform(transform), name.replace("[", "_").rstrip("]")
                        )
            tx.commit_transaction()
        except TableAlreadyExistsError:
            pass
        except CommitFailedException:
            if not catalog.table_exists(self.table):
                raise
        return catalog.load_table(self.table)

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> IcebergState:
        """The Iceberg state of commit partition ``partition_index`` of ``num_partitions``."""
        if not 0 <= partition_index < num_partitions:
            msg = (
                f"iceberg table {self.table!r}: partition {partition_index} of "
                f"{num_partitions} does not exist"
            )
            raise ConfigurationError(msg)
        return IcebergState(self, partition_index, num_partitions)


def _sqlite_dir(uri: str) -> str | None:
    """The directory of a SQLite file URL (``None``: not one)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or uri == prefix or ":memory:" in uri:
        return None
    import os.path

    return os.path.dirname(os.path.abspath(uri[len(prefix) :].split("?")[0]))


def _partition_field(field: Any, table: str) -> tuple[str, str]:
    column, transform = (field, "identity") if isinstance(field, str) else tuple(field)
    from pyiceberg.transforms import UnknownTransform, parse_transform

    try:
        known = not isinstance(parse_transform(transform), UnknownTransform)
    except (ValueError, TypeError):
        known = False
    if not known:
        msg = (
            f"iceberg_state({table!r}): partition transform {transform!r} of {column!r} is not "
            f"one of identity, year, month, day, hour, bucket[N], truncate[W]"
        )
        raise ConfigurationError(msg)
    return validate_name(column, kind="partition column"), transform


def _renamed_conn_id(table: str, iceberg_conn_id: str | None, catalog_conn_id: str | None,
                     stacklevel: int = 3) -> str | None:  # fmt: skip
    """``iceberg_conn_id``, or the deprecated ``catalog_conn_id`` (with a warning)."""
    if catalog_conn_id is None:
        return iceberg_conn_id
    if iceberg_conn_id is not None:
        msg = f"iceberg_state({table!r}): give iceberg_conn_id, not also catalog_conn_id"
        raise ConfigurationError(msg)
    warnings.warn(
        "iceberg_state(catalog_conn_id=...) is deprecated; use iceberg_conn_id=..., the "
        "Iceberg provider's name for it",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return catalog_conn_id


def iceberg_state(
    table: str,
    app_id: str,
    *,
    catalog: Mapping[str, str] | None = None,
    iceberg_conn_id: str | None = None,
    warehouse: str | None = None,
    merge_keys: Sequence[str] = (),
    partition_by: Sequence[PartitionField] = (),
    schema: pa.Schema | None = None,
    txid_column: str | None = "trident_txid",
    evolve_schema: bool = False,
    catalog_conn_id: str | None = None,
) -> IcebergStateFactory:
    """A transactional state writing each batch's rows into the Iceberg table ``table``.

    Parameters
    ----------
    table:
        ``namespace.name`` (namespace and table are created by the first commit).
    app_id:
        This writer's id in the table's properties and snapshot summaries: name it after the
        topology and the state (``"word_topology.events"``); two sinks writing one table need
        two ids.
    catalog, iceberg_conn_id, warehouse:
        Where the catalog is: pyiceberg properties, or an Airflow connection (the Iceberg
        provider's ``iceberg`` connection, or a ``postgres``/``sqlite``/``trident_state`` one
        as a SQL catalog), else the run's state database as a SQL catalog; ``warehouse`` sets
        (or overrides) its warehouse location (see ``docs/sinks/iceberg.md``).
    merge_keys:
        Empty: append the rows. Else upsert on these columns (update a matching row, insert the
        others; the last row of a key in one partition wins).
    partition_by:
        The partition spec of a table the sink creates: column names (identity) or
        ``(column, transform)`` pairs, e.g. ``("ts", "day")``, ``("user", "bucket[16]")``.
    schema:
        The Arrow schema of the rows (without the txid column); inferred when ``None``.
    txid_column:
        A column holding the txid that wrote each row (``None``: none).
    evolve_schema:
        A column the table lacks is added as a nullable column (in the same commit as the
        rows); ``False`` refuses it. Incompatible changes are always refused before writing.
    catalog_conn_id:
        Deprecated name of ``iceberg_conn_id`` (a ``DeprecationWarning``).
    """
    return IcebergStateFactory(
        table,
        app_id,
        catalog=catalog,
        iceberg_conn_id=_renamed_conn_id(table, iceberg_conn_id, catalog_conn_id),
        warehouse=warehouse,
        merge_keys=merge_keys,
        partition_by=partition_by,
        schema=schema,
        txid_column=txid_column,
        evolve_schema=evolve_schema,
    )


def backoff_s(attempt: int) -> float:
    """The wait before commit attempt ``attempt + 1`` (doubling from ``BACKOFF_S``, jittered)."""
    return float(min(BACKOFF_S[0] * 2**attempt, BACKOFF_S[1]) * random.uniform(0.5, 1.5))


class IcebergState:
    """One commit partition's writer: rows collected between ``begin_commit(txid)`` and
    ``commit(txid)`` go into one Iceberg commit carrying the txid."""

    def __init__(self, factory: IcebergStateFactory, index: int, count: int) -> None:
        self.factory = factory
        self.index = index
        self.count = count
        self.partition_key = f"{PROPERTY_PREFIX}{factory.app_id}.p{index}of{count}"
        self.app_key = f"{PROPERTY_PREFIX}{factory.app_id}"
        self._txid: int | None = None
        self._parts: list[pa.Table] = []
        self._rows: list[dict[str, Any]] = []

    def begin_commit(self, txid: int) -> None:
        """Start collecting batch ``txid``'s rows (rows of an unfinished commit are dropped)."""
        self._txid, self._parts, self._rows = txid, [], []

    def write(self, rows: Sequence[Mapping[str, Any]] | pa.Table) -> None:
        """Add rows (column -> value mappings, or an Arrow table) to the commit in progress."""
        if self._txid is None:
            msg = f"iceberg table {self.factory.table!r}: write outside a commit; call begin_commit"
            raise StateError(msg)
        if isinstance(rows, pa.Table):
            self._flush_rows()
            self._parts.append(rows)
        else:
            self._rows.extend(dict(r) for r in rows)

    def rollback(self) -> None:
        """Drop the rows of the commit in progress (nothing was written)."""
        self._txid, self._parts, self._rows = None, [], []

    def written_txid(self) -> int | None:
        """The last txid this partition committed into the table (``None``: none yet)."""
        table = self.factory.load_table()
        value = None if table is None else table.properties.get(self.partition_key)
        return None if value is None else int(value)

    def commit(self, txid: int) -> None:
        """Write the rows in one Iceberg commit, unless the table already holds ``txid`` for
        this partition (a replay): then nothing is written.

        Raises
        ------
        SchemaMismatchError
            If the rows do not fit the table's schema (nothing is written).
        StateError
            If no commit of ``txid`` is open, the txid was written with another partition
            count, or concurrent writers kept winning.
        """
        if self._txid != txid:
            msg = (
                f"iceberg table {self.factory.table!r}: commit({txid}) but the open commit is "
                f"{self._txid}; hint: call begin_commit({txid}) first"
            )
            raise StateError(msg)
        self._flush_rows()
        parts, self._txid, self._parts = self._parts, None, []
        data = (
            self._with_txid(pa.concat_tables(parts, promote_options="default"), txid)
            if parts
            else None
        )
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(RETRIES):
            table = self.factory.load_table()
            if table is not None and self.holds_in(table, txid):
                return
            if data is None or data.num_rows == 0:
                return
            if table is None:  # made from the batch (a column of no type yet left out)
                made = self.plan_write(data.schema, None, txid).target or data.schema
                table = self.factory.create_table(made)
            try:
                self._write(table, data, txid)
                return
            except CommitFailedException as exc:  # another writer won: back off, look again
                wait = backoff_s(attempt)
                log.info(
                    "iceberg table %s: txid %d partition %d: commit conflict (%s); retrying in "
                    "%.2f s", self.factory.table, txid, self.index, exc, wait,
                )  # fmt: skip
                time.sleep(wait)
            except Exception:
                # An unknown outcome (the catalog's connection dropped during the commit): the
                # property says whether it landed.
                if self._landed(txid):
                    return
                raise
        raise self.lost_races(txid)

    def lost_races(self, txid: int) -> StateError:
        """The error of a commit of ``txid`` that lost to concurrent writers every time."""
        msg = (
            f"iceberg table {self.factory.table!r}: txid {txid} partition {self.index}: the "
            f"commit lost to concurrent writers {RETRIES} times; nothing of this partition was "
            f"written; hint: retry the commit"
        )
        return StateError(msg)

    # -- helpers --------------------------------------------------------------------------
    def _flush_rows(self) -> None:
        if self._rows:
            schema = self.factory.schema
            self._parts.append(pa.Table.from_pylist(self._rows, schema=schema))
            self._rows = []

    def _with_txid(self, data: pa.Table, txid: int) -> pa.Table:
        column = self.factory.txid_column
        if column is None:
            return data
        if column in data.column_names:
            data = data.drop_columns([column])
        return data.append_column(column, pa.array([txid] * data.num_rows, pa.int64()))

    def _landed(self, txid: int) -> bool:
        try:
            table = self.factory.load_table()
        except Exception:  # still unreachable: the original error says more
            return False
        return table is not None and self.holds_in(table, txid)

    def holds_in(self, table: Any, txid: int) -> bool:
        """Whether this partition must write nothing of ``txid``: the app wrote a later txid
        (so ``txid`` is complete in the table: the coordinator commits txids in order), or this
        partition wrote ``txid``. A replay of the newest txid with another partition count is
        refused: which of its rows landed cannot be told."""
        props = table.properties
        last = props.get(self.app_key)
        if last is not None:
            last_txid, _, count = last.partition("/")
            if int(last_txid) > txid:
                log.info(
                    "iceberg table %s: txid %d is older than txid %s, the newest app %s wrote "
                    "(%s partitions; this replay has %d): complete in the table, partition %d "
                    "writes nothing",
                    self.factory.table, txid, last_txid, self.factory.app_id, count, self.count,
                    self.index,
                )  # fmt: skip
                return True
            if int(last_txid) == txid and int(count) != self.count:
                msg = (
                    f"iceberg table {self.factory.table!r}: txid {txid} was written with {count} "
                    f"partitions and is committed again with {self.count}; writing would repeat "
                    f"rows. Nothing was written; hint: replay the txid with the topology's "
                    f"parallelism of its first commit (docs/reliability.md: a txid's shape on "
                    f"replay)"
                )
                raise StateError(msg)
        mine = props.get(self.partition_key)
        if mine is not None and int(mine) >= txid:
            log.info(
                "iceberg table %s: txid %d partition %d already written (txid %s): skipped",
                self.factory.table, txid, self.index, mine,
            )  # fmt: skip
            return True
        return False

    def plan_write(self, batch: pa.Schema, table: pa.Schema | None, txid: int) -> SchemaPlan:
        """How ``batch`` is written into ``table`` (``None``: the table is made from it)."""
        return plan_schema(
            batch,
            table,
            evolve=self.factory.evolve_schema,
            where=f"iceberg table {self.factory.table!r}, txid {txid}",
            keys=(*self.factory.merge_keys, *(c for c, _ in self.factory.partition_by)),
        )

    def _write(self, table: Any, data: pa.Table, txid: int) -> None:
        where = f"iceberg table {self.factory.table!r}, txid {txid}"
        plan = self.plan_write(data.schema, table.schema().as_arrow(), txid)
        data = align(data, plan)
        summary = {
            "trident.app-id": self.factory.app_id,
            "trident.txid": str(txid),
            "trident.partition": f"{self.index}/{self.count}",
        }
        tx = no_rebase_transaction(table)
        if plan.added:
            with tx.update_schema() as update:
                update.union_by_name(pa.schema(list(plan.added)))
            log.warning("%s: columns %s added to the table", where, [f.name for f in plan.added])
        keys = list(self.factory.merge_keys)
        if keys:
            _upsert(tx, _last_per_key(data, keys), keys, summary)
        else:
            tx.append(data, snapshot_properties=summary)
        tx.set_properties({self.partition_key: str(txid), self.app_key: f"{txid}/{self.count}"})
        tx.commit_transaction()


def _upsert(tx: Any, data: pa.Table, keys: list[str], summary: dict[str, str]) -> None:
    """Upsert ``data`` (one row per key) on ``keys`` in ``tx``. A ``None`` key field is a key:
    pyiceberg's upsert cannot match it (``EqualTo(k, None)`` is refused), so the rows of such
    keys replace theirs by a delete (``IsNull``) and an append, in the same transaction."""
    from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Or, Reference

    valid = pc.is_valid(data.column(keys[0]))
    for k in keys[1:]:
        valid = pc.and_(valid, pc.is_valid(data.column(k)))
    null = pc.invert(valid)
    nulls = data.filter(null)
    plain = data.filter(pc.invert(null)) if nulls.num_rows else data
    if plain.num_rows:
        tx.upsert(plain, join_cols=keys, snapshot_properties=summary)
    if not nulls.num_rows:
        return
    matches: list[BooleanExpression] = []
    for row in nulls.select(keys).to_pylist():
        terms = [
            IsNull(term=Reference(k))
            if row[k] is None
            else EqualTo(term=Reference(k), value=row[k])
            for k in keys
        ]
        matches.append(terms[0] if len(terms) == 1 else And(*terms))
    with warnings.catch_warnings():  # a new key matches nothing: pyiceberg warns
        warnings.filterwarnings("ignore", "Delete operation did not match any records")
        tx.delete(matches[0] if len(matches) == 1 else Or(*matches), snapshot_properties=summary)
    tx.append(nulls, snapshot_properties=summary)


def _last_per_key(data: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows of ``data`` with the last row of each key (an upsert refuses duplicate keys)."""
    if data.num_rows < 2:
        return data
    index = pa.array(range(data.num_rows), pa.int64())
    last = (
        data.select(list(keys))
        .append_column("__row", index)
        .group_by(list(keys), use_threads=False)
        .aggregate([("__row", "max")])
        .column("__row_max")
    )
    if len(last) == data.num_rows:
        return data
    return data.take(pc.take(last, pc.sort_indices(last)))


class IcebergWriter(StateUpdater[IcebergState]):
    """Writes each tuple (its fields as columns, or only ``fields``) to an :class:`IcebergState`."""

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        self.fields = None if fields is None else tuple(fields)

    def update_state(
        self, state: IcebergState, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        """Add the partition's tuples to the state's commit in progress."""
        if self.fields is None:
            state.write([dict(zip(t.fields, t.values, strict=True)) for t in tuples])
        else:
            state.write([{f: t.get(f) for f in self.fields} for t in tuples])
