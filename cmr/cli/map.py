"""``cmr map``: the services the selected sequences ran in, and the hand-offs between them."""

from __future__ import annotations

import argparse

from cmr.cli.common import (
    Commands,
    add_read_options,
    command,
    emit,
    open_for_reading,
    positive_int,
)
from cmr.cli.ls import add_query_options, query_from
from cmr.views.analyses.services import DEFAULT_LIMIT, Edge, ServiceMap, map_fields, service_map
from cmr.views.render.tables import table
from cmr.views.render.terms import format_duration


def add_map(commands: Commands) -> None:
    parser = command(
        commands,
        "map",
        description=(
            "Draw the service map of the sequences the options select (the options of 'cmr "
            "ls'): one line per edge, a hand-off from one service to another, with its kind "
            "(http, grpc, queue: a task a worker ran, process: multiprocessing or a "
            "subprocess, remote: headers carried otherwise), how many calls continued it, how "
            "many of them raised, the 50th and 99th percentile of those calls' durations (the "
            "called side's), and the median queue wait (from the hand-off to the call's start: "
            "for a queue, the time the task waited for a worker). A service is the application "
            "a launcher serves (gunicorn storefront:app, celery -A tasks: storefront, tasks), "
            "else the program. Each sequence is read whole: the newest --limit sequences, "
            f"{DEFAULT_LIMIT} by default, and the output says when the options select more. "
            "JSON is {sequences, limit, bounded, nodes: [{name, program, processes, sequences, "
            "entries, depth}], edges: [{source, target, kind, count, errors, p50_ns, p99_ns, "
            "queued_p50_ns, sequences}]}. 'cmr ui' draws it on its map page."
        ),
        examples=[
            "cmr map",
            "cmr map --since 1h --root '*checkout'",
            "cmr map --status error --limit 2000",
            "cmr map --json | jq '.edges[] | select(.kind == \"queue\")'",
        ],
        handler=_map,
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"read the newest N sequences at most (default: {DEFAULT_LIMIT})",
    )
    add_query_options(parser)
    add_read_options(parser)


def _map(args: argparse.Namespace) -> int:
    query = query_from(args)
    store = open_for_reading(args.db)
    try:
        found = service_map(store, query, args.limit)
    finally:
        store.close()
    if args.json:
        import msgspec

        emit(msgspec.json.encode(map_fields(found)).decode())
    else:
        emit(render_map(found))
    return 0


def render_map(found: ServiceMap) -> str:
    """The text of ``cmr map``: what was read, the edges as a table, the services."""
    read = len(found.sequences)
    if not read:
        return "no sequence matches"
    noun = "sequence" if read == 1 else "sequences"
    head = f"{read} {noun}" + (
        f" (the newest {found.limit} the options select; --limit N reads more)"
        if found.bounded
        else ""
    )
    services = ", ".join(
        node.name if node.program == node.name else f"{node.name} ({node.program})"
        for node in sorted(found.nodes.values(), key=lambda n: (found.depths()[n.name], n.name))
    )
    edges = found.ordered_edges()
    if not edges:
        body = "no hand-off between services"
    else:
        header = ["EDGE", "KIND", "CALLS", "ERRORS", "P50", "P99", "QUEUED P50"]
        body = table(header, [_cells(edge) for edge in edges], right=frozenset(range(2, 7)))
    return f"{head}\n{body}\nservices: {services}"


def _cells(edge: Edge) -> list[str]:
    times = [edge.percentile(0.5), edge.percentile(0.99), edge.queued_p50]
    return [
        f"{edge.source} → {edge.target}",
        edge.kind,
        f"{edge.count:,}",
        f"{edge.errors:,}",
        *("-" if t is None else format_duration(t) for t in times),
    ]
