"""``airflow-trident``: command-line tools next to Airflow's own.

``airflow-trident backfill DAG_ID --from-txid N --to-txid M`` creates one DAG run per txid of
the range. Txids already allocated are *replayed* (``conf={"txid": t}``): a committed one changes
nothing, an uncommitted one is processed and committed in order. Txids beyond the last
allocated are new batches (runs without conf), allocated in order by their begin tasks. A
running scheduler executes the runs; commits stay strictly ordered whatever order they run in.

Airflow's own ``airflow backfill create --from-date --to-date`` creates runs by *date*: each
begins a *new* txid (dates never name txids), so it processes new batches, it does not replay
old ones. Use this command to replay txids.

``airflow-trident rebuild package.module:topology --state NAME [--state NAME...] --from-txid N
[--to-txid M] [--state-conn-id ID] [--source-topology NAME]`` fills *new* states from the batch
archive (the ledger in the state database): it replays the committed txids N..M (default: the
last committed) in-process into those states only, resuming where an earlier rebuild stopped
(:mod:`airflow_trident.runtime.rebuild`). The state database is the Airflow connection
``--state-conn-id`` or else ``TRIDENT_STATE_URL``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from airflow_trident.errors import TridentError

__all__ = ["main", "plan_backfill"]


def plan_backfill(from_txid: int, to_txid: int, allocated: int) -> list[dict[str, Any]]:
    """The runs to create: ``{"run_id", "conf"}`` per txid, replays first, in txid order.

    >>> for run in plan_backfill(2, 5, allocated=3):
    ...     print(run["run_id"])
    trident_replay__txid_2
    trident_replay__txid_3
    trident_new__txid_4
    trident_new__txid_5
    >>> plan_backfill(2, 5, allocated=3)[-1]["conf"]
    {}
    """
    if from_txid < 1 or to_txid < from_txid:
        msg = f"txid range {from_txid}..{to_txid} is empty or starts below 1"
        raise ValueError(msg)
    runs = []
    for txid in range(from_txid, to_txid + 1):
        if txid <= allocated:
            runs.append({"run_id": f"trident_replay__txid_{txid}", "conf": {"txid": txid}})
        else:
            runs.append({"run_id": f"trident_new__txid_{txid}", "conf": {}})
    return runs


def _begin_task(dag_id: str) -> Any:
    """The ``BeginBatchOperator`` of ``dag_id`` (parsed from the DAGs folder)."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_trident.operators.batch import BeginBatchOperator

    dag = DagBag().dags.get(dag_id)
    if dag is None:
        msg = f"DAG {dag_id!r} is not in the DAGs folder"
        raise LookupError(msg)
    for task in dag.tasks:
        if isinstance(task, BeginBatchOperator):
            return task
    msg = f"DAG {dag_id!r} has no BeginBatchOperator: it is not a Trident DAG"
    raise LookupError(msg)


def _allocated_txids(dag_id: str) -> tuple[int, str]:
    from airflow_trident.hooks.trident import TridentHook

    begin = _begin_task(dag_id)
    hook = TridentHook(zookeeper_conn_id=begin.zookeeper_conn_id)
    with hook.batch_steps(begin.topology, staging_root=begin.staging_root) as steps:
        return steps.store.current_txid(), str(begin.topology)


def backfill(dag_id: str, from_txid: int, to_txid: int, *, dry_run: bool) -> int:
    """Create the runs of :func:`plan_backfill`; print what was (or would be) created."""
    allocated, topology = _allocated_txids(dag_id)
    runs = plan_backfill(from_txid, to_txid, allocated)
    print(f"DAG {dag_id} (topology {topology}): txids 1..{allocated} allocated")
    for run in runs:
        print(f"  {'would create' if dry_run else 'creating'} {run['run_id']} conf={run['conf']}")
        if not dry_run:
            from airflow.api.common.trigger_dag import trigger_dag
            from airflow.utils.types import DagRunTriggeredByType

            trigger_dag(
                dag_id,
                run_id=run["run_id"],
                conf=run["conf"],
                triggered_by=DagRunTriggeredByType.CLI,
            )
    return 0


def rebuild(args: argparse.Namespace) -> int:
    """Replay archived txids into new states; print one line per txid."""
    from airflow_trident.hooks.trident import TridentHook
    from airflow_trident.runtime.ledger import CommitLedger
    from airflow_trident.runtime.rebuild import rebuild_states
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.state.binding import StateBinding
    from airflow_trident.state.sql.engine import describe_url
    from airflow_trident.state.sql.factory import STATE_URL_ENV

    url = TridentHook(state_conn_id=args.state_conn_id).state_url()
    if not url:
        msg = f"no state database: pass --state-conn-id or set {STATE_URL_ENV}"
        raise ValueError(msg)
    topology = load_topology(args.topology)
    ledger = CommitLedger(url)
    source = args.source_topology or topology.name
    to_txid = args.to_txid or ledger.last_txid(source)
    print(f"rebuilding {', '.join(args.state)} of {topology.name} from the archive of {source} "
          f"(txids {args.from_txid}..{to_txid}) in {describe_url(url)}")  # fmt: skip
    summaries = rebuild_states(
        topology,
        ledger,
        args.from_txid,
        to_txid,
        states=args.state,
        source_topology=source,
        binding=StateBinding(url),  # the topology's states and the ledger share the database
    )
    for summary in summaries:
        print(f"  txid {summary['txid']}: {summary['records_in']} records in, keys written "
              f"{summary['keys_written']}")  # fmt: skip
    print(f"done: {len(summaries)} txids applied" if summaries else "done: already rebuilt")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``airflow-trident``."""
    parser = argparse.ArgumentParser(prog="airflow-trident", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fill = commands.add_parser("backfill", help="create DAG runs replaying a txid range")
    fill.add_argument("dag_id")
    fill.add_argument("--from-txid", type=int, required=True)
    fill.add_argument("--to-txid", type=int, required=True)
    fill.add_argument("--dry-run", action="store_true")
    build = commands.add_parser("rebuild", help="fill new states from the batch archive")
    build.add_argument("topology", help="package.module:attribute")
    build.add_argument("--state", action="append", required=True, help="a state to rebuild")
    build.add_argument("--from-txid", type=int, default=1)
    build.add_argument("--to-txid", type=int, default=None, help="default: last committed")
    build.add_argument("--state-conn-id", default=None)
    build.add_argument("--source-topology", default=None, help="whose archive (default: same)")
    args = parser.parse_args(argv)
    try:
        if args.command == "rebuild":
            return rebuild(args)
        return backfill(args.dag_id, args.from_txid, args.to_txid, dry_run=args.dry_run)
    except (ValueError, LookupError, TridentError) as exc:
        print(f"airflow-trident: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
