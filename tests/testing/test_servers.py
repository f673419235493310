"""Private ZooKeeper and PostgreSQL servers: data written before a kill -9 survives a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from kazoo.client import KazooClient

from tests.harness.servers import PrivatePostgres, PrivateZooKeeper

pytestmark = pytest.mark.integration


def test_private_zookeeper_keeps_nodes_across_a_kill_and_restart(tmp_path: Path) -> None:
    # Given a private ZooKeeper with a node written through a client
    with PrivateZooKeeper(tmp_path) as zk:
        client = KazooClient(hosts=zk.hosts, timeout=10.0)
        client.start(timeout=15)
        try:
            client.create("/fault/node", b"before", makepath=True)
            port, first_pid = zk.port, zk.pid

            # When it is killed with SIGKILL and started again
            zk.restart()

            # Then it runs as a new process on the same port, and the node survived
            assert zk.running
            assert zk.pid != first_pid
            assert zk.port == port
            assert zk.hosts == f"127.0.0.1:{port}"
            value, _ = client.retry(client.get, "/fault/node")
            assert value == b"before"
        finally:
            client.stop()
            client.close()
    # And leaving the block stopped it
    assert not zk.running
    assert zk.pid is None


def test_private_zookeeper_kill_leaves_nothing_listening(tmp_path: Path) -> None:
    # Given a running private ZooKeeper
    zk = PrivateZooKeeper(tmp_path)
    zk.start()
    assert zk._ready()

    # When it is killed
    zk.kill()

    # Then it no longer answers ruok
    assert not zk._ready()
    assert not zk.running


def test_private_postgres_keeps_committed_rows_across_a_kill_and_restart(tmp_path: Path) -> None:
    # Given a private PostgreSQL with a committed row
    with PrivatePostgres(tmp_path) as pg:
        engine = sa.create_engine(pg.url, pool_pre_ping=True)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("CREATE TABLE t (k text PRIMARY KEY, v int)"))
                connection.execute(sa.text("INSERT INTO t VALUES ('a', 1)"))
            first_pid = pg.pid

            # When it is killed with SIGKILL and started again
            pg.restart()

            # Then it is a new process, and the row survived (the pool reconnects)
            assert pg.running
            assert pg.pid != first_pid
            with engine.connect() as connection:
                rows = connection.execute(sa.text("SELECT k, v FROM t")).all()
            assert [tuple(row) for row in rows] == [("a", 1)]
        finally:
            engine.dispose()
    assert not pg.running


def test_private_postgres_repr_hides_the_password(tmp_path: Path) -> None:
    # Given a private PostgreSQL object (not started)
    pg = PrivatePostgres(tmp_path)

    # When it is shown
    shown = repr(pg)

    # Then the password of its URL is not in it
    password = pg.url.split(":")[2].split("@")[0]
    assert len(password) == 32
    assert password not in shown
    assert "stopped" in shown
