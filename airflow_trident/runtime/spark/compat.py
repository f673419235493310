"""The one place this package replaces a PySpark internal, each patch for the exact versions it
was read against.

=========  =======================  ==================================  ==========================
library    versions it applies to   what it replaces, what it fixes     upstream
=========  =======================  ==================================  ==========================
pyspark    4.1.0, 4.1.1, 4.1.2,     ``ExecutePlanResponseReattachable   SPARK-55362
           4.1.3                    Iterator.shutdown`` (the Connect    (apache/spark#54145);
                                    client's release pool): a deadlock  SPARK-55406
                                    closing sessions (below)            (apache/spark#54189), 4.2
=========  =======================  ==================================  ==========================

On any other pyspark the client is left as it is. ``tests/runtime/test_spark_compat.py`` fails
when the installed pyspark is not in :data:`RELEASE_POOL_VERSIONS` or the replaced method's
source is not :data:`RELEASE_POOL_SOURCE` (the pin moved): then the patch is read again against
that version and the set extended, or the patch removed (a pyspark with SPARK-55362 or 55406).
The four versions' ``pyspark/sql/connect/client/reattach.py`` are the same file (their
pyspark-client distributions, read 2026-12-07); no 4.1.x has the fix.

**The deadlock.** PySpark 4.1's Spark Connect client sends its ``ReleaseExecute`` calls from one
thread pool shared by every session of the process (``ExecutePlanResponseReattachableIterator``'s).
Closing a client (``SparkSession.stop()``, and ``SparkSession.__del__`` when the garbage
collector frees a dropped session) shuts that pool down **holding the pool's lock and waiting
for its threads**. The collector runs in whichever thread allocates, a pool thread among them:
when it frees a session there, that thread's ``__del__`` waits for the lock the closing thread
holds, which waits for that thread. Both wait forever: a Connect task hangs at the end of its
block, with its work done. ``tests/runtime/test_spark_compat.py`` makes it happen on purpose; a
long-tier test's script that opens and drops seven sessions hung in the same place once
(2026-12-03: after its last query, the server idle, until its 300 s timeout).

Spark fixed it upstream (SPARK-55362: the pool is shut down without waiting; SPARK-55406 then
replaced the pool's life cycle, in 4.2). :func:`close_release_pool_without_waiting` applies the
first fix: the pool's shutdown no longer waits, so no thread waits on another while holding the
lock. It goes one step further than upstream: the collector can also free a session inside the
pool's ``submit``, on the thread holding the pool's own lock, which ``shutdown`` takes too; a
pool whose lock is held is left to end on its own (:func:`_shut_down_unless_held`). A release
still queued or in flight then finishes on its own thread or is dropped with the channel; the
server cleans up executions a client abandons, as upstream accepted.
"""

from __future__ import annotations

import threading
from typing import Any, Final

__all__ = [
    "RELEASE_POOL_SOURCE",
    "RELEASE_POOL_VERSIONS",
    "REPLACES",
    "close_release_pool_without_waiting",
]

RELEASE_POOL_VERSIONS: Final = frozenset({"4.1.0", "4.1.1", "4.1.2", "4.1.3"})
"""The pyspark versions :func:`close_release_pool_without_waiting` patches."""
RELEASE_POOL_SOURCE: Final = "7248deda80cddbeb"
"""The first 16 hex digits of the SHA-256 of the replaced ``shutdown``'s source in them."""

_applied = threading.Lock()
_MARK = "_trident_shutdown_without_waiting"
REPLACES = "_trident_replaces"
"""The attribute of the patched ``shutdown`` holding the client's own (for the test)."""


def close_release_pool_without_waiting() -> bool:
    """Make the Connect client's release pool shut down without waiting (SPARK-55362), once per
    process, on the pyspark versions of :data:`RELEASE_POOL_VERSIONS`; ``True`` when applied
    (now or before), ``False`` on another pyspark or one without the Connect client.

    >>> close_release_pool_without_waiting() in (True, False)
    True
    """
    import pyspark

    if pyspark.__version__ not in RELEASE_POOL_VERSIONS:
        return False  # not a version this patch was read against: the client as it is
    try:
        from pyspark.sql.connect.client import reattach
    except ImportError:  # a pyspark without the Connect client (its extras not installed)
        return False
    iterator: Any = reattach.ExecutePlanResponseReattachableIterator
    with _applied:
        if getattr(iterator.shutdown, _MARK, False):
            return True
        original = iterator.shutdown.__func__

        def shutdown(cls: Any) -> None:
            """Shut the release pool down without waiting for its threads (SPARK-55362),
            unless its lock is held (:func:`_shut_down_unless_held`)."""
            with cls._lock:
                pool = cls._release_thread_pool_instance
                cls._release_thread_pool_instance = None
            if pool is not None:
                _shut_down_unless_held(pool)

        setattr(shutdown, _MARK, True)
        setattr(shutdown, REPLACES, original)
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
