"""Which modules ``tracer run`` traces: the include patterns, and what counts as external code.

More in docs/architecture.md, "tracer/run/patterns.py".
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterable
from types import ModuleType
from typing import Final

__all__ = ["IncludePatterns", "Verdict", "is_external", "module_origin", "parse_patterns"]

_WILDCARD_CHARS: Final = frozenset("*?[")
_OWN_PACKAGE: Final = "tracer"
_PATTERN_CHARS: Final = re.compile(r"[\w.*?\[\]!-]+")


class Verdict(enum.Enum):
    NO = 0
    YES = 1
    UNLESS_EXTERNAL = 2  # matched by a wildcard: only when the module is not stdlib/site-packages


class IncludePatterns:
    """Module-name globs, compiled once (the rules are in this module's docstring)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(pattern for pattern in patterns if pattern)
        self._exact: set[str] = set()
        self._packages: list[str] = []
        globs: list[str] = []
        for pattern in self.patterns:
            stem = pattern.removesuffix(".*")
            if not _WILDCARD_CHARS.intersection(stem):
                if stem == pattern:
                    self._exact.add(stem)
                else:
                    self._packages.append(stem)
            else:
                globs.append(fnmatch.translate(pattern))
                if stem != pattern:
                    globs.append(fnmatch.translate(stem))
        self._glob = re.compile("|".join(globs)) if globs else None

    def __repr__(self) -> str:
        return f"IncludePatterns({list(self.patterns)!r})"

    def matches(self, name: str, *, external: bool = False) -> bool:
        """Whether module ``name`` is to be traced; ``external``: it lives in the standard
        library or a site-packages directory."""
        verdict = self.verdict(name)
        return verdict is Verdict.YES or (verdict is Verdict.UNLESS_EXTERNAL and not external)

    def verdict(self, name: str) -> Verdict:
        if name == _OWN_PACKAGE or name.startswith(_OWN_PACKAGE + "."):
            return Verdict.NO
        if name in self._exact or any(
            name == package or name.startswith(package + ".") for package in self._packages
        ):
            return Verdict.YES
        if self._glob is not None and self._glob.match(name):
            return Verdict.UNLESS_EXTERNAL
        return Verdict.NO


def parse_patterns(values: Iterable[str]) -> tuple[str, ...]:
    """Patterns a user typed: each value may hold several, separated by commas.

    Raises ValueError, with a one-line message, for something that is not a module-name pattern
    (a file path, say)."""
    patterns: list[str] = []
    for value in values:
        for raw in value.split(","):
            pattern = raw.strip()
            if not pattern:
                raise ValueError(f"empty include pattern in {value!r}")
            if "/" in pattern or "\\" in pattern or pattern.endswith(".py"):
                raise ValueError(
                    f"include pattern {pattern!r} looks like a file: patterns match dotted module "
                    "names, like 'shop' or 'shop.*'"
                )
            if not _PATTERN_CHARS.fullmatch(pattern):
                raise ValueError(
                    f"include pattern {pattern!r} is not a dotted module name or glob, like "
                    "'shop' or 'shop.*'"
                )
            patterns.append(pattern)
    return tuple(patterns)


# -- where a module lives ---------------------------------------------------------------------


@functools.cache
def _external_roots() -> tuple[str, ...]:
    """Directories of the standard library and of installed packages, each ending in a separator."""
    paths = sysconfig.get_paths()
    candidates = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    candidates += getattr(site, "getsitepackages", list)()
    candidates.append(site.getusersitepackages() if site.ENABLE_USER_SITE else None)
    candidates += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    roots = {os.path.join(os.path.realpath(c), "") for c in candidates if c}
    return tuple(sorted(roots))


def is_external(origin: str | None) -> bool:
    """Whether a module with this spec origin belongs to the standard library or to an installed
    package (built-in, frozen and namespace modules, which have no file, count as external)."""
    if not origin or origin in ("built-in", "frozen"):
        return True
    path = os.path.realpath(origin)
    return any(path.startswith(root) for root in _external_roots())


def module_origin(module: ModuleType) -> str | None:
    spec = getattr(module, "__spec__", None)
    origin = getattr(spec, "origin", None) or getattr(module, "__file__", None)
    return origin if isinstance(origin, str) else None
