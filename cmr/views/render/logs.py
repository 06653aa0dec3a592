"""The log records a call carries, as lines of their own (for the text renderer).

The tracer records a program's log records at WARNING and above on the invocation that made them
(``tracer._patching.logs``), as attributes: ``log.0``, ``log.1``, … in order, each valued
``"WARNING app.pricing: stock low for apple"``, and ``log.dropped``, how many more there were past
its bound. They stay in the attributes (``--json``, the HTML report's own reading of them in
``cmr/report/static/app.js``); ``cmr show`` draws them under their call::

    ├─ 3.10 ms  app.price  MainThread (1)
    │     ⚠ WARNING app.pricing: stock low for apple
"""

from __future__ import annotations

from typing import Final

from cmr.views.render.terms import printable

#: The keys the tracer writes: ``log.<n>``, and the count of the records past its bound.
PREFIX: Final = "log."
DROPPED: Final = "log.dropped"
MARK: Final = "⚠"
#: Levels drawn in red (the rest of a record's line is yellow).
SEVERE: Final = ("ERROR", "CRITICAL")

#: A record's line breaks (a traceback's) show as ⏎, its tabs as spaces; any other control
#: character is escaped (``terms.printable``), as everywhere else.
_LINES: Final = str.maketrans({9: " ", 10: " \N{RETURN SYMBOL} ", 13: ""})


def is_log_key(key: str) -> bool:
    """Whether an attribute is one of the log records the tracer wrote (or their drop count)."""
    index = key[len(PREFIX) :]
    return key == DROPPED or (
        key.startswith(PREFIX) and index.isascii() and index.isdigit() and len(index) < 10
    )


def log_lines(attributes: dict[str, str | int | float | bool]) -> list[str]:
    """The call's log records in the order they were made, ``⚠ WARNING app.pricing: stock low``,
    then ``… 12 more log records dropped`` when the tracer dropped some; [] for none."""
    records = sorted(
        (int(key[len(PREFIX) :]), str(value))
        for key, value in attributes.items()
        if key != DROPPED and is_log_key(key)
    )
    lines = [f"{MARK} {printable(text.translate(_LINES))}" for _, text in records]
    dropped = attributes.get(DROPPED)
    if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped > 0:
        noun = "record" if dropped == 1 else "records"
        lines.append(f"… {dropped:,} more log {noun} dropped")
    return lines


def severe(line: str) -> bool:
    """Whether a line of ``log_lines`` is a record at ERROR or above."""
    return line.startswith(tuple(f"{MARK} {level} " for level in SEVERE))
