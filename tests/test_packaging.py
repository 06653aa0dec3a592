"""What an install from a source distribution needs beyond the Python modules: the C headers the
accelerators include (MANIFEST.in), and the type stubs of the C modules (package data). Without a
header the extension does not build, and the install falls back to pure Python without a word."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tracer", "cmr")


def test_every_c_header_goes_into_the_source_distribution() -> None:
    patterns = [
        pattern
        for line in (ROOT / "MANIFEST.in").read_text().splitlines()
        if line.startswith("include ")
        for pattern in line.split()[1:]
    ]
    headers = [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.h"))
    ]
    assert headers, "the accelerators have headers"
    # As MANIFEST.in reads a pattern: "*" stops at a "/" (tracer/*.h is no header of a subpackage).
    included = {path.relative_to(ROOT).as_posix() for p in patterns for path in ROOT.glob(p)}
    missing = [h for h in headers if h not in included]
    assert not missing, f"MANIFEST.in leaves out {missing}"


def test_every_type_stub_is_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = data["package-data"]
    for package in PACKAGES:
        stubs = [p.relative_to(ROOT / package).as_posix() for p in (ROOT / package).rglob("*.pyi")]
        missing = [
            stub
            for stub in stubs
            if not any(fnmatch.fnmatch(stub, pattern) for pattern in shipped.get(package, []))
        ]
        assert not missing, f"pyproject.toml's package-data leaves out {package}: {missing}"
