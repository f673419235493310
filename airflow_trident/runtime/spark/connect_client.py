"""A deadlock of PySpark 4.1's Spark Connect client, closed before any session is made here.

The client sends its ``ReleaseExecute`` calls from one thread pool shared by every session of
the process (``ExecutePlanResponseReattachableIterator``'s). Closing a client
(``SparkSession.stop()``, and ``SparkSession.__del__`` when the garbage collector frees a
dropped session) shuts that pool down **holding the pool's lock and waiting for its threads**.
The collector runs in whichever thread allocates, a pool thread among them: when it frees a
session there, that thread's ``__del__`` waits for the lock the closing thread holds, which waits
for that thread. Both wait forever: a Connect task hangs at the end of its block, with its work
done. ``tests/runtime/test_connect_client.py`` makes it happen on purpose; a long-tier test's
script that opens and drops seven sessions hung in the same place once (2026-12-03: after its
last query, the server idle, until its 300 s timeout).

Spark fixed it upstream (SPARK-55362: the pool is shut down without waiting; SPARK-55406 then
replaced the pool's life cycle, in 4.2). :func:`close_release_pool_without_waiting` applies the
first fix to the installed client when it still has the old pool (feature-detected, so a client
that has the fix, or another design, is left as it is): the pool's shutdown no longer waits, so
no thread waits on another while holding the lock. It goes one step further than upstream: the
collector can also free a session inside the pool's ``submit``, on the thread holding the pool's
own lock, which ``shutdown`` takes too; a pool whose lock is held is left to end on its own
(:func:`_shut_down_unless_held`). A release still queued or in flight then
finishes on its own thread or is dropped with the channel; the server cleans up executions a
client abandons, as upstream accepted.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["close_release_pool_without_waiting"]

_applied = threading.Lock()
_MARK = "_trident_shutdown_without_waiting"


def close_release_pool_without_waiting() -> bool:
    """Make the Connect client's release pool shut down without waiting (SPARK-55362), once per
    process; ``True`` when the installed client needed it (now or before).

    >>> close_release_pool_without_waiting() in (True, False)
    True
    """
    try:
        from pyspark.sql.connect.client import reattach
    except ImportError:  # a pyspark without the Connect client (its extras not installed)
        return False
    iterator: Any = reattach.ExecutePlanResponseReattachableIterator
    with _applied:
        if getattr(iterator.shutdown, _MARK, False):
            return True
        if not hasattr(iterator, "_release_thread_pool_instance") or not hasattr(iterator, "_lock"):
            return False  # not the pool this fixes

        def shutdown(cls: Any) -> None:
            """Shut the release pool down without waiting for its threads (SPARK-55362),
            unless its lock is held (:func:`_shut_down_unless_held`)."""
            with cls._lock:
                pool = cls._release_thread_pool_instance
                cls._release_thread_pool_instance = None
            if pool is not None:
                _shut_down_unless_held(pool)

        setattr(shutdown, _MARK, True)
        iterator.shutdown = classmethod(shutdown)
        return True


def _shut_down_unless_held(pool: Any) -> None:
    """``pool.shutdown(wait=False)``, unless the pool's own lock is held right now.

    The collector can free a session *inside* the pool's ``submit`` (a release sent while a
    dropped session waits to be freed), on the thread that holds the pool's ``_shutdown_lock``;
    ``shutdown`` takes that lock too, and a thread waiting for a lock it holds waits forever
    (seen 2026-12-07: a process's fourth session hung in ``catalog.functionExists``). So a held
    lock leaves the pool as it is: the client has already dropped it, and once it is collected
    its idle threads end (``ThreadPoolExecutor``'s own weak-reference callback), at the latest
    at the interpreter's exit. No thread is started here: at the interpreter's exit, where the
    collector frees the last sessions, a new thread never starts (a hang seen with that design).
    """
    lock = getattr(pool, "_shutdown_lock", None)
    if lock is not None:
        if not lock.acquire(blocking=False):
            return
        lock.release()  # not inside submit on this thread: waiting for another thread is safe
    pool.shutdown(wait=False)
