"""``cmr ui``: serve the sequence list and the sequence view to a browser on this machine.

The web server itself (``cmr.ui``) is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import errno
import functools

from cmr.cli.common import DB_HELP, CliError, Commands, command, open_for_reading
from cmr.defaults import DEFAULT_UI_PORT, UI_HOST
from cmr.store import default_db_path


def add_ui(commands: Commands) -> None:
    parser = command(
        commands,
        "ui",
        description=(
            "Serve a web page on 127.0.0.1 that lists the most recent sequences, filtered by a "
            "method they called, their duration and their status, and opens each one in the "
            "same view as 'cmr report'. Above the list, a scatter of the listed sequences (start "
            "time by duration; click a mark to open it, drag a box to filter by it) and a "
            "histogram of their durations with p50, p90 and p99. A sequence that is still "
            "running updates live as its calls arrive. Its map page (/map, linked from the list) "
            "draws 'cmr map' over the sequences the list's filters select. Prints the address to "
            "open on one line, then serves until Ctrl-C. "
            "It listens on the loopback address only and reads the repository without ever "
            "writing to it, so it can run next to 'cmr serve'. The same data is there as JSON: "
            "/api/sequences?method=&min_ms=&max_ms=&status=&limit=, /api/map?... and "
            "/api/seq/SEQ/model."
        ),
        examples=[
            "cmr ui                     # then open http://127.0.0.1:8765/",
            "cmr ui --port 9000",
            "cmr ui --port 0            # any free port: read the address it prints",
            "cmr --db /tmp/shop.sqlite ui",
        ],
        handler=_ui,
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_UI_PORT,
        metavar="N",
        help=f"TCP port on {UI_HOST} (default: {DEFAULT_UI_PORT}; 0: any free port)",
    )
    parser.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=DB_HELP)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got '{text}'") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {value}")
    return value


def _ui(args: argparse.Namespace) -> int:
    from cmr.ui import HOST, UIServer, serve

    open_for_reading(args.db).close()  # a wrong path fails now, in one line, not on each page
    opener = functools.partial(open_for_reading, args.db)
    try:
        server = UIServer(args.port, opener, args.db or default_db_path())
    except OSError as exc:
        hint = " (choose another --port, or 0 for any free one)"
        reason = exc.strerror or str(exc)
        suffix = hint if exc.errno in {errno.EADDRINUSE, errno.EACCES} else ""
        raise CliError(f"cannot listen on {HOST}:{args.port}: {reason}{suffix}") from None
    serve(server)
    return 0
