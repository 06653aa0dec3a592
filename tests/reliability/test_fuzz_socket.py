"""Whatever arrives on its socket, a running `cmr serve` stays up, stores or counts each message
exactly once, and goes on storing valid batches.

tests/cmr/server/test_refused_frames.py fuzzes the decoder in process; this goes through the
socket to the real server process, which must answer a valid batch after every fuzzed message: a
probe that proves it is alive and, since replies come back in order, tells whether the fuzzed
message was stored (acknowledged before the probe) or refused (no reply)."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invoseq import wire
from tests.cmr.conftest import make_batch
from tests.reliability.conftest import Launcher
from tests.reliability.harness import PATIENCE_S, query
from tests.support import cmr_json, shape

SEQ = bytes.fromhex("f0220000000000000000000000000000")
FUZZ_PUID = 77  # the valid batches that fuzzed ones are made from
PROBE_PUID = 99


def valid_body(batch_no: int) -> bytes:
    events: list[wire.Event] = [
        wire.Start(batch_no, 0, 0, 1, 1_000, SEQ),
        wire.Handoff(batch_no + 100, batch_no, "thread", 2, 1_500, SEQ),
        wire.Error(batch_no, 2_000, "ValueError"),
    ]
    return msgspec.msgpack.encode(make_batch(FUZZ_PUID, batch_no, {1: events}))


VALID_BODIES = [valid_body(n) for n in range(1, 4)]
HUGE_LENGTHS = [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"]
HUGE_LENGTHS += [b"\xdb\xff\xff\xff\xff", b"\xdc\xff\xff", b"\xc5\xff\xff"]


@dataclass(frozen=True)
class Message:
    frames: list[bytes]
    #: The reason the repository must refuse it for; None when it might even be a valid batch.
    refused_for: str | None


def header_reason(frame: bytes) -> str | None:
    return None if frame.startswith(wire.MAGIC) and len(frame) > len(wire.MAGIC) else "garbage"


def raw_frames() -> st.SearchStrategy[Message]:
    frames = st.lists(st.binary(max_size=300), min_size=1, max_size=4)
    return frames.map(lambda f: Message(f, header_reason(f[0])))


def random_msgpack() -> st.SearchStrategy[Message]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=20)
        | st.binary(max_size=20)
    )
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=40,
    )
    return values.map(lambda v: Message([wire.BATCH_HEADER, msgspec.msgpack.encode(v)], None))


@st.composite
def mutated_batches(draw: st.DrawFn) -> Message:
    body = bytearray(draw(st.sampled_from(VALID_BODIES)))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(body) - 1))
        how = draw(st.sampled_from(["set", "insert", "delete"]))
        if how == "set":
            body[at] = draw(st.integers(0, 255))
        elif how == "insert":
            body[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif len(body) > 1:
            del body[at]
    return Message([wire.BATCH_HEADER, bytes(body)], None)


@st.composite
def truncated_batches(draw: st.DrawFn) -> Message:
    body = draw(st.sampled_from(VALID_BODIES))
    return Message([wire.BATCH_HEADER, body[: draw(st.integers(0, len(body) - 1))]], "decode")


@st.composite
def deep_nesting(draw: st.DrawFn) -> Message:
    """Arrays or maps nested up to 200,000 deep, alone or where a batch expects its methods."""
    opener = draw(st.sampled_from([b"\x91", b"\x81\xa1k"]))
    deep = opener * draw(st.integers(1, 200_000)) + b"\xc0"
    if draw(st.booleans()):
        process = [1, "host", "platform", 0, 0, ["app.py"], 0]
        deep = msgspec.msgpack.encode([FUZZ_PUID, 9, process, msgspec.Raw(deep), [], []])
    return Message([wire.BATCH_HEADER, deep], "decode")


@st.composite
def huge_lengths(draw: st.DrawFn) -> Message:
    """A length prefix claiming gigabytes (or 65535 items) that the frame does not hold."""
    claim = draw(st.sampled_from(HUGE_LENGTHS)) + draw(st.binary(max_size=16))
    if draw(st.booleans()):
        process = [1, "host", "platform", 0, 0, ["app.py"], 0]
        claim = msgspec.msgpack.encode([FUZZ_PUID, 9, process, [], [], msgspec.Raw(claim)])
    return Message([wire.BATCH_HEADER, claim], "decode")


@st.composite
def wrong_envelopes(draw: st.DrawFn) -> Message:
    """A valid body in the wrong envelope: another version or kind, a bad header, frame count."""
    body = draw(st.sampled_from(VALID_BODIES))
    version = draw(st.just(wire.PROTOCOL_VERSION) | st.integers(0, 255))
    kind = draw(st.integers(0, 255))
    how = draw(st.sampled_from(["header", "long header", "frames"]))
    accepted = version in wire.ACCEPTED_VERSIONS  # an older version's header is still valid
    if how == "header" and not (accepted and kind == wire.KIND_BATCH):
        reason = "kind" if accepted else "version"
        return Message([wire.MAGIC + bytes((version, kind)), body], reason)
    if how == "long header":
        return Message([wire.BATCH_HEADER + bytes((kind,)), body], "garbage")
    extra = draw(st.lists(st.binary(max_size=8), min_size=1, max_size=2))
    return Message(
        draw(st.sampled_from([[wire.BATCH_HEADER], [wire.BATCH_HEADER, body, *extra]])), "frames"
    )


MESSAGES = st.one_of(
    raw_frames(),
    random_msgpack(),
    mutated_batches(),
    truncated_batches(),
    deep_nesting(),
    huge_lengths(),
    wrong_envelopes(),
)


class Prober:
    """Sends a message, then a valid probe batch; tells whether the message was acknowledged,
    and checks that a refused one was counted (so that hypothesis shrinks a failure to the one
    message that shows it)."""

    def __init__(self, dealer: zmq.Socket[bytes], db: Path) -> None:
        self.dealer = dealer
        self.db = db
        self.probes = 0
        self.acknowledged = 0
        self.refused: collections.Counter[str | None] = collections.Counter()

    def send(self, message: Message) -> None:
        counted = self.rejected()
        self.dealer.send_multipart(message.frames)
        self.probes += 1
        probe = make_batch(PROBE_PUID, self.probes, {1: [wire.End(self.probes, 5)]})
        self.dealer.send_multipart([wire.BATCH_HEADER, msgspec.msgpack.encode(probe)])
        answers = list(
            itertools.takewhile(lambda ack: ack != (PROBE_PUID, self.probes), self.acks())
        )
        assert len(answers) <= 1, answers
        assert not (answers and message.refused_for), (message.refused_for, answers)
        # The server handles one connection's messages in order: by the probe's acknowledgement
        # the message was stored, or its refusal committed.
        assert self.rejected() - counted == (0 if answers else 1), "refused but not counted"
        if answers:
            self.acknowledged += 1
        else:
            self.refused[message.refused_for] += 1

    def rejected(self) -> int:
        """Frames refused so far, read from the repository file."""
        [(total,)] = query(self.db, "SELECT coalesce(sum(frames), 0) FROM rejected")
        return int(total)

    def acks(self) -> Iterator[tuple[int, int]]:
        while True:
            assert self.dealer.poll(int(PATIENCE_S * 1000)), "the repository stopped answering"
            header, body = self.dealer.recv_multipart()
            assert header == wire.ACK_HEADER
            ack = msgspec.msgpack.decode(body, type=wire.Ack)
            yield ack.puid, ack.batch_no


@pytest.fixture(name="dealer")
def fixture_dealer() -> Iterator[zmq.Socket[bytes]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    yield dealer
    dealer.close()
    context.term()


def test_fuzzed_frames_are_counted_and_the_repository_stays_up(
    tmp_path: Path, launch: Launcher, dealer: zmq.Socket[bytes]
) -> None:
    repository = launch.repository()
    repository.start()
    dealer.connect(repository.endpoint)
    prober = Prober(dealer, repository.db)

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(message=MESSAGES)
    def fuzz(message: Message) -> None:
        prober.send(message)

    fuzz()

    assert repository.running
    stats = cmr_json(repository.db, "stats")
    refused = sum(prober.refused.values())
    assert sum(stats["rejected"].values()) == refused
    for reason, count in prober.refused.items():
        if reason is not None:  # at least those refused for a reason known in advance
            assert stats["rejected"].get(reason, 0) >= count, (reason, stats["rejected"])
    assert stats["batches"] + stats["duplicate_batches"] == prober.acknowledged + prober.probes

    # And it goes on storing: a valid sequence sent now is there, whole.
    seq = bytes.fromhex("5a1e0000000000000000000000000001")
    events: list[wire.Event] = [
        wire.Start(1, 0, 0, 1, 1_000, seq),
        wire.Start(2, 1, 0, 2, 1_100, seq),
        wire.End(2, 1_200),
        wire.End(1, 1_300),
    ]
    batches = [
        make_batch(5, 1, {1: events[:2]}, methods={1: "app.after", 2: "app.fuzz"}),
        make_batch(5, 2, {1: events[2:]}, final=True),
    ]
    for batch in batches:
        dealer.send_multipart([wire.BATCH_HEADER, msgspec.msgpack.encode(batch)])
        assert next(prober.acks()) == (5, batch.batch_no)
    tree = cmr_json(repository.db, "show", seq.hex())
    assert shape(tree["root"]) == {
        "name": "app.after",
        "status": "ok",
        "children": [{"name": "app.fuzz", "status": "ok"}],
    }
