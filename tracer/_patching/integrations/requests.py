"""Integration: requests (to be written)."""

from __future__ import annotations

from tracer._patching.integrations import Hook

HOOKS: dict[str, Hook] = {}
