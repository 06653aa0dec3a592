"""Build SequenceData by hand, the way a store would return it, and describe trees compactly."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmr.store.base import (
    FrameRecord,
    HandoffRecord,
    InvocationRecord,
    MethodRecord,
    ProcessRecord,
    SampleRecord,
    SequenceData,
    ThreadRecord,
)
from cmr.views.model import KIND_ESTIMATED, SequenceTree, walk

SEQ = bytes.fromhex("0123456789abcdef0123456789abcdef")
PUID = 0x1111


class SequenceBuilder:
    """Records for one sequence. Every call registers its method, thread and process metadata
    unless told otherwise, so a test only spells out what it is about."""

    def __init__(self) -> None:
        self.invocations: list[InvocationRecord] = []
        self.methods: dict[tuple[int, int], MethodRecord] = {}
        self.threads: dict[tuple[int, int], ThreadRecord] = {}
        self.processes: dict[int, ProcessRecord] = {}
        self.handoffs: dict[int, HandoffRecord] = {}
        self.samples: list[SampleRecord] = []
        self.frames: dict[tuple[int, int], FrameRecord] = {}
        self._method_ids: dict[tuple[int, str], int] = {}

    def process(
        self,
        puid: int = PUID,
        *,
        pid: int = 4242,
        host: str = "box",
        ended: bool = False,
        lost: bool = False,
        last_seen_ns: int = 0,
    ) -> None:
        """``lost`` is what a store computed at read time (heartbeat 1 s, silent too long)."""
        self.processes[puid] = ProcessRecord(
            puid=puid,
            pid=pid,
            host=host,
            platform_id="platform",
            argv=("app.py",),
            ended=ended,
            dropped=0,
            last_seen_ns=last_seen_ns,
            heartbeat_ms=1_000 if lost else 0,
            lost=lost,
        )

    def thread(self, tid: int, name: str, *, puid: int = PUID) -> None:
        self.threads[(puid, tid)] = ThreadRecord(native_id=9000 + tid, name=name)

    def call(
        self,
        name: str,
        iid: int,
        parent: int = 0,
        *,
        start: int,
        end: int | None = None,
        error: str | None = None,
        puid: int = PUID,
        tid: int = 1,
        hid: int = 0,
        known: bool = True,
        line: int = 1,
    ) -> None:
        """``line``: the method's first line in app.py (how a stack sample finds its frame)."""
        method = self._method_ids.setdefault((puid, name), len(self._method_ids) + 1)
        if known:
            module, _, qualname = name.rpartition(".")
            self.methods[(puid, method)] = MethodRecord(module, qualname, "app.py", line)
            self.threads.setdefault((puid, tid), ThreadRecord(9000 + tid, f"T{tid}"))
            if puid not in self.processes:
                self.process(puid)
        self.invocations.append(
            InvocationRecord(
                puid=puid,
                iid=iid,
                parent=parent,
                hid=hid,
                tid=tid,
                method=method,
                start_ns=start,
                end_ns=end,
                error=error,
            )
        )

    def handoff(
        self,
        hid: int,
        parent: int,
        *,
        submitted: int,
        kind: str = "thread",
        puid: int = PUID,
        callable_name: str = "app.work",
    ) -> None:
        """Invocation ``parent`` of process ``puid`` handed ``callable_name`` off as ``hid``."""
        method = self._method_ids.setdefault((puid, callable_name), len(self._method_ids) + 1)
        self.handoffs[hid] = HandoffRecord(hid, puid, parent, kind, method, submitted)

    def frame(
        self, frame: int, function: str, *, line: int, file: str = "app.py", puid: int = PUID
    ) -> None:
        """A FrameInfo of process ``puid``: ``function`` starting at ``line`` of ``file``."""
        self.frames[(puid, frame)] = FrameRecord(file, function, line)

    def sample(
        self,
        t: int,
        frames: list[int],
        *,
        tid: int = 1,
        weight: int = 1,
        duration: int = 10,
        cpu: int = 0,
        lines: list[int] | None = None,
        puid: int = PUID,
        ticks: tuple[int, int] | None = None,
    ) -> None:
        """A stack of thread ``tid`` at ``t`` (frame ids, outermost first); ``lines`` default
        to 0 for every frame; ``ticks``: when its first and last ticks saw it (None: unknown)."""
        executing = tuple(lines) if lines is not None else (0,) * len(frames)
        self.samples.append(
            SampleRecord(puid, tid, t, weight, duration, cpu, tuple(frames), executing, ticks)
        )

    def data(self) -> SequenceData:
        return SequenceData(
            seq=SEQ,
            invocations=list(self.invocations),
            methods=dict(self.methods),
            threads=dict(self.threads),
            processes=dict(self.processes),
            handoffs=dict(self.handoffs),
            samples=list(self.samples),
            frames=dict(self.frames),
        )


@pytest.fixture(name="builder")
def fixture_builder() -> SequenceBuilder:
    return SequenceBuilder()


def two_tasks(builder: SequenceBuilder) -> None:
    """``app.main`` running two interleaved asyncio tasks on its thread."""
    builder.call("app.main", 1, start=0, end=100, line=10)
    builder.call("app.task_a", 2, 1, start=10, end=90, line=20)
    builder.call("app.task_b", 3, 1, start=20, end=80, line=30)
    builder.frame(1, "main", line=10)
    builder.frame(2, "task_a", line=20)
    builder.frame(3, "task_b", line=30)


def outline(tree: SequenceTree) -> list[str]:
    """One line per node: indentation by depth, name, duration/self (or '-'), status."""

    def ns(value: int | None) -> str:
        return "-" if value is None else str(value)

    return [
        f"{'  ' * depth}{node.name} {ns(node.duration_ns)}/{ns(node.self_ns)} {node.status}"
        for node, depth in walk(tree.root)
    ]


Outline = Callable[[SequenceTree], list[str]]


@pytest.fixture(name="outline")
def fixture_outline() -> Outline:
    return outline


def merged(tree: SequenceTree, *, frames: bool = False) -> list[str]:
    """Per node: ``~`` for estimated, name, duration/self, samples total/self, CPU time."""
    lines = []
    for node, depth in walk(tree.root):
        mark = "~" if node.kind == KIND_ESTIMATED else ""
        cpu = "-" if node.cpu_ns is None else node.cpu_ns
        where = f" @{node.frame[2]}" if frames and node.frame is not None else ""
        lines.append(
            f"{'  ' * depth}{mark}{node.name}{where} {node.duration_ns}/{node.self_ns} "
            f"n={node.samples}/{node.self_samples} cpu={cpu}"
        )
    return lines
