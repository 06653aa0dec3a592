"""The compatibility corpus's packages (docs/compatibility.md): which suites run, and how.

Each ``Suite`` names a release on PyPI, the import package ``tracer run --include`` traces, the
pytest arguments its own tests run with, and the test ids left out, each with its reason.
``TEST_REQUIREMENTS`` pins what the suites need beyond their own package, and ``MODES`` names the
three runs of every suite (bare, C, pure). Only definitions live here: ``benchmarks.suites``
downloads, installs and runs the suites, and ``benchmarks.suite_outcomes`` compares and reports
their runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

MODES: Final = ("bare", "C", "pure")

#: What the suites need beyond their own package, pinned so that a result can be reproduced.
TEST_REQUIREMENTS: Final = (
    "pytest==9.2.0",
    "hypothesis==6.170.17",
    "freezegun==1.5.5",  # itsdangerous
    "pytest-asyncio==1.5.0",  # blinker
)


@dataclass(frozen=True, slots=True, eq=False)
class Suite:
    """One package of the corpus: its sdist, what to trace and how to run its tests."""

    name: str  # the distribution, as on PyPI
    version: str
    package: str  # the import package traced: --include 'PACKAGE.*'
    args: tuple[str, ...]  # pytest's arguments, run in the unpacked sdist
    checks: str  # what of Python's object model the suite leans on
    #: Test ids left out (pytest --deselect), each with its reason: failing or flaky bare, or
    #: too slow for the corpus's time budget.
    deselect: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def sdist_stems(self) -> tuple[str, ...]:
        """The file names an sdist of this release may have (PEP 625 normalises to '_')."""
        normal = self.name.lower().replace("-", "_")
        return (f"{normal}-{self.version}", f"{self.name}-{self.version}")


SLOW: Final = "slow bare"
NO_ASYNCIO: Final = ("-p", "no:asyncio")  # pytest-asyncio is for blinker; it warns elsewhere

SUITES: Final = (
    Suite(
        "pluggy",
        "1.7.0",
        "pluggy",
        ("testing", "--ignore=testing/benchmark.py", *NO_ASYNCIO),
        "introspection: hookspecs and hookimpls found with inspect; warnings' stacklevel",
        # pytest itself runs on pluggy: traced, every pytest hook call goes through it
    ),
    Suite(
        "attrs",
        "26.1.0",
        "attr",
        ("tests", *NO_ASYNCIO),
        "classes made by a factory (make_class: __module__ from the caller's frame), pickling",
        deselect={
            "tests/test_funcs.py": "slow bare: hypothesis (30 s of the suite's 45)",
            "tests/test_converters.py::TestPipe::test_wrapped_annotation": "fails bare on 3.11",
        },
    ),
    Suite(
        "more-itertools",
        "11.2.1",
        "more_itertools",
        ("tests", *NO_ASYNCIO),
        "generators, itertools recipes, threads (concurrent tee)",
        deselect={
            "tests/test_recipes.py::PrimeFunctionTests::test_primes": "slow bare (50 s)",
            "tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_approximate": "slow bare",
            "tests/test_more.py::DiscreteFourierTransformTests::test_roundtrip": "slow bare",
            "tests/test_more.py::TestConcurrentTee::test_concurrent_consumers": "slow bare",
            "tests/test_more.py::ExtractTests::test_all_orderings": "slow bare",
            "tests/test_more.py::TestSerialize::test_concurrent_calls": "slow bare",
            "tests/test_recipes.py::PolynomialFromRootsTests::test_large": "slow bare",
            "tests/test_recipes.py::RunningMedianTests::test_vs_statistics_median": "slow bare",
            "tests/test_more.py::TestRandomOrderedRange::test_lcg_mitigation": "slow bare",
            "tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_tightened_bound": SLOW,
        },
    ),
    Suite(
        "toolz",
        "1.2.0",
        "toolz",
        ("toolz", *NO_ASYNCIO),
        "introspection (curry reads signatures), pickling curried functions by reference",
    ),
    Suite(
        "cachetools",
        "8.0.2",
        "cachetools",
        ("tests", *NO_ASYNCIO),
        "decorators wrapping functions and methods, cache keys, locks",
    ),
    Suite(
        "blinker",
        "1.9.0",
        "blinker",
        ("tests", "-o", "asyncio_default_fixture_loop_scope=function"),
        "identity and weak references to receivers, gc",
    ),
    Suite(
        "decorator",
        "5.3.1",
        "decorator",
        ("tests/test.py", *NO_ASYNCIO),
        "introspection: signatures, __wrapped__, generated functions",
    ),
    Suite(
        "six",
        "1.17.0",
        "six",
        ("test_six.py", *NO_ASYNCIO),
        "module magic: lazy attributes, meta path importer, metaclasses",
    ),
    Suite(
        "itsdangerous",
        "2.2.0",
        "itsdangerous",
        ("tests", *NO_ASYNCIO),
        "class hierarchies, time frozen by freezegun",
    ),
    Suite(
        "boltons",
        "26.2.0",
        "boltons",
        ("tests", *NO_ASYNCIO),
        "frames and tracebacks (tbutils), function introspection and rewriting (funcutils)",
    ),
    Suite(
        "wrapt",
        "2.5.2",
        "wrapt",
        ("tests", *NO_ASYNCIO),
        "proxies and descriptors, identity of wrapped functions (pure-Python mode)",
        env={"WRAPT_DISABLE_EXTENSIONS": "true"},
    ),
    Suite(
        "trio",
        "0.35.0",
        "trio",
        (
            "--pyargs",
            "trio._tests.test_signals",
            "trio._core._tests.test_ki",
            "trio._core._tests.test_run",
            *NO_ASYNCIO,
        ),
        "signals: the wakeup fd, KeyboardInterrupt delivery, frames of coroutines",
    ),
)
