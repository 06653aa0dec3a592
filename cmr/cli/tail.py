"""``cmr tail``: each sequence as it completes, one line like ``cmr ls``'s, until interrupted."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Final

from cmr.cli.common import (
    Commands,
    add_read_options,
    command,
    open_for_reading,
)
from cmr.cli.ls import add_kind_option, add_min_duration_option, add_root_option
from cmr.store.base import KIND_REQUEST, SequenceQuery, SequenceSummary, Store
from cmr.views.render import json as json_render
from cmr.views.render.tables import SEQUENCE_HEADER, fixed_line, sequence_cells

#: How often the repository is asked for sequences that completed.
POLL_S: Final = 0.5
#: How long a sequence may run and still be reported when it completes: each poll reads the
#: listing lines of the sequences that started this long ago or since.
LOOKBACK_NS: Final = 10 * 60 * 1_000_000_000
#: Listing lines read per poll at most (the newest): more completing in one poll is a flood.
PER_POLL: Final = 5_000


def add_tail(commands: Commands) -> None:
    parser = command(
        commands,
        "tail",
        description=(
            "Follow the repository: print each sequence as it completes (or can no longer "
            "complete: incomplete), one line like 'cmr ls' prints, until interrupted (Ctrl-C "
            "ends it with exit code 0). Sequences that completed before it started are not "
            "printed; a sequence is followed for 10 minutes from its start (one that runs "
            "longer is not printed when it ends: 'cmr ls' finds it). With --json, one JSON "
            "object per line, as 'cmr ls --json' writes them (and a line on stderr once it "
            "follows)."
        ),
        examples=[
            "cmr tail",
            "cmr tail --root 'shop.*' --min-duration 500",
            "cmr tail --json | jq -c 'select(.error != null)'",
        ],
        handler=_tail,
    )
    add_kind_option(parser)
    add_root_option(parser)
    add_min_duration_option(parser)
    add_read_options(parser)


def _tail(args: argparse.Namespace) -> int:
    store = open_for_reading(args.db)
    try:
        follow(store, args.root, args.min_duration_ns, as_json=args.json, kind=args.kind)
    except KeyboardInterrupt:  # Ctrl-C is how a user ends it
        pass
    finally:
        store.close()
    return 0


def follow(
    store: Store,
    root: str | None,
    min_duration_ns: int | None,
    *,
    as_json: bool,
    stop: threading.Event | None = None,
    kind: str = KIND_REQUEST,
) -> None:
    """Print the sequences that complete from now on until ``stop`` is set (or forever)."""
    seen: dict[bytes, int] = {}  # seq -> start: completed, printed or there before we started
    waiting = stop if stop is not None else threading.Event()
    first = True
    while True:
        since = time.time_ns() - LOOKBACK_NS
        query = SequenceQuery(root=root, min_duration_ns=min_duration_ns, since_ns=since, kind=kind)
        news = []
        for line in reversed(store.list_sequences(PER_POLL, query)):  # oldest first
            if line.status == "running" or line.seq in seen:
                continue
            seen[line.seq] = line.start_ns
            if not first:
                news.append(line)
        short_ids = store.short_ids([line.seq for line in news]) if news and not as_json else {}
        for line in news:
            _print(_line(line, short_ids.get(line.seq), as_json=as_json))
        if first:  # after the first look: what completes from now on is news
            if as_json:  # stdout stays JSON lines: say it on stderr
                print("cmr: following; Ctrl-C ends it", file=sys.stderr, flush=True)
            else:
                _print(fixed_line(SEQUENCE_HEADER))
        first = False
        for seq in [seq for seq, start in seen.items() if start < since]:
            del seen[seq]  # out of the window: it cannot come back
        if waiting.wait(POLL_S):
            return


def _line(line: SequenceSummary, short_id: str | None, *, as_json: bool) -> str:
    """The sequence's line; ``short_id``: its prefix unique in the repository as of now."""
    if as_json:
        return json_render.summary_to_json(line)
    return fixed_line(sequence_cells(line, short_id))


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
