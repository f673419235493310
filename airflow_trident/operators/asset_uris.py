"""The ``trident`` asset URI scheme, registered with Airflow (``asset-uris`` of the provider
info): the handler that normalises and validates our assets' URIs, their factory and their
OpenLineage converter.

A topology's assets (:mod:`airflow_trident.operators.assets`) are

* ``trident://<topology>/``: its committed state, one event per committed txid;
* ``trident://<topology>/new-data``: data for a new batch has landed.

Airflow calls :func:`sanitize_uri` for every asset whose URI has the scheme ``trident`` (when a
DAG file makes it): a URI that names no valid topology, or another path, is refused there,
at parse time, rather than becoming an asset nothing ever updates. This module is imported by
Airflow's provider manager wherever assets are made: it imports nothing heavy.

>>> from urllib.parse import urlsplit, urlunsplit
>>> urlunsplit(sanitize_uri(urlsplit("trident://word_count/new-data/")))
'trident://word_count/new-data'
>>> sanitize_uri(urlsplit("trident://word_count/counts"))
Traceback (most recent call last):
...
ValueError: asset URI 'trident://word_count/counts': a trident:// asset is trident://<topology>/ ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlunsplit

from airflow_trident.errors import InvalidNameError
from airflow_trident.names import validate_name

if TYPE_CHECKING:
    from airflow.sdk import Asset

__all__ = [
    "COMMITTED",
    "NEW_DATA",
    "SCHEME",
    "asset_name",
    "asset_uri",
    "convert_asset_to_openlineage",
    "create_asset",
    "sanitize_uri",
]

SCHEME = "trident"
COMMITTED = "/"
"""The path of a topology's committed-state asset."""
NEW_DATA = "/new-data"
"""The path of a topology's new-data asset."""
_KINDS = {COMMITTED: "committed", NEW_DATA: "new-data"}


def asset_uri(topology: str, *, new_data: bool = False) -> str:
    """The URI of ``topology``'s committed-state asset (or its new-data asset).

    >>> asset_uri("word_count"), asset_uri("word_count", new_data=True)
    ('trident://word_count/', 'trident://word_count/new-data')
    """
    return f"{SCHEME}://{topology}{NEW_DATA if new_data else COMMITTED}"


def asset_name(topology: str, *, new_data: bool = False) -> str:
    """The name of ``topology``'s committed-state asset (or its new-data asset)."""
    return f"trident_{topology}_new_data" if new_data else f"trident_{topology}"


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler of the ``trident`` scheme: ``uri`` normalised (no trailing
    ``/`` after ``new-data``, no fragment), or :class:`ValueError` when it is not
    ``trident://<topology>/`` or ``trident://<topology>/new-data`` with a valid topology name
    (no user, port or query either)."""
    text = urlunsplit(uri)
    shape = (f"asset URI {text!r}: a trident:// asset is trident://<topology>/ or "
             f"trident://<topology>/new-data")  # fmt: skip
    path = uri.path.rstrip("/") or COMMITTED
    if uri.scheme.lower() != SCHEME or path not in _KINDS or uri.query:
        raise ValueError(shape)
    if "@" in uri.netloc or ":" in uri.netloc:
        msg = f"{shape}; it names no user or port"
        raise ValueError(msg)
    try:
        validate_name(uri.netloc, kind="topology")
    except InvalidNameError as exc:
        msg = f"{shape}: {exc}"
        raise ValueError(msg) from None
    return uri._replace(scheme=SCHEME, path=path, fragment="")


def create_asset(
    *, topology: str, new_data: bool = False, extra: dict[str, Any] | None = None
) -> Asset:
    """Airflow's asset factory of the ``trident`` scheme: ``topology``'s committed-state asset
    (or its new-data asset, without the watcher of
    :func:`~airflow_trident.operators.assets.data_asset`)."""
    from airflow.sdk import Asset

    validate_name(topology, kind="topology")
    return Asset(
        name=asset_name(topology, new_data=new_data),
        uri=asset_uri(topology, new_data=new_data),
        extra=extra or {},
    )


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> Any:
    """Airflow's OpenLineage converter of the ``trident`` scheme: the OpenLineage dataset of a
    trident asset, namespace ``trident://<topology>`` and name ``committed`` or ``new-data``
    (the topology's real inputs and outputs are reported by its tasks, named by their own
    systems: :mod:`airflow_trident.operators.lineage`)."""
    from urllib.parse import urlsplit

    from airflow.providers.common.compat.openlineage.facet import Dataset

    parsed = sanitize_uri(urlsplit(asset.uri))
    return Dataset(namespace=f"{SCHEME}://{parsed.netloc}", name=_KINDS[parsed.path])
