"""The HTTP integrations' options: requests left untraced (excluded URLs, health checks) and the
headers recorded on a request's invocation (an allow-list), as OpenTelemetry's instrumentations
take them.

More in docs/architecture.md, "tracer/_patching/integrations/_options.py".
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

import tracer._patching as patching
from tracer.config import resolve, split_patterns

#: The frameworks with an ``OTEL_PYTHON_<FRAMEWORK>_EXCLUDED_URLS`` of their own, by the name
#: their invocations carry, and the frameworks each generic layer may be serving.
FRAMEWORKS: Final = {
    "flask": "FLASK",
    "django": "DJANGO",
    "starlette": "STARLETTE",
    "fastapi": "FASTAPI",
    "aiohttp": "AIOHTTP_SERVER",
    "wsgi": "WSGI",
    "asgi": "ASGI",
}
_SERVING: Final = {"wsgi": ("flask", "django"), "asgi": ("starlette", "fastapi", "django")}
_PLAIN: Final = re.compile(r"[A-Za-z0-9_-]+")


class Capture:
    """An allow-list of header names: ``attributes`` picks the listed headers of a message."""

    __slots__ = ("_names", "_pattern", "_prefix")

    def __init__(self, listed: str, prefix: str) -> None:
        items = split_patterns(listed)
        self._names = frozenset(n.lower() for n in items if _PLAIN.fullmatch(n))
        patterns = [n for n in items if not _PLAIN.fullmatch(n)]
        self._pattern = re.compile("|".join(patterns), re.I) if patterns else None
        self._prefix = prefix

    def __bool__(self) -> bool:
        return bool(self._names) or self._pattern is not None

    def attributes(self, headers: Iterable[tuple[str, str]]) -> dict[str, str]:
        """``{"http.request.header.x-request-id": "a, b"}`` for the listed ``(name, value)``s."""
        found: dict[str, list[str]] = {}
        pattern = self._pattern
        for name, value in headers:
            lowered = name.lower()
            if lowered in self._names or (pattern is not None and pattern.fullmatch(lowered)):
                found.setdefault(lowered, []).append(value)
        return {self._prefix + name: ", ".join(values) for name, values in found.items()}


class Options(NamedTuple):
    #: framework -> its excluded URLs (None: none).
    excluded: dict[str, re.Pattern[str] | None]
    server_request: Capture
    server_response: Capture
    client_request: Capture
    client_response: Capture
    #: Whether ``server_request`` and ``server_response`` list any header (asked per request).
    capturing_request: bool = False
    capturing_response: bool = False


def _compile(patterns: str) -> re.Pattern[str] | None:
    listed = split_patterns(patterns)
    return re.compile("|".join(f"(?:{p})" for p in listed)) if listed else None


def _build() -> Options:
    config = patching.configured or resolve({}, strict=False)
    own = {
        name: os.environ.get(f"OTEL_PYTHON_{variable}_EXCLUDED_URLS", "")
        for name, variable in FRAMEWORKS.items()
    }
    lists = {name: own[name] or config.excluded_urls for name in FRAMEWORKS}
    lists["*"] = config.excluded_urls  # a framework without a list of its own
    for layer, frameworks in _SERVING.items():
        lists[layer] = ",".join(filter(None, (lists[layer], *(own[f] for f in frameworks))))
    server_request = Capture(config.capture_server_request_headers, "http.request.header.")
    server_response = Capture(config.capture_server_response_headers, "http.response.header.")
    return Options(
        {name: _compile(listed) for name, listed in lists.items()},
        server_request,
        server_response,
        Capture(config.capture_client_request_headers, "http.request.header."),
        Capture(config.capture_client_response_headers, "http.response.header."),
        bool(server_request),
        bool(server_response),
    )


_current: Options | None = None


def current() -> Options:
    """The options, resolved at the first call after ``reset``."""
    global _current
    found = _current
    if found is None:
        found = _current = _build()
    return found


def reset() -> None:
    """Resolve again at the next request (the configuration changed)."""
    global _current
    _current = None


def excluded(framework: str, url: Callable[[], str] | None) -> bool:
    """Whether the request of ``framework`` at ``url()`` is left untraced (never raises: a URL
    that cannot be built is traced)."""
    patterns = current().excluded
    pattern = patterns.get(framework, patterns["*"])
    if pattern is None or url is None:
        return False
    try:
        return pattern.search(url()) is not None
    except Exception:
        return False
