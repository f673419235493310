"""Trident's value rules, with the seeds' worked examples."""

from __future__ import annotations

import pytest

from airflow_trident.errors import StateBehindError
from airflow_trident.state.values import (
    OpaqueValue,
    TransactionalValue,
    apply_opaque,
    apply_transactional,
)


def add(n: int):  # type: ignore[no-untyped-def]
    return lambda old: (old or 0) + n


class TestTransactionalValue:
    def test_new_txid_applies_and_records_txid(self) -> None:
        # Given a count of 3 written by txid 1, When txid 3 adds 2
        new = TransactionalValue(1, 3).apply(3, add(2))
        # Then the count is 5 and belongs to txid 3
        assert new == TransactionalValue(3, 5)

    def test_replayed_txid_is_skipped(self) -> None:
        # Given dog=4 already written by txid 3, When txid 3 is replayed
        stored = TransactionalValue(3, 4)
        # Then nothing changes (the batch was counted already)
        assert stored.apply(3, add(1)) is stored

    def test_absent_value_starts_from_none(self) -> None:
        assert apply_transactional(None, 7, add(2)) == TransactionalValue(7, 2)

    def test_txid_behind_state_names_both(self) -> None:
        with pytest.raises(StateBehindError, match=r"batch txid 2 .* txid 5"):
            TransactionalValue(5, 1).apply(2, add(1))


class TestOpaqueValue:
    def test_seed_next_batch_builds_on_curr(self) -> None:
        # Given value=4, prev=1, txid=2 When batch 3 brings a partial count of 2
        new = OpaqueValue(2, 4, 1).apply(3, add(2))
        # Then value=6, prev=4, txid=3
        assert new == OpaqueValue(curr_txid=3, curr=6, prev=4)

    def test_seed_replay_recomputes_from_prev(self) -> None:
        # Given value=4, prev=1, txid=2 When txid 2 is replayed with a partial count of 2
        new = OpaqueValue(2, 4, 1).apply(2, add(2))
        # Then value=3 (prev + 2), prev stays 1
        assert new == OpaqueValue(curr_txid=2, curr=3, prev=1)

    def test_replay_with_other_content_replaces_not_adds(self) -> None:
        v = apply_opaque(None, 1, add(10))
        assert v == OpaqueValue(1, 10, None)
        assert v.apply(1, add(7)) == OpaqueValue(1, 7, None)

    def test_get_reads_curr_for_later_prev_for_replay(self) -> None:
        v = OpaqueValue(2, 4, 1)
        assert (v.get(None), v.get(3), v.get(2)) == (4, 4, 1)

    def test_txid_behind_state_names_both(self) -> None:
        with pytest.raises(StateBehindError, match=r"batch txid 1 .* opaque state's txid 2"):
            OpaqueValue(2, 4, 1).apply(1, add(1))
