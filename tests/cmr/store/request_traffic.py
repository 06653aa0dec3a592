"""Request-shaped traffic with the shapes around it, for comparing the SQLite layouts
(tests/cmr/store/test_single_rows.py, test_single_rows_served.py)."""

from __future__ import annotations

import random

from invoseq import wire
from tests.cmr.conftest import make_batch
from tests.cmr.store.records import start

Group = list[wire.Batch]
HOSTS = {1: "web-a", 2: "web-a", 3: "web-b"}


class RequestTraffic:
    """Groups of batches from three processes: requests of one and ten calls (some raising,
    some with attributes), sequences over two threads, over two batches, rooted at a remote
    parent, left open; then later groups that extend sequences stored before (a forged repeat,
    an entry from another process, an earlier true root, a hand-off), and drops."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.iid = dict.fromkeys(HOSTS, 1)
        self.clock = dict.fromkeys(HOSTS, 1_000)
        self.batch_no = dict.fromkeys(HOSTS, 0)
        self.seqs: list[bytes] = []
        self.starts: dict[bytes, tuple[int, wire.Start]] = {}  # seq -> (puid, its root Start)

    def _next(self, puid: int) -> tuple[int, int]:
        iid, t_ns = self.iid[puid], self.clock[puid]
        self.iid[puid] += 1
        self.clock[puid] += self.rng.randint(1, 40)
        return iid, t_ns

    def _seq(self) -> bytes:
        seq = self.rng.randbytes(16)
        self.seqs.append(seq)
        return seq

    def request(self, puid: int, calls: int) -> list[wire.Event]:
        seq = self._seq()
        root, t_ns = self._next(puid)
        first = start(root, t_ns, seq, method=self.rng.randint(1, 4))
        self.starts[seq] = (puid, first)
        events: list[wire.Event] = [first]
        for _ in range(calls - 1):
            child, t_child = self._next(puid)
            events += [start(child, t_child, seq, parent=root, method=5), wire.End(child, t_child)]
            if self.rng.random() < 0.2:
                events.append(wire.Attrs(child, {"user": self.rng.randint(1, 9)}))
        end_iid, end_ns = root, self._next(puid)[1]
        if self.rng.random() < 0.2:
            events.append(wire.Error(end_iid, end_ns, self.rng.choice(["ValueError", "KeyError"])))
        else:
            events.append(wire.End(end_iid, end_ns + self.rng.randint(0, 500)))
        return events

    def batch(self, puid: int, events: dict[int, list[wire.Event]], **extra: object) -> wire.Batch:
        self.batch_no[puid] += 1
        return make_batch(puid, self.batch_no[puid], events, host=HOSTS[puid], **extra)  # type: ignore[arg-type]

    def group(self, later: bool) -> Group:
        rng, batches = self.rng, []
        carried: list[tuple[int, int, int]] = []  # (puid, iid, tid) ended in the next batch
        for puid in HOSTS:
            for _ in range(rng.randint(1, 3)):
                main: list[wire.Event] = []
                other: list[wire.Event] = []
                for _ in range(rng.randint(3, 12)):
                    main += self.request(puid, rng.choice([1, 1, 10]))
                shape = rng.choice(["threads", "spanning", "remote", "open", "none"])
                seq = self._seq()
                root, t_ns = self._next(puid)
                if shape == "threads":
                    hid = rng.randint(1, 2**40)
                    child, t_child = self._next(puid)
                    main += [
                        start(root, t_ns, seq),
                        wire.Handoff(hid, root, "thread", 9, t_ns + 1, seq),
                        wire.End(root, t_child + 5),
                    ]
                    other += [
                        start(child, t_child, seq, parent=0, hid=hid),
                        wire.End(child, t_child + 3),
                    ]
                elif shape == "spanning":
                    main.append(start(root, t_ns, seq))
                    carried.append((puid, root, 1))
                elif shape == "remote":
                    main += [
                        start(root, t_ns, seq, hid=rng.randint(1, 2**40)),
                        wire.End(root, t_ns + 7),
                    ]
                elif shape == "open":
                    main.append(start(root, t_ns, seq))
                extra: dict[str, object] = {}
                if later and rng.random() < 0.5:
                    extra["lost_seqs"] = [rng.choice(self.seqs)]
                if later and rng.random() < 0.2:
                    extra["lost_windows"] = [(self.clock[puid] - 60, self.clock[puid] - 20)]
                batches.append(
                    self.batch(puid, {1: main, 2: other} if other else {1: main}, **extra)
                )
        for puid, iid, tid in carried:
            batches.append(self.batch(puid, {tid: [wire.End(iid, self._next(puid)[1])]}))
        if later:
            batches += self._extending()
        rng.shuffle(batches)
        return batches

    def _extending(self) -> list[wire.Batch]:
        """Batches that bring more of sequences stored before (single rows among them)."""
        rng, batches = self.rng, []
        for seq in rng.sample(sorted(self.starts), 6):
            puid, root = self.starts[seq]
            how = rng.choice(["repeat", "entry", "earlier", "handoff", "child"])
            other = 3 if puid != 3 else 1
            if how == "repeat":  # the same Start and End again, under a new batch number
                batches.append(self.batch(puid, {1: [root, wire.End(root.iid, root.t_ns + 3)]}))
            elif how == "entry":
                iid, t_ns = self._next(other)
                entry = start(iid, t_ns, seq, hid=rng.randint(1, 2**40), method=2)
                batches.append(self.batch(other, {4: [entry, wire.End(iid, t_ns + 9)]}))
            elif how == "earlier":
                iid = self._next(other)[0]
                early = start(iid, root.t_ns - 50, seq, method=3)
                batches.append(self.batch(other, {1: [early, wire.End(iid, root.t_ns + 2_000)]}))
            elif how == "handoff":
                hid = rng.randint(1, 2**40)
                batches.append(
                    self.batch(
                        puid, {1: [wire.Handoff(hid, root.iid, "thread", 9, root.t_ns + 1, seq)]}
                    )
                )
            else:  # a child on another thread of the same process, open
                iid, t_ns = self._next(puid)
                batches.append(self.batch(puid, {3: [start(iid, t_ns, seq, parent=root.iid)]}))
        return batches
