"""Partitioned file log spouts: directories of append-only files read as batches.

Long on purpose: the planning of one source (listing, marks, nested buckets, schema inference, dead
letters, lag) whose transactional and opaque forms share it; the records themselves are parsed in
:mod:`~airflow_trident.spout.file_records`.

Layout: ``root/<partition>/<file>``. Every directory under ``root`` is a partition; every file
in it is a chunk of the partition's log, in **file name order** (name files so that they sort in
arrival order, e.g. ``<epoch millis>-<writer>.jsonl``). Names starting with ``_`` or ``.`` are
ignored: write a file under such a name and rename it when complete (the rename is atomic), so a
batch never reads a file half-written. Files are never changed once landed.

* :class:`FileLogSpout` is transactional: a batch's metadata for a partition is the list of files
  it takes (with their record counts and sizes), fixed the first time the txid is emitted and
  re-emitted exactly on every replay.
* :class:`OpaqueFileLogSpout` is opaque: a batch resumes after the last file committed; an
  unreadable partition emits nothing this batch and is caught up later.

Each batch takes, per partition, files in name order up to ``max_files`` / ``max_bytes`` /
``max_records`` (at least one file). The tuples are emitted as ranges
(:mod:`airflow_trident.spout.ranges`): Spark reads the files in parallel (a batch of at most
``[trident] spark_read_here_bytes``, 1 MiB, is read by the Spark driver with this module's
reader); the in-process runtime reads them here. Formats: ``"json"`` (JSON lines, one object
per line), ``"csv"`` (a header line, then the spout's fields in order) and ``"parquet"``.

Examples
--------
>>> import json, pathlib, tempfile
>>> from airflow_trident.spout.base import ListCollector
>>> from airflow_trident.attempt import TransactionAttempt
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "p0").mkdir()
>>> _ = (root / "p0" / "0001.jsonl").write_text('{"s": "a b"}\\n{"s": "c"}\\n')
>>> spout = FileLogSpout(root, ["s"])
>>> spout.get_partitioned_coordinator().get_partitions_for_batch()
{'partitions': ['p0']}
>>> c = ListCollector()
>>> meta = spout.emit_partition_batch_new(TransactionAttempt(1, 1), c, "p0", None)
>>> meta["files"], c.tuples
([{'name': '0001.jsonl', 'bytes': 24}], [('a b',), ('c',)])
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from airflow_trident.attempt import TransactionAttempt
from airflow_trident.errors import ConfigurationError, SpoutEmitError, SpoutUnavailableError
from airflow_trident.names import Dataset, location_dataset
from airflow_trident.spout.base import Collector
from airflow_trident.spout.file_records import (
    FORMATS,
    RESCUED,
    TYPES,
    FileRange,
    count_records,
    parse_lines,
)
from airflow_trident.spout.lag import Lag
from airflow_trident.spout.ranges import emit_range

__all__ = ["FileLogSpout", "FileRange", "OpaqueFileLogSpout"]

log = logging.getLogger(__name__)

#: With ``trust_mtime``, a directory whose modification and change times are at least this old
#: (by the worker's clock) when it is listed gets a stamp: no landing can share its times since.
_SETTLED_NS = 10 * 10**9

Row = tuple[Any, ...]


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def _filesystem(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str, str]:
    """The filesystem of ``root``, its path there, and the URI prefix Spark reads it by."""
    text = os.fspath(root)
    if "://" in text and not text.startswith("file://"):
        filesystem, path = pafs.FileSystem.from_uri(text)
        return filesystem, path.rstrip("/"), text.split("://", 1)[0] + "://"
    path = os.path.abspath(text.removeprefix("file://"))
    return pafs.LocalFileSystem(), path, "file://"


# -- reading -------------------------------------------------------------------------------------


# -- planning ------------------------------------------------------------------------------------


class _FileLog:
    """What both spouts share: the layout, listing, limits, ranges and dead letters."""

    _infers = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        fields: Sequence[str],
        *,
        format: str = "json",
        types: Mapping[str, str] | None = None,
        max_files: int | None = None,
        max_bytes: int | None = None,
        max_records: int | None = None,
        dead_letter: str | os.PathLike[str] | None = None,
        rescue: bool = False,
        infer_schema: bool = False,
        nested: bool = False,
        trust_mtime: bool = False,
    ) -> None:
        if format not in FORMATS:
            msg = f"file log format {format!r} is not one of {FORMATS}"
            raise ConfigurationError(msg)
        types = dict(types or {})
        unknown = {f: t for f, t in types.items() if f not in fields or t not in TYPES}
        if unknown:
            msg = (
                f"file log types {unknown!r}: every key must be one of the fields "
                f"{tuple(fields)} and every type one of {TYPES}"
            )
            raise ConfigurationError(msg)
        if rescue and format == "parquet":
            msg = "file log rescue=True reads JSON or CSV (Parquet columns are typed by the file)"
            raise ConfigurationError(msg)
        if infer_schema and not self._infers:
            msg = (
                f"{type(self).__name__} cannot infer_schema: a batch's schema is recorded per "
                f"txid and replayed as it was, which an opaque spout does not do. Hint: use "
                f"FileLogSpout, or declare the types"
            )
            raise ConfigurationError(msg)
        if infer_schema and format != "json":
            msg = f"file log infer_schema=True reads JSON lines, not {format!r}"
            raise ConfigurationError(msg)
        if RESCUED in fields:
            msg = f"file log field {RESCUED!r} is reserved (rescue=True adds it)"
            raise ConfigurationError(msg)
        for name, limit in (("max_files", max_files), ("max_bytes", max_bytes),
                            ("max_records", max_records)):  # fmt: skip
            if limit is not None and limit < 1:
                msg = f"file log {name} must be >= 1 (or None for no limit), got {limit}"
                raise ConfigurationError(msg)
        self.root = os.fspath(root)
        if trust_mtime and "://" in self.root and not self.root.startswith("file://"):
            msg = (
                f"file log trust_mtime=True trusts a local directory's times; {self.root!r} "
                f"is listed whole every time. Hint: drop trust_mtime for this root"
            )
            raise ConfigurationError(msg)
        self.rescue = rescue
        self.output_fields = (*fields, RESCUED) if rescue else tuple(fields)
        self.format = format
        self.schema = tuple((f, types.get(f, "string")) for f in fields)
        self.declared = types
        self.infer_schema = infer_schema
        self.max_files, self.max_bytes, self.max_records = max_files, max_bytes, max_records
        self.nested = nested
        self.trust_mtime = trust_mtime
        self.dead_letter = None if dead_letter is None else os.fspath(dead_letter)
        self._fs: tuple[pafs.FileSystem, str, str] | None = None
        self._progress: Callable[[str, int], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"], state["_progress"] = None, None
        return state

    def openlineage_datasets(self, state_url: str | None = None) -> list[Dataset]:
        """The directory read, as Airflow's providers name files: ``file`` and the absolute
        path, or ``s3://bucket`` (``gs://...``, ``hdfs://namenode:port``) and the path.

        >>> FileLogSpout("s3://lake/events/", ["k"]).openlineage_datasets()
        [('s3://lake', 'events')]
        """
        return [location_dataset(self.root)]

    def filesystem(self) -> tuple[pafs.FileSystem, str, str]:
        """The root's filesystem, its path there and the URI prefix Spark reads it by."""
        if self._fs is None:
            self._fs = _filesystem(self.root)
        return self._fs

    def partitions(self) -> list[str]:
        """The partition directories, by name; :class:`SpoutUnavailableError` when the root
        does not exist or cannot be listed (nothing can be planned without it)."""
        filesystem, base, _ = self.filesystem()
        try:
            if isinstance(filesystem, pafs.LocalFileSystem):
                # a partition behind a broken link or mount keeps its place (a listing through
                # pyarrow drops it): its batches emit nothing until it is back
                with os.scandir(base) as entries:
                    names = [e.name for e in entries if e.is_symlink() or e.is_dir()]
            else:
                infos = filesystem.get_file_info(pafs.FileSelector(base))
                names = [i.base_name for i in infos if i.type != pafs.FileType.File]
        except OSError as exc:
            gone = isinstance(exc, FileNotFoundError) or "not found" in str(exc).lower()
            what = "does not exist" if gone else f"cannot be listed ({type(exc).__name__}: {exc})"
            msg = (
                f"file log root {self.root!r} {what}: no batch can be planned and nothing is "
                f"committed. Hint: create the root (an empty directory is a log without data), "
                f"fix the path or mount it; a batch begun meanwhile fails and is retried, and "
                f"every partition then resumes after its last committed file"
            )
            raise SpoutUnavailableError(msg) from exc
        return sorted(n for n in names if not _hidden(n))

    def new_files(self, partition: str, after: str, listed: Any = None) -> list[tuple[str, int]]:
        """``(name, bytes)`` of the partition's landed files whose names sort after the mark
        ``after``, in name order (raises ``OSError`` when the partition cannot be listed).

        A file behind the mark (consumed) costs a name comparison and no ``stat``; with
        ``nested``, a bucket directory behind the mark's is not even listed, level by level
        (local filesystems; others: one recursive listing). ``listed``: the previous batch's
        ``"listed"`` stamp (``trust_mtime``), which lets an unchanged mark's directory go
        unlisted."""
        return self._discover(partition, after, listed)[0]

    def _discover(
        self, partition: str, after: str, listed: Any
    ) -> tuple[list[tuple[str, int]], dict[str, tuple[tuple[int, int, int], str]]]:
        """The new files (as :meth:`new_files`) and, with ``trust_mtime`` on a local
        filesystem, the settled stamps of the directories listed: relative directory ->
        (stamp, its last entry name; ``""`` when it has none)."""
        filesystem, base, _ = self.filesystem()
        directory = f"{base}/{partition}"
        mark = tuple(after.split("/")) if after else ()
        seen: dict[str, tuple[tuple[int, int, int], str]] = {}
        if isinstance(filesystem, pafs.LocalFileSystem):
            skip = None
            if self.trust_mtime and isinstance(listed, dict) and mark:
                stamp = listed.get("stamp")
                if listed.get("dir") == "/".join(mark[:-1]) and isinstance(stamp, list):
                    skip = tuple(stamp)
            found = self._local_after(directory, (), mark, skip, seen)
            return [("/".join(rel), size) for rel, size in sorted(found)], seen
        selector = pafs.FileSelector(directory, recursive=self.nested)
        files = []
        for info in filesystem.get_file_info(selector):
            rel = tuple(info.path[len(directory) + 1 :].split("/"))
            if info.type == pafs.FileType.File and rel > mark and not any(map(_hidden, rel)):
                files.append((rel, info.size))
        return [("/".join(rel), size) for rel, size in sorted(files)], seen

    def _local_after(
        self,
        directory: str,
        prefix: tuple[str, ...],
        mark: tuple[str, ...],
        skip: tuple[int, ...] | None,
        seen: dict[str, tuple[tuple[int, int, int], str]],
    ) -> list[tuple[tuple[str, ...], int]]:
        """``(relative path, bytes)`` of the files under ``directory`` (``prefix`` relative
        to the partition) after ``mark``: with ``nested``, level by level, only into the
        directories named at or after the mark's at that level; the mark's own directory not
        at all when its stamp is still ``skip`` (``trust_mtime``)."""
        depth = len(prefix)
        on_mark = prefix == mark[:depth]
        bound = mark[depth] if on_mark and depth < len(mark) else ""
        now, stamp = 0, (0, 0, 0)
        if self.trust_mtime:
            now = time.time_ns()  # before the stat: the stamp's age is a lower bound
            st = os.stat(directory)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            if on_mark and depth == len(mark) - 1 and stamp == skip:
                seen["/".join(prefix)] = (stamp, bound)  # unchanged: nothing after the mark
                return []
        with os.scandir(directory) as listing:
            entries = [e for e in listing if e.name >= bound and e.name[0] not in "_."]
        if self.trust_mtime and now - max(stamp[1:]) > _SETTLED_NS:
            seen["/".join(prefix)] = (stamp, max((e.name for e in entries), default=""))
        out: list[tuple[tuple[str, ...], int]] = []
        for entry in entries:
            if on_mark and entry.name == bound and depth + 1 == len(mark):
                continue  # the mark itself
            rel = (*prefix, entry.name)
            try:
                if self.nested and entry.is_dir():
                    sub = f"{directory}/{entry.name}"
                    out.extend(self._local_after(sub, rel, mark, skip, seen))
                elif entry.is_file() and not (on_mark and entry.name == bound):
                    out.append((rel, entry.stat().st_size))
            except FileNotFoundError:
                continue  # gone since listed (or a broken link): not landed
        return out

    # -- coordinator (both spouts) ---------------------------------------------------------------

    def get_partitions_for_batch(self) -> Any:
        return {"partitions": self.partitions()}

    def use_progress(self, progress: Callable[[str, int], Any]) -> None:
        """Called by the executor: where each partition's next batch starts (for is_ready)."""
        self._progress = progress

    def is_ready(self, txid: int) -> bool:
        """True when some partition has a landed file after its newest batch's last file."""
        for partition in self.partitions():
            meta = self._progress(partition, txid) if self._progress is not None else None
            meta = meta or {}
            try:
                if self.new_files(partition, meta.get("after", ""), meta.get("listed")):
                    return True
            except OSError:
                continue  # unreadable for now: no new data from it
        return False

    def lag(self, partition: str, partition_meta: Any) -> Lag:
        """The files of ``partition`` landed after its batch ``partition_meta`` (every file
        before its first batch) and their bytes: the lag ``airflow-trident status`` shows
        (:mod:`airflow_trident.spout.lag`); one listing, no file is read."""
        meta = partition_meta if isinstance(partition_meta, dict) else {}
        files = self.new_files(partition, meta.get("after", ""), meta.get("listed"))
        return Lag(len(files), "files", f"{sum(size for _, size in files):,} bytes")

    def get_ordered_partitions(self, all_partition_info: Any) -> Sequence[str]:
        return list(all_partition_info["partitions"])

    def close(self) -> None:
        return None

    # -- planning a batch ------------------------------------------------------------------------

    def plan(self, attempt: TransactionAttempt, partition: str, last: Any) -> dict[str, Any]:
        """A new batch of ``partition`` after its batch ``last`` (``None``: its first): the
        files within the limits, with their record counts (malformed lines dead-lettered when
        configured) and, with ``infer_schema``, the schema the batch reads with."""
        after = (last or {}).get("after", "")
        filesystem, base, _ = self.filesystem()
        known = self._known_schema(partition, attempt.txid, last) if self.infer_schema else None
        added: list[str] = []
        taken: list[dict[str, Any]] = []
        records = size = 0
        found, seen = self._discover(partition, after, (last or {}).get("listed"))
        for name, nbytes in found:
            if taken and self._full(len(taken), size + nbytes, records):
                break
            path = f"{base}/{partition}/{name}"
            entry: dict[str, Any] = {"name": name}
            if known is not None:
                entry["records"] = _infer(filesystem, path, known, added)
            elif self.dead_letter is not None and self.format != "parquet":
                good, bad = self._dead_letters(attempt, partition, path, self.schema)
                entry["records"] = good
                if bad:
                    entry["malformed_lines"] = bad
            elif self.max_records is not None or self.format == "parquet":
                entry["records"] = count_records(filesystem, path, self.format)
            # else: not counted here; the job that reads the file counts its records
            entry["bytes"] = nbytes
            taken.append(entry)
            records += entry.get("records", 0)
            size += nbytes
            if self._full(len(taken), size, records):
                break
        meta: dict[str, Any] = {
            "files": taken,
            "after": taken[-1]["name"] if taken else after,
        }
        directory, _, leaf = meta["after"].rpartition("/")
        stamp, last_name = seen.get(directory, (None, "\uffff"))
        if stamp is not None and last_name <= leaf:  # nothing after the new mark in its directory
            meta["listed"] = {"dir": directory, "stamp": list(stamp)}
        if known is not None:
            meta["schema"] = known
            if added:
                meta["schema_added"] = added
                log.info("txid %d: partition %r of %s adds fields %s to the schema",
                         attempt.txid, partition, self.root, added)  # fmt: skip
            if self.dead_letter is not None:
                schema = self.reading_schema(meta)
                for entry in taken:
                    path = f"{base}/{partition}/{entry['name']}"
                    good, bad = self._dead_letters(attempt, partition, path, schema)
                    entry["records"] = good
                    if bad:
                        entry["malformed_lines"] = bad
        dead = sum(len(e.get("malformed_lines", ())) for e in taken)
        if dead:
            meta["dead_letters"] = dead
        return meta

    def _known_schema(self, partition: str, txid: int, last: Any) -> dict[str, str]:
        """The schema a new batch of ``partition`` starts from: the declared types, then what
        its previous batch and every other partition's newest batch up to ``txid`` knew."""
        known = dict(self.declared)
        schemas = [(last or {}).get("schema") or {}]
        if self._progress is not None:
            for other in self.partitions():
                if other != partition:
                    schemas.append((self._progress(other, txid + 1) or {}).get("schema") or {})
        for schema in schemas:
            for name, kind in schema.items():
                known.setdefault(name, kind)
        return known

    def reading_schema(self, meta: Any) -> tuple[tuple[str, str], ...]:
        """The fields and types a batch with metadata ``meta`` reads with (with
        ``infer_schema``: its recorded schema; a field no file typed yet is ``null``)."""
        if not self.infer_schema:
            return self.schema
        known = meta.get("schema") or {}
        return tuple((f, known.get(f, "null")) for f, _ in self.schema)

    def _full(self, files: int, size: int, records: int) -> bool:
        return (
            (self.max_files is not None and files >= self.max_files)
            or (self.max_bytes is not None and size > self.max_bytes)
            or (self.max_records is not None and records >= self.max_records)
        )

    def _dead_letters(
        self,
        attempt: TransactionAttempt,
        partition: str,
        path: str,
        schema: tuple[tuple[str, str], ...],
    ) -> tuple[int, list[int]]:
        """Parse ``path`` here; write its malformed lines to the dead-letter location; return
        the good record count and the malformed line numbers."""
        filesystem, _, _ = self.filesystem()
        good, bad, letters = 0, [], []
        lines = parse_lines(filesystem, path, self.format, schema, self.rescue)
        for number, line, _, error in lines:
            if error is None:
                good += 1
                continue
            bad.append(number)
            letters.append({"file": path, "line": number, "error": error, "record": line,
                            "txid": attempt.txid, "partition": partition})  # fmt: skip
        if letters:
            assert self.dead_letter is not None
            target = Path(self.dead_letter) / partition
            target.mkdir(parents=True, exist_ok=True)
            relative = path.split(f"/{partition}/", 1)[-1].replace("/", "~")
            name = f"txid={attempt.txid:012d}-{relative}.jsonl"
            tmp = target / f"_{name}"
            tmp.write_text("".join(json.dumps(x) + "\n" for x in letters), encoding="utf-8")
            tmp.replace(target / name)  # a replay writes the same file again
            log.warning("txid %d: %d malformed records of %s went to %s", attempt.txid,
                        len(letters), path, target / name)  # fmt: skip
        return good, bad

    def range_of(self, attempt: TransactionAttempt, partition: str, meta: Any) -> FileRange:
        """The :class:`FileRange` of ``partition``'s batch described by ``meta``."""
        filesystem, base, prefix = self.filesystem()
        files = tuple(
            (f"{base}/{partition}/{f['name']}",
             None if f.get("records") is None else int(f["records"]),
             tuple(f.get("malformed_lines", ())))
            for f in meta["files"]
        )  # fmt: skip
        where = (
            f"file log {self.root!r} txid {attempt.txid} (attempt {attempt.attempt_id}), "
            f"partition {partition!r}"
        )
        return FileRange(
            self.format,
            prefix,
            files,
            self.reading_schema(meta),
            where,
            filesystem,
            dead_letter=self.dead_letter is not None,
            rescue=self.rescue,
            size_bytes=_size(meta["files"]),
        )


def _size(files: Any) -> int | None:
    """The bytes of a batch's files, as its metadata lists them (``None`` if one is missing:
    metadata written before sizes were kept)."""
    sizes = [f.get("bytes") for f in files]
    return None if any(b is None for b in sizes) else sum(int(b) for b in sizes)


_INFERRED = ((bool, "boolean"), (int, "bigint"), (float, "double"), (str, "string"))


def _infer(filesystem: pafs.FileSystem, path: str, known: dict[str, str], added: list[str]) -> int:
    """Add to ``known`` (and ``added``) the type of every key of ``path``'s JSON records that
    ``known`` lacks (the first non-null scalar value decides; nested values decide nothing);
    return the records (non-blank lines)."""
    records = 0
    with filesystem.open_input_stream(path) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8", newline=""):
            stripped = line.strip()
            if not stripped:
                continue
            records += 1
            try:
                obj = json.loads(stripped)
            except ValueError:
                continue  # malformed: failed or dead-lettered when read
            if not isinstance(obj, dict):
                continue
            for name, value in obj.items():
                if name in known or value is None:
                    continue
                kind = next((k for t, k in _INFERRED if isinstance(value, t)), None)
                if kind is not None:
                    known[name] = kind
                    added.append(name)
    return records


class FileLogSpout(_FileLog):
    """A transactional partitioned spout over ``root/<partition>/<file>`` (see module docs).

    Parameters
    ----------
    root
        The log's root directory (a local path, or a URI pyarrow and Spark both read:
        ``s3://bucket/log``, ``hdfs://nn/log``).
    fields
        The spout's output fields: JSON keys, CSV columns (in order) or Parquet columns.
    format
        ``"json"`` (JSON lines), ``"csv"`` or ``"parquet"``.
    types
        Spark type per field (``string``, ``bigint``, ``int``, ``double``, ``boolean``);
        ``string`` when not given.
    max_files, max_bytes, max_records
        Limits per partition per batch (a batch takes at least one file).
    dead_letter
        A local directory for malformed records (one JSON line each, naming file and line);
        without it a malformed record fails the batch.
    rescue
        Add a last field ``_rescued_data``: values that do not fit their field's type and keys
        that are not fields, as a JSON object text, instead of a malformed record (JSON, CSV).
    infer_schema
        Infer the types not declared from the data, recorded per txid in the batch metadata
        (additive evolution; a replay reads with its txid's schema). JSON lines only.
    nested
        Files sit in bucket directories of each partition (``eu/2026-11-25/0001.jsonl``), read
        in path order; buckets behind the last file read are not listed.
    trust_mtime
        A local root only, on a disk filesystem of the machine that plans the batches (not
        NFS, SMB or a FUSE mount of an object store): a batch that read every file of the
        mark's directory, unchanged for 10 s, records the directory's inode, modification and
        change times (``"listed"``); the next batches do not list it again while they are the
        same (a landing there changes them). An idle partition then costs one ``stat``.
    """

    def get_partitioned_coordinator(self) -> FileLogSpout:
        return self

    def get_partitioned_emitter(self) -> FileLogSpout:
        return self

    def emit_partition_batch_new(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        after = (last_partition_meta or {}).get("after", "")
        try:
            meta = self.plan(attempt, partition, last_partition_meta)
        except OSError as exc:  # unreadable for now: this txid takes nothing from it, for good
            meta = {"files": [], "after": after}
            if self.infer_schema:
                meta["schema"] = (last_partition_meta or {}).get("schema") or {}
            log.warning("txid %d: partition %r of %s is unreadable (%s); it emits nothing in "
                        "this batch", attempt.txid, partition, self.root, exc)  # fmt: skip
        self.emit_partition_batch(attempt, collector, partition, meta)
        return meta

    def emit_partition_batch(
        self, attempt: TransactionAttempt, collector: Collector, partition: str, partition_meta: Any
    ) -> None:
        if not partition_meta["files"]:
            return
        source = self.range_of(attempt, partition, partition_meta)
        self._check_unchanged(source, partition_meta)
        emit_range(collector, source)

    def _check_unchanged(self, source: FileRange, meta: Any) -> None:
        """A replay reads the very files the txid fixed: refuse files gone or changed."""
        filesystem, _, _ = self.filesystem()
        paths = [p for p, _, _ in source.files]
        for info, entry in zip(filesystem.get_file_info(paths), meta["files"], strict=True):
            if info.type != pafs.FileType.File or info.size != entry["bytes"]:
                found = "missing" if info.type != pafs.FileType.File else f"{info.size} bytes"
                msg = (
                    f"{source.where}: {info.path} was {entry['bytes']} bytes when the batch "
                    f"was fixed and is {found} now; a transactional batch replays exactly the "
                    f"same files. Hint: restore the file (files must never change once landed)"
                )
                raise SpoutEmitError(msg)


class OpaqueFileLogSpout(_FileLog):
    """An opaque partitioned spout over ``root/<partition>/<file>``: a batch resumes after the
    last committed file; a partition that cannot be read is skipped and caught up later.

    Parameters are :class:`FileLogSpout`'s (but ``infer_schema``).
    """

    _infers = False

    def get_opaque_coordinator(self) -> OpaqueFileLogSpout:
        return self

    def get_opaque_emitter(self) -> OpaqueFileLogSpout:
        return self

    def emit_partition_batch(
        self,
        attempt: TransactionAttempt,
        collector: Collector,
        partition: str,
        last_partition_meta: Any,
    ) -> Any:
        try:
            meta = self.plan(attempt, partition, last_partition_meta)
        except OSError as exc:
            log.warning("txid %d: partition %r of %s is unreadable (%s); skipped in this batch, "
                        "caught up later", attempt.txid, partition, self.root, exc)  # fmt: skip
            return last_partition_meta
        if meta["files"]:
            emit_range(collector, self.range_of(attempt, partition, meta))
        return meta
