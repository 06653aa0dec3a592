"""``cmr ui``'s web server: the sequence list and the sequence view, on 127.0.0.1 only.

Routes (GET only):

- ``/`` — the list page, filtered by the query (see ``cmr.ui.query``);
- ``/api/sequences?root=&method=&min_ms=&max_ms=&status=&since=&until=&host=&sort=&limit=`` —
  the same selection as JSON, in the shape of ``cmr ls --json``;
- ``/top?since=&root=&by=`` — ``cmr top``'s table (``cmr.ui.top``), and ``/api/top`` its JSON;
- ``/map?<the list's parameters>`` — ``cmr map`` drawn (``cmr.ui.map``), and ``/api/map`` its
  JSON;
- ``/seq/<hex>`` — the view of one sequence (``cmr.report``), which polls the next route while
  the sequence runs;
- ``/api/seq/<hex>/model`` — the view's model of one sequence as JSON.

``<hex>`` is a sequence id or any unambiguous prefix of one. A mistake in a request is a short
plain-text 400 or 404, never a traceback. The repository is opened read-only for each request:
a store serves one thread at a time, requests arrive on many, and a fresh read sees what
``cmr serve`` stored a moment ago. Requests must name this server in their Host header (or name
none): a web page elsewhere cannot read the repository by pointing a name of its own at
127.0.0.1 (DNS rebinding).
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import msgspec

from cmr.defaults import READY_PREFIX, UI_HOST
from cmr.store.base import (
    AmbiguousSequenceError,
    SequenceData,
    Store,
    StoreError,
    UnknownSequenceError,
)
from cmr.ui.listing import render_list_page, sequence_path
from cmr.ui.query import QueryError, SequenceFilter, parse_filter, select_sequences
from cmr.ui.top import TopQuery, parse_top, render_top_page, top_rows
from cmr.views.render.json import summary_fields, top_fields
from cmr.views.render.terms import printable
from cmr.views.tree.hops import fold_empty_hops

#: The only address the UI listens on: the repository holds what the traced programs did.
HOST: Final = UI_HOST

#: Pages may run their inline code and talk to this server; they load nothing from elsewhere.
_CSP: Final = (
    "default-src 'self' 'unsafe-inline' data: blob:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_SEQ_VIEW: Final = re.compile(r"^/seq/([^/]+)$")
_SEQ_MODEL: Final = re.compile(r"^/api/seq/([^/]+)/model$")
_MAX_QUERY_FIELDS: Final = 20
_encode = msgspec.json.Encoder().encode

StoreOpener = Callable[[], Store]


class _RequestError(Exception):
    """Ends a request early with a plain-text status and message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class UIServer(ThreadingHTTPServer):
    """One thread per request; each opens the repository with ``open_store`` and closes it."""

    # A request still being read or answered (a browser holding a connection open) must not
    # hold up a stop: its thread is a daemon, and closing the server does not join it.
    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        port: int,
        open_store: StoreOpener,
        repository: str,
        *,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.open_store = open_store
        self.repository = repository
        self.clock = clock
        super().__init__((HOST, port), _Handler)
        self.port: int = self.server_address[1]
        self.allowed_hosts = frozenset(
            {HOST, "localhost", f"{HOST}:{self.port}", f"localhost:{self.port}"}
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection that failed below HTTP (the browser left, the server is stopping) is
        nobody's mistake; anything else is one line on stderr, not a traceback."""
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, OSError):
            print(f"cmr: ui: {type(error).__name__}: {printable(str(error))}", file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    server: UIServer
    server_version = "invoseq-ui"
    sys_version = ""
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"

    def do_GET(self) -> None:
        try:
            self._check_host()
            self._route()
        except _RequestError as failure:
            self._send(failure.status, f"{failure}\n".encode(), "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away: nobody to answer
        except StoreError as exc:  # the repository itself failed (moved, corrupt, locked)
            self._send_quietly(HTTPStatus.SERVICE_UNAVAILABLE, f"repository: {exc}")
        except Exception as exc:  # a bug: one line here and there, not a traceback page
            # the path came from the request, the message may quote what a sender wrote
            where = printable(f"{self.path}: {type(exc).__name__}: {exc}")
            print(f"cmr: ui: {where}", file=sys.stderr)
            self._send_quietly(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {exc}")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a live page asks every 2 s, and the terminal is for the ready line."""

    def _check_host(self) -> None:
        host = self.headers.get("Host")
        if host is not None and host.lower() not in self.server.allowed_hosts:
            raise _RequestError(
                HTTPStatus.FORBIDDEN, f"unexpected Host header: open {self.server.url} instead"
            )

    def _route(self) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path == "/":
            self._list_page(parts.query)
        elif path == "/api/sequences":
            self._list_json(parts.query)
        elif path == "/top":
            self._top_page(parts.query)
        elif path == "/api/top":
            self._top_json(parts.query)
        elif path in ("/map", "/api/map"):
            self._map(parts.query, page=path == "/map")
        elif match := _SEQ_VIEW.match(path):
            self._sequence_page(match.group(1))
        elif match := _SEQ_MODEL.match(path):
            self._model_json(match.group(1))
        else:
            raise _RequestError(HTTPStatus.NOT_FOUND, f"no page {path} (the sequence list is at /)")

    def _list_page(self, query: str) -> None:
        now_ns = self.server.clock()
        try:
            wanted = parse_filter(_parse_query(query))
        except QueryError as exc:
            page = render_list_page(
                [],
                SequenceFilter(),
                repository=self.server.repository,
                now_ns=now_ns,
                error=str(exc),
            )
            self._send_html(HTTPStatus.BAD_REQUEST, page)
            return
        with self._store() as store:
            summaries = select_sequences(store, wanted, now_ns)
            short_ids = store.short_ids([summary.seq for summary in summaries])
        page = render_list_page(
            summaries,
            wanted,
            repository=self.server.repository,
            now_ns=now_ns,
            short_ids=short_ids,
        )
        self._send_html(HTTPStatus.OK, page)

    def _list_json(self, query: str) -> None:
        try:
            wanted = parse_filter(_parse_query(query))
        except QueryError as exc:
            raise _RequestError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        with self._store() as store:
            summaries = select_sequences(store, wanted, self.server.clock())
        self._send_json([summary_fields(summary) for summary in summaries])

    def _top_page(self, query: str) -> None:
        try:
            wanted = parse_top(_parse_query(query))
        except QueryError as exc:
            page = render_top_page(
                [], TopQuery(), repository=self.server.repository, error=str(exc)
            )
            self._send_html(HTTPStatus.BAD_REQUEST, page)
            return
        with self._store() as store:
            rows = top_rows(store, wanted, self.server.clock())
        self._send_html(
            HTTPStatus.OK, render_top_page(rows, wanted, repository=self.server.repository)
        )

    def _top_json(self, query: str) -> None:
        try:
            wanted = parse_top(_parse_query(query))
        except QueryError as exc:
            raise _RequestError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        with self._store() as store:
            rows = top_rows(store, wanted, self.server.clock())
        self._send_json(top_fields(rows, with_self=wanted.by == "method"))

    def _map(self, query: str, *, page: bool) -> None:
        from cmr.ui.map import map_of, parse_map, render_map_page
        from cmr.views.analyses.services import map_fields

        now_ns = self.server.clock()
        repository = self.server.repository
        try:
            wanted = parse_map(_parse_query(query))
        except QueryError as exc:
            if not page:
                raise _RequestError(HTTPStatus.BAD_REQUEST, str(exc)) from None
            failed = render_map_page(
                None, SequenceFilter(), repository=repository, now_ns=now_ns, error=str(exc)
            )
            self._send_html(HTTPStatus.BAD_REQUEST, failed)
            return
        with self._store() as store:
            found = map_of(store, wanted, now_ns)
        if page:
            shown = render_map_page(found, wanted, repository=repository, now_ns=now_ns)
            self._send_html(HTTPStatus.OK, shown)
        else:
            self._send_json(map_fields(found))

    def _sequence_page(self, prefix: str) -> None:
        from cmr.report import build_model, render_page  # the list pages never need it

        data = self._load(prefix)
        live_url = f"/api{sequence_path(data.seq)}/model"
        self._send_html(HTTPStatus.OK, render_page(build_model(data), live_url=live_url))

    def _model_json(self, prefix: str) -> None:
        from cmr.report import build_model

        data = self._load(prefix)
        self._send_json(build_model(data))

    def _load(self, prefix: str) -> SequenceData:
        try:
            with self._store() as store:
                return fold_empty_hops(store.load_sequence(store.resolve_sequence(prefix)))
        except (UnknownSequenceError, AmbiguousSequenceError) as exc:
            raise _RequestError(HTTPStatus.NOT_FOUND, str(exc)) from None

    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        store = self.server.open_store()
        try:
            yield store
        finally:
            store.close()

    def _send_html(self, status: HTTPStatus, page: str) -> None:
        self._send(status, page.encode(), "text/html; charset=utf-8")

    def _send_json(self, document: object) -> None:
        self._send(HTTPStatus.OK, _encode(document), "application/json")

    def _send_quietly(self, status: HTTPStatus, message: str) -> None:
        with contextlib.suppress(OSError):
            self._send(status, f"{message}\n".encode(), "text/plain; charset=utf-8")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", _CSP)
        self.end_headers()
        self.wfile.write(body)


def _parse_query(query: str) -> dict[str, list[str]]:
    try:
        return parse_qs(query, keep_blank_values=True, max_num_fields=_MAX_QUERY_FIELDS)
    except ValueError:
        raise QueryError(f"too many query parameters (at most {_MAX_QUERY_FIELDS})") from None


class _StopRequested(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM, out of the accept loop. A BaseException,
    like KeyboardInterrupt: the loop handles an ``Exception`` while it starts a request's thread
    and goes on serving."""


def serve(server: UIServer) -> None:
    """Serve until SIGINT or SIGTERM, printing the ready line first; then close the server.

    The accept loop runs on the main thread and a signal's handler raises out of it, as
    ``python -m http.server`` stops on Ctrl-C: nothing to poll, and no lock shared with a
    handler that could interrupt its holder. Requests run on daemon threads of their own, so a
    stop never waits for one."""
    signals = (signal.SIGINT, signal.SIGTERM)
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in signals:
            previous[sig] = signal.signal(sig, _request_stop)
        print(f"{READY_PREFIX}{server.url}", flush=True)
        server.serve_forever()
    except _StopRequested:
        pass
    finally:
        for sig, handler in previous.items():  # a second Ctrl-C now acts as usual
            signal.signal(sig, handler)
        server.server_close()


def _request_stop(signum: int, frame: types.FrameType | None) -> None:
    raise _StopRequested
