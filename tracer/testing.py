"""Helpers for testing code that uses the tracer: capture what it would send, in memory.

    from tracer.testing import capture

    with capture() as trace:
        checkout(cart)
    assert [i.name for i in trace.invocations()] == ["shop.checkout", "shop.price"]

More in docs/architecture.md, "tracer/testing.py".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Unpack

from invoseq import wire
from tracer import _runtime as runtime
from tracer._shipping.transport import MemoryTransport
from tracer.config import Config, Settings

__all__ = [
    "Capture",
    "CapturedInvocation",
    "capture",
    "trees",
]


@dataclass(frozen=True, slots=True)
class CapturedInvocation:
    iid: int
    parent: int  # iid of the enclosing invocation (across a hand-off too), 0 for a root
    seq: str  # 32 hex digits
    name: str  # module.qualname
    tid: int
    thread_name: str
    start_ns: int  # this process's monotonic clock
    end_ns: int | None
    status: str  # ok | error | running
    error: str | None
    handoff: str | None = None  # the kind of hand-off this invocation continues (thread, task)
    queued_ns: int | None = None  # submit → start, for an invocation that continues a hand-off
    # Key/value pairs recorded for it (wire.Attrs: an OpenTelemetry span's), merged in order.
    attributes: dict[str, str | int | float | bool] | None = None


class Capture:
    def __init__(self) -> None:
        self.transport = MemoryTransport()
        #: The capture's block has ended: the tracer was shut down, which sent everything it had
        #: recorded; what the capture holds is final.
        self.ended = False

    @property
    def batches(self) -> list[wire.Batch]:
        return self.transport.batches

    def flush(self, timeout_s: float = 10.0) -> None:
        """Send what the tracer recorded so far and wait for it; nothing to do once the block has
        ended (a thread that records afterwards, a server's still finishing a request, records
        into a tracer that no longer sends, and must not make reading the capture fail)."""
        if self.ended:
            return
        if not runtime.flush(timeout_s):
            raise AssertionError("the tracer did not flush within the timeout")

    def trees(self, strip: str = "") -> list[dict[str, Any]]:
        """Every captured sequence as a nested dict (see ``trees``), flushing first."""
        return trees(self.invocations(), strip)

    def invocations(self) -> list[CapturedInvocation]:
        """Every invocation captured so far, in start order (flushes first)."""
        self.flush()
        methods: dict[int, str] = {}
        threads: dict[int, str] = {}
        starts: dict[int, tuple[wire.Start, int]] = {}
        ends: dict[int, wire.End | wire.Error] = {}
        handoffs: dict[int, wire.Handoff] = {}
        attributes: dict[int, dict[str, str | int | float | bool]] = {}
        for batch in self.batches:
            methods.update({m.method: f"{m.module}.{m.qualname}" for m in batch.methods})
            threads.update({t.tid: t.name for t in batch.threads})
            for chunk in batch.chunks:
                for event in chunk.events:
                    if isinstance(event, wire.Start):
                        starts[event.iid] = (event, chunk.tid)
                    elif isinstance(event, wire.Handoff):
                        handoffs[event.hid] = event
                    elif isinstance(event, wire.End | wire.Error):
                        ends[event.iid] = event
                    elif isinstance(event, wire.Attrs):
                        attributes.setdefault(event.iid, {}).update(event.attributes)
        result = []
        for iid, (start, tid) in sorted(starts.items(), key=lambda item: item[1][0].t_ns):
            end = ends.get(iid)
            status = "running" if end is None else "error" if isinstance(end, wire.Error) else "ok"
            handoff = handoffs.get(start.hid)
            result.append(
                CapturedInvocation(
                    iid=iid,
                    parent=handoff.parent if handoff is not None else start.parent,
                    seq=start.seq.hex(),
                    name=methods.get(start.method, f"<unknown method {start.method}>"),
                    tid=tid,
                    thread_name=threads.get(tid, "?"),
                    start_ns=start.t_ns,
                    end_ns=None if end is None else end.t_ns,
                    status=status,
                    error=end.error if isinstance(end, wire.Error) else None,
                    handoff=None if handoff is None else handoff.kind,
                    queued_ns=None if handoff is None else start.t_ns - handoff.t_ns,
                    attributes=attributes.get(iid),
                )
            )
        return result


def _node(invocation: CapturedInvocation, strip: str) -> dict[str, Any]:
    node: dict[str, Any] = {"name": invocation.name.removeprefix(strip)}
    if invocation.status != "ok":
        node["status"] = invocation.status
    if invocation.error:
        node["error"] = invocation.error
    if invocation.handoff:
        node["handoff"] = invocation.handoff
    return node


def trees(invocations: list[CapturedInvocation], strip: str = "") -> list[dict[str, Any]]:
    """Nested ``{"name", "children", ...}`` dicts, one per root, children in start order: the
    shape to write expected trees by hand. ``status``/``error`` appear when not ok, ``handoff``
    (its kind) on an invocation that continues a hand-off; ``strip`` is removed from names."""
    nodes = {i.iid: _node(i, strip) for i in invocations}
    roots: list[dict[str, Any]] = []
    for invocation in invocations:  # start order, so children are appended in start order
        parent = nodes.get(invocation.parent)
        if parent is None:
            roots.append(nodes[invocation.iid])
        else:
            parent.setdefault("children", []).append(nodes[invocation.iid])
    return roots


@contextmanager
def capture(**settings: Unpack[Settings]) -> Iterator[Capture]:
    """Trace into memory for the duration of the block; the tracer is shut down afterwards.
    Nothing is spooled unless ``spool_bytes`` is given: a capture neither writes a spool file
    nor replays the ones other processes of the same program left (their events are not the
    block's)."""
    captured = Capture()
    settings.setdefault("spool_bytes", 0)

    def factory(config: Config) -> MemoryTransport:
        return captured.transport

    previous = runtime.set_transport_factory(factory)
    try:
        runtime.configure(**settings)
        yield captured
    finally:
        runtime.shutdown()
        captured.ended = True
        runtime.set_transport_factory(previous)
