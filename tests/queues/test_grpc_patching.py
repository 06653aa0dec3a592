"""The gRPC integrations as patches: ``instrument()`` replaces the server and channel
constructors of ``grpc`` and ``grpc.aio`` (and the servers' ``start``), ``uninstrument()`` puts
every one back and what was made while instrumented passes calls through; each side switches off
by name (``INVOSEQ_DISABLED_INTEGRATIONS``); a grpc whose ``server`` has another shape skips the
server side with one warning, the client side still measured."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import grpc._server
import grpc.aio
import grpc.aio._server
import pytest

import tracer
from tests.queues.grpc_support import (
    Pricing,
    caller,
    instrumented,
    quote,
    sync_server,
)
from tracer._patching import integrations
from tracer._patching.integrations import DISABLED_ENV
from tracer.testing import capture

MODULE = "tests.queues.grpc_support."

#: Every attribute the gRPC integrations patch.
PATCHED: list[tuple[Any, str]] = [
    (grpc, "server"),
    (grpc, "insecure_channel"),
    (grpc, "secure_channel"),
    (grpc.aio, "server"),
    (grpc.aio, "insecure_channel"),
    (grpc.aio, "secure_channel"),
    (grpc._server._Server, "start"),
    (grpc.aio._server.Server, "start"),
]


def _stored(owner: Any, name: str) -> Any:
    return vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)


ORIGINALS = {(owner, name): _stored(owner, name) for owner, name in PATCHED}


@pytest.fixture(name="service")
def _service() -> Pricing:
    return Pricing()


def test_uninstrument_restores_every_attribute_and_what_was_made_passes_through(
    service: Pricing,
) -> None:
    with capture() as trace:
        tracer.instrument()
        tracer.instrument()
        try:
            for owner, name in PATCHED:
                assert _stored(owner, name) is not ORIGINALS[owner, name], name
                assert _stored(owner, name).__wrapped__ is ORIGINALS[owner, name], name
            server = sync_server(service)
            port = server.__enter__()
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        finally:
            tracer.uninstrument()
        try:
            assert [(o, n) for o, n in PATCHED if _stored(o, n) is not ORIGINALS[o, n]] == []
            assert caller(quote, channel, b"apple") == b"15"  # made while instrumented
            # No client or server invocation: the handler is not traced, its work a root of its own.
            assert trace.trees(strip=MODULE) == [{"name": "caller"}, {"name": "price_of"}]
            assert "traceparent" not in service.next_seen().metadata
        finally:
            channel.close()
            server.__exit__(None, None, None)


@pytest.mark.parametrize("disabled", ["grpc_server", "grpc_client"])
def test_each_side_switches_off_by_name(
    disabled: str, service: Pricing, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DISABLED_ENV, disabled)
    with instrumented() as trace, sync_server(service) as port:
        side = ["server"] if disabled == "grpc_server" else ["insecure_channel", "secure_channel"]
        unchanged = [(owner, name) for owner in (grpc, grpc.aio) for name in side]
        assert all(getattr(o, n) is ORIGINALS[o, n] for o, n in unchanged)
        assert not any(getattr(o, n) is ORIGINALS[o, n] for o, n in PATCHED[:6] if n not in side)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            caller(quote, channel, b"apple")
        names = [(i.name, i.parent == 0) for i in trace.invocations()]
    seen = service.next_seen()
    if disabled == "grpc_server":  # the handler's work: a sequence of its own
        assert names == [
            (MODULE + "caller", True),
            ("grpc.client /shop.Pricing/Quote", False),
            (MODULE + "price_of", True),
        ]
        assert "traceparent" in seen.metadata
    else:
        assert "traceparent" not in seen.metadata
        assert names == [
            (MODULE + "caller", True),
            ("grpc.server /shop.Pricing/Quote", True),
            (MODULE + "Pricing.quote", False),
            (MODULE + "price_of", False),
        ]


def test_a_grpc_whose_server_takes_no_interceptors_skips_the_server_side_with_one_warning(
    service: Pricing, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = grpc.server

    def server(thread_pool: Any, handlers: Any = None) -> Any:  # an older shape
        return original(thread_pool, handlers)

    monkeypatch.setattr(grpc, "server", server)
    monkeypatch.setattr(integrations, "_warned", set())
    caplog.set_level(logging.WARNING, logger="tracer")
    with instrumented() as trace:
        tracer.instrument()  # twice: still one warning
        assert grpc.server is server
        with sync_server(service) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert caller(quote, channel, b"apple") == b"15"
        names = [i.name for i in trace.invocations()]
    warnings = [r.getMessage() for r in caplog.records if "grpc_server" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("invoseq: integration grpc_server skipped for grpc: TypeError")
    # The client side works; the handler's work is a sequence of its own.
    assert names == [MODULE + "caller", "grpc.client /shop.Pricing/Quote", MODULE + "price_of"]
