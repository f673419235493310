"""The one place the state package relies on a pyiceberg internal, for the exact versions it was
read against.

=========  ======================  ======================================  =====================
library    versions                what the Iceberg sink's commit uses     upstream
=========  ======================  ======================================  =====================
pyiceberg  0.12.0                  a ``Transaction`` subclass whose        the retry:
                                   private ``_rebuild_snapshot_updates``   apache/iceberg-python
                                   raises ``CommitFailedException``: the   #3320 (0.12.0), for
                                   commit retry does not rebase it         issue #269
pyiceberg  0.10.0, 0.11.0, 0.11.1  pyiceberg's ``Transaction``: its
                                   ``commit_transaction`` commits once
                                   (no retry, nothing to turn off)
=========  ======================  ======================================  =====================

Any other pyiceberg is refused (:class:`~airflow_trident.errors.ConfigurationError` naming it):
whether it rebases a commit is not known. ``tests/state/test_iceberg_compat.py`` fails when the
installed pyiceberg is not in the table, or the two methods the subclass relies on are not the
ones it was read against (:data:`REBASE_SOURCES`): then the table is read again for that version
and extended. Read 2026-12-07 from the installed 0.12.0 and apache/iceberg-python's tags.

**Why.** The sink checks its txid property before each attempt and starts over after a conflict
(``state/iceberg.py``). pyiceberg 0.12's commit retry instead refreshes the table and rebases the
same updates on the new snapshot: over a concurrent commit of the same txid (a second task
attempt, a replay) it would land the rows again, the txid property never read.

**Why not a public API.** 0.12.0's public knob for the retry is the table property
``commit.retry.num-retries`` (``0``: no retry). Set on the table, it would turn the retry off for
every other writer of the table too (Spark's Iceberg writer, the sink's own Spark staging). Set
only in this writer's loaded copy of the metadata, it changes one case: a commit that landed
although the catalog reported a conflict (a lost response its transport retried). The retry
finds that commit's snapshot in the refreshed metadata and stops; without the retry pyiceberg
deletes the manifests written for it, which the landed snapshot references. ``Transaction`` has
no public hook between a failed attempt and the next. So the private method stays, here only.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from airflow_trident.errors import ConfigurationError

__all__ = ["NO_RETRY_VERSIONS", "REBASE_SOURCES", "REBASING_VERSIONS", "no_rebase_transaction"]

REBASING_VERSIONS: Final = frozenset({"0.12.0"})
"""pyiceberg versions whose commit retry rebases: the sink uses :func:`_no_rebase_class`."""
NO_RETRY_VERSIONS: Final = frozenset({"0.10.0", "0.11.0", "0.11.1"})
"""pyiceberg versions that commit once: the sink uses pyiceberg's ``Transaction``."""
REBASE_SOURCES: Final = {
    "commit_transaction": "31e91e28f2729338",
    "_rebuild_snapshot_updates": "772a9824c3918fb1",
}
"""The first 16 hex digits of the SHA-256 of each ``Transaction`` method's source in 0.12.0:
the retry loop that calls ``_rebuild_snapshot_updates`` after a ``CommitFailedException`` and
cleans the attempt's files when it raises one, and the method the subclass overrides."""


def no_rebase_transaction(table: Any) -> Any:
    """A pyiceberg transaction on ``table`` whose commit is not rebased on a concurrent one: a
    conflict raises ``CommitFailedException`` and the sink starts over (checking its txid again).

    Raises
    ------
    ConfigurationError
        If the installed pyiceberg is not one of this module's table.
    """
    import pyiceberg
    from pyiceberg.table import Transaction

    version = pyiceberg.__version__
    if version in NO_RETRY_VERSIONS:
        return Transaction(table)
    if version in REBASING_VERSIONS:
        return _no_rebase_class()(table)
    known = sorted(NO_RETRY_VERSIONS | REBASING_VERSIONS)
    msg = (
        f"pyiceberg {version}: the Iceberg sink's commit is verified on pyiceberg {known} only "
        f"(whether this one rebases a commit over a concurrent one, which would skip the txid "
        f"check, is not known); install one of them, e.g. pip install 'pyiceberg=={known[-1]}' "
        f"(airflow_trident/state/compat.py)"
    )
    raise ConfigurationError(msg)


@functools.cache
def _no_rebase_class() -> type[Any]:
    """pyiceberg 0.12's ``Transaction`` whose retry after a conflict raises it instead."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import Transaction

    class NoRebaseTransaction(Transaction):
        def _rebuild_snapshot_updates(self) -> None:
            msg = "a concurrent commit landed first; the sink retries from its txid check"
            raise CommitFailedException(msg)

    return NoRebaseTransaction
