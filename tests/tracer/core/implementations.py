"""What the tests of the two hot-path implementations share: whether the C accelerator is built
and active, and running a script under either."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tracer._core import decorator

try:
    _speedups: Any = importlib.import_module("tracer._core._speedups")
except ImportError:
    _speedups = None

C_ACTIVE = decorator.IMPLEMENTATION == "c"
needs_c_build = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")
needs_c_path = pytest.mark.skipif(not C_ACTIVE, reason="the suite runs the pure-Python path")


def run_completed(
    script: Path, *, pure: bool, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``script`` run on the implementation ``pure`` says, to a 0 exit: its output and errors."""
    env = {k: v for k, v in os.environ.items() if k != "INVOSEQ_PURE"}
    if pure:
        env["INVOSEQ_PURE"] = "1"
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def run(script: Path, *, pure: bool, timeout: float = 120) -> str:
    return run_completed(script, pure=pure, timeout=timeout).stdout


#: Program text for a traced subprocess (after ``import msgspec`` and ``from tracer import
#: _runtime as runtime, wire``): the batches it sends go, hex, into ``bodies``, each acknowledged
#: at once, instead of over ZeroMQ; installed through the runtime's transport hook.
RAW_TRANSPORT = """
bodies = []

class RawTransport:
    def __init__(self):
        self.acks = []
    def send(self, body):
        bodies.append(body.hex())
        puid, batch_no = (msgspec.msgpack.decode(raw) for raw in
                          msgspec.msgpack.decode(body, type=list[msgspec.Raw])[:2])
        self.acks.append(wire.Ack(puid, batch_no))
        return True
    def receive_acks(self, timeout_ms):
        acks, self.acks = self.acks, []
        return acks
    def close(self):
        pass

runtime.set_transport_factory(lambda config: RawTransport())
"""
