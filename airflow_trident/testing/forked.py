"""Run one batch step in a forked child process that may be ``kill -9``-ed half-way.

An Airflow worker can die at any instruction (OOM killer, node loss). :func:`run_forked` forks
(``multiprocessing`` with the ``fork`` start method, so the child has the caller's topology and
fault injector without pickling), lets the child open its own connections and run ``work``, and
reports how it ended. The child is killed at a seeded point by arming the injector it inherited
with :func:`~airflow_trident.testing.fault_points.kill_this_process` (a real ``SIGKILL``: no
``finally`` block, no rollback, no flushing), so the same seed kills at the same place.

Connections the parent had open must not be used by the child (a forked socket is shared):
:func:`forget_inherited_engine` drops the pooled SQL connections the child inherited without
closing them (closing would end the parent's sessions).

Example::

    outcome = run_forked(lambda: steps_factory().commit(7))
    outcome.status   # "ok", "error" or "killed"
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_trident.state.sql.engine import shared_engine

__all__ = ["ForkOutcome", "forget_inherited_engine", "run_forked"]

_INHERITED: list[Any] = []


@dataclass(frozen=True)
class ForkOutcome:
    """How a forked step ended.

    Attributes
    ----------
    status:
        ``"ok"`` (``result`` holds what it returned), ``"error"`` (``error`` holds the
        exception's type and message), ``"killed"`` (by ``SIGKILL``) or ``"hung"`` (killed by
        the parent at the time limit).
    """

    status: str
    result: Any = None
    error: str | None = None
    exitcode: int | None = None


def forget_inherited_engine(url: str) -> None:
    """In a forked child: make the shared engine of ``url`` open new connections, leaving the
    parent's (inherited, shared sockets) untouched and never garbage-collected here."""
    engine = shared_engine(url)
    _INHERITED.append(engine.pool)
    engine.dispose(close=False)


def run_forked(work: Callable[[], Any], *, timeout_s: float = 180.0) -> ForkOutcome:
    """Run ``work()`` in a forked child; its result must be picklable.

    The child exits with ``os._exit`` (multiprocessing's fork bootstrap), so no ``atexit``
    handler of the parent runs there.
    """
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            result = work()
        except BaseException as exc:  # report every failure to the parent, then exit
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            send.send(("error", detail))
            return
        send.send(("ok", result))

    process = context.Process(target=child, daemon=True)
    process.start()
    send.close()
    message: tuple[str, Any] | None = None
    if receive.poll(timeout_s):
        with contextlib.suppress(EOFError):
            message = receive.recv()
    process.join(timeout=30.0 if message is not None else 1.0)
    if process.is_alive():
        process.kill()
        process.join()
        receive.close()
        return ForkOutcome("hung", exitcode=process.exitcode)
    receive.close()
    if process.exitcode == -signal.SIGKILL:
        return ForkOutcome("killed", exitcode=process.exitcode)
    if message is None:
        return ForkOutcome(
            "error", error="child exited without a result", exitcode=process.exitcode
        )
    status, payload = message
    if status == "ok":
        return ForkOutcome("ok", result=payload, exitcode=process.exitcode)
    return ForkOutcome("error", error=str(payload), exitcode=process.exitcode)
