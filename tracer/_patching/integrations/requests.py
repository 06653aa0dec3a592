"""requests: ``Session.send`` is one invocation per request, ``"GET host/path"``.

``send`` takes the ``PreparedRequest`` that goes on the wire; the hand-off is written into its
headers (``_clients``: a request object sent again gets a fresh one). Everything ``send`` does is
the one invocation: urllib3 and http.client below it pass through, and so do the further
``send`` calls of the redirects it follows, so the status is the final response's; each redirect
carries a hand-off of its own (written where http.client puts the headers on the wire). With
``stream=True`` the invocation ends when the response headers are in, before the body is read.
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
