"""``cmr serve``: run the repository server until interrupted."""

from __future__ import annotations

import argparse
import logging

from cmr.cli.common import DB_HELP, CliError, Commands, command
from cmr.cli.keys import add_curve_options, curve_from_args
from cmr.defaults import DEFAULT_ENDPOINT

#: More workers than this is a typo, not a plan.
MAX_WORKERS = 64


def add_serve(commands: Commands) -> None:
    parser = command(
        commands,
        "serve",
        description=(
            "Receive batches from traced processes and store them until interrupted (Ctrl-C). "
            "Without CURVE, anyone who reaches the address can send: only listen on addresses "
            "you trust. With --curve-secret and --allowed-clients, connections are encrypted "
            "and only clients whose public key is allowed get through (see 'cmr keys')."
        ),
        examples=[
            "cmr serve",
            "cmr serve --bind tcp://127.0.0.1:7400 --db /var/lib/invoseq/cmr.sqlite",
            "cmr serve --bind ipc:///tmp/invoseq.sock --memory   # nothing kept on disk",
            "cmr serve --curve-secret keys/repository.key_secret --allowed-clients keys/clients",
            "cmr serve --workers 4 --db postgresql://invoseq@db.internal/invoseq",
        ],
        handler=_serve,
    )
    parser.add_argument(
        "--bind",
        metavar="ENDPOINT",
        default=DEFAULT_ENDPOINT,
        help=f"ZeroMQ endpoint to listen on (default: {DEFAULT_ENDPOINT})",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)
    where.add_argument("--memory", action="store_true", help="keep everything in memory only")
    parser.add_argument(
        "--workers",
        metavar="N",
        type=_worker_count,
        default=1,
        help=(
            "decode and store batches in N processes behind the one endpoint (default: 1, this "
            "process). Each opens the repository; with SQLite their commits take turns, so more "
            "workers than cores gain nothing. Not with --memory"
        ),
    )
    add_curve_options(parser)


def _worker_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of workers: {text!r}") from None
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"give 1 to {MAX_WORKERS} workers, not {count}")
    return count


def _serve(args: argparse.Namespace) -> int:
    from cmr.server.server import run_server
    from cmr.store import open_store, repository_target

    if args.memory and args.db is not None:
        raise CliError("--memory keeps nothing on disk: leave out --db")
    if args.memory and args.workers > 1:
        raise CliError("--workers needs a repository every worker can open: leave out --memory")
    curve = curve_from_args(args)  # before the repository is opened: a bad key creates nothing
    logging.basicConfig(format="cmr: %(message)s")
    store = open_store(args.db, memory=args.memory)  # created or upgraded before any worker
    db = None if args.memory else repository_target(args.db)
    # run_server closes the store
    return run_server(store, args.bind, curve=curve, workers=args.workers, db=db)
