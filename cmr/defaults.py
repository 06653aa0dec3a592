"""The repository side's defaults and fixed strings, each written once: where ``cmr serve``
listens, which database it opens, the port of ``cmr ui``, and the line a server prints once it
listens (``tracer run``, tests and benchmarks wait for it).
"""

from __future__ import annotations

from invoseq import DEFAULT_ENDPOINT

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "DB_ENV",
    "DEFAULT_DB_PATH",
    "DEFAULT_ENDPOINT",
    "DEFAULT_UI_PORT",
    "READY_PREFIX",
    "UI_HOST",
    "needs_extra",
]

#: Environment variable naming the repository when no ``--db`` is given.
DB_ENV: Final = "INVOSEQ_DB"
#: The repository used when neither ``--db`` nor INVOSEQ_DB is given (relative to the cwd).
DEFAULT_DB_PATH: Final = "./.invoseq/cmr.sqlite"
#: ``cmr ui`` listens on this machine only, on this port unless ``--port`` says otherwise.
UI_HOST: Final = "127.0.0.1"
DEFAULT_UI_PORT: Final = 8765
#: The first line ``cmr serve`` (and ``python -m cmr.server``) and ``cmr ui`` print, followed by
#: the endpoint or URL they listen on.
READY_PREFIX: Final = "cmr: listening on "


def needs_extra(what: str, extra: str) -> str:
    """The one line a command prints when ``what`` needs an extra that is not installed."""
    return f"{what} needs the {extra} extra: pip install 'invoseq[{extra}]'"
