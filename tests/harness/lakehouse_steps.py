"""The batch steps both lakehouse scenarios (:mod:`tests.harness.delta_spark`,
:mod:`tests.harness.iceberg_spark`) drive: a txid begun, processed in process and staged; and the
Python writer's run with a lost compare-and-set and replays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["commit_with_replays", "crash_once", "staged"]


def staged(steps: Any, run: str) -> tuple[int, Any, Any]:
    """Begin run ``run``'s txid and process it in process: the txid, its plan and manifest."""
    txid = int(steps.begin(run)["txid"])
    steps.process_local(txid)
    plan = steps.plan(txid)
    return txid, plan, steps.staging.verified_manifest(plan.attempt, plan.metas)


def commit_with_replays(steps: Any) -> None:
    """Txids 1..3 committed by the Python writer, txid 2's table commits landing without the
    compare-and-set (then committed again); then txids 3 and 1 processed and applied again,
    which the table must skip."""
    for run in ("r1", "r2", "r3"):
        txid, plan, manifest = staged(steps, run)
        if txid == 2:  # the table's commits land, the compare-and-set does not
            steps.apply_staged(plan, manifest)
        steps.commit(txid)
    for txid in (3, 1):  # replays (processed again) reach the table: it skips them
        steps.process_local(txid)
        plan = steps.plan(txid)
        steps.apply_staged(plan, steps.staging.verified_manifest(plan.attempt, plan.metas))


def crash_once(module: Any, name: str, message: str, commit: Callable[[], Any]) -> str:
    """Run ``commit`` with ``module.name`` raising ``RuntimeError(message)`` at its first call
    (then restored); return the commit's error text (``"none"``: it did not fail)."""
    real = getattr(module, name)

    def dies(*args: Any) -> None:
        setattr(module, name, real)
        raise RuntimeError(message)

    setattr(module, name, dies)
    try:
        commit()
    except Exception as exc:
        return str(exc)[:300]
    finally:
        setattr(module, name, real)
    return "none"
