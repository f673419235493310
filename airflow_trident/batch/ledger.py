"""The commit ledger: one row per committed batch in the state database, for people and
dashboards (``SELECT * FROM trident_commit_ledger ORDER BY txid``), and the batch archive: each
row keeps the batch's metadata (every spout's, and every partition's), so a batch can be replayed
long after ZooKeeper rotated it away — to rebuild a new state over a txid range
(:mod:`airflow_trident.batch.rebuild`).

>>> ledger = CommitLedger("sqlite://")
>>> ledger.record({"topology": "wc", "txid": 1, "attempt_id": 2, "records_in": 10,
...                "keys_written": {"counts": 7}, "emitted": {"sentences": {"p0": 10}}})
>>> [(r["txid"], r["attempt_id"], r["records_in"]) for r in ledger.rows("wc")]
[(1, 2, 10)]
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from airflow_trident.state.sql.schema import create_table_if_absent

__all__ = ["LEDGER_TABLE", "REBUILD_TABLE", "CommitLedger"]

LEDGER_TABLE = "trident_commit_ledger"
REBUILD_TABLE = "trident_rebuild_progress"

_metadata = sa.MetaData()
_ledger = sa.Table(
    LEDGER_TABLE,
    _metadata,
    sa.Column("topology", sa.String(63), primary_key=True),
    sa.Column("txid", sa.BigInteger, primary_key=True),
    sa.Column("attempt_id", sa.Integer, nullable=False),
    sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("records_in", sa.BigInteger, nullable=False),
    sa.Column("keys_written", sa.Text, nullable=False),
    sa.Column("emitted", sa.Text, nullable=False),
    sa.Column("batch_meta", sa.Text, nullable=True),
    sa.Column("run_id", sa.String(250), nullable=True),
    sa.Column("process_started_at", sa.DateTime(timezone=True), nullable=True),
)


_rebuilds = sa.Table(
    REBUILD_TABLE,
    _metadata,
    sa.Column("topology", sa.String(63), primary_key=True),
    sa.Column("state", sa.String(63), primary_key=True),
    sa.Column("txid", sa.BigInteger, nullable=False),
    sa.Column("rebuilt_at", sa.DateTime(timezone=True), nullable=False),
)


def _moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


class CommitLedger:
    """Records committed batches in ``trident_commit_ledger`` (created on first use)."""

    def __init__(self, url_or_engine: str | sa.Engine) -> None:
        self._engine = (
            url_or_engine
            if isinstance(url_or_engine, sa.Engine)
            else sa.create_engine(url_or_engine)
        )
        self._created = False

    def _table(self) -> sa.Table:
        if not self._created:
            with self._engine.connect() as conn:
                for table in (_ledger, _rebuilds):
                    create_table_if_absent(conn, table)
            columns = {c["name"] for c in sa.inspect(self._engine).get_columns(LEDGER_TABLE)}
            added = (("batch_meta", "TEXT"), ("run_id", "VARCHAR(250)"),
                     ("process_started_at", "TIMESTAMP"))  # fmt: skip
            for name, kind in added:
                if name not in columns:  # a ledger from before the archive / the run column
                    with self._engine.begin() as conn:
                        conn.execute(
                            sa.text(f"ALTER TABLE {LEDGER_TABLE} ADD COLUMN {name} {kind}")
                        )
            self._created = True
        return _ledger

    def record(self, summary: dict[str, Any], batch_meta: dict[str, Any] | None = None) -> None:
        """Record a commit summary (``BatchSteps.commit``'s) and the batch's metadata; a replay
        keeps the first row."""
        table = self._table()
        key = {"topology": summary["topology"], "txid": summary["txid"]}
        row = {
            **key,
            "attempt_id": summary["attempt_id"],
            "committed_at": datetime.now(UTC),
            "records_in": summary["records_in"],
            "keys_written": json.dumps(summary["keys_written"], sort_keys=True),
            "emitted": json.dumps(summary["emitted"], sort_keys=True),
            "batch_meta": None if batch_meta is None else json.dumps(batch_meta, sort_keys=True),
            "run_id": summary.get("run_id"),  # the run that committed the batch
            # when its committed attempt started processing (a later replay's attempt hides it)
            "process_started_at": _moment(summary.get("process_started_at")),
        }
        with self._engine.begin() as conn:
            exists = conn.execute(
                sa.select(table.c.txid).where(
                    table.c.topology == key["topology"], table.c.txid == key["txid"]
                )
            ).first()
            if exists is None:
                conn.execute(table.insert().values(**row))

    def rows(self, topology: str) -> list[dict[str, Any]]:
        """Every recorded commit of ``topology``, in txid order."""
        table = self._table()
        with self._engine.connect() as conn:
            result = conn.execute(
                sa.select(table).where(table.c.topology == topology).order_by(table.c.txid)
            )
            return [dict(r._mapping) for r in result]

    def recent(self, topology: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits of ``topology``, in txid order, without the batch
        archive (``airflow-trident status`` and the UI view read these)."""
        table = self._table()
        columns = [c for c in table.c if c.name != "batch_meta"]
        with self._engine.connect() as conn:
            result = conn.execute(
                sa.select(*columns)
                .where(table.c.topology == topology)
                .order_by(table.c.txid.desc())
                .limit(limit)
            )
            return [dict(r._mapping) for r in reversed(result.all())]

    def row(self, topology: str, txid: int) -> dict[str, Any] | None:
        """The commit of ``txid`` as :meth:`recent` gives it (``None`` if not recorded)."""
        table = self._table()
        columns = [c for c in table.c if c.name != "batch_meta"]
        with self._engine.connect() as conn:
            found = conn.execute(
                sa.select(*columns).where(table.c.topology == topology, table.c.txid == txid)
            ).first()
        return None if found is None else dict(found._mapping)

    def batch_meta(self, topology: str, txid: int) -> dict[str, Any] | None:
        """The archived metadata of committed batch ``txid`` (``None`` if not recorded)."""
        table = self._table()
        with self._engine.connect() as conn:
            text = conn.execute(
                sa.select(table.c.batch_meta).where(
                    table.c.topology == topology, table.c.txid == txid
                )
            ).scalar()
        return None if text is None else dict(json.loads(text))

    def last_txid(self, topology: str) -> int:
        """The newest txid recorded for ``topology`` (0 if none)."""
        table = self._table()
        with self._engine.connect() as conn:
            found = conn.execute(
                sa.select(sa.func.max(table.c.txid)).where(table.c.topology == topology)
            ).scalar()
        return int(found or 0)

    def rebuilt_txid(self, topology: str, state: str) -> int:
        """The last txid a rebuild applied to ``state`` of ``topology`` (0 if none)."""
        self._table()
        with self._engine.connect() as conn:
            found = conn.execute(
                sa.select(_rebuilds.c.txid).where(
                    _rebuilds.c.topology == topology, _rebuilds.c.state == state
                )
            ).scalar()
        return int(found or 0)

    def record_rebuilt(self, topology: str, state: str, txid: int) -> None:
        """Record that a rebuild applied txids up to ``txid`` to ``state``."""
        self._table()
        key = (_rebuilds.c.topology == topology) & (_rebuilds.c.state == state)
        values = {"txid": txid, "rebuilt_at": datetime.now(UTC)}
        with self._engine.begin() as conn:
            if conn.execute(sa.update(_rebuilds).where(key).values(**values)).rowcount == 0:
                conn.execute(_rebuilds.insert().values(topology=topology, state=state, **values))
