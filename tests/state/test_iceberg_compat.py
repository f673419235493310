"""The pyiceberg internal of ``state/compat.py``: used only on the versions it was read against,
and what it is for (a conflict is not rebased on pyiceberg 0.12's commit retry)."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import ConfigurationError
from airflow_trident.state import compat

pytest.importorskip("pyiceberg")


def test_the_installed_pyiceberg_is_one_the_table_names() -> None:
    import pyiceberg
    from pyiceberg.table import Transaction

    # The pin moved: read commit_transaction of this version again (does it rebase? through
    # which method?), then put the version in the module's table or change the subclass
    known = compat.NO_RETRY_VERSIONS | compat.REBASING_VERSIONS
    assert pyiceberg.__version__ in known, f"pyiceberg {pyiceberg.__version__}: see state/compat.py"
    if pyiceberg.__version__ in compat.REBASING_VERSIONS:
        rebuild = Transaction._rebuild_snapshot_updates
        assert list(inspect.signature(rebuild).parameters) == ["self"]
        for name, digest in compat.REBASE_SOURCES.items():
            source = inspect.getsource(getattr(Transaction, name))
            assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, name


def _table(tmp_path: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "compat", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}"
    )
    catalog.create_namespace("db")
    return catalog.create_table("db.t", schema=pa.schema([("n", pa.int64())]))


def _race(tmp_path: Path, transaction: Any) -> tuple[Exception | None, list[int]]:
    """``transaction`` of an append of ``1`` committed after another writer appended ``2``."""
    table = _table(tmp_path)
    tx = transaction(table)
    tx.append(pa.table({"n": [1]}))
    table.catalog.load_table("db.t").append(pa.table({"n": [2]}))  # the other writer
    try:
        tx.commit_transaction()
    except Exception as exc:  # returned for the test to look at
        error: Exception | None = exc
    else:
        error = None
    rows = table.catalog.load_table("db.t").scan().to_arrow().column("n").to_pylist()
    return error, sorted(rows)


def test_a_conflict_is_not_rebased_and_nothing_of_it_lands(tmp_path: Path) -> None:
    from pyiceberg.exceptions import CommitFailedException

    # Given a writer whose commit loses the race to another writer's
    # When it commits through the sink's transaction
    error, rows = _race(tmp_path, compat.no_rebase_transaction)
    # Then the conflict reaches the sink (which starts over from its txid check), nothing landed
    assert isinstance(error, CommitFailedException)
    assert rows == [2]


def test_pyicebergs_own_retry_rebases_where_the_table_says_so(tmp_path: Path) -> None:
    import pyiceberg
    from pyiceberg.table import Transaction

    if pyiceberg.__version__ not in compat.REBASING_VERSIONS:
        pytest.skip(f"pyiceberg {pyiceberg.__version__} commits once")
    # Given pyiceberg's own transaction: its retry rebases the append on the other writer's
    error, rows = _race(tmp_path, Transaction)
    # Then both land, which the sink must not allow (its txid property is not read again)
    assert error is None
    assert rows == [1, 2]


@pytest.mark.parametrize(
    ("version", "outcome"),
    [("0.11.1", "Transaction"), ("0.12.0", "NoRebaseTransaction"), ("0.12.1", None)],
)
def test_the_transaction_follows_the_version(
    monkeypatch: pytest.MonkeyPatch, version: str, outcome: str | None
) -> None:
    import pyiceberg

    monkeypatch.setattr(pyiceberg, "__version__", version)
    table = object()  # a transaction only keeps its table until something is staged
    if outcome is None:
        # An unknown version is refused, naming it and the versions that are known
        with pytest.raises(ConfigurationError, match=r"pyiceberg 0\.12\.1: .*'0\.12\.0'"):
            compat.no_rebase_transaction(table)
    else:
        assert type(compat.no_rebase_transaction(table)).__name__ == outcome
