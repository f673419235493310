"""The long in-process fault run's command line (``bash scripts/faults.sh``): seeded schedules of
:mod:`airflow_trident.testing.schedule` for each exactly-once combination, with the ZooKeeper and
PostgreSQL restart faults on private servers (:mod:`tests.harness.servers`) this command starts
and stops::

    python -m tests.harness.fault_schedule --seed S --batches N --combo tx-opaque \\
        --private-zk --private-pg

Without ``--private-zk`` it uses ``--zk-hosts`` (default ``TRIDENT_ZK_HOSTS``) and never restarts
it; without ``--private-pg`` the state is SQLite (or ``--state-url``). Exit code 0 when every
schedule is exactly once with no broken invariant.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from airflow_trident.testing.fault_topology import COMBOS
from airflow_trident.testing.schedule import ScheduleConfig, ScheduleReport, run_schedule
from tests.harness.servers import PrivatePostgres, PrivateZooKeeper

__all__ = ["main"]


def replay_command(config: ScheduleConfig) -> str:
    """The command line that replays ``config``'s schedule (seed, batches, combination).

    >>> replay_command(ScheduleConfig(seed=7, combo="tx-opaque", batches=12))
    'python -m tests.harness.fault_schedule --seed 7 --batches 12 --combo tx-opaque'
    """
    return (
        f"python -m tests.harness.fault_schedule --seed {config.seed} "
        f"--batches {config.batches} --combo {config.combo}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run schedules, print their reports and a line per combination."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--combo", choices=[*COMBOS, "all"], default="all")
    parser.add_argument("--state-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument("--zk-hosts", default=None, help="default: TRIDENT_ZK_HOSTS")
    parser.add_argument("--private-zk", action="store_true", help="own ZooKeeper (zk_restart)")
    parser.add_argument("--private-pg", action="store_true", help="own PostgreSQL (pg_restart)")
    parser.add_argument("--fault-rate", type=float, default=0.35)
    parser.add_argument("--faults", default=None, help="comma-separated kinds (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep ZooKeeper nodes and tables")
    parser.add_argument(
        "--hide-state-methods",
        default="",
        help="mutation test of the harness: hide these state methods (revert_txid)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # expected noise: sessions expire and servers restart on purpose
        for noisy in ("kazoo", "psycopg", "airflow_trident.batch"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    combos = list(COMBOS) if args.combo == "all" else [args.combo]
    faults = frozenset(args.faults.split(",")) if args.faults else None
    reports: list[ScheduleReport] = []
    with (
        tempfile.TemporaryDirectory(prefix="trident-faults-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        zk = stack.enter_context(PrivateZooKeeper(Path(tmp))) if args.private_zk else None
        pg = stack.enter_context(PrivatePostgres(Path(tmp))) if args.private_pg else None
        for combo in combos:
            config = ScheduleConfig(
                seed=seed,
                combo=combo,
                batches=args.batches,
                fault_rate=args.fault_rate,
                faults=faults,
                hide_state_methods=frozenset(filter(None, args.hide_state_methods.split(","))),
            )
            print(f"replay: {replay_command(config)}", flush=True)
            reports.append(
                run_schedule(
                    config,
                    zk_hosts=zk.hosts if zk else args.zk_hosts,
                    state_url=pg.url if pg else args.state_url,
                    workdir=Path(tmp) / combo,
                    zk_server=zk,
                    pg_server=pg,
                    keep=args.keep,
                )
            )
    print()
    for report in reports:
        c = report.config
        print(
            f"{c.combo:>14}: seed={c.seed} batches={report.batches} "
            f"faults={sum(report.faults.values())} {dict(sorted(report.faults.items()))} "
            f"keys differing at the end={len(report.final_differences)} "
            f"after commits={len(report.differences)} violations={len(report.violations)}"
        )
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
