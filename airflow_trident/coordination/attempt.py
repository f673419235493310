"""Where :class:`~airflow_trident.attempt.TransactionAttempt` lived at first (a value type
spouts use too, so it now sits beside ``tuple`` at the bottom of the layers)."""

from airflow_trident.attempt import TransactionAttempt

__all__ = ["TransactionAttempt"]
