"""A failed Spark job's own error, handed to its Airflow task.

``spark-submit`` only tells its caller an exit code; the job's error (``step 'Boom' failed in
batch txid 3 on record ('cow',): ...``) would be one line among Spark's output. So the job of a
batch's process or Spark-commit step writes its error, as JSON, to a known place under the
staging root, and the task raises it as its own failure:

``<staging_root>/_job_errors/<topology reference, encoded>/<txid>.<step>.json``

The task removes the report before it submits the job, so a report is always this run's.

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> from airflow_trident.errors import BatchFailedError
>>> write_job_error(root, "pkg.flows:wc", 3, "process", BatchFailedError("step 'x' failed"))
>>> err = read_job_error(root, "pkg.flows:wc", 3, "process")
>>> type(err).__name__, str(err)
('BatchFailedError', "step 'x' failed")
>>> clear_job_error(root, "pkg.flows:wc", 3, "process")
>>> read_job_error(root, "pkg.flows:wc", 3, "process") is None
True
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_trident.errors import TridentError, decode_error, encode_error
from airflow_trident.names import encode_segment
from airflow_trident.runtime.staging import StagingArea

if TYPE_CHECKING:  # the file system comes from StagingArea: pyarrow only when a job reports
    from pyarrow import fs

__all__ = ["clear_job_error", "read_job_error", "reporting_errors", "write_job_error"]

log = logging.getLogger("airflow_trident.spark_job")

_MAX_MESSAGE = 4000


def _path(staging_root: str, reference: str, txid: int, step: str) -> tuple[fs.FileSystem, str]:
    filesystem, base = StagingArea(staging_root, "_job_errors").filesystem()
    return filesystem, f"{base}/_job_errors/{encode_segment(reference)}/{txid}.{step}.json"


def write_job_error(
    staging_root: str, reference: str, txid: int, step: str, exc: BaseException
) -> None:
    """Record ``exc`` as the error of the ``step`` job of ``txid`` (best effort: a report that
    cannot be written is logged, never raised over the job's own error)."""
    filesystem, path = _path(staging_root, reference, txid, step)
    report = encode_error(exc, limit=_MAX_MESSAGE)
    try:
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(path) as out:
            out.write(json.dumps(report).encode())
    except OSError as err:
        log.warning("could not write the job's error report %s: %s", path, err)


def read_job_error(staging_root: str, reference: str, txid: int, step: str) -> TridentError | None:
    """The error the ``step`` job of ``txid`` reported, as the same :class:`TridentError`
    subclass (a ``BatchFailedError`` for any other exception; see
    :func:`~airflow_trident.errors.decode_error`), or ``None``."""
    filesystem, path = _path(staging_root, reference, txid, step)
    try:
        with filesystem.open_input_stream(path) as stream:
            report = json.loads(stream.read())
    except (OSError, ValueError):
        return None
    return decode_error(report)


def clear_job_error(staging_root: str, reference: str, txid: int, step: str) -> None:
    """Remove an earlier report of the ``step`` job of ``txid`` (before submitting it again)."""
    filesystem, path = _path(staging_root, reference, txid, step)
    with contextlib.suppress(OSError):  # FileNotFoundError included
        filesystem.delete_file(path)


def reporting_errors(main: Callable[[Sequence[str] | None], int], argv: Sequence[str]) -> int:
    """Run the Spark job's ``main(argv)``; if it raises, log the error as the job's last ERROR
    line, write its report (see :func:`write_job_error`), and raise it again."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--topology")
    parser.add_argument("--txid", type=int)
    parser.add_argument("--staging-root")
    parser.add_argument("--commit", action="store_true")
    args, _ = parser.parse_known_args(argv)
    try:
        return main(argv)
    except BaseException as exc:
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        if args.staging_root and args.topology and args.txid is not None:
            step = "commit" if args.commit else "process"
            write_job_error(args.staging_root, args.topology, args.txid, step, exc)
        log.error("%s", exc if isinstance(exc, TridentError) else f"{type(exc).__name__}: {exc}")
        raise
