"""Downstream of seed 001: a DAG scheduled on the committed word counts.

The commit task of `trident_word_count` adds one event to the asset `trident://word_count` per
committed txid (extra: topology, txid, records in, keys written); the replay of a committed txid
adds none. Each run of this DAG receives the events since its previous run, so every committed
txid reaches exactly one run (Airflow puts events that arrive while no run is pending into the
same run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_trident.operators.assets import committed_asset

COUNTS = committed_asset("word_count")

with DAG(
    "trident_word_count_report",
    schedule=[COUNTS],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trident"],
    doc_md=__doc__,
):

    @task
    def committed_txids(*, triggering_asset_events: Any = None) -> list[int]:
        """The txids this run is about (read their counts from the state database)."""
        events = triggering_asset_events[COUNTS] if triggering_asset_events else []
        txids = sorted(int(event.extra["txid"]) for event in events)
        print(f"committed txids of word_count in this run: {txids}")
        return txids

    committed_txids()
