"""What each integration is doing in this process, and why: ``tracer info`` and
``tracer run --list-integrations`` print it.

More in docs/architecture.md, "tracer/_patching/integrations/states.py".
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Final, NamedTuple

from tracer._core import forking
from tracer._patching.integrations.registry import (
    BY_NAME,
    BY_OTEL_NAME,
    REGISTRY,
    Integration,
    supports,
)

DISABLED_ENV: Final = "INVOSEQ_DISABLED_INTEGRATIONS"
#: OpenTelemetry's: its instrumentation names (``aiohttp-client``), ours, or ``*``.
OTEL_DISABLED_ENV: Final = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"

ACTIVE: Final = "active"
NOT_IMPORTED: Final = "not imported"
DISABLED: Final = "disabled"
UNSUPPORTED: Final = "unsupported version"
FAILED: Final = "failed"


class State(NamedTuple):
    name: str
    state: str
    why: str


_lock = threading.Lock()
#: What happened to each integration's hooks in this process: name -> (state, why).
_seen: dict[str, tuple[str, str]] = {}
#: Installed versions read so far: distribution -> version (None: not installed).
_versions: dict[str, str | None] = {}


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork


forking.on_fork("integration states", in_child=_after_fork_in_child)


def _names(variable: str) -> list[str]:
    return [n for n in os.environ.get(variable, "").replace(" ", "").split(",") if n]


def disabled_by(
    known: tuple[str, ...], disable: frozenset[str]
) -> tuple[dict[str, str], list[str]]:
    """Each integration ``disable`` or the environment leaves out, with the setting that does,
    and the names of ``INVOSEQ_DISABLED_INTEGRATIONS`` that name none (OpenTelemetry's list may
    name instrumentations invoseq has not: those are ignored quietly)."""
    reasons = dict.fromkeys(disable, "instrument(disable=...)")
    unknown = []
    for name in _names(DISABLED_ENV):
        if name in known:
            reasons.setdefault(name, DISABLED_ENV)
        else:
            unknown.append(name)
    for name in _names(OTEL_DISABLED_ENV):
        matched = known if name == "*" else [BY_OTEL_NAME.get(name, name)]
        for found in matched:
            if found in known:
                reasons.setdefault(found, OTEL_DISABLED_ENV)
    return reasons, unknown


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (None when it is not installed), read once: from
    the name of its ``.dist-info`` directory, first on ``sys.path`` (``name-version.dist-info``,
    as importlib.metadata finds it), else through importlib.metadata (an egg, a zip), which costs
    tens of milliseconds to import."""
    if distribution in _versions:
        return _versions[distribution]
    version = _from_dist_info(distribution)
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version(distribution)
        except Exception:  # not installed, or a broken METADATA: take it as supported
            version = None
    _versions[distribution] = version
    return version


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


#: Normalized distribution name -> version, of the ``.dist-info`` directories on ``sys.path``
#: (the first of a name wins, as for importlib.metadata); read once, at the first lookup.
_dist_infos: dict[str, str] | None = None


def _from_dist_info(distribution: str) -> str | None:
    global _dist_infos
    if _dist_infos is None:
        index: dict[str, str] = {}
        for entry in sys.path:
            try:
                names = os.listdir(entry or ".")
            except OSError:  # not a directory (a zip), or gone
                continue
            for found in names:
                if found.endswith(".dist-info"):
                    name, _, version = found.removesuffix(".dist-info").rpartition("-")
                    if name:
                        index.setdefault(_normalized(name), version)
        _dist_infos = index
    return _dist_infos.get(_normalized(distribution))


def unsupported(name: str) -> str | None:
    """Why integration ``name`` does not support the installed library, or None when it does
    (or cannot tell: no record, no distribution, not installed)."""
    integration = BY_NAME.get(name)
    if integration is None or integration.distribution is None or not integration.versions:
        return None
    version = installed_version(integration.distribution)
    if version is None or supports(integration.versions, version):
        return None
    return f"{integration.distribution} {version} is installed; supported: {integration.versions}"


def record(name: str, state: str, why: str) -> None:
    """Say what became of integration ``name``'s hooks (a later failure stays)."""
    with _lock:
        if _seen.get(name, ("", ""))[0] in (FAILED, UNSUPPORTED) and state == ACTIVE:
            return
        _seen[name] = (state, why)


def forget() -> None:
    """At ``uninstrument()``: nothing is patched any more."""
    with _lock:
        _seen.clear()


def states(disabled: dict[str, str] | None = None, *, instrumented: bool = True) -> list[State]:
    """Every integration's state in this process (module docstring), in the registry's order.
    ``disabled``: what ``disabled_by`` found (the environment's, when None)."""
    if disabled is None:
        disabled = disabled_by(tuple(BY_NAME), frozenset())[0]
    found = []
    for integration in REGISTRY:
        name = integration.name
        seen = _seen.get(name)
        if name in disabled:
            found.append(State(name, DISABLED, f"by {disabled[name]}"))
        elif seen is not None and instrumented:
            found.append(State(name, *seen))
        elif (why := unsupported(name)) is not None:
            found.append(State(name, UNSUPPORTED, f"{why}: not patched"))
        elif not integration.modules:
            found.append(State(name, ACTIVE, "patches nothing: used by hand or by another"))
        else:
            found.append(State(name, NOT_IMPORTED, _not_imported(integration)))
    return found


def _not_imported(integration: Integration) -> str:
    distribution = integration.distribution
    if distribution is None:  # the standard library's, or several servers'
        return f"patched when the program imports {' or '.join(integration.modules)}"
    version = installed_version(distribution)
    if version is None:
        return f"{distribution} is not installed"
    return f"{distribution} {version}: patched when the program imports it"
