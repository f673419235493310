"""Provider metadata for Airflow's provider manager (``apache_airflow_provider`` entry point).

Airflow 3.2+ reads connection forms declaratively from here (``ui-field-behaviour`` and
``conn-fields`` of each connection type) without importing the hooks; the hooks'
``get_ui_field_behaviour`` only mirrors this module. Nothing here imports ``airflow``: the provider
manager calls this function while Airflow itself is starting.

>>> info = get_provider_info()
>>> info["package-name"], info["versions"][0]
('airflow-trident', '0.1.0')
>>> sorted(c["connection-type"] for c in info["connection-types"])
['trident_state', 'trident_zookeeper']
>>> sorted(info["config"]["trident"]["options"])
['connect_session_reuse', 'embedded', 'home', 'inline', 'spark_jars',
 'spark_read_here_bytes', 'spark_read_here_records', 'staging_root', 'state_conn_id']
>>> info["cli"], [p["name"] for p in info["plugins"]]
(['airflow_trident.cli.get_cli_commands'], ['trident_notes', 'trident_drpc', 'trident_status'])
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_trident import __version__

__all__ = [
    "CONFIG",
    "DOCUMENTATION_URL",
    "connection_type_info",
    "get_provider_info",
    "ui_field_behaviour",
]

DOCUMENTATION_URL = "https://github.com/airflow-trident/airflow-trident/tree/main/docs"
"""Where the how-tos live (also ``[project.urls] Documentation`` in pyproject.toml, which is what
Airflow 3.3 shows: it sets ``documentation-url`` from the distribution's metadata)."""

_INTEGRATION = "Trident"

_CONNECTION_TYPES: tuple[dict[str, Any], ...] = (
    {
        "hook-class-name": "airflow_trident.hooks.zookeeper.ZooKeeperHook",
        "hook-name": "Trident ZooKeeper",
        "connection-type": "trident_zookeeper",
        "ui-field-behaviour": {
            # Every extra has a field below, so the raw JSON box would only invite typos.
            "hidden-fields": ["extra"],
            "relabeling": {
                "host": "Hosts",
                "schema": "Chroot",
                "login": "Digest user",
                "password": "Digest password",
            },
            "placeholders": {
                "host": "zk1:2181,zk2:2181,zk3:2181",
                "port": "2181 (for hosts given without a port)",
                "schema": "/apps (optional)",
                "login": "optional: every created znode gets a digest ACL for this user",
            },
        },
        "conn-fields": {
            "root": {
                "label": "Root znode",
                "description": "Parent of every topology's nodes, below the chroot.",
                "schema": {"type": ["string", "null"], "default": "/trident"},
            },
            "timeout": {
                "label": "Connect timeout (s)",
                "description": "Seconds to wait for the first ZooKeeper session.",
                "schema": {"type": ["number", "null"], "default": 10, "minimum": 0},
            },
            "session_timeout": {
                "label": "Session timeout (s)",
                "description": "ZooKeeper session timeout requested by the client.",
                "schema": {"type": ["number", "null"], "default": 10, "minimum": 0},
            },
            # TLS and SASL: kazoo's KazooClient(use_ssl=..., ca=..., sasl_options=...)
            "use_ssl": {
                "label": "Use TLS",
                "description": "Connect with TLS (the servers' secureClientPort).",
                "schema": {"type": ["boolean", "null"], "default": False},
            },
            "ca": {
                "label": "TLS CA file",
                "description": "PEM file of the CA that signed the servers' certificates.",
                "schema": {"type": ["string", "null"]},
            },
            "certfile": {
                "label": "TLS client certificate",
                "description": "PEM client certificate, when the servers require client auth.",
                "schema": {"type": ["string", "null"]},
            },
            "keyfile": {
                "label": "TLS client key",
                "description": "PEM key of the client certificate.",
                "schema": {"type": ["string", "null"]},
            },
            "keyfile_password": {
                "label": "TLS client key password",
                "description": "Password of an encrypted client key.",
                "schema": {"type": ["string", "null"], "format": "password"},
            },
            "verify_certs": {
                "label": "Verify server certificate",
                "description": "Turn off only for a test server.",
                "schema": {"type": ["boolean", "null"], "default": True},
            },
            "check_hostname": {
                "label": "Check TLS host name",
                "description": "Check that the server certificate names the host connected to.",
                "schema": {"type": ["boolean", "null"], "default": False},
            },
            "sasl_mechanism": {
                "label": "SASL mechanism",
                "description": "DIGEST-MD5 (a JAAS user of the servers) or GSSAPI (Kerberos).",
                "schema": {"type": ["string", "null"], "enum": ["DIGEST-MD5", "GSSAPI", None]},
            },
            "sasl_username": {
                "label": "SASL user",
                "description": "DIGEST-MD5 user.",
                "schema": {"type": ["string", "null"]},
            },
            "sasl_password": {
                "label": "SASL password",
                "description": "DIGEST-MD5 password.",
                "schema": {"type": ["string", "null"], "format": "password"},
            },
            "sasl_service": {
                "label": "SASL service",
                "description": "Kerberos service name of the servers (default zookeeper).",
                "schema": {"type": ["string", "null"]},
            },
            "sasl_principal": {
                "label": "SASL principal",
                "description": "Kerberos principal of the client (GSSAPI, optional).",
                "schema": {"type": ["string", "null"]},
            },
        },
    },
    {
        "hook-class-name": "airflow_trident.hooks.state_store.StateStoreHook",
        "hook-name": "Trident State Store",
        "connection-type": "trident_state",
        "ui-field-behaviour": {
            "hidden-fields": [],
            "relabeling": {"schema": "Database"},
            "placeholders": {
                "host": "db.example.com (PostgreSQL only)",
                "schema": "trident (PostgreSQL) or /var/lib/trident/state.db (SQLite)",
            },
        },
        "conn-fields": {
            "dialect": {
                "label": "Dialect",
                "description": "Database kind of the state store.",
                "schema": {"type": "string", "enum": ["sqlite", "postgresql"], "default": "sqlite"},
            },
        },
    },
)


_PLUGINS = (
    ("trident_notes", "airflow_trident.tasks.notes.TridentNotesPlugin"),
    ("trident_drpc", "airflow_trident.plugins.drpc.TridentDRPCPlugin"),
    ("trident_status", "airflow_trident.plugins.status_view.TridentStatusPlugin"),
)
"""The plugins (also the ``airflow.plugins`` entry points in pyproject.toml, which load them)."""

_ASSET_URIS: tuple[dict[str, Any], ...] = (
    {
        "schemes": ["trident"],
        "handler": "airflow_trident.operators.asset_uris.sanitize_uri",
        "factory": "airflow_trident.operators.asset_uris.create_asset",
        "to_openlineage_converter": (
            "airflow_trident.operators.asset_uris.convert_asset_to_openlineage"
        ),
    },
)
"""The ``trident://`` assets a topology's tasks emit and DAGs are scheduled on: Airflow
normalises and checks their URIs with the handler (``operators/asset_uris.py``)."""

_ADDED = __version__
CONFIG: dict[str, Any] = {
    "trident": {
        "description": (
            "Trident batches: where they stage and which state database a DAG without one uses. "
            "Read when a task runs, not when a DAG file is parsed; the TRIDENT_* environment "
            "variables named below are fallbacks."
        ),
        "options": {
            "staging_root": {
                "description": (
                    "Where processed batches are staged: a directory (or object-store URL) "
                    "that every Airflow worker and the Spark driver and executors read and "
                    "write. A DAG's staging_root argument wins. Empty: TRIDENT_STAGING_ROOT, "
                    "else the single-machine default (see embedded)."
                ),
                "version_added": _ADDED,
                "type": "string",
                "example": "/mnt/shared/trident/staging",
                "default": "",
            },
            "state_conn_id": {
                "description": (
                    "The state database's Airflow connection (trident_state, postgres or "
                    "sqlite) for DAGs that give no state_conn_id. Empty: TRIDENT_STATE_URL, "
                    "else the single-machine default (see embedded)."
                ),
                "version_added": _ADDED,
                "type": "string",
                "example": "trident_state",
                "default": "",
            },
            "home": {
                "description": (
                    "Directory of the single-machine default: staging in <home>/staging, "
                    "SQLite state in <home>/state.db. Empty: TRIDENT_HOME, else "
                    "~/.airflow_trident."
                ),
                "version_added": _ADDED,
                "type": "string",
                "example": "/var/lib/trident",
                "default": "",
            },
            "embedded": {
                "description": (
                    "When a task may use the single-machine default for what is not configured "
                    "(staging root, state database): auto = only when every task runs on this "
                    "machine ([core] executor is LocalExecutor), true = always, false = never. "
                    "Otherwise the task fails with an error naming the option to set, instead "
                    "of each worker writing files only it can see."
                ),
                "version_added": _ADDED,
                "type": "string",
                "example": "false",
                "default": "auto",
            },
            "connect_session_reuse": {
                "description": (
                    "Whether the Spark Connect tasks of a topology attach to one server-side "
                    "session that outlives them, so its Python workers stay warm between "
                    "batches (true), or each open and release a session of their own (false). "
                    "The shared session is keyed by the topology, the provider version and a "
                    "digest of the task's own code; the server ends it after its idle timeout."
                ),
                "version_added": _ADDED,
                "type": "boolean",
                "example": "false",
                "default": "true",
            },
            "spark_read_here_bytes": {
                "description": (
                    "A batch whose source files hold at most this many bytes is read by the "
                    "process step's Spark driver (a Spark Connect task: the task itself) with "
                    "the spout's own reader and handed to Spark as one table, which saves the "
                    "Python worker round trip of each Spark task; larger batches are read by "
                    "Spark's tasks in parallel. 0 = always by Spark's tasks."
                ),
                "version_added": _ADDED,
                "type": "integer",
                "example": "0",
                "default": "1048576",
            },
            "spark_read_here_records": {
                "description": (
                    "Likewise for sources whose ranges know their records, not their bytes "
                    "(Kafka offset ranges, next - first each): a batch of at most this many "
                    "offsets is read by the process step's Spark driver with the spout's own "
                    "consumer and handed to Spark as one table; larger batches are read by "
                    "Spark's Kafka connector on its tasks. 0 = always by Spark's tasks."
                ),
                "version_added": _ADDED,
                "type": "integer",
                "example": "0",
                "default": "50000",
            },
            "spark_jars": {
                "description": (
                    "Jars every spark-submit of a batch (the process step, a Spark commit) adds "
                    "to spark.jars, after the DAG's own spark_conf spark.jars: comma-separated "
                    "paths or URLs the driver can read (spark-submit ships them to the "
                    "executors), e.g. Spark's Kafka connector and a JDBC driver. A Spark Connect "
                    "server loads jars of its own at its start (its --jars)."
                ),
                "version_added": _ADDED,
                "type": "string",
                "example": "/opt/jars/spark-sql-kafka-0-10_2.13-4.1.1.jar,/opt/jars/pg.jar",
                "default": "",
            },
            "inline": {
                "description": (
                    "Whether the Spark runtime may run a per-tuple Function's execute or a "
                    "Filter's is_keep of the simple form (assignments, then one emit or "
                    "return) as one comprehension over a batch's columns (true), or calls each "
                    "once per tuple (false). A topology turns it off for itself with "
                    "TridentTopology(..., inline=False). Values, their order and errors are the "
                    "same either way; only the frames user code sees differ."
                ),
                "version_added": _ADDED,
                "type": "boolean",
                "example": "false",
                "default": "true",
            },
        },
    }
}
"""The ``[trident]`` section (read by :mod:`airflow_trident.hooks.config`)."""


def connection_type_info(connection_type: str) -> dict[str, Any]:
    """The provider-info entry of one of our connection types (a copy).

    Raises
    ------
    KeyError
        If ``connection_type`` is not one of this provider's.
    """
    for entry in _CONNECTION_TYPES:
        if entry["connection-type"] == connection_type:
            return copy.deepcopy(entry)
    raise KeyError(connection_type)


def ui_field_behaviour(connection_type: str) -> dict[str, Any]:
    """The ``ui-field-behaviour`` of a connection type in the form hooks return it.

    >>> ui_field_behaviour("trident_zookeeper")["relabeling"]["schema"]
    'Chroot'
    """
    behaviour = connection_type_info(connection_type)["ui-field-behaviour"]
    return {
        "hidden_fields": behaviour.get("hidden-fields", []),
        "relabeling": behaviour.get("relabeling", {}),
        "placeholders": behaviour.get("placeholders", {}),
    }


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, versions, hooks, operators, sensors, triggers, the
    ``trident`` asset URI scheme, connection types, plugins, the ``[trident]`` config section
    and the ``airflow trident`` commands, in the form of Airflow's
    ``provider_info.schema.json``."""
    return {
        "package-name": "airflow-trident",
        "name": "Trident",
        "description": (
            "Storm Trident's exactly-once transactional micro-batches: one DAG run per txid, "
            "processing on Apache Spark, commits in strict txid order coordinated in ZooKeeper."
        ),
        "versions": [__version__],
        "documentation-url": DOCUMENTATION_URL,
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://storm.apache.org/releases/current/Trident-tutorial.html",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_trident.hooks.zookeeper",
                    "airflow_trident.hooks.state_store",
                    "airflow_trident.hooks.iceberg",
                    "airflow_trident.hooks.trident",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_trident.operators.batch",
                    "airflow_trident.operators.process",
                    "airflow_trident.operators.connect",
                    "airflow_trident.operators.express",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_trident.sensors.ready",
                    "airflow_trident.sensors.begin",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_trident.triggers.zookeeper",
                    "airflow_trident.triggers.data",
                ],
            }
        ],
        "asset-uris": [copy.deepcopy(entry) for entry in _ASSET_URIS],
        "connection-types": [copy.deepcopy(entry) for entry in _CONNECTION_TYPES],
        "plugins": [{"name": name, "plugin-class": cls} for name, cls in _PLUGINS],
        "config": copy.deepcopy(CONFIG),
        "cli": ["airflow_trident.cli.get_cli_commands"],
    }
