"""Integration: FastAPI. Each HTTP request is one invocation named by its method and route
template (``"fastapi.GET /price/{item}"``), the endpoint function a traced child; the rest of the
request (middleware, Starlette routes, mounts) is the ``starlette`` integration's.

More in docs/architecture.md, "tracer/_patching/integrations/fastapi.py".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, Final

from tracer._core import recorder
from tracer._patching.integrations import Hook, PatchSpec, _endpoints, _http, asgi, starlette

FRAMEWORK: Final = "fastapi"


class _TracedDependant:
    """A dependant seen through with ``call`` traced."""

    __slots__ = ("_dependant", "call")

    def __init__(self, dependant: Any, call: Callable[..., Any]) -> None:
        self._dependant = dependant
        self.call = call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dependant, name)


#: FastAPI's dependants by id: (the dependant, its endpoint, the dependant seen through with that
#: endpoint traced, or None when the endpoint is left as it is: traced already, not a function).
_Traced = tuple[Any, Callable[..., Any], _TracedDependant | None]
_traced_dependants: dict[int, _Traced] = {}
MAX_DEPENDANTS: Final = 4096


def _trace_dependant(dependant: Any, call: Callable[..., Any]) -> _Traced:
    """``dependant`` seen through with ``call`` traced (``_endpoints.endpoint``), remembered."""
    traced = _endpoints.endpoint(call)
    found = (dependant, call, None if traced is call else _TracedDependant(dependant, traced))
    if len(_traced_dependants) >= MAX_DEPENDANTS:
        _traced_dependants.clear()
    _traced_dependants[id(dependant)] = found
    return found


def patch_run_endpoint(
    original: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    async def run_endpoint_function(*args: Any, **kwargs: Any) -> Any:
        dependant = kwargs.get("dependant")
        call = getattr(dependant, "call", None)
        if call is not None and not _http.excluding.get():
            # One seen-through dependant per route's dependant and endpoint, made once: a route
            # keeps its dependant for the application's life (by id, the dependant kept alive
            # beside it so that the id stays its own).
            found = _traced_dependants.get(id(dependant))
            if found is None or found[0] is not dependant or found[1] is not call:
                found = _trace_dependant(dependant, call)
            if found[2] is not None:
                kwargs["dependant"] = found[2]
        return await original(*args, **kwargs)

    starlette.copy_names(run_endpoint_function, original)
    return run_endpoint_function


def patch_route_selected(original: Callable[..., Any]) -> Callable[..., Any]:
    def _route_selected(*args: Any, **kwargs: Any) -> Any:
        try:
            scope = kwargs.get("scope")
            path = kwargs.get("path")
            # A mount adds its prefix in Starlette's Mount.handle, called next.
            if isinstance(scope, dict) and isinstance(path, str) and not kwargs.get("mount"):
                asgi.name_route(scope, path)
        except Exception as exc:
            recorder.internal_error(exc)
        return original(*args, **kwargs)

    starlette.copy_names(_route_selected, original)
    return _route_selected


def _applications(module: ModuleType) -> list[PatchSpec]:
    fastapi = module.FastAPI
    if "build_middleware_stack" not in vars(fastapi):
        return []  # Starlette's, which the starlette integration wraps
    return [(fastapi, "build_middleware_stack", starlette.wrap_stack(FRAMEWORK, fastapi))]


def _routing(module: ModuleType) -> list[PatchSpec]:
    if not callable(module.run_endpoint_function):
        raise TypeError("fastapi.routing.run_endpoint_function is not callable")
    patches: list[PatchSpec] = [(module, "run_endpoint_function", patch_run_endpoint)]
    if callable(getattr(module, "_route_selected", None)):
        patches.append((module, "_route_selected", patch_route_selected))
    return patches


HOOKS: dict[str, Hook] = {
    "fastapi.applications": _applications,
    "fastapi.routing": _routing,
    "anyio._backends._asyncio": _endpoints.detach_anyio_workers,
}
