"""Large metadata in ZooKeeper: compressed, chunked, or refused before anything is written with a
message that names its size, its partitions, the limit and the way out (issue 55)."""

from __future__ import annotations

import os

import pytest
from kazoo.client import KazooClient

from airflow_trident.batch.steps import BatchSteps
from airflow_trident.coordination.packed import CHUNK_BYTES, pack, unpack
from airflow_trident.coordination.store import CoordinatorStore
from airflow_trident.errors import MetadataError, MetadataTooLargeError
from airflow_trident.operation import Count
from airflow_trident.spout.memory import MemoryTransactionalSpout
from airflow_trident.state.memory import memory_state
from airflow_trident.topology import TridentTopology


def noise(n: int) -> str:
    return os.urandom(n // 2).hex()


def test_small_values_stay_plain_json() -> None:
    assert pack({"a": 1}, what="m").head == b'{"a":1}'


def test_large_values_compress_then_chunk() -> None:
    compressible = {f"p{i}": {"offset": i} for i in range(10_000)}
    packed = pack(compressible, what="m")
    assert packed.head[:1] == b"x"
    assert not packed.chunks
    assert unpack(packed.head, []) == compressible
    random = {"blob": noise(300_000)}
    chunked = pack(random, what="m")
    assert len(chunked.chunks) == 3
    assert max(map(len, chunked.chunks)) <= CHUNK_BYTES
    assert unpack(chunked.head, list(chunked.chunks)) == random
    with pytest.raises(MetadataError, match="changed while being read"):
        unpack(chunked.head, list(chunked.chunks[:-1]))


def test_too_large_is_refused_naming_size_partitions_limit_and_way_out() -> None:
    with pytest.raises(MetadataTooLargeError) as caught:
        pack({"blob": noise(2_000_000)}, what="metadata of spout 's'", partitions=12_345)
    message = str(caught.value)
    for part in ("2,000,0", "12,345 partitions", "491,520", "jute.maxbuffer",
                 "fewer partitions", "Nothing of it was written"):  # fmt: skip
        assert part in message, (part, message)


def largest(client: KazooClient, path: str) -> int:
    data, _ = client.get(path)
    found = len(data or b"")
    for child in client.get_children(path):
        found = max(found, largest(client, f"{path}/{child}"))
    return found


@pytest.mark.integration
def test_chunked_batch_metadata_round_trips(zk_store: CoordinatorStore) -> None:
    meta = {"partitions": [noise(40) for _ in range(8_000)]}
    zk_store.metas.put_meta("s", 1, meta)
    assert zk_store.metas.get_meta("s", 1) == meta
    zk_store.metas.put_meta("s", 1, meta)  # the same again: fixed, a no-op
    with pytest.raises(MetadataError, match="fixed"):
        zk_store.metas.put_meta("s", 1, {"partitions": []})
    zk_store.metas.put_meta("o", 1, meta, overwrite=True)
    zk_store.metas.put_meta("o", 1, {"partitions": ["a"]}, overwrite=True)  # chunks go
    assert zk_store.metas.get_meta("o", 1) == {"partitions": ["a"]}
    assert zk_store.client.get_children(zk_store.paths.meta("o", 1)) == []
    assert largest(zk_store.client, zk_store.paths.base) <= 64 * 1024
    assert zk_store.cleanup_before(3) == 0  # the newest of each spout stays
    assert zk_store.metas.latest_meta_before("s", 2) == (1, meta)


@pytest.mark.integration
def test_too_large_batch_metadata_writes_nothing(zk_store: CoordinatorStore) -> None:
    with pytest.raises(MetadataTooLargeError, match="3 partitions"):
        zk_store.metas.put_meta("s", 1, {"partitions": [noise(400_000) for _ in range(3)]})
    assert zk_store.client.exists(zk_store.paths.meta("s", 1)) is None


@pytest.mark.integration
def test_10000_partitions_of_200_character_names(zk_store: CoordinatorStore) -> None:
    topic = "t" * 200
    rows = {f"{topic}-{i}": [("a",), ("b",)] for i in range(10_000)}
    t = TridentTopology(zk_store.paths.topology)
    t.new_stream("words", MemoryTransactionalSpout(rows, ["word"], 1)).group_by(
        ["word"]
    ).persistent_aggregate(
        memory_state(f"{zk_store.paths.topology}_n", "transactional"), Count(), ["n"], name="n"
    )
    steps = BatchSteps(t, zk_store)
    assert [steps.run_batch(f"r{i}").records_in for i in (1, 2, 3)] == [10_000, 10_000, 0]
    assert steps.query_state("n").multi_get([("a",), ("b",)]) == [10_000, 10_000]
    assert largest(zk_store.client, zk_store.paths.base) <= 64 * 1024
