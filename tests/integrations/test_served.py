"""What every server integration shares (``_served.Served``): a request's invocation ends once,
whichever thread finishes it first (a server's response-closing thread and the request's own
may both try)."""

from __future__ import annotations

import sys
import threading
from collections import Counter

from invoseq import wire
from tracer._patching.integrations import _served, wsgi
from tracer.testing import capture

#: Requests, each finished by THREADS threads released together.
REQUESTS = 200
THREADS = 4
TIMEOUT_S = 30.0


def test_a_request_finished_by_several_threads_at_once_ends_once() -> None:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        with capture(sample_interval_ms=0) as trace:
            for number in range(REQUESTS):
                environ = {"REQUEST_METHOD": "GET", "PATH_INFO": f"/r{number}"}
                served = _served.begin(environ, "wsgi", "GET", f"/r{number}", wsgi.ENVIRON)
                assert served is not None
                served.name("wsgi", f"/r{number}")
                served.status = 200
                barrier = threading.Barrier(THREADS, timeout=TIMEOUT_S)

                def finish(
                    served: _served.Served = served, barrier: threading.Barrier = barrier
                ) -> None:
                    barrier.wait()
                    served.finish()

                threads = [threading.Thread(target=finish) for _ in range(THREADS)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(TIMEOUT_S)
                    assert not thread.is_alive()
            trace.flush()
            ends = Counter(
                event.iid
                for batch in trace.batches
                for chunk in batch.chunks
                for event in chunk.events
                if isinstance(event, wire.End | wire.Error)
            )
            starts = [i for i in trace.invocations() if i.name.startswith("wsgi.GET")]
    finally:
        sys.setswitchinterval(previous)
    assert len(starts) == REQUESTS
    assert all(invocation.status == "ok" for invocation in starts)
    # each request ends once (another test's thread may end a call of its own meanwhile)
    assert [ends[invocation.iid] for invocation in starts] == [1] * REQUESTS
