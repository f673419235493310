"""An ASGI app built on its first request: :class:`LazyApp`.

Every Airflow process loads the plugins of every installed distribution (a task process does, to
integrate macros, before its task runs), so a plugin module that imports FastAPI and Airflow's
API security costs every task ~0.6 s and ~75 MB (``bench/plugin_cost.py``) and logs a
``StarletteDeprecationWarning``. Only the API server mounts a plugin's ``fastapi_apps``: a
:class:`LazyApp` names the factory of the real app by its import path and imports it on the API
server's first request to it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["LazyApp"]

_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that builds ``factory`` (``"module:function"``) on its first request.

    >>> app = LazyApp("airflow_trident.plugins.drpc_app:create_app")
    >>> app
    LazyApp('airflow_trident.plugins.drpc_app:create_app', built=False)
    """

    def __init__(self, factory: str) -> None:
        self.factory = factory
        self._app: Any = None
        self._lock = threading.Lock()

    def build(self) -> Any:
        """The real app, built once (thread-safe)."""
        with self._lock:
            if self._app is None:
                module, _, name = self.factory.partition(":")
                self._app = getattr(importlib.import_module(module), name)()
            return self._app

    async def __call__(self, scope: MutableMapping[str, Any], receive: _Receive,
                       send: _Send) -> None:  # fmt: skip
        app = self._app if self._app is not None else self.build()
        await app(scope, receive, send)

    def __repr__(self) -> str:
        return f"LazyApp({self.factory!r}, built={self._app is not None})"
