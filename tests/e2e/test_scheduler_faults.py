"""Faults under a real Airflow scheduler, short form: one of each fault kind over a few batches
(:mod:`tests.harness.scheduler_faults`; the long run is ``scripts/faults-scheduler.sh``).

A killed commit task, a ZooKeeper and a PostgreSQL ``kill -9`` and restart, the UI's Clear of a
committed run and of a failed one (the later runs waiting for it give their slots back), and a
backfill over committed txids, while pipelined runs commit: the states must equal the
reference key by key, the ledger must hold txids 1..N.
The seed is random unless ``TRIDENT_FAULT_SEED`` is set; it is printed and in the assertion
message. Slow: ~3-4 min (servers and Airflow ~40 s, the batches and faults the rest).
Once per layout: ``standard`` (a task per step; in the test command) and ``express`` (the whole
batch in one task, ``batch.run``, killed in its commit step; its retry resumes at the commit; in
the real-scheduler tier, ``bash scripts/scheduler-test.sh``, marker ``scheduler``). Every planned
fault must be injected: the plan puts the express commit kill early, and restarts, clears of
committed runs and the backfill also land after every run ended.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.harness.scheduler_faults import (
    FAULT_KINDS,
    SchedulerFaultConfig,
    run_scheduler_faults,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.solo]


@pytest.mark.timeout(900)
def test_one_of_each_fault_under_a_real_scheduler(tmp_path: Path, pg_url: str) -> None:
    _one_of_each_fault(tmp_path, pg_url, layout="standard")


@pytest.mark.timeout(900)
@pytest.mark.scheduler  # the real-scheduler tier (three runs in a row passed: docs/reliability.md)
def test_one_of_each_fault_under_a_real_scheduler_express(tmp_path: Path, pg_url: str) -> None:
    # the whole batch is one task, batch.run: the commit kill hits it in its commit step
    _one_of_each_fault(tmp_path, pg_url, layout="express")


def _one_of_each_fault(tmp_path: Path, pg_url: str, *, layout: str) -> None:
    # Given: a seed, and 8 pipelined batches with one fault of each kind planned among them
    seed = int(os.environ.get("TRIDENT_FAULT_SEED") or random.SystemRandom().randrange(10**6))
    print(f"seed={seed} layout={layout}")
    config = SchedulerFaultConfig(
        seed=seed,
        batches=8,
        commit_kills=1,
        committed_clears=1,
        failed_runs=1,
        zookeeper_restarts=1,
        postgres_restarts=1,
        backfill_txids=2,
        timeout_s=600,
        stall_s=45,
        layout=layout,
    )

    # When: Airflow runs them while the faults are injected
    report = run_scheduler_faults(config, pg_url=pg_url, work_dir=tmp_path)
    summary = report.summary()
    print(report.backfill_output)
    print(summary)

    # Then: every planned fault was injected, one of each kind, and the final state is the
    # reference's, key by key
    planned = sorted(fault.kind for fault in report.planned)
    injected = sorted(kind for kind, _ in report.injected)
    assert planned == sorted(FAULT_KINDS), summary
    assert injected == planned, f"seed={seed} layout={layout}: not injected {report.not_injected}"
    assert report.not_injected == [], summary
    assert report.differences == [], summary
    assert report.problems == [], summary
    assert report.ledger_txids == list(range(1, config.batches + 1)), summary
    assert all(n > 100 for n in report.keys_compared.values()), summary
    assert report.ok, summary
