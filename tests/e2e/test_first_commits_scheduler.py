"""A brand-new topology's first commits, pipelined under a real Airflow scheduler: four runs
triggered at once, each layout that commits in one task while later runs commit right behind it
(express: the whole batch in ``batch.run``; compact: ``batch.commit`` with the success step).

Airflow links a commit task's outlet alias to the topology's asset when the first event goes
through it; two first events reported at once both inserted that link and one task failed on the
unique key (``asset_alias_asset``). The commit now reports a topology's first events one at a
time (:func:`airflow_trident.operators.assets.await_first_event_turn`): every run succeeds at
its first try, and the asset has exactly one event per txid.
Slow: ~2-3 min per layout (Airflow ~15 s, a Connect server ~15 s, the runs the rest).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.connect import running_connect_server
from tests.harness.scheduler import running_airflow

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.scheduler]

RUNS = 4
DAG_FILE = """
from airflow_trident.dag import trident_dag

dag = trident_dag(
    "tests.harness.topologies:e2e_word_count",
    dag_id="{dag_id}",
    schedule=None,
    layout="{layout}",
    process_mode="connect",
    spark_connect_conn_id="first_connect",
    max_active_batches={runs},
    retries=0,
)
"""


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_connect_server(tmp_path_factory.mktemp("first_commits_connect")) as url:
        yield url


@pytest.mark.timeout(900)
@pytest.mark.parametrize("layout", ["express", "compact"])
def test_a_new_topologys_first_pipelined_commits_all_succeed_with_one_event_per_txid(
    tmp_path: Path, zk_hosts: str, pg_url: str, connect_url: str, layout: str
) -> None:
    # Given a topology no run has committed yet, and a DAG of four batches at once
    topology = f"first_{layout}_{uuid.uuid4().hex[:8]}"
    dag_id = f"e2e_first_{layout}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, layout=layout, runs=RUNS))
    zk_host, _, zk_port = zk_hosts.partition(":")
    connect_host, _, connect_port = connect_url.rpartition(":")
    env = {
        "AIRFLOW_CONN_FIRST_CONNECT": json.dumps(
            {"conn_type": "spark_connect", "host": connect_host, "port": int(connect_port)}
        ),
        "AIRFLOW_CONN_TRIDENT_ZOOKEEPER_DEFAULT": json.dumps({
            "conn_type": "trident_zookeeper", "host": zk_host, "port": int(zk_port or 2181),
            "extra": {"root": "/trident_e2e_first_commits"},
        }),
        "TRIDENT_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "TRIDENT_STAGING_ROOT": str(tmp_path / "staging"),
        "TRIDENT_TEST_TOPOLOGY": topology,
    }  # fmt: skip
    with running_airflow(
        tmp_path, pg_url=pg_url, dags_folder=dags, env=env, parallelism=RUNS,
        expect_dags=[dag_id],
    ) as af:  # fmt: skip
        af.unpause(dag_id)
        # When four runs start at once
        run_ids = [af.trigger(dag_id) for _ in range(RUNS)]
        try:
            runs = af.wait_for_runs(dag_id, run_ids, timeout_s=600)
        except TimeoutError as error:
            pytest.fail(str(error))
        describe = af.describe(dag_id)

        # Then every run succeeded at its first try (no retries: a failed link insert shows)
        assert [r.state for r in runs] == ["success"] * RUNS, describe
        tries = {(t.run_id, t.task_id): t.try_number for t in af.task_instances(dag_id)}
        assert set(tries.values()) == {1}, f"{tries}\n{describe}"
        # And the topology's asset has one event per committed txid, through the alias
        events = af.query(
            "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.uri LIKE %s",
            (f"trident://{topology}%",),
        )
        txids = sorted(
            int((extra if isinstance(extra, dict) else json.loads(extra))["txid"])
            for (extra,) in events
        )
        assert txids == list(range(1, RUNS + 1)), f"{events}\n{describe}"
        (links,) = af.query(
            "SELECT count(*) FROM asset_alias_asset l JOIN asset_alias al ON al.id = l.alias_id "
            "WHERE al.name = %s",
            (f"trident_{topology}_commits",),
        )
        assert links == (1,), links
