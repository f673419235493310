"""The ``trident`` asset URI scheme as Airflow sees it: the provider's ``asset-uris`` entry is
discovered by Airflow's own provider manager, its handler checks every ``trident://`` asset a DAG
makes, and OpenLineage converts our assets with its converter."""

from __future__ import annotations

import importlib.util

import pytest
from airflow.sdk import Asset

from airflow_trident.operators.asset_uris import (
    convert_asset_to_openlineage,
    create_asset,
    sanitize_uri,
)
from airflow_trident.operators.assets import committed_asset, data_asset

HAS_OPENLINEAGE = importlib.util.find_spec("airflow.providers.openlineage") is not None


def test_airflow_discovers_our_handler_factory_and_converter() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManagerTaskRuntime()  # type: ignore[no-untyped-call]
    assert manager.asset_uri_handlers["trident"] is sanitize_uri
    assert manager.asset_factories["trident"] is create_asset
    assert manager.asset_to_openlineage_converters["trident"] is convert_asset_to_openlineage


@pytest.mark.parametrize(
    "uri",
    [
        "trident://bad name/",  # not a topology name
        "trident://word_count/counts",  # a path we do not emit
        "trident://word_count/?txid=3",  # a query
        "trident://u@word_count/",  # a user
        "trident://word_count:99/",  # a port
        "trident:///new-data",  # no topology
    ],
)
def test_a_trident_asset_that_is_not_ours_is_refused_when_the_dag_makes_it(uri: str) -> None:
    with pytest.raises(ValueError, match="trident://<topology>/"):
        Asset(uri=uri)


def test_our_assets_keep_their_uris_and_the_factory_makes_the_same() -> None:
    reference = "airflow_trident.examples.topologies:word_count"
    assert Asset(uri="trident://word_count").uri == "trident://word_count/"
    assert Asset(uri="trident://word_count/new-data/").uri == "trident://word_count/new-data"
    assert committed_asset("word_count").uri == "trident://word_count/"
    assert data_asset("word_count", reference).uri == "trident://word_count/new-data"
    made = create_asset(topology="word_count")
    assert (made.name, made.uri) == ("trident_word_count", "trident://word_count/")
    made = create_asset(topology="word_count", new_data=True)
    assert (made.name, made.uri) == ("trident_word_count_new_data", "trident://word_count/new-data")


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_openlineage_converts_our_assets_with_our_converter() -> None:
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset

    reference = "airflow_trident.examples.topologies:word_count"
    committed = translate_airflow_asset(committed_asset("word_count"), None)
    new_data = translate_airflow_asset(data_asset("word_count", reference), None)
    assert committed is not None
    assert new_data is not None
    assert (committed.namespace, committed.name) == ("trident://word_count", "committed")
    assert (new_data.namespace, new_data.name) == ("trident://word_count", "new-data")
