"""Secured Kafka the way users run it (issue 53): real DAG runs (``airflow dags test``) of the
express layout on a Spark Connect server, ZooKeeper from ``TRIDENT_ZK_HOSTS``, SQLite state,
a transactional Kafka word count (:func:`tests.harness.kafka_topologies.kafka_tx_word_count`)
whose spout names the Airflow ``kafka`` connection ``e2e_kafka``. That connection (an
``AIRFLOW_CONN_E2E_KAFKA`` JSON in the deployment's environment) is what a user writes for a
broker the test starts (:class:`tests.harness.kafka_secure.SecuredKafka`): SASL_SSL with
SCRAM-SHA-512, and mutual TLS. ``[trident] spark_read_here_records = 0`` sends every batch
through Spark's Kafka connector on the Connect server (the path a backlog takes), so the
connection's TLS and SASL settings must reach the connector's ``kafka.*`` options.

* two batches commit exactly the words produced (produced on the broker's PLAINTEXT listener);
* a replay of txid 1, after more records were produced, reads txid 1's offsets again and
  changes nothing;
* the runs' output (``dags test`` writes its task logs there) holds no secret of the
  connection.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_trident.examples.kafka import produce_sentences, word_counts
from tests.e2e.test_dag_runs import Deployment, _connect_to
from tests.harness.connect import running_connect_server
from tests.harness.kafka import create_topic
from tests.harness.kafka_secure import PASSWORD, SecuredKafka
from tests.harness.kafka_topologies import CONNECTION_ID, TX_TOPIC_ENV

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

DAG_ID = "e2e_kafka_secured"
DAG = f"""
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.kafka_topologies:kafka_tx_word_count",
    dag_id="{DAG_ID}",
    layout="express",
    process_mode="connect",
    spark_connect_conn_id="e2e_connect",
    keep_txids=1,
    retries=0,
)
"""
RECORDS = (20, 16, 12)  # per batch: txids 1 and 2, then the records a replay must not read


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    if not os.environ.get("TRIDENT_ZK_HOSTS"):
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    with SecuredKafka(tmp_path_factory.mktemp("secured_dag")) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Connect server of this module's own (its log is read too); its URL and work dir."""
    if not os.environ.get("TRIDENT_ZK_HOSTS"):
        pytest.skip("TRIDENT_ZK_HOSTS unset: run `bash scripts/test.sh`")
    work = tmp_path_factory.mktemp("secured_connect")
    with running_connect_server(work) as url:
        yield url, work


class Topic:
    """The sentences produced into a topic of 2 partitions, by batch (on PLAINTEXT)."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap, self.name = bootstrap, name
        self.batches: list[list[str]] = []
        create_topic(bootstrap, name, partitions=2)

    def produce(self, n: int) -> None:
        self.batches.append(produce_sentences(self.bootstrap, self.name, n, len(self.batches) + 1))

    def words(self, batches: int) -> dict[str, int]:
        return dict(word_counts(s for b in self.batches[:batches] for s in b))


def _output(result: Any) -> str:
    return str(result.process.stdout + result.process.stderr)


def _secrets(config: dict[str, Any], tls: Path) -> list[str]:
    """What must appear in no log: the SASL password, and the client key's PEM body."""
    out = [config["sasl.password"]] if "sasl.password" in config else []
    if "ssl.key.location" in config:
        body = (tls / "client.key").read_text().splitlines()[1:-1]
        out += [line for line in body if len(line) > 40][:3]
    return out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("way", ["scram-sha-512", "mtls"])
def test_express_dag_runs_read_a_secured_broker_through_spark_s_connector_exactly_once(
    secured: SecuredKafka,
    connect_server: tuple[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    way: str,
) -> None:
    url, server_dir = connect_server
    config = secured.config(way)
    topic = Topic(secured.plaintext, f"e2e_ksec_{way.replace('-', '_')}_{uuid.uuid4().hex[:8]}")
    # Given an express DAG on Spark Connect whose Kafka connection is the secured listener's,
    # every batch read by Spark's Kafka connector
    root = tmp_path_factory.mktemp(f"ksec_{way}")
    deployment = _connect_to(
        Deployment(root, os.environ["TRIDENT_ZK_HOSTS"], dag_id=DAG_ID, dag_file=DAG), url
    )
    deployment.topology = topic.name  # the topology, and its state's table, are named as the topic
    deployment.env.update({
        f"AIRFLOW_CONN_{CONNECTION_ID.upper()}": json.dumps({"conn_type": "kafka",
                                                             "extra": config}),
        "AIRFLOW__TRIDENT__SPARK_READ_HERE_RECORDS": "0",
        TX_TOPIC_ENV: topic.name,
    })  # fmt: skip
    outputs: list[str] = []
    # When two batches' records are produced and a run follows each
    for txid, n in enumerate(RECORDS[:2], start=1):
        topic.produce(n)
        result = deployment.run()
        outputs.append(_output(result))
        assert result.ok, result.describe(80)
        assert set(result.task_states) == {"batch.run"}, result.task_states
        # Then each commits exactly the words produced so far, under its own txid
        assert deployment.counts() == topic.words(txid)
        assert max(deployment.txids()) == txid
    assert "on Spark Connect" in outputs[-1]
    assert "spark-submit" not in outputs[-1]
    # When more records are produced and txid 1 is replayed, Then nothing changes
    topic.produce(RECORDS[2])
    before = deployment.counts()
    replay = deployment.run(conf={"txid": 1})
    outputs.append(_output(replay))
    assert replay.ok, replay.describe(80)
    assert "replays txid 1" in outputs[-1], outputs[-1][-3000:]
    assert deployment.counts() == before == topic.words(2)
    assert max(deployment.txids()) == 2
    # And the batches went through Spark's Kafka connector with the connection's security: the
    # connector's consumers on the Connect server spoke the secured listener's protocol
    server_log = "\n".join(p.read_text(errors="replace") for p in server_dir.rglob("*.log"))
    assert f"security.protocol = {config['security.protocol']}" in server_log
    if "sasl.mechanism" in config:
        assert f"sasl.mechanism = {config['sasl.mechanism']}" in server_log
    # And no secret of the connection is in the runs' output (their task logs) or the server's
    for secret in _secrets(config, secured.tls):
        leaks = [i for i, text in enumerate(outputs) if secret in text]
        assert leaks == [], f"the connection's secret is in the output of run(s) {leaks}"
        assert secret not in server_log, "the connection's secret is in the Connect server's log"
    assert PASSWORD not in "\n".join(outputs)
