"""`cmr export --format otlp-profiles`: a sequence's stack samples as OTLP profiles that the
opentelemetry-proto definitions read, each sample linked to the span `--format otlp` gives the
measured call it was taken under."""

from __future__ import annotations

import hashlib
import json

import pytest
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
)

from cmr.otlp.profiles import to_profiles
from cmr.otlp.spans import to_trace
from cmr.views.pipeline import sequence_tree
from tests.cmr.otlp.test_export import Spans, fixture_shop, walk  # noqa: F401 -- shared run
from tests.cmr.otlp_support import (
    attributes,
    otlp_json_to_request,
    otlp_receiver,
    profiles_json_to_request,
)
from tests.cmr.views.conftest import PUID, SEQ, SequenceBuilder
from tests.support import cmr, cmr_json

MS = 1_000_000


class Observations:
    """Every observation of a parsed request: (profile type, link's span id or None, stack as
    function names outermost first, weight, timestamp, value, thread name)."""

    def __init__(self, request: ExportProfilesServiceRequest) -> None:
        d = request.dictionary
        self.strings = list(d.string_table)
        self.rows: list[tuple[str, bytes | None, tuple[str, ...], int, int, int, str]] = []
        self.trace_ids = {link.trace_id for link in list(d.link_table)[1:]}
        for resource in request.resource_profiles:
            for scope in resource.scope_profiles:
                assert scope.scope.name == "invoseq"
                for profile in scope.profiles:
                    kind = self.strings[profile.sample_type.type_strindex]
                    assert self.strings[profile.sample_type.unit_strindex] == "nanoseconds"
                    for sample in profile.samples:
                        assert len(sample.values) == len(sample.timestamps_unix_nano) > 0
                        link = d.link_table[sample.link_index] if sample.link_index else None
                        stack = tuple(
                            self.strings[
                                d.function_table[
                                    d.location_table[at].lines[0].function_index
                                ].name_strindex
                            ]
                            for at in reversed(d.stack_table[sample.stack_index].location_indices)
                        )
                        attrs = {
                            self.strings[d.attribute_table[at].key_strindex]: d.attribute_table[at]
                            for at in sample.attribute_indices
                        }
                        weight = attrs["invoseq.sample.weight"].value.int_value
                        thread = attrs["thread.name"].value.string_value
                        for value, t in zip(
                            sample.values, sample.timestamps_unix_nano, strict=True
                        ):
                            span = None if link is None else link.span_id
                            self.rows.append((kind, span, stack, weight, t, value, thread))

    def of(self, kind: str) -> list[tuple[bytes | None, tuple[str, ...], int, int, int]]:
        return sorted(
            ((r[1], r[2], r[3], r[4], r[5]) for r in self.rows if r[0] == kind),
            key=lambda row: (row[0] or b"", row[1:]),
        )


def span_id(puid: int, iid: int) -> bytes:
    material = puid.to_bytes(8, "big") + iid.to_bytes(8, "big")
    return hashlib.blake2b(material, digest_size=8, person=b"invoseq.span").digest()


def built() -> SequenceBuilder:
    """main (0-100 ms) calls work (10-60 ms) on thread T1; samples inside work, inside main,
    a collapsed idle stretch across work's end, and one outside every call."""
    b = SequenceBuilder()
    b.call("app.main", 1, start=0, end=100 * MS, line=10)
    b.call("app.work", 2, 1, start=10 * MS, end=60 * MS, line=20)
    b.frame(1, "main", line=10)
    b.frame(2, "work", line=20)
    b.frame(3, "spin", line=30, file="lib.py")
    b.sample(20 * MS, [1, 2, 3], duration=5 * MS, cpu=5 * MS)
    b.sample(70 * MS, [1], duration=5 * MS, cpu=1 * MS)
    b.sample(50 * MS, [1], weight=4, duration=40 * MS, cpu=0)  # idle in main, 10 ms in work
    b.sample(200 * MS, [1], duration=5 * MS, cpu=0)  # after main returned: no call holds it
    return b


def export(b: SequenceBuilder) -> str:
    data = b.data()
    tree = sequence_tree(data)
    document = to_profiles(tree, data, to_trace(tree, data))
    assert document is not None
    return json.dumps(document)


def test_each_sample_links_to_the_span_of_the_call_it_was_taken_under() -> None:
    found = Observations(profiles_json_to_request(export(built())))
    main, work = span_id(PUID, 1), span_id(PUID, 2)
    assert found.trace_ids == {SEQ}
    assert found.of("wall") == [
        (None, ("main",), 1, 200 * MS, 5 * MS),  # kept, without a link
        (main, ("main",), 1, 70 * MS, 5 * MS),
        (main, ("main",), 3, 60 * MS, 30 * MS),  # the idle stretch after work returned
        (work, ("main",), 1, 50 * MS, 10 * MS),  # 10 of its 40 ms: 1 of its 4 ticks
        (work, ("main", "work", "spin"), 1, 20 * MS, 5 * MS),
    ]
    assert [row[4] for row in found.of("cpu")] == [0, 1 * MS, 0, 0, 5 * MS]
    assert {row[6] for row in found.rows} == {"T1"}


def test_the_same_stack_link_and_weight_make_one_sample_of_several_observations() -> None:
    b = SequenceBuilder()
    b.call("app.main", 1, start=0, end=100 * MS, line=10)
    b.frame(1, "main", line=10)
    for t in (30, 10, 20):
        b.sample(t * MS, [1], duration=5 * MS, cpu=2 * MS)
    document = json.loads(export(b))
    [resource] = document["resourceProfiles"]
    wall, cpu = resource["scopeProfiles"][0]["profiles"]
    [sample] = wall["samples"]
    assert sample["timestampsUnixNano"] == [str(t * MS) for t in (10, 20, 30)]
    assert sample["values"] == [str(5 * MS)] * 3
    assert cpu["samples"][0]["values"] == [str(2 * MS)] * 3
    assert wall["timeUnixNano"] == str(10 * MS)
    assert wall["durationNano"] == str(25 * MS)
    assert wall["profileId"] != cpu["profileId"]
    assert export(b) == export(b)  # derived ids: the same file twice


def test_a_sequence_without_samples_has_no_profiles(tmp_path, capsys) -> None:
    b = SequenceBuilder()
    b.call("app.main", 1, start=0, end=10)
    data = b.data()
    tree = sequence_tree(data)
    assert to_profiles(tree, data, to_trace(tree, data)) is None


@pytest.mark.system
def test_a_traced_runs_profiles_parse_and_link_to_its_exported_spans(shop) -> None:
    db, seq = shop
    request = profiles_json_to_request(
        cmr(db, "export", seq[:8], "--format", "otlp-profiles").stdout
    )
    spans = Spans(otlp_json_to_request(cmr(db, "export", seq, "--format", "otlp").stdout))
    found = Observations(request)
    assert found.trace_ids == {bytes.fromhex(seq)}
    wall = [row for row in found.rows if row[0] == "wall"]
    assert wall, "the shop's run was sampled every 5 ms"
    linked = [row for row in wall if row[1] is not None]
    assert len(linked) >= len(wall) * 0.9
    for _kind, span_id_, _stack, weight, t, value, thread in linked:
        span = spans.by_id[span_id_]  # the span --format otlp gives that call
        facts = spans.attrs(span)
        assert "invoseq.estimated" not in facts  # a measured call
        assert "invoseq.iid" in facts
        assert facts["thread.name"] == thread
        assert span.start_time_unix_nano <= t <= span.end_time_unix_nano
        assert value >= 0
        assert weight >= 0  # a sliver of a collapsed sample may round to no tick
    processes = {
        attributes(r.resource.attributes)["invoseq.puid"] for r in request.resource_profiles
    }
    shown = {node["process"]["puid"] for node in walk(cmr_json(db, "show", seq)["root"])}
    assert processes
    assert processes <= shown
    for resource in request.resource_profiles:
        kinds = [
            found.strings[p.sample_type.type_strindex] for p in resource.scope_profiles[0].profiles
        ]
        assert kinds == ["wall", "cpu"]


def test_the_command_refuses_a_sequence_without_samples(tmp_path, capsys) -> None:
    from invoseq import wire
    from tests.cmr.conftest import make_batch
    from tests.cmr.otlp.test_export import stored

    seq = bytes.fromhex("00000000000000000000000000000abc")
    path = stored(
        tmp_path,
        make_batch(7, 1, {1: [wire.Start(1, 0, 0, 1, 0, seq), wire.End(1, 10)]}),
    )
    from cmr.cli import main

    assert main(["--db", path, "export", seq.hex(), "--format", "otlp-profiles"]) == 1
    assert "has no samples to export as profiles" in capsys.readouterr().err


@pytest.mark.system
def test_forward_profiles_sends_what_the_export_writes_after_the_spans(shop, capsys) -> None:
    from cmr.cli import main

    db, seq = shop
    exported = profiles_json_to_request(cmr(db, "export", seq, "--format", "otlp-profiles").stdout)
    with otlp_receiver() as receiver:
        code = main(
            ["--db", str(db), "forward", "--otlp-endpoint", receiver.url, "--profiles", seq]
        )
        paths = list(receiver.paths)
        [received] = receiver.profiles
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.splitlines()[1] == (
        f"and the samples of 1 of them as profiles to {receiver.url}/v1development/profiles"
    )
    assert paths == ["/v1/traces", "/v1development/profiles"]  # the spans the links name first
    assert Observations(received).rows == Observations(exported).rows


def test_forward_profiles_needs_an_endpoint_whose_profiles_path_it_can_find(
    tmp_path, capsys
) -> None:
    from cmr.cli import main

    argv = ["forward", "--otlp-endpoint", "http://127.0.0.1:4318/custom", "--profiles", "--all"]
    assert main(["--db", str(tmp_path / "none.sqlite"), *argv]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "with --profiles, give the receiver's base URL or its /v1/traces URL" in line


@pytest.mark.system
def test_a_receiver_refusing_the_profiles_is_a_one_line_error(shop, capsys) -> None:
    from cmr.cli import main

    db, seq = shop
    with otlp_receiver() as receiver:
        receiver.profiles_status = 404  # a receiver without the profiles signal
        url = receiver.url + "/v1/traces"
        code = main(["--db", str(db), "forward", "--otlp-endpoint", url, "--profiles", seq])
        spans = receiver.spans()
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"cmr: {receiver.url}/v1development/profiles did not take the profiles: HTTP 404 Not Found"
    ]
    assert spans, "the spans went first"
