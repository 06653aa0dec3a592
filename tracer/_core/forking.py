"""One fork handler for the whole tracer, its steps in the order this module states.

A forked child inherits its parent's locks (perhaps held by a thread it does not have), ids,
buffers, a sender whose sockets and threads are the parent's, and the sequence the forking
thread was in. Each module holding such state names its step here when it is imported
(``on_fork``); one handler, registered with ``os.register_at_fork`` when this module loads, runs
the steps of the modules loaded so far in ``ORDER``, whatever order they were imported in.
"""

from __future__ import annotations

import os
import sys
import types

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

#: The steps, in the order a child runs them (``after_in_child``). The hot path's state first
#: (the memory bound, the buffers, the process's identity: everything after records as the
#: child), then OpenTelemetry's adopted spans, the patches' and the runtime's locks and sender
#: (a fresh one starts on the child's first event), SIGTERM, the integrations' locks, and last
#: the hand-off the fork made, which the child's main thread continues. Before the fork the
#: order is reversed (the hand-off is recorded while the parent's buffers are whole, then
#: SIGTERM is blocked); in the parent after it, it is this order again.
ORDER: Final = (
    "budget",
    "recorder",
    "ids",
    "adoption",
    "patching",
    "runtime",
    "signals",
    "measured",
    "otel",
    "handoff",
    "logs",
    "integration states",
    "processes",
)

_RANK: Final = {name: rank for rank, name in enumerate(ORDER)}

#: name -> (before, in_parent, in_child), each None when the step has nothing to do then.
_steps: dict[
    str,
    tuple[Callable[[], object] | None, Callable[[], object] | None, Callable[[], object] | None],
] = {}


def on_fork(
    name: str,
    *,
    before: Callable[[], object] | None = None,
    in_parent: Callable[[], object] | None = None,
    in_child: Callable[[], object] | None = None,
) -> None:
    """Name the step of one module (``ORDER``'s ``name``): what it does before a fork, in the
    parent after it, and in the child. A module registers once, when it is imported."""
    if name not in _RANK:
        raise ValueError(f"no fork step {name!r} in forking.ORDER")
    _steps[name] = (before, in_parent, in_child)


def _run(phase: int, reverse: bool = False) -> None:
    """Each loaded step's ``phase`` in ``ORDER`` (reversed before the fork); one that fails is
    reported as ``os.register_at_fork`` reports a hook's error, and the others still run."""
    for name in sorted(_steps, key=_RANK.__getitem__, reverse=reverse):
        step = _steps[name][phase]
        if step is None:
            continue
        try:
            step()
        except Exception as exc:
            sys.unraisablehook(
                types.SimpleNamespace(
                    exc_type=type(exc),
                    exc_value=exc,
                    exc_traceback=exc.__traceback__,
                    err_msg=f"Exception ignored in the tracer's fork step {name!r}",
                    object=step,
                )
            )


def _before() -> None:
    _run(0, reverse=True)


def _in_parent() -> None:
    _run(1)


def _in_child() -> None:
    _run(2)


os.register_at_fork(before=_before, after_in_parent=_in_parent, after_in_child=_in_child)
