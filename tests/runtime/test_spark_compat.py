"""The PySpark patch of ``runtime/spark/compat.py``: pinned to the versions it was read against,
and PySpark 4.1's Spark Connect client deadlock, made to happen and closed by
:func:`~airflow_trident.runtime.spark.compat.close_release_pool_without_waiting`.

The scenario runs in a child interpreter of its own (a deadlocked pool thread would otherwise
keep pytest from exiting): one thread closes a client (``SparkSession.stop()``: the pool's
shutdown under the pool's lock) while a pool thread frees a dropped session
(``SparkSession.__del__``, run by the garbage collector there: the same shutdown). No server is
needed: the deadlock is in the client's own locking.
"""

from __future__ import annotations

import hashlib
import inspect
import subprocess
import sys

import pytest

SCENARIO = """
import os, sys, threading
from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as It
if sys.argv[1] == "fixed":
    from airflow_trident.runtime.spark.compat import close_release_pool_without_waiting
    close_release_pool_without_waiting()
pool = It._get_or_create_release_thread_pool()
closing = threading.Event()

def a_dropped_session_freed_in_a_pool_thread():
    closing.wait()
    It.shutdown()  # SparkSession.__del__ -> client.close(), on this pool thread

def a_client_closing():
    with It._lock:  # client.close()'s shutdown holds the pool's lock from here on
        closing.set()
        It.shutdown()

pool.submit(a_dropped_session_freed_in_a_pool_thread)
closer = threading.Thread(target=a_client_closing, daemon=True)
closer.start()
closer.join(float(sys.argv[2]))
print("closed" if not closer.is_alive() else "deadlocked", flush=True)
os._exit(0)  # a deadlocked pool thread is not daemonic: do not wait for it at exit
"""


def _run(mode: str, wait_s: float) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, mode, str(wait_s)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_installed_pyspark_is_one_the_patch_was_read_against() -> None:
    import pyspark
    from pyspark.sql.connect.client import reattach

    from airflow_trident.runtime.spark import compat

    # The pin moved: read the patch again against this version (is SPARK-55362 or 55406 in
    # it?), then add the version to RELEASE_POOL_VERSIONS or remove the patch
    assert pyspark.__version__ in compat.RELEASE_POOL_VERSIONS, (
        f"pyspark {pyspark.__version__}: re-verify runtime/spark/compat.py's release pool patch"
    )
    shutdown = reattach.ExecutePlanResponseReattachableIterator.shutdown.__func__
    replaced = getattr(shutdown, compat.REPLACES, shutdown)  # the client's own, patched or not
    digest = hashlib.sha256(inspect.getsource(replaced).encode()).hexdigest()
    assert digest[:16] == compat.RELEASE_POOL_SOURCE, "the method the patch replaces changed"


def test_another_pyspark_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark
    from pyspark.sql.connect.client import reattach

    from airflow_trident.runtime.spark.compat import close_release_pool_without_waiting

    before = reattach.ExecutePlanResponseReattachableIterator.__dict__["shutdown"]
    # Given a pyspark the patch was not read against (4.2 has the fix upstream)
    monkeypatch.setattr(pyspark, "__version__", "4.2.0")
    # Then the patch says it is not applied, and the client's shutdown is left as it was
    assert close_release_pool_without_waiting() is False
    assert reattach.ExecutePlanResponseReattachableIterator.__dict__["shutdown"] is before


def _has_the_old_pool() -> bool:
    from pyspark.sql.connect.client import reattach

    iterator = reattach.ExecutePlanResponseReattachableIterator
    return hasattr(iterator, "_release_thread_pool_instance")


def test_closing_a_client_while_a_pool_thread_frees_a_session_ends_with_the_fix() -> None:
    if not _has_the_old_pool():
        pytest.skip("this PySpark's Connect client has no shared release pool to fix")
    # Given the installed client, as it is: the closing thread waits for the pool thread, which
    # waits for the lock the closing thread holds
    assert _run("as-installed", 10) == "deadlocked"
    # When the pool's shutdown no longer waits (SPARK-55362, applied by our remote_session)
    # Then the same interleaving ends
    assert _run("fixed", 60) == "closed"


def test_the_fix_is_applied_once_and_reports_itself() -> None:
    from airflow_trident.runtime.spark.compat import close_release_pool_without_waiting

    needed = _has_the_old_pool()
    # Applied twice, it says the same and replaces the client's shutdown only once
    assert close_release_pool_without_waiting() is needed
    from pyspark.sql.connect.client import reattach

    first = reattach.ExecutePlanResponseReattachableIterator.shutdown
    assert close_release_pool_without_waiting() is needed
    assert reattach.ExecutePlanResponseReattachableIterator.shutdown == first


INSIDE_SUBMIT = """
import os, sys, threading
from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as It
if sys.argv[1] == "fixed":
    from airflow_trident.runtime.spark.compat import close_release_pool_without_waiting
    close_release_pool_without_waiting()
pool = It._get_or_create_release_thread_pool()

def a_session_freed_inside_submit():
    with pool._shutdown_lock:  # pool.submit() -> _adjust_thread_count() -> the collector runs
        It.shutdown()  # SparkSession.__del__ -> client.close(), on the same thread

freeing = threading.Thread(target=a_session_freed_inside_submit, daemon=True)
freeing.start()
freeing.join(float(sys.argv[2]))
if freeing.is_alive():
    print("deadlocked", flush=True)
    os._exit(0)
# the client dropped the pool; a later release gets a new one, and closing it shuts it down
assert It._release_thread_pool_instance is None
again = It._get_or_create_release_thread_pool()
assert again is not pool
It.shutdown()
print("closed" if again._shutdown else "left running", flush=True)
os._exit(0)
"""


def test_a_session_freed_inside_the_pools_submit_ends_with_the_fix() -> None:
    if not _has_the_old_pool():
        pytest.skip("this PySpark's Connect client has no shared release pool to fix")
    # Given the installed client: a thread in the pool's submit (holding the pool's own lock)
    # frees a dropped session, whose close shuts the pool down, which takes that lock again
    done = subprocess.run(
        [sys.executable, "-c", INSIDE_SUBMIT, "as-installed", "10"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == "deadlocked", done.stderr[-2000:]
    # When a shutdown that finds the pool's lock held leaves the (dropped) pool to end on its own
    done = subprocess.run(
        [sys.executable, "-c", INSIDE_SUBMIT, "fixed", "60"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # Then the freeing thread goes on, and the next pool is shut down as usual
    assert done.stdout.strip() == "closed", done.stderr[-2000:]
