"""The one exception tree of airflow-trident.

Every error the package raises on purpose is a :class:`TridentError`. Messages say what went wrong,
where (txid, state, step, path) and give a hint.

Examples
--------
>>> from airflow_trident.errors import StateBehindError, TridentError
>>> issubclass(StateBehindError, TridentError)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "BatchFailedError",
    "BatchIncompleteError",
    "BatchNotReadyError",
    "BatchStalledError",
    "CommitConflictError",
    "CommitOrderError",
    "ConfigurationError",
    "CoordinatorUnavailableError",
    "DRPCArgumentsError",
    "DRPCCommitInProgressError",
    "DRPCError",
    "DRPCUnknownFunctionError",
    "FailedException",
    "InvalidNameError",
    "KafkaSecurityError",
    "MalformedRecordError",
    "MetadataError",
    "MetadataNotSerializableError",
    "MetadataTooLargeError",
    "MissingConnectionError",
    "NotExactlyOnceError",
    "StateBehindError",
    "StateError",
    "SchemaMismatchError",
    "SpoutEmitError",
    "SpoutUnavailableError",
    "StateStoreUnavailableError",
    "TopologyError",
    "TridentError",
    "UnknownDagError",
    "UnknownStateTypeError",
    "decode_error",
    "encode_error",
]


class TridentError(Exception):
    """Root of every error raised by airflow-trident."""


class ConfigurationError(TridentError, ValueError):
    """Bad input given by the user: a name, an option, a type."""


class InvalidNameError(ConfigurationError):
    """A name that cannot become a znode path segment or a SQL identifier."""


class TopologyError(ConfigurationError):
    """A topology that cannot be built: unknown or duplicate fields, duplicate step names."""


class UnknownStateTypeError(ConfigurationError):
    """A state type other than transactional, opaque or non-transactional."""


class UnknownDagError(ConfigurationError, LookupError):
    """A DAG id that names no DAG, or a DAG without a Trident batch (no begin task)."""


class MissingConnectionError(ConfigurationError, LookupError):
    """An Airflow connection the DAG or command names that is not defined where it runs."""


class KafkaSecurityError(ConfigurationError):
    """Kafka refused the client's authentication or TLS handshake (names the connection and
    the mechanism; docs/security.md)."""


class MetadataError(TridentError):
    """Batch metadata that cannot be stored or read back."""


class MetadataNotSerializableError(MetadataError, TypeError):
    """Batch metadata that is not JSON-serialisable (nothing was written)."""


class MetadataTooLargeError(MetadataError):
    """Batch metadata too large for ZooKeeper even compressed and chunked (nothing of it was
    written); the message names its size, its partitions, the limit and the way out."""


class StateError(TridentError):
    """A state update that breaks the exactly-once rules."""


class StateBehindError(StateError):
    """A batch whose txid is behind the txid already stored in state."""


class SchemaMismatchError(StateError):
    """A batch's columns do not fit the sink table's schema (refused before anything is written)."""


class CommitOrderError(TridentError):
    """A commit attempted out of txid order (txid-1 is not committed yet)."""


class CommitConflictError(CommitOrderError):
    """Another committer already committed this txid (the compare-and-set was lost)."""


class CoordinatorUnavailableError(TridentError, ConnectionError):
    """ZooKeeper cannot be reached."""


class StateStoreUnavailableError(StateError, ConnectionError):
    """The state database cannot be reached."""


class FailedException(TridentError):
    """Raised by user code to fail only the current batch; the batch is replayed."""


class BatchFailedError(TridentError):
    """A batch failed in the processing phase; it will be replayed with a new attempt."""


class BatchStalledError(BatchFailedError):
    """A batch's task waits for txid-1, which cannot make progress: the task fails now, without
    retrying, and the message says which runs to clear (``airflow_trident.batch.order``)."""


class BatchNotReadyError(BatchFailedError):
    """A batch that cannot be emitted yet (an earlier txid must be emitted first); retry."""


class BatchIncompleteError(BatchFailedError):
    """Staged results that do not account for every emitted record (or are from old metadata)."""


class NotExactlyOnceError(TopologyError):
    """A persist step whose spout and state together are not exactly-once (Trident's table);
    fix the combination, or pass ``at_least_once=True`` to accept it."""


class SpoutEmitError(BatchFailedError):
    """A spout's emitter raised: the batch fails and is replayed. The message names the spout,
    txid, attempt (and partition when known); the spout's own error is the ``__cause__``."""


class SpoutUnavailableError(SpoutEmitError, ConnectionError):
    """A spout's emitter could not reach its source (it raised a ``ConnectionError``)."""


class MalformedRecordError(SpoutEmitError):
    """A source record that cannot be read as the spout's fields (the message names the file and
    the line); the batch fails and nothing is committed (or configure a dead-letter location)."""


class DRPCError(TridentError):
    """A DRPC request that could not be answered (see its subclasses for why)."""


class DRPCUnknownFunctionError(DRPCError, LookupError):
    """A DRPC request to a function the topology does not define (HTTP 404)."""


class DRPCArgumentsError(DRPCError, ValueError):
    """A DRPC request whose arguments are not a string, or that a step of the DRPC stream
    failed on (HTTP 400); the step's own error is the ``__cause__``."""


class DRPCCommitInProgressError(DRPCError, ConnectionError):
    """A DRPC request that needs a value a commit in progress is writing and whose committed
    value the state does not keep (transactional state without ``prev``); retry (HTTP 503)."""


# -- one codec for errors that cross a process (a Spark worker -> its driver, a Spark job -> its
#    Airflow task): the error arrives as the same TridentError subclass, with its message


FAILURE_TAG = "trident-batch-failed"
"""The marker around an error's text that survives Spark's (and JDBC's) exception wrapping."""


def failure_text(exc: TridentError) -> str:
    """``exc`` wrapped in the :data:`FAILURE_TAG` marker; the Spark runtime raises the same
    error on the driver when a task fails with it (e.g. a database read that fails with it).

    >>> failure_text(SpoutEmitError("gone"))
    '<trident-batch-failed type=SpoutEmitError>gone</trident-batch-failed>'
    """
    return f"<{FAILURE_TAG} type={type(exc).__name__}>{exc}</{FAILURE_TAG}>"


def encode_error(exc: BaseException, *, limit: int = 4000) -> dict[str, str]:
    """``exc`` as JSON-ready ``{"type", "message"}``; an error not ours keeps its class name in
    the message.

    >>> encode_error(StateBehindError("state 'c' is at txid 2"))
    {'type': 'StateBehindError', 'message': "state 'c' is at txid 2"}
    >>> encode_error(KeyError("w"))
    {'type': 'KeyError', 'message': "KeyError: 'w'"}
    """
    message = str(exc) if isinstance(exc, TridentError) else f"{type(exc).__name__}: {exc}"
    return {"type": type(exc).__name__, "message": message[:limit]}


def decode_error(report: Mapping[str, Any]) -> TridentError:
    """The error :func:`encode_error` described: the :class:`TridentError` subclass of that
    name (any loaded one, e.g. ``StaleBatchError``), else a :class:`BatchFailedError`.

    >>> err = decode_error(encode_error(StateBehindError("behind")))
    >>> type(err).__name__, str(err)
    ('StateBehindError', 'behind')
    >>> type(decode_error({"type": "KeyError", "message": "KeyError: 'w'"})).__name__
    'BatchFailedError'
    """
    name = str(report.get("type"))
    cls: type[TridentError] = _error_classes().get(name, BatchFailedError)
    return cls(str(report.get("message", "")))


def _error_classes() -> dict[str, type[TridentError]]:
    found: dict[str, type[TridentError]] = {}
    todo: list[type[TridentError]] = [TridentError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found
