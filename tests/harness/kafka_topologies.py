"""Kafka word counts for DAG-run tests (shipped by reference to ``spark-submit``, so configured
from the environment; two DAGs of one Airflow read different variables):

* :func:`kafka_tx_word_count`: a :class:`~airflow_trident.spout.kafka.KafkaSpout` over topic
  ``$TRIDENT_TEST_KAFKA_TX_TOPIC``, transactional SQL state; ``$TRIDENT_TEST_KAFKA_FAIL_ONCE``
  (a path): the first processing attempt that finds no file there fails (after creating it);
* :func:`kafka_opaque_word_count`: an :class:`~airflow_trident.spout.kafka.OpaqueKafkaSpout`
  over ``$TRIDENT_TEST_KAFKA_OPAQUE_TOPIC``, opaque SQL state.

Both read JSON records ``{"sentence": ...}`` through the Airflow ``kafka`` connection
:data:`CONNECTION_ID`, split them into words and count each word in the run's state database
(the DAG's ``state_conn_id``, else ``TRIDENT_STATE_URL``) in a table named as the topology,
which is named as its topic.

>>> import os
>>> os.environ[TX_TOPIC_ENV] = "doc_topic"
>>> kafka_tx_word_count().name
'doc_topic'
>>> del os.environ[TX_TOPIC_ENV]
"""

from __future__ import annotations

import os

from airflow_trident.operation import Count, Split
from airflow_trident.spout.kafka import KafkaSpout, OpaqueKafkaSpout
from airflow_trident.state.sql import sql_state
from airflow_trident.testing.faults import FailOnce
from airflow_trident.topology import TridentTopology

__all__ = [
    "CONNECTION_ID",
    "FAIL_ONCE_ENV",
    "OPAQUE_TOPIC_ENV",
    "TX_TOPIC_ENV",
    "kafka_opaque_word_count",
    "kafka_tx_word_count",
]

CONNECTION_ID = "e2e_kafka"
TX_TOPIC_ENV = "TRIDENT_TEST_KAFKA_TX_TOPIC"
OPAQUE_TOPIC_ENV = "TRIDENT_TEST_KAFKA_OPAQUE_TOPIC"
FAIL_ONCE_ENV = "TRIDENT_TEST_KAFKA_FAIL_ONCE"


def _word_count(topic: str, kind: str, fail_once: str) -> TridentTopology:
    spout_type = OpaqueKafkaSpout if kind == "opaque" else KafkaSpout
    spout = spout_type(topic, kafka_config_id=CONNECTION_ID, value_format="json",
                       fields=["sentence"], timeout_s=20.0)  # fmt: skip
    topology = TridentTopology(topic)
    words = topology.new_stream("sentences", spout).each(["sentence"], Split(), ["word"])
    if fail_once:
        words = words.each(["word"], FailOnce(fail_once), ["checked"]).project(["word"])
    words.group_by(["word"]).persistent_aggregate(
        sql_state(None, topic, kind, key_fields=("word",), value_type="bigint"),
        Count(),
        ["count"],
        name="counts",
    )
    return topology


def kafka_tx_word_count() -> TridentTopology:
    """The transactional Kafka word count (see the module)."""
    topic = os.environ.get(TX_TOPIC_ENV) or "e2e_kafka_tx"
    return _word_count(topic, "transactional", os.environ.get(FAIL_ONCE_ENV, ""))


def kafka_opaque_word_count() -> TridentTopology:
    """The opaque Kafka word count (see the module)."""
    return _word_count(os.environ.get(OPAQUE_TOPIC_ENV) or "e2e_kafka_opaque", "opaque", "")
