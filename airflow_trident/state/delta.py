"""Exactly-once into a Delta Lake table, with delta-rs (the ``deltalake`` package).

``stream.partition_persist(delta_state(path, app_id), fields, DeltaWriter())`` appends (or, with
``merge_keys``, MERGEs) each batch's rows into the Delta table at ``path``. Each partition's rows
of batch ``txid`` go in *one* Delta commit that also records Delta's application transaction
``(app id, version=txid)``; before writing, the state reads that version back from the table, so
a replayed txid (the commit's compare-and-set in ZooKeeper failed after the Delta commit, a cleared
Airflow run, a backfill of committed txids) is skipped by the table itself: no row twice, no
row lost. It is a *transactional* state: a replay of a txid must carry the same rows, as
transactional spouts guarantee.

Application transaction ids, for state ``app_id`` and partition ``i`` of ``n``:

* ``<app_id>.p<i>of<n>`` — version = the last txid this partition wrote (the skip check);
* ``<app_id>`` — version = ``txid * 4096 + n``: the last txid written and its partition count.
  A txid below it is complete in the table (txids commit in order) and writes nothing, whatever
  its partition count; that txid itself replayed with another partition count is refused (it
  would write the rows again under other ids) with :class:`~airflow_trident.errors.StateError`.

Examples
--------
>>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
>>> from deltalake import DeltaTable
>>> path = tempfile.mkdtemp()
>>> sink = delta_state(path, "doc_topology.events").make_state()
>>> for txid in (1, 2, 2):  # txid 2 is replayed
...     sink.begin_commit(txid)
...     sink.write([{"word": "w", "n": txid}])
...     sink.commit(txid)
>>> table = pq.read_table(DeltaTable(path).file_uris())
>>> sorted(zip(table["n"].to_pylist(), table["trident_txid"].to_pylist()))
[(1, 1), (2, 2)]
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError, StateError
from airflow_trident.names import Dataset, location_dataset, validate_name
from airflow_trident.operation.base import StateUpdater
from airflow_trident.state.base import StateType
from airflow_trident.state.schema_evolution import align, plan_schema
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = ["DeltaState", "DeltaStateFactory", "DeltaWriter", "delta_state"]

log = logging.getLogger(__name__)

MAX_PARTITIONS = 4095
"""The largest commit partition count (it is encoded in the app-level version)."""
_COUNT_BASE = 4096
_RETRIES = 8


class DeltaStateFactory:
    """Makes the :class:`DeltaState` of each commit partition (see :func:`delta_state`)."""

    state_type = StateType.TRANSACTIONAL
    txids_by_partition = True
    """The table records the txid each commit partition wrote, not a txid per key: a txid's
    replay must spread its rows over the partitions as its first commit did
    (:mod:`airflow_trident.runtime.shape`)."""

    def __init__(
        self,
        path: str,
        app_id: str,
        *,
        merge_keys: Sequence[str] = (),
        schema: pa.Schema | None = None,
        txid_column: str | None = "trident_txid",
        storage_options: Mapping[str, str] | None = None,
        evolve_schema: bool = False,
        conn_id: str | None = None,
    ) -> None:
        if not path:
            msg = "delta_state: path is empty; hint: a local directory or an s3:// URI"
            raise ConfigurationError(msg)
        if not isinstance(app_id, str) or not app_id.strip():
            msg = f"delta_state({path!r}): app_id must be a non-empty string, e.g. 'topology.state'"
            raise ConfigurationError(msg)
        if isinstance(merge_keys, str):
            msg = f"delta_state({path!r}): merge_keys is a sequence of names, not {merge_keys!r}"
            raise ConfigurationError(msg)
        self.path = path
        self.app_id = app_id
        self.merge_keys = tuple(validate_name(k, kind="merge key") for k in merge_keys)
        self.schema = schema
        self.txid_column = (
            None if txid_column is None else validate_name(txid_column, kind="txid column")
        )
        self.storage_options = dict(storage_options or {})
        self.evolve_schema = evolve_schema
        self.conn_id = None if conn_id is None else connections.declare(conn_id)

    def resolved_options(self) -> dict[str, str] | None:
        """The delta-rs storage options: the connection's (resolved now, at run time), then
        ``storage_options`` over them; ``None`` when there are none. They hold credentials:
        never log them."""
        options = {} if self.conn_id is None else connections.storage_options(self.conn_id)
        options.update(self.storage_options)
        return options or None

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The table written, as OpenLineage names files: by its storage URI (``s3://bucket``
        and the key, ``file`` and the absolute path...).

        >>> delta_state("s3://lake/tables/events", "wc.events").openlineage_datasets()
        [('s3://lake', 'tables/events')]
        """
        return [location_dataset(self.path)]

    def __repr__(self) -> str:
        mode = f"merge on {list(self.merge_keys)}" if self.merge_keys else "append"
        return f"DeltaStateFactory({self.path!r}, {self.app_id!r}, {mode})"

    def spark_append(self, updater: Any) -> str | None:
        """``"delta"`` when Spark's Delta writer can append what ``updater`` stages
        (:mod:`airflow_trident.runtime.spark.lakehouse`): the plain :class:`DeltaWriter`,
        appending (no ``merge_keys``, no ``evolve_schema``) to a table Spark reaches with its
        own file-system configuration (no ``conn_id``, no ``storage_options``).

        >>> delta_state("/t", "a").spark_append(DeltaWriter())
        'delta'
        >>> delta_state("/t", "a", merge_keys=["k"]).spark_append(DeltaWriter()) is None
        True
        """
        own = isinstance(updater, DeltaWriter) and self.conn_id is None
        plain = not (self.merge_keys or self.evolve_schema or self.storage_options)
        return "delta" if own and plain else None

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> DeltaState:
        """The Delta state of commit partition ``partition_index`` of ``num_partitions``."""
        if not 0 <= partition_index < num_partitions <= MAX_PARTITIONS:
            msg = (
                f"delta table {self.path!r}: partition {partition_index} of {num_partitions} "
                f"does not exist (at most {MAX_PARTITIONS} partitions)"
            )
            raise ConfigurationError(msg)
        return DeltaState(self, partition_index, num_partitions)


def delta_state(
    path: str,
    app_id: str,
    *,
    merge_keys: Sequence[str] = (),
    schema: pa.Schema | None = None,
    txid_column: str | None = "trident_txid",
    storage_options: Mapping[str, str] | None = None,
    evolve_schema: bool = False,
    conn_id: str | None = None,
) -> DeltaStateFactory:
    """A transactional state writing each batch's rows into the Delta table at ``path``.

    Parameters
    ----------
    path:
        The table's directory or URI (created by the first commit).
    app_id:
        The application transaction id: name it after the topology and the state
        (``"word_topology.events"``); two sinks writing one table need two ids.
    merge_keys:
        Empty: append the rows. Else MERGE them on these columns (update a matching row, insert
        the others; the last row of a key in one partition wins).
    schema:
        The Arrow schema of the rows (with the txid column, if any); inferred when ``None``.
    txid_column:
        A column holding the txid that wrote each row (``None``: none).
    storage_options:
        delta-rs storage options that are no secret (``{"AWS_REGION": "eu-west-1"}``); over
        the connection's, when both give one.
    evolve_schema:
        A column the table lacks is added as a nullable column (in the same Delta commit as
        the rows); ``False`` refuses it. Incompatible changes are always refused before
        writing (:mod:`airflow_trident.state.schema_evolution`).
    conn_id:
        An Airflow connection with the object store's credentials (an ``aws`` connection, or
        any connection whose extra has ``storage_options``), read when the state commits, in
        the commit task or on a Spark executor, never when the DAG file is parsed; see
        docs/howto/connections.md. Keep credentials out of ``storage_options``: a DAG file
        is no place for them.
    """
    return DeltaStateFactory(
        path,
        app_id,
        merge_keys=merge_keys,
        schema=schema,
        txid_column=txid_column,
        storage_options=storage_options,
        evolve_schema=evolve_schema,
        conn_id=conn_id,
    )


class DeltaState:
    """One commit partition's writer: rows collected between ``begin_commit(txid)`` and
    ``commit(txid)`` go into one Delta commit carrying the application transaction."""

    def __init__(self, factory: DeltaStateFactory, index: int, count: int) -> None:
        self.factory = factory
        self.index = index
        self.count = count
        self.partition_app_id = f"{factory.app_id}.p{index}of{count}"
        self._txid: int | None = None
        self._rows: list[dict[str, Any]] = []

    @functools.cached_property
    def _options(self) -> dict[str, str] | None:
        """The factory's storage options, resolved once per state (at its first use)."""
        return self.factory.resolved_options()

    def begin_commit(self, txid: int) -> None:
        """Start collecting batch ``txid``'s rows (rows of an unfinished commit are dropped)."""
        self._txid, self._rows = txid, []

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Add rows (column -> value) to the commit in progress."""
        if self._txid is None:
            msg = f"delta table {self.factory.path!r}: write outside a commit; call begin_commit"
            raise StateError(msg)
        self._rows.extend(dict(r) for r in rows)

    def rollback(self) -> None:
        """Drop the rows of the commit in progress (nothing was written)."""
        self._txid, self._rows = None, []

    def written_txid(self) -> int | None:
        """The last txid this partition committed into the table (``None``: none yet)."""
        table = self._table()
        return None if table is None else table.transaction_version(self.partition_app_id)

    def holds(self, txid: int) -> bool:
        """Whether the table already holds this partition's rows of ``txid`` (by its
        application transactions, whoever wrote them: this writer or Spark's Delta writer,
        :mod:`airflow_trident.runtime.spark.lakehouse`), so a commit of ``txid`` writes nothing.

        Raises
        ------
        StateError
            If ``txid`` is the app's last and was written with another partition count.
        """
        table = self._table(txid)
        return table is not None and self._already_written(table, txid)

    def commit(self, txid: int) -> None:
        """Write the rows in one Delta commit, unless the table already holds ``txid`` for this
        partition (a replay): then nothing is written.

        Raises
        ------
        StateError
            If no commit of ``txid`` is open, the txid was written with another partition count,
            or the table kept refusing the commit (concurrent writers).
        """
        if self._txid != txid:
            msg = (
                f"delta table {self.factory.path!r}: commit({txid}) but the open commit is "
                f"{self._txid}; hint: call begin_commit({txid}) first"
            )
            raise StateError(msg)
        rows, self._txid, self._rows = self._rows, None, []
        from deltalake.exceptions import CommitFailedError
        from deltalake.exceptions import SchemaMismatchError as DeltaSchemaMismatch

        for _ in range(_RETRIES):
            table = self._table(txid)
            if table is not None and self._already_written(table, txid):
                return
            if not rows:
                return
            try:
                self._write(table, rows, txid)
                return
            except CommitFailedError as exc:  # a concurrent writer won: look again
                log.info(
                    "delta table %s: txid %d commit conflict (%s); retrying",
                    self.factory.path, txid, exc,
                )  # fmt: skip
            except DeltaSchemaMismatch as exc:
                # another partition of this txid added a column after this one read the
                # schema: plan again against the table as it is now (the rows get nulls)
                if not self._moved_since(table):
                    msg = (
                        f"delta table {self.factory.path!r}: txid {txid} partition "
                        f"{self.index}: delta-rs refused the rows' schema: {_plain(str(exc))}; "
                        f"nothing of this partition was written; hint: give the sink a "
                        f"schema= that matches the table"
                    )
                    raise StateError(msg) from exc
                log.info(
                    "delta table %s: txid %d partition %d: the schema changed under the "
                    "write (%s); planning again",
                    self.factory.path, txid, self.index, _plain(str(exc)),
                )  # fmt: skip
            except OSError as exc:  # delta-rs: the path cannot hold a table (ANSI-coloured)
                raise self._unusable(txid, _plain(str(exc))) from exc
        msg = (
            f"delta table {self.factory.path!r}: txid {txid} partition {self.index}: the commit "
            f"failed {_RETRIES} times on concurrent writers; nothing of this partition was "
            f"written; hint: retry the commit"
        )
        raise StateError(msg)

    # -- helpers --------------------------------------------------------------------------
    def _table(self, txid: int | None = None) -> Any:
        from deltalake import DeltaTable

        local = _local_path(self.factory.path)
        if local is not None and local.exists() and not local.is_dir():
            raise self._unusable(txid, "it is a file, not a directory")
        options = self._options
        try:
            if not DeltaTable.is_deltatable(self.factory.path, storage_options=options):
                return None
            return DeltaTable(self.factory.path, storage_options=options)
        except OSError as exc:
            raise self._unusable(txid, _plain(str(exc))) from exc

    def _moved_since(self, table: Any) -> bool:
        """Whether another writer committed to the table after ``table`` was read (or made
        it, when ``table`` is ``None``)."""
        now = self._table()
        if now is None:
            return False
        return table is None or int(now.version()) > int(table.version())

    def _unusable(self, txid: int | None, why: str) -> StateError:
        """The error for a path that cannot hold the Delta table: state, txid, path, hint."""
        batch = "" if txid is None else f" txid {txid}:"
        msg = (
            f"delta state {self.factory.app_id!r} (partition {self.index} of {self.count}):"
            f"{batch} the Delta table path {self.factory.path!r} cannot be used: {why}; nothing "
            f"of this partition was written; hint: point delta_state at a directory (new or "
            f"holding a Delta table) and retry the commit"
        )
        return StateError(msg)

    def _already_written(self, table: Any, txid: int) -> bool:
        """Whether this partition must write nothing of ``txid``: the app wrote a later txid
        (so ``txid`` is complete in the table: the coordinator commits txids in order), or this
        partition wrote ``txid``. A replay of the newest txid with another partition count is
        refused: which of its rows landed cannot be told."""
        last = table.transaction_version(self.factory.app_id)
        if last is not None:
            last_txid, count = divmod(last, _COUNT_BASE)
            if last_txid > txid:
                log.info(
                    "delta table %s: txid %d is older than txid %d, the newest app %s wrote "
                    "(%d partitions; this replay has %d): complete in the table, partition %d "
                    "writes nothing",
                    self.factory.path, txid, last_txid, self.factory.app_id, count, self.count,
                    self.index,
                )  # fmt: skip
                return True
            if last_txid == txid and count != self.count:
                msg = (
                    f"delta table {self.factory.path!r}: txid {txid} was written with {count} "
                    f"partitions and is committed again with {self.count}; writing would repeat "
                    f"rows. Nothing was written; hint: replay the txid with the topology's "
                    f"parallelism of its first commit (docs/reliability.md: a txid's shape on "
                    f"replay)"
                )
                raise StateError(msg)
        mine = table.transaction_version(self.partition_app_id)
        if mine is not None and mine >= txid:
            log.info(
                "delta table %s: txid %d partition %d already written (version %d): skipped",
                self.factory.path, txid, self.index, mine,
            )  # fmt: skip
            return True
        return False

    def _write(self, table: Any, rows: list[dict[str, Any]], txid: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        column = self.factory.txid_column
        if column is not None:
            rows = [{**r, column: txid} for r in rows]
        data = pa.Table.from_pylist(rows, schema=self.factory.schema)
        plan = plan_schema(
            data.schema,
            None if table is None else pa.schema(table.schema().to_arrow()),
            evolve=self.factory.evolve_schema,
            where=f"delta table {self.factory.path!r}, txid {txid}",
            keys=self.factory.merge_keys,
        )
        data = align(data, plan)
        if plan.added:
            log.warning(
                "delta table %s: txid %d adds columns %s",
                self.factory.path, txid, [f.name for f in plan.added],
            )  # fmt: skip
        props = CommitProperties(
            app_transactions=[
                Transaction(app_id=self.partition_app_id, version=txid),
                Transaction(app_id=self.factory.app_id, version=txid * _COUNT_BASE + self.count),
            ]
        )
        options = self._options
        keys = self.factory.merge_keys
        if not keys or table is None:
            write_deltalake(
                self.factory.path,
                _last_per_key(data, keys) if keys else data,
                mode="append",
                schema_mode="merge" if plan.added else None,
                commit_properties=props,
                storage_options=options,
            )
            return
        # NULL-safe: a None key field is a key (``t.k = s.k`` never matches it)
        predicate = " AND ".join(f"t.{k} IS NOT DISTINCT FROM s.{k}" for k in keys)
        (
            table.merge(
                _last_per_key(data, keys),
                predicate=predicate,
                source_alias="s",
                target_alias="t",
                merge_schema=bool(plan.added),
                commit_properties=props,
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(text: str) -> str:
    """``text`` without ANSI colour codes (delta-rs colours its errors)."""
    return " ".join(_ANSI.sub("", text).split())


def _local_path(path: str) -> Path | None:
    """The local path of a table location (a plain path or ``file://``), else ``None``."""
    if path.startswith("file://"):
        return Path(path[len("file://") :])
    return None if "://" in path else Path(path)


def _last_per_key(data: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows of ``data`` with the last row of each key (MERGE refuses duplicate keys)."""
    rows = data.to_pylist()
    last = {tuple(r[k] for k in keys): i for i, r in enumerate(rows)}
    return data.take(sorted(last.values()))


class DeltaWriter(StateUpdater[DeltaState]):
    """Writes each tuple (its fields as columns, or only ``fields``) to a :class:`DeltaState`."""

    def __init__(self, fields: Sequence[str] | None = None) -> None:
        self.fields = None if fields is None else tuple(fields)

    def update_state(
        self, state: DeltaState, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        """Add the partition's tuples to the state's commit in progress."""
        if self.fields is None:
            state.write([dict(zip(t.fields, t.values, strict=True)) for t in tuples])
        else:
            state.write([{f: t.get(f) for f in self.fields} for t in tuples])
