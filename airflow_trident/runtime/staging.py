"""Staged batch results: uncompressed Parquet files plus a manifest, under
``<staging_root>/<topology>/<txid>/<attempt>/``.

The processing step writes, per state, one Parquet file per output partition, then the manifest
last: records emitted per source partition, rows per staged file, and a digest of the batch
metadata the batch was computed from. The commit step refuses a batch whose manifest is missing,
incomplete, from another attempt, computed from other metadata, or whose files do not hold the
rows it lists (Trident's expected tuple counts, between our two processes).

The root may be a local path or any URI ``pyarrow.fs`` understands (``hdfs://``, ``s3://``...).
``pyarrow`` is imported by the functions that read or write files, not with this module: every
Airflow task process imports it (through the batch lifecycle) while parsing its DAG file, and
only the steps that touch the staging use Arrow.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import BatchIncompleteError
from airflow_trident.runtime.result import ProcessResult, StagedState
from airflow_trident.tuple import Fields

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import fs

__all__ = [
    "MANIFEST",
    "StagingArea",
    "meta_digest",
    "rows_to_table",
    "table_to_rows",
]

MANIFEST = "_manifest.json"
COMMIT_SUMMARY = "_commit.json"
_JSON_META = b"trident.json_columns"


def meta_digest(metas: Mapping[str, Any]) -> str:
    """A digest of every spout's batch metadata (canonical JSON)."""
    text = json.dumps(metas, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rows_to_table(fields: Fields, rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """An Arrow table of ``rows``; a column Arrow cannot type is kept as JSON text."""
    import pyarrow as pa

    arrays, json_columns = [], []
    for i, name in enumerate(fields):
        values = [r[i] for r in rows]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays.append(pa.array([json.dumps(v, default=repr) for v in values], pa.string()))
            json_columns.append(name)
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(fields, arrays, strict=True)])
    schema = schema.with_metadata({_JSON_META: json.dumps(json_columns).encode()})
    return pa.Table.from_arrays(arrays, schema=schema)


def table_to_rows(
    table: pa.Table, fields: Fields, pickled: Sequence[str] = ()
) -> list[tuple[Any, ...]]:
    """Invert :func:`rows_to_table` (columns taken in ``fields`` order); ``pickled`` columns
    (written by the Spark runtime for values Arrow cannot type) are unpickled."""
    meta = table.schema.metadata or {}
    json_columns = set(json.loads(meta.get(_JSON_META, b"[]")))
    columns = []
    for name in fields:
        values = table.column(name).to_pylist(maps_as_pydicts="strict")
        if name in json_columns:
            values = [json.loads(v) for v in values]
        elif name in pickled:
            values = [None if v is None else pickle.loads(v) for v in values]
        columns.append(values)
    return list(zip(*columns, strict=True)) if columns else []


def _read_staged(path: str, filesystem: Any) -> pa.Table:
    """A staged file's table. Spark's Parquet writer stores a ``TimestampType`` (an instant)
    as ``INT96`` by default, which Arrow reads as a timestamp without time zone: such columns
    are read as UTC instants, the values the in-process runtime stages (and Arrow's own
    files carry their time zone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with filesystem.open_input_file(path) as source:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        instants = {parquet.schema.column(i).path for i in range(len(parquet.schema))
                    if parquet.schema.column(i).physical_type == "INT96"}  # fmt: skip
        table = parquet.read()
    for name in instants & set(table.column_names):
        index = table.column_names.index(name)
        utc = table.column(index).cast(pa.timestamp("us", tz="UTC"))
        table = table.set_column(index, pa.field(name, utc.type), utc)
    return table


@dataclass(frozen=True)
class StagingArea:
    """Where one topology's batches are staged."""

    root: str
    topology: str

    def filesystem(self) -> tuple[fs.FileSystem, str]:
        """The ``pyarrow`` file system of the root, and the root as a path in it."""
        from pyarrow import fs

        filesystem, path = (
            fs.FileSystem.from_uri(self.root)
            if "://" in self.root
            else (fs.LocalFileSystem(), self.root)
        )
        return filesystem, path.rstrip("/")

    def path(self, attempt: TransactionAttempt) -> str:
        """The directory of ``attempt``'s results (as a path of the file system)."""
        _, base = self.filesystem()
        return f"{base}/{self.topology}/{attempt.txid}/{attempt.attempt_id}"

    def write(
        self, attempt: TransactionAttempt, result: ProcessResult, metas: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Stage ``result`` (from the local runtime) and write the manifest; return it."""
        import pyarrow.parquet as pq

        filesystem, _ = self.filesystem()
        directory = self.path(attempt)
        filesystem.create_dir(directory, recursive=True)
        files: dict[str, list[dict[str, Any]]] = {}
        for name, staged in result.staged.items():
            files[name] = []
            for index, rows in enumerate(staged.partitions):
                path = f"{directory}/{name}/part-{index:05d}.parquet"
                filesystem.create_dir(f"{directory}/{name}", recursive=True)
                table = rows_to_table(staged.fields, rows)
                # read once, by the commit, usually from a local disk: compression only costs
                pq.write_table(table, path, filesystem=filesystem, compression="none")
                files[name].append({"path": path, "rows": len(rows)})
        states = {
            name: {
                "kind": s.kind,
                "fields": list(s.fields),
                "files": files[name],
                "partitions": max(1, len(files[name])),
            }
            for name, s in result.staged.items()
        }
        return self.write_manifest(attempt, result.emitted, states, metas, "local")

    def write_manifest(
        self,
        attempt: TransactionAttempt,
        emitted: Mapping[str, Mapping[str, int]],
        states: Mapping[str, Mapping[str, Any]],
        metas: Mapping[str, Any],
        runtime: str | None = None,
    ) -> dict[str, Any]:
        """Write the manifest (last, so its presence means every file is in place).

        ``states`` give each state's ``files`` (one per commit partition, in order; a ``None``
        path for a partition with no rows) and ``partitions`` (their count); ``runtime``
        (``"local"``, ``"spark"``) is where the batch was processed: with the partition counts,
        the txid's shape (:mod:`~airflow_trident.runtime.shape`)."""
        filesystem, _ = self.filesystem()
        filesystem.create_dir(self.path(attempt), recursive=True)  # no file staged: no dir yet
        manifest = {
            "topology": self.topology,
            "txid": attempt.txid,
            "attempt_id": attempt.attempt_id,
            "meta_digest": meta_digest(metas),
            "emitted": {k: dict(v) for k, v in emitted.items()},
            "states": {k: dict(v) for k, v in states.items()},
            "runtime": runtime,
            "complete": True,
        }
        with filesystem.open_output_stream(f"{self.path(attempt)}/{MANIFEST}") as out:
            out.write(json.dumps(manifest, sort_keys=True, indent=1).encode())
        return manifest

    def read_manifest(self, attempt: TransactionAttempt) -> dict[str, Any]:
        """The manifest of ``attempt``.

        Raises
        ------
        BatchIncompleteError
            If there is none (the process step did not finish this attempt).
        """
        filesystem, _ = self.filesystem()
        where = f"txid {attempt.txid} attempt {attempt.attempt_id} of topology {self.topology!r}"
        manifest_path = f"{self.path(attempt)}/{MANIFEST}"
        try:
            with filesystem.open_input_stream(manifest_path) as stream:
                manifest: dict[str, Any] = json.loads(stream.read())
        except (FileNotFoundError, OSError) as exc:
            msg = (
                f"no staged results for {where} ({manifest_path}); hint: the process step did "
                f"not finish for this attempt — re-run it (clear the process task)"
            )
            raise BatchIncompleteError(msg) from exc
        return manifest

    def verified_manifest(
        self, attempt: TransactionAttempt, metas: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The manifest of ``attempt``, checked complete and computed from ``metas``.

        Raises
        ------
        BatchIncompleteError
            If the manifest is missing or incomplete, or was computed from other metadata.
        """
        where = f"txid {attempt.txid} attempt {attempt.attempt_id} of topology {self.topology!r}"
        manifest = self.read_manifest(attempt)
        if not manifest.get("complete") or manifest.get("txid") != attempt.txid:
            msg = f"the manifest of {where} is incomplete or belongs to another batch"
            raise BatchIncompleteError(msg)
        if manifest["meta_digest"] != meta_digest(metas):
            msg = (
                f"{where} was processed from metadata {manifest['meta_digest']}, but the "
                f"coordinator now holds {meta_digest(metas)}; hint: re-run the process step"
            )
            raise BatchIncompleteError(msg)
        return manifest

    def read_partition(
        self, manifest: Mapping[str, Any], state: str, index: int
    ) -> list[tuple[Any, ...]]:
        """The rows of staged file ``index`` of ``state`` in ``manifest``, checked against the
        row count the manifest lists (Spark executors call this for their partition).

        Raises
        ------
        BatchIncompleteError
            If the file is missing or holds another number of rows than listed.
        """

        filesystem, _ = self.filesystem()
        where = (
            f"txid {manifest['txid']} attempt {manifest['attempt_id']} of topology "
            f"{self.topology!r}"
        )
        entry = manifest["states"][state]
        staged_file = entry["files"][index]
        if staged_file["path"] is None:  # a commit partition with no rows (Spark wrote no file)
            if staged_file["rows"]:
                msg = (
                    f"{where}: partition {index} of state {state!r} lists {staged_file['rows']} "
                    f"rows and no file; the batch is incomplete and will not be committed"
                )
                raise BatchIncompleteError(msg)
            return []
        try:
            table = _read_staged(staged_file["path"], filesystem)
        except (FileNotFoundError, OSError) as exc:
            msg = f"{where}: staged file {staged_file['path']} of state {state!r} is missing"
            raise BatchIncompleteError(msg) from exc
        if table.num_rows != staged_file["rows"]:
            msg = (
                f"{where}: staged file {staged_file['path']} of state {state!r} holds "
                f"{table.num_rows} rows, the manifest lists {staged_file['rows']}; the batch is "
                f"incomplete and will not be committed"
            )
            raise BatchIncompleteError(msg)
        return table_to_rows(table, tuple(entry["fields"]), entry.get("pickled", ()))

    def read(
        self, attempt: TransactionAttempt, metas: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, StagedState]]:
        """The manifest and staged rows of ``attempt``, verified complete.

        Raises
        ------
        BatchIncompleteError
            If the manifest is missing or incomplete, was computed from other metadata, or a
            file is missing or holds another number of rows than listed.
        """
        manifest = self.verified_manifest(attempt, metas)
        return manifest, self.read_states(manifest)

    def read_states(self, manifest: Mapping[str, Any]) -> dict[str, StagedState]:
        """Every staged partition of every state in ``manifest`` (see :meth:`read_partition`)."""
        staged = {}
        for name, entry in manifest["states"].items():
            partitions = [
                self.read_partition(manifest, name, i) for i in range(len(entry["files"]))
            ]
            staged[name] = StagedState(name, entry["kind"], tuple(entry["fields"]), partitions)
        return staged

    def write_commit_summary(self, txid: int, summary: Mapping[str, Any]) -> None:
        """Record what the commit of ``txid`` did (the Spark commit job's report to its task)."""
        filesystem, base = self.filesystem()
        directory = f"{base}/{self.topology}/{txid}"
        filesystem.create_dir(directory, recursive=True)
        with filesystem.open_output_stream(f"{directory}/{COMMIT_SUMMARY}") as out:
            out.write(json.dumps(summary, sort_keys=True, default=repr).encode())

    def read_commit_summary(self, txid: int) -> dict[str, Any]:
        """What the commit of ``txid`` reported (see :meth:`write_commit_summary`).

        Raises
        ------
        BatchIncompleteError
            If no commit of ``txid`` reported.
        """
        filesystem, base = self.filesystem()
        path = f"{base}/{self.topology}/{txid}/{COMMIT_SUMMARY}"
        try:
            with filesystem.open_input_stream(path) as stream:
                summary: dict[str, Any] = json.loads(stream.read())
        except (FileNotFoundError, OSError) as exc:
            msg = f"no commit summary for txid {txid} of topology {self.topology!r} ({path})"
            raise BatchIncompleteError(msg) from exc
        return summary

    def remove_before(self, txid: int) -> int:
        """Delete the staging of txids below ``txid``; return how many txids were removed."""
        from pyarrow import fs

        filesystem, base = self.filesystem()
        root = f"{base}/{self.topology}"
        selector = fs.FileSelector(root, allow_not_found=True)
        removed = 0
        for info in filesystem.get_file_info(selector):
            name = info.base_name
            if info.type == fs.FileType.Directory and name.isdigit() and int(name) < txid:
                filesystem.delete_dir(info.path)
                removed += 1
        return removed
