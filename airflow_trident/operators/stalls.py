"""Where the stall logic lived before it moved below the triggers: see
:mod:`airflow_trident.hooks.stalls` (the commit trigger asks the same :class:`StallWatch`)."""

from __future__ import annotations

from airflow_trident.hooks.stalls import (
    QUEUED_GRACE_S,
    STALL_CHECK_S,
    StallWatch,
    dagrun_states,
    wait_watching,
)

__all__ = ["QUEUED_GRACE_S", "STALL_CHECK_S", "StallWatch", "dagrun_states", "wait_watching"]
