"""JSON values of any size in ZooKeeper: plain, compressed, or compressed in a few chunks.

A znode holds at most ``jute.maxbuffer`` bytes (1 MB by default), and so does one request,
a multi-op transaction included. Batch metadata grows with the partitions of a spout, so a
value is stored in one of three forms, told apart by its first byte:

* plain JSON, up to :data:`INLINE_BYTES` (what every node held before; small values keep it);
* zlib-compressed JSON (first byte ``x``, which no JSON value starts with), up to
  :data:`CHUNK_BYTES` compressed;
* a head ``\\x00{"chunks": n, "bytes": b, "crc": c}`` with the compressed bytes split into
  ``n`` children ``<path>/chunk-<i>`` of at most :data:`CHUNK_BYTES` each, written with the
  head in one transaction. A reader checks size and CRC and re-reads if a writer raced it.

A value whose compressed form exceeds :data:`MAX_BYTES` is refused before anything is written
(:class:`~airflow_trident.errors.MetadataTooLargeError`). No node is ever above
:data:`CHUNK_BYTES` plus a few bytes.

>>> small = pack({"offset": 3}, what="meta")
>>> small.head, small.chunks
(b'{"offset":3}', ())
>>> big = pack({f"p{i}": {"offset": i} for i in range(5000)}, what="meta")
>>> big.head[:1], len(big.chunks), unpack(big.head, list(big.chunks)) == unpack(
...     pack({f"p{i}": {"offset": i} for i in range(5000)}, what="meta").head, [])
(b'x', 0, True)
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from airflow_trident.coordination.znodes import decode_json, encode_json
from airflow_trident.errors import MetadataError, MetadataTooLargeError

__all__ = [
    "CHUNK_BYTES",
    "INLINE_BYTES",
    "MAX_BYTES",
    "Packed",
    "StoredNode",
    "chunk_path",
    "pack",
    "read_node",
    "stage_write",
    "unpack",
]

INLINE_BYTES = 16 * 1024
"""Values up to this many bytes of JSON stay plain JSON."""

CHUNK_BYTES = 60 * 1024
"""The largest node written (compressed bytes per chunk)."""

MAX_CHUNKS = 8
MAX_BYTES = MAX_CHUNKS * CHUNK_BYTES
"""The most compressed bytes one value may take: half of ZooKeeper's default 1 MB request limit
(``jute.maxbuffer``), so that a commit's transaction with it still fits."""

_ZLIB = b"x"
_CHUNKED = b"\x00"
_READ_TRIES = 5


@dataclass(frozen=True)
class Packed:
    """A value's head node bytes and its chunks' bytes (none unless chunked)."""

    head: bytes
    chunks: tuple[bytes, ...]
    raw_bytes: int

    @property
    def stored_bytes(self) -> int:
        """Bytes written to ZooKeeper (head and chunks)."""
        return len(self.head) + sum(map(len, self.chunks))


@dataclass(frozen=True)
class StoredNode:
    """A packed value read back: the value, its head's version and how many chunks it has."""

    value: Any
    version: int
    chunks: int
    stored_bytes: int = 0


def chunk_path(path: str, index: int) -> str:
    """The ``index``-th chunk of the value at ``path``."""
    return f"{path}/chunk-{index:03d}"


def pack(value: Any, *, what: str, partitions: int | None = None) -> Packed:
    """``value`` as node bytes (see the module docstring).

    Raises
    ------
    MetadataNotSerializableError
        If ``value`` is not JSON.
    MetadataTooLargeError
        If it does not fit in :data:`MAX_BYTES` compressed; naming its size, ``partitions``,
        the limit and the way out.
    """
    data = encode_json(value, what=what)
    if len(data) <= INLINE_BYTES:
        return Packed(data, (), len(data))
    compressed = zlib.compress(data, 6)
    if len(compressed) <= CHUNK_BYTES:
        return Packed(compressed, (), len(data))
    if len(compressed) > MAX_BYTES:
        count = f"{partitions:,} partitions" if partitions is not None else "its partitions"
        msg = (
            f"{what} is too large for ZooKeeper: {len(data):,} bytes of JSON, "
            f"{len(compressed):,} compressed, for {count}; the limit is {MAX_BYTES:,} "
            f"compressed bytes ({MAX_CHUNKS} nodes of {CHUNK_BYTES:,}), half of ZooKeeper's "
            f"request limit jute.maxbuffer (1 MB by default). Nothing of it was written. "
            f"Hint: give the spout fewer partitions (split its topics or directories over "
            f"several spouts or topologies), or use shorter partition names"
        )
        raise MetadataTooLargeError(msg)
    pieces = tuple(compressed[i : i + CHUNK_BYTES] for i in range(0, len(compressed), CHUNK_BYTES))
    head = {"chunks": len(pieces), "bytes": len(compressed), "crc": zlib.crc32(compressed)}
    return Packed(_CHUNKED + json.dumps(head).encode(), pieces, len(data))


def chunk_count(head: bytes) -> int:
    """How many chunks the value whose head is ``head`` has (0 unless chunked)."""
    if not head.startswith(_CHUNKED):
        return 0
    return int(json.loads(head[1:].decode())["chunks"])


def unpack(head: bytes, chunks: Sequence[bytes]) -> Any:
    """The value of a head and its chunks (``chunks`` empty unless chunked).

    Raises
    ------
    MetadataError
        If the chunks do not match the head (a writer raced the reader: read again).
    """
    if head.startswith(_ZLIB):
        return decode_json(zlib.decompress(head))
    if not head.startswith(_CHUNKED):
        return decode_json(head)
    described = json.loads(head[1:].decode())
    joined = b"".join(chunks)
    if len(joined) != described["bytes"] or zlib.crc32(joined) != described["crc"]:
        msg = "the chunks of a value changed while being read"
        raise MetadataError(msg)
    return decode_json(zlib.decompress(joined))


def read_node(client: KazooClient, path: str) -> StoredNode | None:
    """The packed value at ``path`` and its version, ``None`` when absent (no retry: call it
    under ``client.retry``, or inside a function that is)."""
    for _ in range(_READ_TRIES):
        try:
            head, stat = client.get(path)
        except NoNodeError:
            return None
        count = chunk_count(head)
        try:
            chunks = [client.get(chunk_path(path, i))[0] for i in range(count)]
            value = unpack(head, chunks)
        except (NoNodeError, MetadataError):
            continue  # rewritten while read: again
        stored = len(head) + sum(map(len, chunks))
        return StoredNode(value, stat.version, count, stored)
    msg = f"the value at {path} kept changing while being read ({_READ_TRIES} tries)"
    raise MetadataError(msg)


def stage_write(tx: Any, path: str, packed: Packed, old: StoredNode | None) -> None:
    """Add the writes of ``packed`` at ``path`` to kazoo transaction ``tx``: a create when
    ``old`` is ``None`` (the parent must exist), else a set checked against ``old``'s version,
    its chunks rewritten and the extra old ones deleted."""
    if old is None:
        tx.create(path, packed.head)
    else:
        tx.set_data(path, packed.head, old.version)
    existing = 0 if old is None else old.chunks
    for i, piece in enumerate(packed.chunks):
        if i < existing:
            tx.set_data(chunk_path(path, i), piece)
        else:
            tx.create(chunk_path(path, i), piece)
    for i in range(len(packed.chunks), existing):
        tx.delete(chunk_path(path, i))


def new_version(results: Sequence[Any], old: StoredNode | None) -> int:
    """The head's version after a committed transaction staged by :func:`stage_write` first."""
    first = results[0]
    version = getattr(first, "version", None)
    if isinstance(version, int):
        return version
    return 0 if old is None else old.version + 1


Reader = Callable[[str], StoredNode | None]
