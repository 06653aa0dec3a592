"""What the numbers were measured on, and how busy it was: a result is only read beside this.

The load average and the CPU time the rest of the machine took (``/proc/stat`` between the start
and the end of the run) say whether other work competed with the benchmark; steal time says
whether the hypervisor did.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import platform
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent


def _first_line(path: str, key: str) -> str:
    with contextlib.suppress(OSError), open(path) as file:
        for line in file:
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    return ""


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str:
    """Read-only git queries (the commit measured and whether the tree had local changes)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPOSITORY, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def cpu_times() -> dict[str, int]:
    """Cumulative CPU ticks of the whole machine (``/proc/stat``), empty where unavailable."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    with contextlib.suppress(OSError, ValueError), open("/proc/stat") as file:
        values = [int(v) for v in file.readline().split()[1:9]]
        return dict(zip(names, values, strict=False))
    return {}


def busy_share(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """Shares of all CPUs' time between two ``cpu_times`` readings: busy (ours and everyone
    else's) and stolen by the hypervisor."""
    if not before or not after:
        return {}
    delta = {k: after[k] - before.get(k, 0) for k in after}
    total = sum(delta.values()) or 1
    idle = delta.get("idle", 0) + delta.get("iowait", 0)
    return {
        "busy_pct": 100 * (total - idle) / total,
        "steal_pct": 100 * delta.get("steal", 0) / total,
    }


def loadavg() -> list[float]:
    with contextlib.suppress(OSError):
        return [round(v, 2) for v in os.getloadavg()]
    return []


def accelerator() -> dict[str, Any]:
    """Whether the C accelerator of the hot path is built here (``tracer._core._speedups``)."""
    found = importlib.util.find_spec("tracer._core._speedups") is not None
    return {"module": "tracer._core._speedups", "importable": found}


def record() -> dict[str, Any]:
    """The machine, the software and the commit, as the JSON file and docs/performance.md show."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 0
    memory_kb = _first_line("/proc/meminfo", "MemTotal").split(" ")[0]
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _first_line("/proc/cpuinfo", "model name") or platform.processor(),
        "cpu_mhz": _first_line("/proc/cpuinfo", "cpu MHz"),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memory_mib": int(memory_kb) // 1024 if memory_kb.isdigit() else None,
        "libraries": {
            "msgspec": _version("msgspec"),
            "pyzmq": _version("pyzmq"),
            "libzmq": _libzmq(),
            "sqlite": sqlite3.sqlite_version,
            "opentelemetry-sdk": _version("opentelemetry-sdk"),
            "viztracer": _version("viztracer"),
        },
        "accelerator": accelerator(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "local_changes": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }


def _libzmq() -> str | None:
    try:
        import zmq
    except ImportError:
        return None
    return str(zmq.zmq_version())
