"""The readiness sensor's conventions: deferrable default from the configuration, templated
connection id."""

from __future__ import annotations

import pytest

from airflow_trident.sensors.ready import BatchReadySensor

COMMON = {"task_id": "wait_ready", "topology": "m:t", "staging_root": "/x"}


@pytest.mark.parametrize(("configured", "expected"), [("True", True), ("False", False)])
def test_sensor_deferrable_defaults_to_the_configuration(
    monkeypatch: pytest.MonkeyPatch, configured: str, expected: bool
) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", configured)
    assert BatchReadySensor(**COMMON).deferrable is expected
    assert BatchReadySensor(deferrable=not expected, **COMMON).deferrable is (not expected)


def test_sensor_templates_its_zookeeper_connection_id() -> None:
    sensor = BatchReadySensor(zookeeper_conn_id="zk_{{ params.env }}", **COMMON)
    sensor.render_template_fields({"params": {"env": "qa"}})
    assert sensor.zookeeper_conn_id == "zk_qa"
