"""The commit ledger: one row per committed batch in the state database, for people and
dashboards (``SELECT * FROM trident_commit_ledger ORDER BY txid``).

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

__all__ = ["LEDGER_TABLE", "CommitLedger"]

LEDGER_TABLE = "trident_commit_ledger"

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
)


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
            _metadata.create_all(self._engine, tables=[_ledger], checkfirst=True)
            self._created = True
        return _ledger

    def record(self, summary: dict[str, Any]) -> None:
        """Record a commit summary (``BatchSteps.commit``'s); a replay keeps the first row."""
        table = self._table()
        key = {"topology": summary["topology"], "txid": summary["txid"]}
        row = {
            **key,
            "attempt_id": summary["attempt_id"],
            "committed_at": datetime.now(UTC),
            "records_in": summary["records_in"],
            "keys_written": json.dumps(summary["keys_written"], sort_keys=True),
            "emitted": json.dumps(summary["emitted"], sort_keys=True),
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
