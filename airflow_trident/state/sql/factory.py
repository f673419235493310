"""``sql_state(...)``: a state factory whose map states live in one SQL table.

Making the factory validates the options and does no I/O (it is safe in a DAG file, parsed often);
the table is created by the first :meth:`SqlMapStateFactory.make_state`. Every state made by
factories with the same URL shares one engine (one connection pool).

A factory made with no URL (``sql_state(None, "word_counts", ...)``) lives in *the run's state
database*: the DAG's ``state_conn_id`` connection, a CLI command's ``--state-conn-id``, the URL
a Spark job was given (see :class:`~airflow_trident.state.binding.StateBinding`); used on its
own, it falls back to ``TRIDENT_STATE_URL``, else SQLite under ``~/.airflow_trident``
(:func:`default_state_url`).

Examples
--------
>>> from airflow_trident.state.combine import CombineOp
>>> factory = sql_state("sqlite://", "doc_counts", "transactional", value_type="bigint")
>>> counts = factory.make_state()
>>> counts.begin_commit(1)
>>> counts.multi_combine([("man",), ("dog",)], [2, 1], CombineOp.SUM)
>>> counts.commit(1)
>>> counts.multi_get([("man",), ("dog",), ("cat",)])
[2, 1, None]
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import sqlalchemy as sa

from airflow_trident.errors import ConfigurationError
from airflow_trident.names import Dataset, table_dataset
from airflow_trident.state.base import StateType
from airflow_trident.state.map.backing import BackingMap
from airflow_trident.state.map.base import RuleMap
from airflow_trident.state.map.cached import CachedMap
from airflow_trident.state.map.non_transactional import NonTransactionalMap
from airflow_trident.state.map.opaque import OpaqueMap
from airflow_trident.state.map.transactional import TransactionalMap
from airflow_trident.state.sql.engine import describe_url, resolve_engine
from airflow_trident.state.sql.schema import ensure_table, migrate_null_keys
from airflow_trident.state.sql.store import COPY_THRESHOLD, SqlBackingMap
from airflow_trident.state.sql.table import TableLayout

__all__ = ["SqlMapStateFactory", "default_state_url", "sql_state"]

STATE_URL_ENV = "TRIDENT_STATE_URL"


def default_state_url() -> str:
    """The state database of a SQL state made without a URL and used outside a run that gives
    one: ``TRIDENT_STATE_URL``, else SQLite in ``$TRIDENT_HOME`` (``~/.airflow_trident``)."""
    url = os.environ.get(STATE_URL_ENV)
    if url:
        return url
    home = Path(os.environ.get("TRIDENT_HOME", Path.home() / ".airflow_trident"))
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'state.db'}"


_MAPS: dict[StateType, type[RuleMap]] = {
    StateType.TRANSACTIONAL: TransactionalMap,
    StateType.OPAQUE: OpaqueMap,
    StateType.NON_TRANSACTIONAL: NonTransactionalMap,
}


class SqlMapStateFactory:
    """Makes the map state of one partition over a :class:`SqlBackingMap`.

    ``make_state`` returns a ``TransactionalMap``, ``OpaqueMap`` or ``NonTransactionalMap`` (by
    ``state_type``) over a new store on the shared engine, behind a ``CachedMap`` of
    ``cache_size`` entries when ``cache_size > 0``. All partitions share the table.
    ``url_or_engine=None`` leaves the database to the run (:meth:`located_at`).
    ``txid_index=True`` indexes an opaque table's ``txid`` column: the commit of a txid whose
    earlier commit attempt wrote state looks up the keys stored at that txid (to revert the ones
    this attempt does not write); without the index that is a scan of the table, paid only on
    such replays, while the index costs every write (~15% of the PostgreSQL commit throughput
    measured by ``bench/commit.py``).

    Examples
    --------
    >>> factory = SqlMapStateFactory("sqlite://", "doc_totals", "opaque", cache_size=100)
    >>> state = factory.make_state(partition_index=0, num_partitions=2)
    >>> type(state).__name__, type(state.backing).__name__
    ('OpaqueMap', 'CachedMap')
    """

    def __init__(
        self,
        url_or_engine: str | sa.URL | sa.Engine | None,
        table: str,
        state_type: StateType | str,
        *,
        key_fields: Sequence[str] = ("key",),
        key_types: Mapping[str, type] | None = None,
        value_type: str = "json",
        cache_size: int = 0,
        create: bool = True,
        copy_threshold: int = COPY_THRESHOLD,
        txid_index: bool = False,
        value_fields: Sequence[str] | None = None,
        value_types: Mapping[str, str] | None = None,
    ) -> None:
        self.layout = TableLayout.build(
            table,
            state_type=state_type,
            key_fields=key_fields,
            key_types=key_types,
            value_type=value_type,
            txid_index=txid_index,
            value_fields=value_fields,
            value_types=value_types,
        )
        if cache_size < 0:
            msg = f"state table {table!r}: cache_size must be >= 0, got {cache_size}"
            raise ConfigurationError(msg)
        self._target = url_or_engine
        self.cache_size = cache_size
        self._create = create
        self._copy_threshold = copy_threshold
        self._stored: TableLayout | None = None  # the table's, once made (legacy: no None keys)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        """Picklable (given a URL, not an engine): the lock is not carried over."""
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def state_type(self) -> StateType:
        """The rule of the states made."""
        return self.layout.state_type

    def __repr__(self) -> str:
        where = "the run's database" if self._target is None else describe_url(self._target)
        return (
            f"SqlMapStateFactory({where!r}, {self.layout.qualified!r}, "
            f"{self.state_type.value!r}, cache_size={self.cache_size})"
        )

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The state's table, as OpenLineage names it, in its own database or else the run's
        (``state_url``): ``postgres://host:port`` and ``database.schema.table``, or
        ``sqlite://<file>`` and the table.

        >>> SqlMapStateFactory("postgresql://u:pw@pg/dw", "analytics.counts", "opaque"
        ...                    ).openlineage_datasets()
        [('postgres://pg:5432', 'dw.analytics.counts')]
        >>> SqlMapStateFactory(None, "counts", "opaque").openlineage_datasets("sqlite:////s.db")
        [('sqlite:///s.db', 'counts')]
        """
        target = self._target
        if isinstance(target, sa.Engine):
            target = target.url
        url = target.render_as_string(hide_password=False) if isinstance(target, sa.URL) else (
            target or state_url)  # fmt: skip
        return [table_dataset(url, self.layout.name, self.layout.schema)]

    def located_at(self, url: str) -> SqlMapStateFactory:
        """This factory in the database ``url`` when it was made without one, else itself.

        >>> unbound = SqlMapStateFactory(None, "located_counts", "opaque")
        >>> unbound.located_at("sqlite://")
        SqlMapStateFactory('sqlite://', 'located_counts', 'opaque', cache_size=0)
        >>> SqlMapStateFactory("sqlite:///a.db", "t", "opaque").located_at("sqlite://")
        SqlMapStateFactory('sqlite:///a.db', 't', 'opaque', cache_size=0)
        """
        if self._target is not None:
            return self
        located = copy.copy(self)
        located.__setstate__({**self.__getstate__(), "_target": url, "_stored": None})
        return located

    def make_state(self, partition_index: int = 0, num_partitions: int = 1) -> RuleMap:
        """The map state of partition ``partition_index`` of ``num_partitions``.

        Raises
        ------
        StateStoreUnavailableError
            If the table must be created and the database cannot be reached.
        """
        if not 0 <= partition_index < num_partitions:
            msg = (
                f"state table {self.layout.name!r}: partition {partition_index} of "
                f"{num_partitions} does not exist; hint: 0 <= partition_index < num_partitions"
            )
            raise ConfigurationError(msg)
        engine = self._engine()
        with self._lock:
            if self._create and self._stored is None:
                # the table as it is: one made before None keys is used in its legacy form
                self._stored = ensure_table(engine, self.layout)
            layout = self._stored or self.layout
        store: BackingMap = SqlBackingMap.from_layout(
            engine, layout, copy_threshold=self._copy_threshold, checked=self._stored is not None
        )  # unchecked (create=False): the store looks at the table on its first use
        if self.cache_size > 0:
            store = CachedMap(store, max_size=self.cache_size)
        return _MAPS[self.state_type](store, name=self.layout.name)

    def migrate_null_keys(self) -> bool:
        """Make a table created before ``None`` keys could be stored take them: add its
        ``trident_null_keys`` column to the primary key, keeping every row (one transaction;
        run it while no commit writes the table). Returns whether anything changed (``False``:
        already migrated, or no table yet). States made afterwards use the new layout.

        >>> factory = sql_state("sqlite://", "doc_migrated", "transactional")
        >>> factory.migrate_null_keys()  # a table made now needs none
        False
        """
        with self._lock:
            changed = migrate_null_keys(self._engine(), self.layout)
            self._stored = None
        return changed

    def _engine(self) -> sa.Engine:
        return resolve_engine(self._target if self._target is not None else default_state_url())


def sql_state(
    url_or_engine: str | sa.URL | sa.Engine | None,
    table: str,
    state_type: StateType | str,
    *,
    key_fields: Sequence[str] = ("key",),
    key_types: Mapping[str, type] | None = None,
    value_type: str = "json",
    cache_size: int = 0,
    create: bool = True,
    txid_index: bool = False,
    value_fields: Sequence[str] | None = None,
    value_types: Mapping[str, str] | None = None,
) -> SqlMapStateFactory:
    """A state factory over the SQL table ``table`` (see :class:`SqlMapStateFactory`);
    ``url_or_engine=None``: in the run's state database.

    ``value_fields`` makes it *table-shaped*: the value is stored in typed columns named after
    the aggregate's output field(s) (``value_type`` each, or ``value_types[field]``), beside
    ``txid`` and, for opaque state, ``prev_<field>``; analysts query it with plain SQL. Without
    it the value is one ``val`` column (JSON text by default: any JSON value).

    ``table`` may name a PostgreSQL schema, ``"analytics.word_counts"``: the first state made
    creates the schema if it is absent (when the role may; an existing schema is only looked
    up) and the table in it. The run's bookkeeping tables (the commit ledger, window stores)
    stay in the connection's default schema (set its ``search_path`` with the connection's
    ``options`` extra, ``-csearch_path=analytics``, to move them too). SQLite has no schemas:
    there a schema-qualified name is a :class:`~airflow_trident.errors.ConfigurationError`
    when the state is made.

    Examples
    --------
    >>> import sqlalchemy as sa
    >>> from airflow_trident.state.combine import CombineOp
    >>> engine = sa.create_engine("sqlite://")
    >>> counts = sql_state(
    ...     engine, "word_counts", "opaque", key_fields=("word",), value_fields=("count",),
    ...     value_type="bigint",
    ... ).make_state()
    >>> counts.begin_commit(1)
    >>> counts.multi_combine([("man",), ("dog",)], [2, 1], CombineOp.SUM)
    >>> counts.commit(1)
    >>> with engine.connect() as conn:
    ...     conn.execute(sa.text("SELECT word, count FROM word_counts ORDER BY word")).all()
    [('dog', 1), ('man', 2)]
    """
    return SqlMapStateFactory(
        url_or_engine,
        table,
        state_type,
        key_fields=key_fields,
        key_types=key_types,
        value_type=value_type,
        cache_size=cache_size,
        create=create,
        txid_index=txid_index,
        value_fields=value_fields,
        value_types=value_types,
    )
