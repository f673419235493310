"""The id of one try at one batch (Trident's ``TransactionAttempt``).

>>> a = TransactionAttempt(txid=7, attempt_id=2)
>>> a
TransactionAttempt(txid=7, attempt_id=2)
>>> TransactionAttempt.from_json(a.to_json()) == a
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TransactionAttempt"]


@dataclass(frozen=True, slots=True, order=True)
class TransactionAttempt:
    """``txid`` names the batch for ever; ``attempt_id`` rises on every re-emit of it."""

    txid: int
    attempt_id: int

    def __post_init__(self) -> None:
        if self.txid < 1 or self.attempt_id < 0:
            msg = f"invalid attempt {self.txid}:{self.attempt_id}: txid >= 1, attempt_id >= 0"
            raise ValueError(msg)

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict (for XCom and staging manifests)."""
        return {"txid": self.txid, "attempt_id": self.attempt_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransactionAttempt:
        """Invert :meth:`to_json`."""
        return cls(int(data["txid"]), int(data["attempt_id"]))

    def __str__(self) -> str:
        return f"{self.txid}:{self.attempt_id}"
