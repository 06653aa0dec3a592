"""The real program ``benchmarks/real.py`` runs bare, under ``tracer run`` and under VizTracer:
sqlparse (Django's SQL formatter, pure Python) formats the same SQL script pass after pass. Its
lexer and filters are generators, its grouping walks token lists with methods and keyword calls:
about 150 k traced calls a pass.

Each pass is timed from inside, so start-up and the tool's report at exit are left out: its wall
time and the CPU time of the whole process (every thread: the tracer's sender and sampler too).
Under the tracer the program reads ``tracer.stats()`` after its passes and a flush: the events
sent and dropped. ``"count": true`` counts instead the calls a profile function sees in
sqlparse's files (function calls and generator resumes: VizTracer's entries), in one pass;
``"floor": N`` what the interpreter alone adds to a traced call when it tells a tool of it
(no-op hooks), over N rounds (``benchmarks.real_floor``).

``python -m benchmarks.real_program '{"passes": 5, "statements": 12}'``
"""

from __future__ import annotations

import os
import sys
import time
from types import FrameType
from typing import Any

import sqlparse

from benchmarks.processes import report_result, sent_and_dropped, worker_params

#: One statement of the script: joins, a subquery, CASE, functions, literals and comments.
STATEMENT = """-- monthly revenue by region
SELECT r.name AS region, date_trunc('month', o.created_at) AS month,
       count(DISTINCT o.id) AS orders, sum(i.quantity * i.unit_price) AS revenue,
       CASE WHEN sum(i.quantity) > 100 THEN 'bulk' ELSE 'retail' END AS kind
FROM orders o JOIN customers c ON c.id = o.customer_id
LEFT OUTER JOIN regions r ON r.id = c.region_id
JOIN order_items i ON i.order_id = o.id
WHERE o.status IN ('paid', 'shipped') AND o.created_at >= '2024-01-01'
  AND c.id NOT IN (SELECT customer_id FROM blocked WHERE reason <> 'test')
GROUP BY r.name, month HAVING count(*) > 3 ORDER BY revenue DESC, region LIMIT 50;
"""


def script(statements: int) -> str:
    return STATEMENT * statements


def format_once(text: str) -> str:
    formatted: str = sqlparse.format(
        text, reindent=True, keyword_case="upper", identifier_case="lower", strip_comments=True
    )
    return formatted


def count_entries(text: str) -> int:
    """Calls and generator resumes of sqlparse's code in one pass, as a profile function sees
    them (VizTracer records each as an entry)."""
    package = os.path.dirname(sqlparse.__file__)
    entries = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal entries
        if event == "call" and frame.f_code.co_filename.startswith(package):
            entries += 1

    sys.setprofile(profile)
    try:
        format_once(text)
    finally:
        sys.setprofile(None)
    return entries


def main() -> None:
    params = worker_params()
    text = script(params["statements"])
    if params.get("count"):
        report_result({"entries": count_entries(text)})
        return
    if params.get("floor"):  # telling a tool, with no-op hooks (benchmarks/real_floor.py)
        from benchmarks.real_floor import floor

        report_result(floor(params["statements"], params["floor"]))
        return
    passes: list[float] = []
    passes_cpu: list[float] = []
    for _ in range(params["passes"]):
        started, started_cpu = time.perf_counter(), time.process_time()
        format_once(text)
        passes_cpu.append(time.process_time() - started_cpu)
        passes.append(time.perf_counter() - started)
    result: dict[str, Any] = {"passes_s": passes, "passes_cpu_s": passes_cpu}
    if params.get("stats", True):  # under tracer run: what was sent
        result.update(sent_and_dropped())
    report_result(result)


if __name__ == "__main__":
    main()
