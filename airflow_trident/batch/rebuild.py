"""Rebuilding states from the batch archive: replay committed txids ``N..M`` into *new* states.

Every commit records the batch's metadata in the ledger (every spout's, every partition's; see
:class:`~airflow_trident.batch.ledger.CommitLedger`), long after ZooKeeper rotated it away.
:func:`rebuild_states` re-emits each archived batch from exactly that metadata (a transactional
spout gives the same tuples again; an opaque one starts each partition where the batch did, and
gives whatever its source holds there now), runs the topology's processing phase in-process and
applies the result to the chosen states only, under the same txid and the same exactly-once
rules. So a state added to a topology (or a corrected aggregation, under a new state name) gets
the value it would have had, had it existed since txid ``N``. ZooKeeper, the topology's other
states and its live runs are not touched.

Progress is recorded per state in the ledger database (``trident_rebuild_progress``) after each
txid: an interrupted rebuild run again resumes after the last txid recorded (re-applying that
txid, should the crash have come between the state's commit and the record, is a no-op by the
per-key txids), and a finished one changes nothing.

Rebuild into a state before its live commits start (pause the DAG, rebuild ``1..committed``,
unpause): a state already holding later txids refuses earlier ones (``StateBehindError``).
States fed by a state's new values (``new_values_stream``) are rebuilt with it: the commit
phase runs after the chosen states took each txid, as in a live commit; such a state can only be
rebuilt together with the states whose new values feed it, from the same txid (else
:class:`~airflow_trident.errors.ConfigurationError`). Other commit-phase streams (a ``peek``)
run too.

Command line: ``airflow-trident rebuild package.module:topology --from-txid 1 --to-txid 40
--state word_lengths --state-conn-id trident_state`` (see :mod:`airflow_trident.cli`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.batch.ledger import CommitLedger
from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.coordinator import BatchPlan
from airflow_trident.coordination.memory import MemoryCoordinatorStore
from airflow_trident.errors import BatchIncompleteError, ConfigurationError
from airflow_trident.graph import NewValuesNode, WindowNode
from airflow_trident.runtime.result import ProcessResult
from airflow_trident.spout.executor import PartitionedBatches
from airflow_trident.state.binding import StateBinding
from airflow_trident.topology import TridentTopology

__all__ = ["rebuild_states"]

log = logging.getLogger(__name__)


def rebuild_states(
    topology: TridentTopology,
    ledger: CommitLedger,
    from_txid: int,
    to_txid: int,
    *,
    states: Sequence[str] | None = None,
    source_topology: str | None = None,
    binding: StateBinding | None = None,
) -> list[dict[str, Any]]:
    """Replay archived txids ``from_txid..to_txid`` of ``source_topology`` (default: this
    topology's name) through ``topology`` into ``states`` (default: all of its states), in the
    state database of ``binding`` (default: each state factory's own).

    Returns one summary per txid applied (records in, keys written per state), in txid
    order; txids a state already got from an earlier rebuild are skipped for it.

    Raises
    ------
    ConfigurationError
        For an empty range, an unknown state, or a spout the archive does not know.
    BatchIncompleteError
        If a txid of the range has no archived metadata (checked before anything is written).
    """
    source = source_topology or topology.name
    if from_txid < 1 or to_txid < from_txid:
        msg = f"txid range {from_txid}..{to_txid} is empty or starts below 1"
        raise ConfigurationError(msg)
    chosen = list(states) if states else sorted(topology.states)
    unknown = [s for s in chosen if s not in topology.states]
    if unknown:
        msg = (
            f"topology {topology.name!r} has no state {', '.join(map(repr, unknown))}; its "
            f"states: {', '.join(sorted(topology.states)) or '(none)'}"
        )
        raise ConfigurationError(msg)
    _refuse_windows(topology, chosen)
    done = {name: ledger.rebuilt_txid(topology.name, name) for name in chosen}
    _check_new_values_feeds(topology, chosen, done)
    start = max(from_txid, min(done.values()) + 1)
    archives = {txid: _archive(ledger, source, txid) for txid in range(start, to_txid + 1)}
    for name, txid in done.items():
        if txid >= from_txid:
            log.info("state %s was rebuilt up to txid %d: resuming after it", name, txid)
    # the lifecycle on an in-memory coordinator: ZooKeeper and live runs are not touched
    steps = BatchSteps(topology, MemoryCoordinatorStore(topology.name), states=binding)
    summaries = []
    for txid, archive in archives.items():
        result = _replay(steps, txid, archive)
        records_in = result.records_in
        pending = [name for name in chosen if done[name] < txid]
        chosen_staged = {name: result.staged[name] for name in pending if name in result.staged}
        # only the first txid of a (resumed) rebuild can hold an interrupted run's writes
        revert = txid == start
        new_values = steps.commits.apply_result(txid, chosen_staged, revert=revert)
        keys = {name: s.rows for name, s in chosen_staged.items()}
        keys.update(
            steps.commits.apply_commit_phase(
                txid, new_values, revert=revert, only=frozenset(pending)
            )
        )
        for name in pending:
            ledger.record_rebuilt(topology.name, name, txid)
        log.info("rebuilt txid %d (%d of %d): %d records in, keys written %s", txid,
                 txid - start + 1, len(archives), records_in, keys)  # fmt: skip
        summaries.append({"txid": txid, "records_in": records_in, "keys_written": keys})
    return summaries


def _archive(ledger: CommitLedger, topology: str, txid: int) -> dict[str, Any]:
    archive = ledger.batch_meta(topology, txid)
    if archive is None:
        msg = (
            f"txid {txid} of topology {topology!r} has no archived batch metadata in the "
            f"ledger: it was not committed (yet), or committed without a ledger; nothing was "
            f"rebuilt. Hint: the ledger holds txids 1..{ledger.last_txid(topology)}"
        )
        raise BatchIncompleteError(msg)
    return archive


def _replay(steps: BatchSteps, txid: int, archive: dict[str, Any]) -> ProcessResult:
    """Re-emit archived batch ``txid`` from in-memory spout state and process it in-process."""
    archived = archive["spouts"]
    spouts = steps.ctx.coordinator.spouts
    missing = [name for name in spouts if name not in archived]
    if missing:
        msg = (
            f"the archive of txid {txid} has no spout {', '.join(map(repr, missing))}; it "
            f"has {', '.join(sorted(archived))} (a rebuilding topology must read the same "
            f"spouts, by name)"
        )
        raise ConfigurationError(msg)
    for name, spout in spouts.items():
        if isinstance(spout, PartitionedBatches):
            spout.restore_batch(txid, archived[name].get("partitions", {}))
    plan = BatchPlan(TransactionAttempt(txid, 0), {name: archived[name]["meta"] for name in spouts})
    return steps.ctx.processor.process(txid, steps.emit(plan))


def _refuse_windows(topology: TridentTopology, chosen: list[str]) -> None:
    """A window's results come from its store, which holds only what later batches need: they
    cannot be derived again from the archive, so states after a window are not rebuilt."""
    for name in chosen:
        todo, seen = [topology.states[name]], set()
        while todo:
            step = todo.pop()
            if step in seen:
                continue
            seen.add(step)
            if isinstance(topology.nodes[step], WindowNode):
                msg = (
                    f"state {name!r} of topology {topology.name!r} is fed by window "
                    f"{step!r}: a window's results cannot be derived again from the batch "
                    f"archive, so it cannot be rebuilt; hint: choose states that no window feeds"
                )
                raise ConfigurationError(msg)
            todo.extend(topology.nodes[step].parents)


def _fed_by(topology: TridentTopology, name: str) -> set[str]:
    """The states whose new values feed state ``name`` (directly)."""
    todo, seen, found = [topology.states[name]], set(), set()
    while todo:
        step = todo.pop()
        if step in seen:
            continue
        seen.add(step)
        node = topology.nodes[step]
        if isinstance(node, NewValuesNode):
            found.add(node.state)
            continue
        todo.extend(node.parents)
    return found


def _check_new_values_feeds(
    topology: TridentTopology, chosen: list[str], done: dict[str, int]
) -> None:
    """A state fed by new values gets them only from states rebuilt with it, txid by txid."""
    for name in chosen:
        for upstream in sorted(_fed_by(topology, name)):
            if upstream not in done:
                msg = (
                    f"state {name!r} of topology {topology.name!r} is fed by the new values of "
                    f"state {upstream!r}, which is not rebuilt: its new values cannot be "
                    f"derived again; hint: rebuild {upstream!r} with it (--state {upstream} "
                    f"--state {name})"
                )
                raise ConfigurationError(msg)
            if done[upstream] != done[name]:
                msg = (
                    f"state {name!r} (rebuilt up to txid {done[name]}) is fed by the new values "
                    f"of state {upstream!r} (rebuilt up to txid {done[upstream]}): they must be "
                    f"rebuilt from the same txid; hint: rebuild them into new states together"
                )
                raise ConfigurationError(msg)
