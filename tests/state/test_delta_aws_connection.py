"""Delta on S3 takes the Amazon provider's ``aws`` connection (issue 53, item 6): with
``apache-airflow-providers-amazon`` installed the credentials come from its ``AwsBaseHook`` (a
role assumed through STS, a session token), and ``AWS_SESSION_TOKEN`` reaches delta-rs; without
the provider ``aws_session_token`` is read from the extra and ``role_arn``/``profile_name`` are
refused naming the connection. Before, the session token and the role were dropped silently.

S3 and STS are a real HTTP server: moto's (``moto_server``, a process of its own: delta-rs holds
the GIL while it waits for an answer, so a server thread in the test's process would never
answer), with its IAM authentication on, so a request whose session token is missing or wrong
is refused (403) as AWS refuses it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import deltalake
import pyarrow as pa
import pytest
import requests

from airflow_trident import connections
from airflow_trident.errors import ConfigurationError
from airflow_trident.hooks import aws as aws_hook
from airflow_trident.hooks.connections import AirflowConnections, install
from airflow_trident.state.delta import delta_state
from tests.harness.ports import free_port

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
BUCKET = "trident-lake"
ROLE = "arn:aws:iam::123456789012:role/trident-writer"
# delta-rs needs a lock for S3's rename: none here, one writer per table
UNSAFE_RENAME = {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


@dataclass(frozen=True)
class S3:
    endpoint: str
    key_id: str
    secret: str


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """moto's S3 and STS on a local port; a bucket, a user allowed to assume a role, the role
    allowed S3; then IAM authentication switched on (every later request is checked)."""
    binary = Path(sys.executable).with_name("moto_server")
    if not binary.exists():
        pytest.skip("moto_server not installed: pip install 'moto[server]' (the dev extra has it)")
    port = free_port()
    server = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            requests.get(f"{endpoint}/moto-api/", timeout=1)
            break
        except requests.ConnectionError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"moto_server did not start on {endpoint}")
            time.sleep(0.1)
    admin = {"endpoint_url": endpoint, "region_name": REGION,
             "aws_access_key_id": "AKIAADMIN", "aws_secret_access_key": "admin"}  # fmt: skip
    boto3.client("s3", **admin).create_bucket(
        Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
    )
    iam = boto3.client("iam", **admin)
    allow_all = json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:*", "sts:AssumeRole"], "Resource": "*"}]})  # fmt: skip
    trust = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})  # fmt: skip
    iam.create_role(RoleName=ROLE.rpartition("/")[2], AssumeRolePolicyDocument=trust)
    iam.put_role_policy(RoleName=ROLE.rpartition("/")[2], PolicyName="s3", PolicyDocument=allow_all)
    iam.create_user(UserName="etl")
    iam.put_user_policy(UserName="etl", PolicyName="all", PolicyDocument=allow_all)
    key = iam.create_access_key(UserName="etl")["AccessKey"]
    requests.post(f"{endpoint}/moto-api/reset-auth", data=b"0", timeout=10).raise_for_status()
    try:
        yield S3(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def resolver() -> Iterator[None]:
    install()
    yield
    connections.install_resolver(None)


def _aws_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "aws", **fields})
    )
    return conn_id


def _write_and_read(path: str, conn_id: str) -> list[int]:
    factory = delta_state(path, f"{conn_id}.events", conn_id=conn_id)
    for txid in (1, 2, 2):
        state = factory.make_state()
        state.begin_commit(txid)
        state.write([{"n": txid}])
        state.commit(txid)
    options = factory.resolved_options()
    table = deltalake.DeltaTable(path, storage_options=options).to_pyarrow_table()
    return sorted(table["n"].to_pylist())


def test_a_role_assumed_by_the_amazon_provider_writes_delta_with_its_session_token(
    s3: S3, resolver: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow.providers.amazon")
    # Given an `aws` connection as the Amazon provider defines it: a user's key pair and a role
    # to assume (STS at the test's endpoint), S3 at a custom endpoint
    conn_id = _aws_conn(
        monkeypatch, "lake_role", login=s3.key_id, password=s3.secret,
        extra={"role_arn": ROLE, "region_name": REGION, "endpoint_url": s3.endpoint,
               "service_config": {"sts": {"endpoint_url": s3.endpoint}},
               "storage_options": UNSAFE_RENAME},
    )  # fmt: skip
    # When the storage options are read
    options = AirflowConnections().storage_options(conn_id)
    # Then they are the role's temporary credentials, with their session token
    assert options["AWS_ACCESS_KEY_ID"] != s3.key_id
    assert options["AWS_SESSION_TOKEN"]
    assert options["AWS_REGION"] == REGION
    assert options["AWS_ENDPOINT_URL"] == s3.endpoint
    assert options["AWS_ALLOW_HTTP"] == "true"
    # and a Delta state commits on S3 with them (replayed txid 2 written once)
    assert _write_and_read(f"s3://{BUCKET}/role_events", conn_id) == [1, 2]
    # which S3 refuses without the token: it is what authorizes the role's key
    no_token = {k: v for k, v in options.items() if k != "AWS_SESSION_TOKEN"}
    with pytest.raises(OSError, match=r"403|InvalidToken|InvalidClientTokenId|Forbidden"):
        deltalake.write_deltalake(f"s3://{BUCKET}/refused", pa.table({"n": [1]}),
                                  storage_options=no_token)  # fmt: skip


def test_a_session_token_in_the_extra_reaches_delta_rs(
    s3: S3, resolver: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given temporary credentials (a role's, from STS) written into a connection by hand: the
    # key pair as login/password and the extra aws_session_token
    sts = boto3.client("sts", endpoint_url=s3.endpoint, region_name=REGION,
                       aws_access_key_id=s3.key_id, aws_secret_access_key=s3.secret)  # fmt: skip
    temporary = sts.assume_role(RoleArn=ROLE, RoleSessionName="by-hand")["Credentials"]
    conn_id = _aws_conn(
        monkeypatch, "lake_token", login=temporary["AccessKeyId"],
        password=temporary["SecretAccessKey"],
        extra={"aws_session_token": temporary["SessionToken"], "region_name": REGION,
               "endpoint_url": s3.endpoint, "storage_options": UNSAFE_RENAME},
    )  # fmt: skip
    # Then, with the Amazon provider and without it, delta-rs gets the token and S3 takes it
    for provider in (True, False):
        monkeypatch.setattr(aws_hook, "amazon_provider_installed", lambda p=provider: p)
        if provider and not _has_amazon_provider():
            continue
        options = AirflowConnections().storage_options(conn_id)
        assert options["AWS_SESSION_TOKEN"] == temporary["SessionToken"], provider
        assert options["AWS_ACCESS_KEY_ID"] == temporary["AccessKeyId"]
        path = f"s3://{BUCKET}/token_events_{'provider' if provider else 'direct'}"
        assert _write_and_read(path, conn_id) == [1, 2]


def _has_amazon_provider() -> bool:
    import importlib.util

    return importlib.util.find_spec("airflow.providers.amazon") is not None


@pytest.mark.parametrize("needs", ["role_arn", "profile_name"])
def test_without_the_amazon_provider_a_role_or_profile_is_refused_not_dropped(
    needs: str, resolver: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a process without the Amazon provider, and a connection that needs its hook
    monkeypatch.setattr(aws_hook, "amazon_provider_installed", lambda: False)
    conn_id = _aws_conn(monkeypatch, f"lake_{needs}", login="AKIAEXAMPLE", password="hidden",
                        extra={needs: ROLE if needs == "role_arn" else "etl"})  # fmt: skip
    # Then reading it says which connection, what, and how to get it read
    with pytest.raises(ConfigurationError) as raised:
        AirflowConnections().storage_options(conn_id)
    text = str(raised.value)
    assert f"aws connection {conn_id!r} sets {needs}" in text
    assert "pip install 'airflow-trident[aws]' (apache-airflow-providers-amazon)" in text
    assert "hidden" not in text


def test_the_amazon_providers_refusal_names_the_connection(
    s3: S3, resolver: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("airflow.providers.amazon")
    # Given a role that cannot be assumed (a wrong secret key for the user)
    conn_id = _aws_conn(
        monkeypatch, "lake_wrong", login=s3.key_id, password="not-the-secret",
        extra={"role_arn": ROLE, "region_name": REGION,
               "service_config": {"sts": {"endpoint_url": s3.endpoint}}},
    )  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"aws connection 'lake_wrong': the Amazon "
                       r"provider's AwsBaseHook could not get credentials") as raised:  # fmt: skip
        AirflowConnections().storage_options(conn_id)
    assert "not-the-secret" not in str(raised.value)
