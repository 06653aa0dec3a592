"""requests: ``Session.send`` is one invocation per request, ``"GET host/path"``.

More in docs/architecture.md, "tracer/_patching/integrations/requests.py".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer._patching.integrations import Hook, PatchSpec, _clients

LIBRARY: Final = "requests"


def patch_send(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        client = _clients.begin(LIBRARY, lambda: (request.method, request.url))
        if client is None:
            return original(self, request, **kwargs)
        _clients.inject_request(client, request)
        return _clients.call(client, lambda: original(self, request, **kwargs))

    return send


def _hook(module: ModuleType) -> list[PatchSpec]:
    session = module.Session
    _clients.require(session, "send", ("self", "request"))
    return [(session, "send", patch_send)]


HOOKS: dict[str, Hook] = {"requests.sessions": _hook}
