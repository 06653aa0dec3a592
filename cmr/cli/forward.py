"""``cmr forward``: push sequences to an OTLP/HTTP receiver (see ``cmr.otlp.forward``).

The OpenTelemetry exporter is loaded only when ``forward`` runs.

Which sequences: the ones named, or every one started since ``--since``, or ``--all``. Everything
the user can get wrong is checked before anything is sent: the URL, the ids, the repository, and
whether anything answers at the endpoint.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from cmr.cli.common import (
    DB_HELP,
    CliError,
    Commands,
    command,
    emit,
    open_for_reading,
    parse_since,
    positive_int,
)
from cmr.defaults import needs_extra

if TYPE_CHECKING:
    from cmr.store.base import Store

DEFAULT_BATCH_SIZE: Final = 512
DEFAULT_TIMEOUT_S: Final = 10.0
#: ``--since`` reads the sequence list in pages that double, newest first, until it passes WHEN.
_FIRST_PAGE: Final = 64
#: ``--all`` (SQLite's LIMIT takes a signed 64-bit integer).
_EVERYTHING: Final = 2**62


def add_forward(commands: Commands) -> None:
    parser = command(
        commands,
        "forward",
        description=(
            "Send sequences as OpenTelemetry traces to an OTLP/HTTP receiver: an OpenTelemetry "
            "Collector, Jaeger or Grafana Tempo (port 4318). Each call is a span, as 'cmr "
            "export --format otlp' writes it: the trace id is the sequence id, hand-offs are "
            "parents, estimated calls are flagged. Give sequence ids, or --since WHEN, or --all. "
            "An endpoint without a path gets /v1/traces. The exporter's environment variables "
            "(OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_CERTIFICATE, ...) apply to spans. "
            "With --profiles, each sequence's stack samples follow its spans as OTLP profiles "
            "(OTLP/JSON to /v1development/profiles, as 'cmr export --format otlp-profiles' "
            "writes them), every sample linked to its call's span; --header applies to them."
        ),
        examples=[
            "cmr forward --otlp-endpoint http://localhost:4318 3f2a9c",
            "cmr forward --otlp-endpoint http://collector:4318 --since 1h",
            "cmr forward --otlp-endpoint http://collector:4318 --profiles 3f2a9c",
            "cmr forward --otlp-endpoint https://tempo.example.com/v1/traces --all "
            "--header 'Authorization=Bearer TOKEN'",
        ],
        handler=_forward,
    )
    parser.add_argument(
        "seq", nargs="*", metavar="SEQ", help="sequence ids, or any unambiguous hex prefixes"
    )
    parser.add_argument(
        "--otlp-endpoint",
        required=True,
        metavar="URL",
        help="the receiver: http(s)://HOST:PORT, or the full URL of its traces path",
    )
    parser.add_argument(
        "--since",
        type=parse_since,
        dest="since_ns",
        metavar="WHEN",
        help="every sequence started since WHEN: a duration ago (30s, 15m, 1h, 2d, 1w) or an "
        "ISO time (local time unless it names its zone)",
    )
    parser.add_argument("--all", action="store_true", help="every sequence in the repository")
    parser.add_argument(
        "--profiles",
        action="store_true",
        help="also send each sequence's stack samples as OTLP profiles linked to its spans",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"spans per request (default: {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up on a request after SECONDS, retries included (default: "
        f"{DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--header",
        action="append",
        type=_header,
        default=[],
        metavar="KEY=VALUE",
        help="an HTTP header for every request (repeatable), e.g. for authentication",
    )
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _forward(args: argparse.Namespace) -> int:
    try:
        from cmr.otlp.forward import ForwardError, check_reachable, forward, otlp_sender, traces_url
        from cmr.otlp.forward_profiles import profiles_sender, profiles_url
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "opentelemetry":
            raise
        raise CliError(needs_extra("cmr forward", "otlp")) from exc

    chosen = [bool(args.seq), args.since_ns is not None, args.all]
    if sum(chosen) != 1:
        raise CliError("give sequence ids, --since WHEN or --all (one of them)")
    try:
        url = traces_url(args.otlp_endpoint)
        profiles = profiles_url(args.otlp_endpoint) if args.profiles else None
    except ForwardError as exc:
        raise CliError(f"--otlp-endpoint: {exc}") from None
    store = open_for_reading(args.db)
    try:
        seqs = _chosen(store, args)
        if not seqs:
            emit(
                "nothing to forward: "
                + (
                    "no sequence started since then"
                    if args.since_ns is not None
                    else "the repository holds no sequence"
                )
            )
            return 0
        try:
            check_reachable(url, args.timeout)
            send_profiles = (
                None
                if profiles is None
                else profiles_sender(profiles, timeout_s=args.timeout, headers=dict(args.header))
            )
            with otlp_sender(url, timeout_s=args.timeout, headers=dict(args.header)) as send:
                result = forward(
                    store,
                    seqs,
                    send,
                    batch_size=args.batch_size,
                    send_profiles=send_profiles,
                )
        except ForwardError as exc:
            raise CliError(str(exc)) from None
    finally:
        store.close()
    sequences = "sequence" if result.sequences == 1 else "sequences"
    requests = "request" if result.requests == 1 else "requests"
    emit(
        f"forwarded {result.sequences} {sequences} ({result.spans} spans) to {url} "
        f"in {result.requests} {requests}"
    )
    if profiles is not None:
        emit(
            f"and the samples of {result.profiles} of them as profiles to {profiles}"
            if result.profiles
            else "no profiles sent: none of them has samples (sample with the tracer's sampler on)"
        )
    return 0


def _chosen(store: Store, args: argparse.Namespace) -> list[bytes]:
    """The sequences to send, oldest first: a backend then receives them in the order they ran."""
    if args.seq:
        return list(dict.fromkeys(store.resolve_sequence(prefix) for prefix in args.seq))
    if args.all:
        return [summary.seq for summary in reversed(store.list_sequences(_EVERYTHING))]
    since: int = args.since_ns
    limit = _FIRST_PAGE
    while True:
        recent = store.list_sequences(limit)
        if len(recent) < limit or recent[-1].start_ns < since:
            return [summary.seq for summary in reversed(recent) if summary.start_ns >= since]
        limit *= 2


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got '{text}'") from None
    if not 0 < value <= 3600:  # an hour is already far past any receiver
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600, got '{text}'")
    return value


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return key.strip(), value.strip()
