"""Integration: anyio, whose asyncio backend binds ``contextvars.copy_context`` at import: the
context it copies for ``to_thread.run_sync`` (Starlette's and FastAPI's sync endpoints) and
``from_thread`` carries the exact call it was copied in, as every copy through
``contextvars.copy_context`` does (``tracer._patching.contexts``)."""

from __future__ import annotations

from tracer._patching import contexts
from tracer._patching.integrations import Hook

HOOKS: dict[str, Hook] = {"anyio._backends._asyncio": contexts.copy_context_in}
