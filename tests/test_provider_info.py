"""Provider info: valid for Airflow 3.3's schemas, consistent with the hook classes, and seen by the
``airflow`` CLI through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from importlib.metadata import entry_points
from importlib.resources import files
from typing import Any

import jsonschema
import pytest

from airflow_trident import __version__
from airflow_trident.get_provider_info import get_provider_info
from tests.harness.airflow import AirflowHome, prepare_airflow_home, run_airflow

CONNECTION_TYPES = {
    "trident_zookeeper": "airflow_trident.hooks.zookeeper.ZooKeeperHook",
    "trident_state": "airflow_trident.hooks.state_store.StateStoreHook",
}


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> AirflowHome:
    # The twin of tests/hooks/conftest.py's fixture: both belong in tests/conftest.py.
    return prepare_airflow_home(tmp_path_factory.mktemp("airflow_home"), migrate=False)


def airflow_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((files("airflow") / name).read_text())
    return schema


def import_class(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_provider_info_is_valid_for_the_runtime_schema() -> None:
    # The schema Airflow's provider manager validates every entry point's result against
    jsonschema.validate(get_provider_info(), airflow_schema("provider_info.schema.json"))


def test_connection_types_are_valid_for_the_strict_provider_yaml_schema() -> None:
    # provider.yaml's schema forbids unknown keys in ui-field-behaviour and conn-fields, where
    # the runtime schema would let a typo through silently
    strict = airflow_schema("provider.yaml.schema.json")["properties"]["connection-types"]
    jsonschema.validate(get_provider_info()["connection-types"], strict)


def test_connection_types_name_our_hooks() -> None:
    declared = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    assert {k: v["hook-class-name"] for k, v in declared.items()} == CONNECTION_TYPES
    for conn_type, entry in declared.items():
        hook = import_class(entry["hook-class-name"])
        assert (hook.conn_type, hook.hook_name) == (conn_type, entry["hook-name"])
        assert hook.default_conn_name == f"{conn_type}_default"
        # Airflow builds hooks as hook_class(**{conn_name_attr: conn_id})
        assert getattr(hook(**{hook.conn_name_attr: "x"}), hook.conn_name_attr) == "x"


def test_hook_modules_import_and_cover_every_connection_type() -> None:
    (hooks,) = get_provider_info()["hooks"]
    assert hooks["integration-name"] == get_provider_info()["integrations"][0]["integration-name"]
    modules = {importlib.import_module(m).__name__ for m in hooks["python-modules"]}
    assert {c.rpartition(".")[0] for c in CONNECTION_TYPES.values()} <= modules


def _public_airflow_classes() -> dict[str, dict[str, list[str]]]:
    """kind -> module -> the public operator/sensor, trigger or hook classes it defines, for
    every module of the adapter packages."""
    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    import airflow_trident

    kinds = (("operators", BaseOperator), ("triggers", BaseTrigger), ("hooks", BaseHook))
    found: dict[str, dict[str, list[str]]] = {kind: {} for kind, _ in kinds}
    for package in ("operators", "sensors", "triggers", "hooks"):
        path = [f"{airflow_trident.__path__[0]}/{package}"]
        for info in pkgutil.walk_packages(path, prefix=f"airflow_trident.{package}."):
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if name.startswith("_") or not inspect.isclass(obj):
                    continue
                if obj.__module__ != module.__name__:
                    continue  # imported, not defined here
                for kind, base in kinds:
                    if issubclass(obj, base):
                        found[kind].setdefault(module.__name__, []).append(name)
    return found


def test_every_module_with_a_public_operator_sensor_trigger_or_hook_is_listed() -> None:
    # Given the modules that define a public BaseOperator (sensors too), BaseTrigger or BaseHook
    found = _public_airflow_classes()
    info = get_provider_info()
    listed = {kind: {m for e in info[kind] for m in e["python-modules"]}
              for kind in ("operators", "sensors", "triggers", "hooks")}  # fmt: skip
    # Then each is listed: an operator or sensor under operators or sensors, the others under
    # their kind; and every listed module defines one
    missing = {
        kind: sorted(set(modules) - (listed["operators"] | listed["sensors"]
                                     if kind == "operators" else listed[kind]))
        for kind, modules in found.items()
    }  # fmt: skip
    assert missing == {"operators": [], "triggers": [], "hooks": []}
    assert listed["operators"] | listed["sensors"] == set(found["operators"])
    assert listed["triggers"] == set(found["triggers"])
    assert listed["hooks"] == set(found["hooks"])
    # (the express operator, the data trigger and the Iceberg and Trident hooks among them)
    assert {"airflow_trident.operators.express", "airflow_trident.triggers.data",
            "airflow_trident.hooks.iceberg", "airflow_trident.hooks.trident"} <= (
        listed["operators"] | listed["triggers"] | listed["hooks"])  # fmt: skip


def test_asset_uris_register_the_trident_scheme_with_importable_callables() -> None:
    (entry,) = get_provider_info()["asset-uris"]
    assert entry["schemes"] == ["trident"]
    for key in ("handler", "factory", "to_openlineage_converter"):
        assert callable(import_class(entry[key])), key


@pytest.mark.parametrize("conn_type", sorted(CONNECTION_TYPES))
def test_hook_ui_behaviour_mirrors_provider_info(conn_type: str) -> None:
    hook = import_class(CONNECTION_TYPES[conn_type])
    behaviour = hook.get_ui_field_behaviour()
    jsonschema.validate(behaviour, airflow_schema("customized_form_field_behaviours.schema.json"))
    (declared,) = [
        c["ui-field-behaviour"]
        for c in get_provider_info()["connection-types"]
        if c["connection-type"] == conn_type
    ]
    assert behaviour["relabeling"] == declared["relabeling"]
    assert behaviour["hidden_fields"] == declared["hidden-fields"]


def test_entry_point_is_registered() -> None:
    (entry,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.dist and e.dist.name == "airflow-trident"
    ]
    assert entry.load() is get_provider_info


def test_airflow_providers_list_shows_the_provider(airflow_home: AirflowHome) -> None:
    done = run_airflow(airflow_home, "providers", "list", "-o", "json", timeout_s=60)
    assert done.returncode == 0, done.stderr
    listed = {p["package_name"]: p["version"] for p in json.loads(done.stdout)}
    assert listed.get("airflow-trident") == __version__


def test_airflow_knows_both_connection_types(airflow_home: AirflowHome) -> None:
    # `providers hooks` is what the connection form's type list is built from in 3.3
    done = run_airflow(airflow_home, "providers", "hooks", "-o", "json", timeout_s=60)
    assert done.returncode == 0, done.stderr
    hooks = {h["connection_type"]: h for h in json.loads(done.stdout)}
    for conn_type, class_name in CONNECTION_TYPES.items():
        assert hooks[conn_type]["class"] == class_name
        assert hooks[conn_type]["package_name"] == "airflow-trident"
    # And the provider manager accepted our form metadata without complaint
    assert not [line for line in done.stderr.splitlines() if "trident" in line.lower()]


def test_airflow_registers_the_custom_connection_fields(airflow_home: AirflowHome) -> None:
    done = run_airflow(airflow_home, "providers", "widgets", "-o", "json", timeout_s=60)
    assert done.returncode == 0, done.stderr
    fields = {
        w["connection_parameter_name"]
        for w in json.loads(done.stdout)
        if w["package_name"] == "airflow-trident"
    }
    declared = {
        f"extra__{c['connection-type']}__{name}"
        for c in get_provider_info()["connection-types"]
        for name in c["conn-fields"]
    }
    assert fields == declared
    assert {
        "extra__trident_zookeeper__root",
        "extra__trident_zookeeper__use_ssl",
        "extra__trident_zookeeper__sasl_password",
        "extra__trident_state__dialect",
    } <= fields


def test_listed_modules_import() -> None:
    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        modules = [m for entry in info[kind] for m in entry["python-modules"]]
        assert modules, kind
        for module in modules:
            importlib.import_module(module)
