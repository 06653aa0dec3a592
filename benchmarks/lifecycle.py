"""``python -m benchmarks.lifecycle [--runs 20] [--pure]``: how processes start and stop under
``tracer run`` with the embedded repository (docs/reliability.md, "Processes started and
stopped"); ``--pure``: the programs traced in pure Python.

- gunicorn ``-w 2`` (and ``--max-requests 2``): 20 requests, the slowest, the seconds from SIGTERM
  to the master's exit, and the requests stored;
- the exit status of a program ended by SIGINT and by SIGTERM, under ``python`` and ``tracer run``;
- a ``multiprocessing`` spawn child serving HTTP (``ThreadingHTTPServer``, ``tracer.configure()``
  in its target) ended by ``Process.terminate()`` right after answering, ``--runs`` times: in how
  many runs its call is stored and its process ``ended``.

Not a case of ``python -m benchmarks``: it measures behaviour, not speed. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PATIENCE_S = 60.0

APP = """
def work(path):
    return path

def app(environ, start_response):
    body = work(environ["PATH_INFO"]).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""

WAITS = """
import select, sys

def main():
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], 0.1)[0]:
        pass

main()
"""

#: ``python spawnserver.py N``: N spawn children in a row, each terminated right after its
#: answer; prints the children's pids (tests/processes/test_run_lifecycle.py runs it too).
SPAWN_SERVER = """
import json, multiprocessing as mp, os, sys, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import tracer

@tracer.traced
def answer(path):
    return f"{os.getpid()} {path}".encode()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = answer(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

def serve(conn):
    tracer.configure()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    conn.send(server.server_address[1])
    server.serve_forever()

if __name__ == "__main__":
    context = mp.get_context("spawn")
    pids = []
    for run in range(int(sys.argv[1])):
        ours, theirs = context.Pipe()
        process = context.Process(target=serve, args=(theirs,))
        process.start()
        port = ours.recv()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/r{run}", timeout=60) as response:
            pids.append(int(response.read().split()[0]))
        process.terminate()  # right after the answer: the child's call is still to be sent
        process.join(60)
        assert process.exitcode == -15, process.exitcode
    print(json.dumps(pids), flush=True)
"""


#: The programs' hot path: ``--pure`` sets ``INVOSEQ_PURE=1`` here.
HOT_PATH: dict[str, str] = {}


def environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOSEQ_")}
    env.update(INVOSEQ_DB=str(folder / "cmr.sqlite"), INVOSEQ_SPOOL_DIR=str(folder / "spool"))
    env.update(HOT_PATH)
    return env


def tracer_run(*args: str) -> list[str]:
    return [sys.executable, "-m", "tracer", "run", "--no-report", *args]


def cmr_json(folder: Path, *args: str) -> Any:
    command = [sys.executable, "-m", "cmr", *args, "--db", str(folder / "cmr.sqlite"), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE_S, check=True)
    return json.loads(done.stdout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def gunicorn(folder: Path, *options: str, requests: int = 20) -> str:
    (folder / "app.py").write_text(APP)
    port = free_port()
    command = tracer_run("--include", "app", "-m", "gunicorn", "-w", "2", "--no-control-socket")
    command += ["-b", f"127.0.0.1:{port}", *options, "app:app"]
    with (folder / "gunicorn.log").open("w") as log:
        master = subprocess.Popen(command, cwd=folder, env=environment(folder), stderr=log)
    try:
        deadline = time.monotonic() + PATIENCE_S
        while (folder / "gunicorn.log").read_text().count("Booting worker") < 2:
            if master.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start: " + str(folder / "gunicorn.log"))
            time.sleep(0.05)
        slowest = 0.0
        for n in range(requests):
            began = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/r{n}", timeout=PATIENCE_S) as r:
                r.read()
            slowest = max(slowest, time.monotonic() - began)
        began = time.monotonic()
        master.send_signal(signal.SIGTERM)
        code = master.wait(PATIENCE_S)
        stopped = time.monotonic() - began
    finally:
        if master.poll() is None:
            master.kill()
            master.wait(PATIENCE_S)
    stored = len(cmr_json(folder, "ls", "--limit", "1000"))
    return (
        f"gunicorn -w 2 {' '.join(options) or '(plain)'}: slowest request {slowest:.2f} s, "
        f"stopped {stopped:.2f} s after SIGTERM (exit {code}), {stored}/{requests} requests stored"
    )


def signalled(folder: Path, signum: signal.Signals) -> str:
    (folder / "waits.py").write_text(WAITS)
    statuses = []
    for command in ([sys.executable, "waits.py"], tracer_run("waits.py")):
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=environment(folder),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        process.send_signal(signum)
        process.communicate(timeout=PATIENCE_S)
        statuses.append(process.returncode)
    return f"{signum.name}: python exits {statuses[0]}, tracer run {statuses[1]}"


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["children"]:
        yield from nodes(child)


def spawn_server(folder: Path) -> tuple[bool, str]:
    """One run: whether the child's call was stored, and its process's state."""
    (folder / "spawnserver.py").write_text(SPAWN_SERVER)
    done = subprocess.run(
        tracer_run("spawnserver.py", "1"),
        cwd=folder,
        env=environment(folder),
        capture_output=True,
        text=True,
        timeout=PATIENCE_S * 2,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"spawnserver.py failed: {done.stderr}")
    [child] = json.loads(done.stdout)
    states = {p["pid"]: p["state"] for p in cmr_json(folder, "stats")["processes"]}
    for summary in cmr_json(folder, "ls", "--limit", "1000"):
        root = cmr_json(folder, "show", summary["seq"])["root"]
        if any(
            node["name"].endswith("answer") and node["process"]["pid"] == child
            for node in nodes(root)
        ):
            return True, states.get(child, "unknown")
    return False, states.get(child, "unknown")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lifecycle")
    parser.add_argument("--runs", type=int, default=20, help="spawn-server runs (default 20)")
    parser.add_argument(
        "--pure", action="store_true", help="the programs traced in pure Python (INVOSEQ_PURE=1)"
    )
    options = parser.parse_args(argv)
    if options.pure:
        HOT_PATH["INVOSEQ_PURE"] = "1"
    with tempfile.TemporaryDirectory(prefix="invoseq-lifecycle-") as top:
        base = Path(top)
        for n, gunicorn_options in enumerate([(), ("--max-requests", "2")]):
            (base / f"g{n}").mkdir()
            print(gunicorn(base / f"g{n}", *gunicorn_options), flush=True)
        for signum in (signal.SIGINT, signal.SIGTERM):
            (base / signum.name).mkdir()
            print(signalled(base / signum.name, signum), flush=True)
        outcomes = []
        for n in range(options.runs):
            (base / f"s{n}").mkdir()
            outcomes.append(spawn_server(base / f"s{n}"))
        kept = sum(stored for stored, _ in outcomes)
        states = sorted({state for _, state in outcomes})
        print(
            f"spawn child serving HTTP, terminate() after answering: its call stored in "
            f"{kept}/{options.runs} runs; its process {', '.join(states)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
