"""``airflow-trident``: command-line tools next to Airflow's own.

Long on purpose: one command table serves both ``airflow-trident`` and ``airflow trident``
(backfill's plan and run binding, rebuild, drpc, status, version); each command is a function here
so both entry points stay one.

``airflow-trident backfill DAG_ID --from-txid N --to-txid M [--dry-run]`` creates one DAG run
per txid of the range, each with ``conf={"txid": t}`` and named after its txid. Txids already
allocated are *replayed* (``trident_replay__txid_t``): a committed one changes nothing, an
uncommitted one is processed and committed in order. Txids beyond the last allocated are new
batches (``trident_new__txid_t``): the command allocates them and binds them to their runs in
ZooKeeper, in txid order, before it creates the runs, so each run's begin binds exactly the
txid its name says, whatever order the begins run in. A range may not start beyond the next
txid (a gap would block every later commit). Backfilling a range again creates new runs
(``trident_replay__txid_t__2``, ``__3``, ...) replaying the same txids. A running scheduler
executes the runs; commits stay strictly ordered whatever order they run in. Mistakes (an
unknown DAG, a gap, an empty range) exit 2 with a one-line message.

Airflow's own ``airflow backfill create --from-date --to-date`` creates runs by *date*: each
begins a *new* txid (dates never name txids), so it processes new batches, it does not replay
old ones. Use this command to replay txids.

``airflow-trident rebuild package.module:topology --state NAME [--state NAME...] --from-txid N
[--to-txid M] [--state-conn-id ID] [--source-topology NAME]`` fills *new* states from the batch
archive (the ledger in the state database): it replays the committed txids N..M (default: the
last committed) in-process into those states only, resuming where an earlier rebuild stopped
(:mod:`airflow_trident.batch.rebuild`). The state database is the Airflow connection
``--state-conn-id`` or else ``TRIDENT_STATE_URL``. Instead of a topology it takes a DAG id
(``airflow-trident rebuild DAG_ID --state NAME``): the DAG's topology, and its state connection
unless ``--state-conn-id`` says otherwise.

Every command that takes a DAG id finds the DAG's topology and connections in either layout of
``trident_dag`` (:func:`~airflow_trident.hooks.dag_tasks.dag_topology`), through the
:class:`~airflow_trident.hooks.trident.TridentHook`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import (
    ConfigurationError,
    MetadataError,
    TridentError,
    UnknownDagError,
)
from airflow_trident.hooks.dag_tasks import dag_topology
from airflow_trident.hooks.trident import TridentHook

__all__ = [
    "COMMANDS",
    "DESCRIPTION",
    "BackfillRun",
    "build_parser",
    "get_cli_commands",
    "main",
    "plan_backfill",
]

DESCRIPTION = (
    "Command-line tools next to Airflow's own, for DAGs made by trident_dag: replay txids "
    "(backfill), fill new states from the batch archive (rebuild), answer DRPC requests "
    "(drpc), show a topology's txids and batches (status). Results go to stdout, logs to stderr."
)

REPLAY_PREFIX = "trident_replay__txid_"
NEW_PREFIX = "trident_new__txid_"


@dataclass(frozen=True)
class BackfillRun:
    """One DAG run of a backfill: its run id, the txid it is pinned to, and why.

    ``new`` runs hold txids beyond the last allocated (the command allocates and binds them);
    the others replay an allocated txid. ``again`` names the earlier run this one repeats when
    the plain name (``trident_replay__txid_N``) was taken.
    """

    run_id: str
    txid: int
    new: bool
    again: str | None = None

    @property
    def conf(self) -> dict[str, int]:
        """The run's ``dag_run.conf``: its begin binds exactly this txid."""
        return {"txid": self.txid}


def plan_backfill(
    from_txid: int, to_txid: int, allocated: int, *, taken: Container[str] = frozenset()
) -> list[BackfillRun]:
    """The runs of a backfill of txids ``from_txid..to_txid``, in txid order.

    Txids up to ``allocated`` are replays, named ``trident_replay__txid_N``; later ones are new
    txids, named ``trident_new__txid_N``, which must follow ``allocated`` without a gap. A run
    id in ``taken`` (Airflow or ZooKeeper knows it already) gets the first free counter suffix,
    ``trident_replay__txid_N__2``, ``__3``, ...: repeating a range replays the same txids in
    new runs. Every run's conf is ``{"txid": N}``.

    Raises
    ------
    ConfigurationError
        If the range is empty, starts below 1, or starts beyond the next txid (a gap).

    Examples
    --------
    >>> for run in plan_backfill(2, 5, allocated=3, taken={"trident_replay__txid_2"}):
    ...     print(run.run_id, run.conf, "new" if run.new else f"replay (again: {run.again})")
    trident_replay__txid_2__2 {'txid': 2} replay (again: trident_replay__txid_2)
    trident_replay__txid_3 {'txid': 3} replay (again: None)
    trident_new__txid_4 {'txid': 4} new
    trident_new__txid_5 {'txid': 5} new
    >>> plan_backfill(6, 7, allocated=3)
    Traceback (most recent call last):
    ...
    airflow_trident.errors.ConfigurationError: txids 6..7 start beyond the next txid, 4: ...
    """
    if from_txid < 1 or to_txid < from_txid:
        msg = f"txid range {from_txid}..{to_txid} is empty or starts below 1"
        raise ConfigurationError(msg)
    if from_txid > allocated + 1:
        msg = (
            f"txids {from_txid}..{to_txid} start beyond the next txid, {allocated + 1}: txids "
            f"are allocated without gaps (a gap would block every later commit); nothing was "
            f"created. Hint: --from-txid {allocated + 1} or less"
        )
        raise ConfigurationError(msg)
    runs = []
    for txid in range(from_txid, to_txid + 1):
        new = txid > allocated
        plain = f"{NEW_PREFIX if new else REPLAY_PREFIX}{txid}"
        run_id, counter = plain, 1
        while run_id in taken:
            counter += 1
            run_id = f"{plain}__{counter}"
        runs.append(BackfillRun(run_id, txid, new, None if run_id == plain else plain))
    return runs


class _KnownRunIds:
    """Run ids Airflow's metadata database or ZooKeeper knows (a plan must not reuse them)."""

    def __init__(self, in_airflow: set[str], store: CoordinatorStore) -> None:
        self.in_airflow = in_airflow
        self.store = store

    def __contains__(self, run_id: object) -> bool:
        if run_id in self.in_airflow:
            return True
        return isinstance(run_id, str) and self.store.runs.txid_for_run(run_id) is not None


def _check_dag_accepts_runs(dag_id: str) -> bool:
    """Whether ``dag_id`` is paused; refuse one the metadata database cannot take runs for."""
    from airflow.models.dag import DagModel
    from airflow.utils.types import DagRunType

    model = DagModel.get_current(dag_id)
    if model is None:
        msg = (
            f"DAG {dag_id!r} is not in Airflow's metadata database yet; nothing was created. "
            f"Hint: let the DAG processor parse it, or run `airflow dags reserialize`"
        )
        raise UnknownDagError(msg)
    allowed = model.allowed_run_types
    if allowed is not None and DagRunType.MANUAL not in allowed:
        msg = f"DAG {dag_id!r} does not allow manual runs; nothing was created"
        raise ConfigurationError(msg)
    return bool(model.is_paused)


def _airflow_run_ids(dag_id: str) -> set[str]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id, DagRun.run_id.like("trident_%"))
        )
        return set(rows)


def _describe(run: BackfillRun, committed: int) -> str:
    if run.new:
        return f"new txid {run.txid}, bound to this run in ZooKeeper"
    what = f"replays txid {run.txid}"
    if run.again is not None:
        what += f" again ({run.again} exists)"
    if run.txid <= committed:
        what += "; committed already, so it changes nothing"
    return what


def backfill(dag_id: str, from_txid: int, to_txid: int, *, dry_run: bool) -> int:
    """Create the runs of :func:`plan_backfill`, binding new txids first; print each run.

    New txids are allocated and bound to their runs in ZooKeeper here, in txid order, before
    any run exists (:meth:`CoordinatorStore.bind_new_run`): a run's name and txid agree
    whatever order the begins run in. Returns the exit status (2: not every run was created).
    """
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.sdk.exceptions import AirflowException
    from airflow.utils.types import DagRunTriggeredByType

    from airflow_trident.runtime.reference import load_topology

    target = dag_topology(dag_id)
    topology = load_topology(target.topology).name
    paused = _check_dag_accepts_runs(dag_id)
    hook = TridentHook(zookeeper_conn_id=target.zookeeper_conn_id)
    with hook.coordinator_store(topology) as store:
        allocated, committed = store.runs.current_txid(), store.commits.committed_txid()
        taken = _KnownRunIds(_airflow_run_ids(dag_id), store)
        runs = plan_backfill(from_txid, to_txid, allocated, taken=taken)
        print(f"DAG {dag_id}, topology {topology}: last allocated txid {allocated}, last "
              f"committed txid {committed}")  # fmt: skip
        if dry_run:
            for run in runs:
                print(f"  would create {_line(run, committed)}")
            return 0
        bound, refusal = _bind_new_txids(store, runs)
    status = 0
    for run in bound:
        try:
            trigger_dag(
                dag_id,
                run_id=run.run_id,
                conf=run.conf,
                triggered_by=DagRunTriggeredByType.CLI,
                note=f"airflow-trident backfill: {_describe(run, committed)}",
            )
        except (AirflowException, ValueError) as exc:
            status = 2
            _error(f"run {run.run_id} (txid {run.txid}) was not created: {exc}" + _recreate(
                dag_id, run))  # fmt: skip
            continue
        print(f"  created {_line(run, committed)}")
    if refusal is not None:
        _error(refusal)
        return 2
    hint = f" once {dag_id} is unpaused" if paused else ""
    print(f"{len(bound)} runs created; a running scheduler executes them{hint}, committing in "
          f"txid order")  # fmt: skip
    return status


def _line(run: BackfillRun, committed: int) -> str:
    return f"{run.run_id} conf={json.dumps(run.conf)}: {_describe(run, committed)}"


def _recreate(dag_id: str, run: BackfillRun) -> str:
    """How to create a new run by hand (its txid is bound to it already)."""
    if not run.new:
        return ""
    return (
        f". Its txid is bound to it: create it with `airflow dags trigger {dag_id} --run-id "
        f"{run.run_id} --conf '{json.dumps(run.conf)}'`"
    )


def _logs_to_stderr() -> None:
    """Send log lines to stderr: a command's results go to stdout (Airflow, once imported,
    logs to stdout)."""
    import airflow  # noqa: F401 - configures Airflow's logging, which the lines below move
    import structlog

    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(_STDERR)
    factory: Any = structlog.get_config().get("logger_factory")
    if getattr(factory, "io", _STDERR) is None:  # Airflow's factory: None means stdout
        factory.io = _STDERR


class _CurrentStderr:
    """Whatever ``sys.stderr`` is at each write. Logging is configured once per process, but
    ``sys.stderr`` may be replaced later (pytest's capture, a caller's redirect): binding the
    object of the moment would leave the loggers writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr, name)


_STDERR = _CurrentStderr()


def _error(message: str) -> None:
    print(f"airflow-trident: {message}", file=sys.stderr)


def _bind_new_txids(
    store: CoordinatorStore, runs: list[BackfillRun]
) -> tuple[list[BackfillRun], str | None]:
    """Bind each new run to its txid, in txid order; the runs to create, and why the rest not.

    A begin that allocates a txid meanwhile makes the next binding fail: the runs up to there
    are still created (their txids are bound and must not stay without a run)."""
    for index, run in enumerate(runs):
        if not run.new:
            continue
        try:
            store.runs.bind_new_run(run.run_id, run.txid)
        except (ConfigurationError, MetadataError) as exc:
            rest = runs[index:]
            return runs[:index], (
                f"{exc}. Runs for txids {rest[0].txid}..{rest[-1].txid} were not created: run "
                f"the command again for them"
            )
    return runs, None


def rebuild(args: argparse.Namespace) -> int:
    """Replay archived txids into new states; print one line per txid.

    ``args.topology`` is a topology (``module:attribute``) or a Trident DAG's id (its topology,
    and its state connection unless ``--state-conn-id`` is given).
    """
    from airflow_trident.batch.ledger import CommitLedger
    from airflow_trident.batch.rebuild import rebuild_states
    from airflow_trident.runtime.reference import load_topology
    from airflow_trident.state.binding import StateBinding
    from airflow_trident.state.sql.engine import describe_url
    from airflow_trident.state.sql.factory import STATE_URL_ENV

    reference, state_conn_id = args.topology, args.state_conn_id
    if ":" not in reference:  # a DAG id
        target = dag_topology(reference)
        reference = target.topology
        state_conn_id = state_conn_id or target.state_conn_id
    url = TridentHook(state_conn_id=state_conn_id).state_url()
    if not url:
        msg = f"no state database: pass --state-conn-id or set {STATE_URL_ENV}"
        raise ConfigurationError(msg)
    topology = load_topology(reference)
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


def drpc(dag_id: str, function: str, args: str) -> int:
    """``airflow-trident drpc DAG_ID FUNCTION ARGS``: print the result JSON; exit status 0.

    Errors propagate (:func:`main` prints them in one line and exits 2).
    """
    from airflow_trident.hooks.drpc import DRPCClient

    with DRPCClient(dag_id) as client:
        print(client.execute(function, args))
    return 0


_Arg = tuple[tuple[str, ...], dict[str, Any]]
_DAG_ID: _Arg = (("dag_id",), {"help": "a DAG made by trident_dag"})
COMMANDS: dict[str, tuple[str, tuple[_Arg, ...]]] = {
    "backfill": (
        "create DAG runs replaying a txid range",
        (
            _DAG_ID,
            (("--from-txid",), {"type": int, "required": True, "help": "first txid of the range"}),
            (("--to-txid",), {"type": int, "required": True, "help": "last txid of the range"}),
            (("--dry-run",), {"action": "store_true", "help": "print the runs, create none"}),
        ),
    ),
    "rebuild": (
        "fill new states from the batch archive",
        (
            (("topology",), {"help": "package.module:attribute, or a DAG made by trident_dag"}),
            (("--state",), {"action": "append", "required": True, "help": "a state to rebuild"}),
            (("--from-txid",), {"type": int, "default": 1, "help": "first txid (default 1)"}),
            (("--to-txid",), {"type": int, "default": None, "help": "default: last committed"}),
            (("--state-conn-id",), {"help": "the state database's Airflow connection"}),
            (("--source-topology",), {"help": "whose archive (default: same)"}),
        ),
    ),
    "drpc": (
        "answer a DRPC request from committed state",
        (
            _DAG_ID,
            (("function",), {"help": "the DRPC stream's name (new_drpc_stream)"}),
            (("args",), {"help": "the request's argument string"}),
        ),
    ),
    "status": (
        "show txids, batches in flight, commits, lag",
        (
            _DAG_ID,
            (("--json",), {"action": "store_true", "help": "print JSON instead of text"}),
            (
                ("--last",),
                {"type": int, "default": 10, "help": "how many last commits (default 10)"},
            ),
        ),
    ),
}
"""Every command, its help and its arguments: ``airflow-trident COMMAND`` and
``airflow trident COMMAND`` (:func:`get_cli_commands`) are built from this one table."""


def build_parser(prog: str = "airflow-trident") -> argparse.ArgumentParser:
    """The parser of ``airflow-trident`` (with ``--version``).

    >>> build_parser().parse_args(["status", "my_dag", "--json"]).json
    True
    """
    from airflow_trident import __version__

    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, help="what to do")
    for name, (help_text, arguments) in COMMANDS.items():
        command = commands.add_parser(name, help=help_text)
        for flags, options in arguments:
            command.add_argument(*flags, **options)
    return parser


def get_cli_commands() -> list[Any]:
    """The ``airflow trident ...`` commands, for the provider's ``cli`` entry
    (``get_provider_info``): the same commands and arguments as ``airflow-trident``, plus
    ``airflow trident version``."""
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

    subcommands = [
        ActionCommand(
            name=name,
            help=help_text,
            func=lazy_load_command(f"airflow_trident.cli.airflow_{name}"),
            args=tuple(Arg(flags, **options) for flags, options in arguments),  # type: ignore[no-untyped-call]
        )
        for name, (help_text, arguments) in COMMANDS.items()
    ]
    subcommands.append(
        ActionCommand(
            name="version",
            help="print airflow-trident's version",
            func=lazy_load_command("airflow_trident.cli.airflow_version"),
            args=(),
        )
    )
    return [GroupCommand(name="trident", help="Trident topologies", subcommands=subcommands,
                         description=DESCRIPTION)]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``airflow-trident``."""
    return _execute(build_parser().parse_args(argv))


def _execute(args: argparse.Namespace) -> int:
    """Run the command ``args.command`` with its arguments; the exit status."""
    # Like `airflow connections` (and the scheduler, the api-server): an operator's tool with the
    # metadata database at hand, so connections stored there are found too. Outside a task,
    # Airflow 3.3 otherwise reads only AIRFLOW_CONN_* and external secrets backends.
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_trident.hooks.trident import missing_connection

    _logs_to_stderr()
    try:
        if args.command == "status":
            from airflow_trident.status import status_command

            return status_command(args.dag_id, as_json=args.json, last=args.last)
        if args.command == "rebuild":
            return rebuild(args)
        if args.command == "drpc":
            return drpc(args.dag_id, args.function, args.args)
        return backfill(args.dag_id, args.from_txid, args.to_txid, dry_run=args.dry_run)
    except TridentError as exc:
        _error(str(exc))
        return 2
    except AirflowNotFoundException as exc:  # a connection a hook outside ours looked up
        _error(str(missing_connection(exc)))
        return 2
    except (ValueError, LookupError) as exc:  # a library's refusal: one line, not a traceback
        _error(str(exc))
        return 2


def _from_airflow(command: str, args: argparse.Namespace) -> None:
    args.command = command
    code = _execute(args)
    if code:
        sys.exit(code)


def airflow_backfill(args: argparse.Namespace) -> None:
    """``airflow trident backfill``."""
    _from_airflow("backfill", args)


def airflow_rebuild(args: argparse.Namespace) -> None:
    """``airflow trident rebuild``."""
    _from_airflow("rebuild", args)


def airflow_drpc(args: argparse.Namespace) -> None:
    """``airflow trident drpc``."""
    _from_airflow("drpc", args)


def airflow_status(args: argparse.Namespace) -> None:
    """``airflow trident status``."""
    _from_airflow("status", args)


def airflow_version(args: argparse.Namespace) -> None:
    """``airflow trident version``."""
    from airflow_trident import __version__

    print(__version__)


if __name__ == "__main__":
    sys.exit(main())
