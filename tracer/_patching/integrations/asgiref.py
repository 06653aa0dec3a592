"""Integration: asgiref's ``async_to_sync`` and ``sync_to_async`` (Django, Flask's async views).

Both copy the caller's context (``contextvars.copy_context``, exact inside a nested call:
``tracer._patching.contexts``) and carry the variables the callee changed back into the caller's
(``asgiref.sync._restore_context``). The value a copy was given names the call it was copied in;
patched, ``_restore_context`` never carries it back, where it would outlive that call.
"""

from __future__ import annotations

from types import ModuleType

from tracer._patching import contexts
from tracer._patching.integrations import Hook, PatchSpec


def _sync(module: ModuleType) -> list[PatchSpec]:
    if not callable(getattr(module, "_restore_context", None)):
        raise TypeError("asgiref.sync has no _restore_context")
    return [(module, "_restore_context", contexts.restore_context)]


HOOKS: dict[str, Hook] = {"asgiref.sync": _sync}
