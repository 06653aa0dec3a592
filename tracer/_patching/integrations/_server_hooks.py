"""The two shapes of a server hook: wrap the application a server stores once a method of its has
run (``wrap_after``: hypercorn's and daphne's ``__init__``, uvicorn's ``Config.load``, waitress's
and werkzeug's servers), and run the function that imports the application as a service
invocation (``run_as_service``: its calls at import time are start-up's, ``tracer._core.service``).
Neither raises into the server."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tracer._core import recorder, service
from tracer._patching.integrations import PatchSpec, mark


def wrap_after(
    owner: type,
    method: str,
    attribute: str,
    wrap: Callable[[Any], Any | None],
    own_mark: str | None = None,
) -> PatchSpec:
    """A patch of ``owner.method`` that, once the original has run, replaces the application it
    stored in ``attribute`` by ``wrap(app)`` (None: leave it, wrapped already). ``own_mark``: an
    attribute set on the replacement besides ``PATCH_MARK``, an integration's own."""
    if not callable(owner.__dict__.get(method)):
        raise TypeError(f"{owner.__qualname__}.{method} is not a function here")

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def after(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            try:
                app = getattr(self, attribute, None)
                wrapped = None if app is None else wrap(app)
                if wrapped is not None:
                    setattr(self, attribute, wrapped)
            except Exception as exc:
                recorder.internal_error(exc)
            return result

        if own_mark is not None:
            setattr(after, own_mark, True)
        return mark(after)

    return (owner, method, make)


def run_as_service(owner: Any, name: str, phase: str) -> PatchSpec:
    """A patch of ``owner.name`` (a module's function or a class's method) that imports the
    application: it runs as the service invocation ``phase`` (``"uvicorn.startup"``)."""
    if not callable(getattr(owner, name, None)):
        raise TypeError(f"{getattr(owner, '__name__', owner)}.{name} is not a function here")

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def load(*args: Any, **kwargs: Any) -> Any:
            return service.run(phase, lambda: original(*args, **kwargs))

        return mark(load)

    return (owner, name, make)
