"""``cmr import``: load a bundle written by ``cmr export --format bundle``."""

from __future__ import annotations

import argparse

from cmr.cli.common import DB_HELP, CliError, Commands, command, emit, read_input
from cmr.cli.progress import HELP as PROGRESS_HELP


def add_import(commands: Commands) -> None:
    parser = command(
        commands,
        "import",
        description=(
            "Load a bundle written by 'cmr export --format bundle' into the repository "
            "(created if missing), through the same checks as batches from the network. "
            "Importing a bundle again stores nothing new. " + PROGRESS_HELP
        ),
        examples=[
            "cmr import seq.ivsq",
            "cmr import seq.ivsq --db /tmp/copy.sqlite",
            "ssh prod cmr export 3f2a9c --format bundle -o - | cmr import -",
        ],
        handler=_import,
    )
    parser.add_argument("file", metavar="FILE", help="the bundle ('-': standard input)")
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _import(args: argparse.Namespace) -> int:
    from cmr.bundle import import_bundle
    from cmr.cli import progress
    from cmr.exports import ExportError, describe_import, load_bundle
    from cmr.store import open_store

    shown = progress.start("reading the bundle", unit="batches")
    try:
        try:
            bundle = load_bundle(args.file, read_input(args.file))
        except ExportError as exc:
            raise CliError(str(exc)) from None
        shown.phase("importing", total=len(bundle.entries))
        store = open_store(args.db)
        try:
            result = import_bundle(store, bundle, on_batch=shown.update)
            shown.phase("finishing: the repository's last writes")
        finally:
            store.close()
    finally:
        shown.close()
    emit(describe_import(result))
    return 0
