"""Object-store credentials (delta-rs ``storage_options``) from the Amazon provider's ``aws``
connection.

With ``apache-airflow-providers-amazon`` installed (``pip install 'airflow-trident[aws]'``) the
credentials come from its hook, ``AwsBaseHook(aws_conn_id=..., client_type="s3")``, so every
form of that connection works as it does for the provider's own operators: a key pair
(Login/Password), a session token, a role to assume (``role_arn``, with
``assume_role_method``/``assume_role_kwargs``), a profile (``profile_name``), or, with none of
them, boto3's default chain (environment, instance or pod role). The hook's frozen credentials
become ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``; the region
(``region_name``) ``AWS_REGION``; its S3 endpoint (``endpoint_url``, or ``service_config``'s
``s3``) ``AWS_ENDPOINT_URL`` (``http://`` also sets ``AWS_ALLOW_HTTP``).

Without the provider the connection is read directly: Login/Password (or the extras
``aws_access_key_id``/``aws_secret_access_key``), the extras ``aws_session_token``,
``region_name`` and ``endpoint_url``. What only the provider's hook can do — ``role_arn``,
``profile_name``, ``assume_role_method``, ``assume_role_kwargs``, ``session_kwargs``,
``service_config`` — is refused, naming the connection, never dropped.

Credentials of an assumed role are temporary (an hour by default): they are read when a
batch's state commits, and a Spark job gets the ones its task read.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from airflow_trident.errors import ConfigurationError

__all__ = ["amazon_provider_installed", "aws_storage_options"]

NEEDS_PROVIDER = ("role_arn", "profile_name", "assume_role_method", "assume_role_kwargs",
                  "session_kwargs", "service_config")  # fmt: skip
"""Extras of an ``aws`` connection that only the Amazon provider's hook can use."""
_TEXT_EXTRAS = ("region_name", "endpoint_url", "aws_session_token", "aws_access_key_id",
                "aws_secret_access_key", "role_arn", "profile_name")  # fmt: skip


def amazon_provider_installed() -> bool:
    """Whether ``apache-airflow-providers-amazon`` is importable here."""
    return importlib.util.find_spec("airflow.providers.amazon") is not None


def aws_storage_options(conn_id: str, conn: Any, extra: Mapping[str, Any]) -> dict[str, str]:
    """delta-rs storage options of ``aws`` connection ``conn_id`` (``conn``, its ``extra``
    already read as a JSON object). They hold credentials: never log them.

    Raises
    ------
    ConfigurationError
        If an extra has the wrong type, the provider's hook cannot get credentials, or
        (without the provider) the connection needs it.
    """
    where = f"aws connection {conn_id!r}"
    wrong = sorted(k for k in _TEXT_EXTRAS if extra.get(k) is not None
                   and not isinstance(extra[k], str))  # fmt: skip
    if wrong:
        msg = f"{where}: extra {', '.join(wrong)} must be a string"
        raise ConfigurationError(msg)
    if amazon_provider_installed():
        return _through_provider(conn_id, where)
    return _without_provider(conn, extra, where)


def _through_provider(conn_id: str, where: str) -> dict[str, str]:
    from airflow.providers.amazon.aws.hooks.base_aws import (  # type: ignore[import-not-found,unused-ignore]
        AwsBaseHook,
    )
    from airflow.sdk.log import mask_secret

    try:
        hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
        session = hook.get_session()
        found = session.get_credentials()
        credentials = None if found is None else found.get_frozen_credentials()
        region = hook.conn_config.region_name or session.region_name
        endpoint = hook.conn_config.get_service_endpoint_url("s3")
    except Exception as exc:  # botocore's and STS's refusals: they name no secret
        msg = (
            f"{where}: the Amazon provider's AwsBaseHook could not get credentials "
            f"({type(exc).__name__}: {exc})"
        )
        raise ConfigurationError(msg) from None
    options: dict[str, str] = {}
    if credentials is not None:
        options["AWS_ACCESS_KEY_ID"] = credentials.access_key
        options["AWS_SECRET_ACCESS_KEY"] = credentials.secret_key
        mask_secret(credentials.secret_key)
        if credentials.token:
            options["AWS_SESSION_TOKEN"] = credentials.token
            mask_secret(credentials.token)
    return _with_place(options, region, endpoint)


def _without_provider(conn: Any, extra: Mapping[str, Any], where: str) -> dict[str, str]:
    needs = [key for key in NEEDS_PROVIDER if extra.get(key) not in (None, "", {})]
    if needs:
        msg = (
            f"{where} sets {', '.join(needs)}, which only the Amazon provider's hook can use "
            f"(it assumes the role, reads the profile); hint: pip install "
            f"'airflow-trident[aws]' (apache-airflow-providers-amazon), or give the key pair "
            f"(and aws_session_token) in the connection"
        )
        raise ConfigurationError(msg)
    options: dict[str, str] = {}
    key_id = conn.login or extra.get("aws_access_key_id")
    secret = conn.password or extra.get("aws_secret_access_key")
    if key_id:
        options["AWS_ACCESS_KEY_ID"] = str(key_id)
    if secret:
        options["AWS_SECRET_ACCESS_KEY"] = str(secret)
    if extra.get("aws_session_token"):
        options["AWS_SESSION_TOKEN"] = str(extra["aws_session_token"])
    return _with_place(options, extra.get("region_name"), extra.get("endpoint_url"))


def _with_place(options: dict[str, str], region: Any, endpoint: Any) -> dict[str, str]:
    if region:
        options["AWS_REGION"] = str(region)
    if endpoint:
        options["AWS_ENDPOINT_URL"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    return options
