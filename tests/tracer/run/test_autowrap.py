"""The import hook: which modules it wraps, what it wraps in them, and that it never gets in the way
(pickling, process pools, failing imports, uninstalling)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import multiprocessing
import pickle
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import tracer
from tracer.run import autowrap
from tracer.run.autowrap import IncludePatterns
from tracer.testing import capture

Write = Callable[[str, str], Path]

TRACED = "__invoseq_traced__"


def is_traced(obj: object) -> bool:
    return bool(getattr(obj, TRACED, False))


@pytest.fixture(name="write")
def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Write]:
    """Write modules under a fresh sys.path entry; afterwards uninstall the hook and forget the
    modules, and check that sys.meta_path is exactly as before."""
    root = tmp_path / "src"
    root.mkdir()
    meta_path = list(sys.meta_path)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(autowrap, "_error_logged", False)

    def write(dotted: str, source: str) -> Path:
        parts = dotted.split(".")
        for depth in range(1, len(parts)):
            package = root.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
        path = root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.write_text(textwrap.dedent(source))
        return path

    yield write
    autowrap.uninstall()
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(root)):
            del sys.modules[name]
    sys.path_importer_cache.pop(str(root), None)
    assert sys.meta_path == meta_path
    assert autowrap.installed() is None


def load(name: str) -> ModuleType:
    __import__(name)
    return sys.modules[name]


SHOP_CART = """
    import json

    def checkout(items):
        return price(items) + shipping()

    def price(items):
        return sum(items)

    def shipping():
        return 5

    dumps = json.dumps          # imported: not ours to trace
    double = lambda x: 2 * x    # lambdas are left alone
"""


# -- which modules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("shop", "shop", True),
        ("shop", "shop.cart", False),
        ("shop.*", "shop", True),
        ("shop.*", "shop.cart", True),
        ("shop.*", "shop.api.v1", True),
        ("shop.*", "shopping", False),
        ("shop.*", "myshop.cart", False),
        ("*_service", "billing.tax_service", True),
        ("*_service", "billing", False),
        ("sh?p.*", "shop", True),
        ("sh?p.*", "ship.x", True),
        ("*", "anything.at.all", True),
        ("*", "tracer", False),
        ("tracer.*", "tracer._core.decorator", False),
    ],
)
def test_pattern_rules(pattern: str, name: str, expected: bool) -> None:
    assert IncludePatterns([pattern]).matches(name) is expected


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*", "json", False),
        ("j*", "json.decoder", False),
        ("json", "json", True),
        ("json", "json.decoder", False),
        ("json.*", "json", True),
        ("json.*", "json.decoder", True),
    ],
)
def test_stdlib_and_site_packages_match_only_patterns_that_name_them(
    pattern: str, name: str, expected: bool
) -> None:
    assert IncludePatterns([pattern]).matches(name, external=True) is expected


def test_external_means_stdlib_site_packages_or_builtin(tmp_path: Path) -> None:
    import msgspec

    assert autowrap.is_external(json_file())
    assert autowrap.is_external(msgspec.__file__)
    assert autowrap.is_external("built-in")
    assert autowrap.is_external(None)
    assert not autowrap.is_external(str(tmp_path / "app.py"))


def json_file() -> str:
    import json

    assert json.__file__ is not None
    return json.__file__


def test_patterns_are_validated_and_may_be_comma_separated() -> None:
    assert autowrap.parse_patterns(["shop.*, billing", "x"]) == ("shop.*", "billing", "x")
    with pytest.raises(ValueError, match="looks like a file"):
        autowrap.parse_patterns(["examples/shop.py"])
    with pytest.raises(ValueError, match="empty"):
        autowrap.parse_patterns(["shop,,x"])
    with pytest.raises(ValueError, match="not a dotted module name"):
        autowrap.parse_patterns(["shop cart"])
    assert autowrap.parse_patterns(["shop_[a-c]?.*"]) == ("shop_[a-c]?.*",)


def test_matching_module_is_traced_as_it_is_imported(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    autowrap.install(["shop.*"])
    cart = load("shop.cart")
    with capture() as trace:
        assert cart.checkout([1, 2]) == 8
        invocations = trace.invocations()
    by_iid = {i.iid: i.name for i in invocations}
    assert [(i.name, by_iid.get(i.parent, "")) for i in invocations] == [
        ("shop.cart.checkout", ""),
        ("shop.cart.price", "shop.cart.checkout"),
        ("shop.cart.shipping", "shop.cart.checkout"),
    ]
    assert not is_traced(cart.dumps)
    assert not is_traced(cart.double)


def test_module_that_does_not_match_is_left_exactly_as_imported(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    write("billing", "def invoice():\n    return 1\n")
    autowrap.install(["billing"])
    cart = load("shop.cart")
    assert not is_traced(cart.checkout)
    assert type(cart.__loader__).__name__ == "SourceFileLoader"
    assert is_traced(load("billing").invoice)


def test_star_traces_my_code_but_not_the_standard_library(write: Write) -> None:
    write("app", "def run():\n    return 1\n")
    sys.modules.pop("colorsys", None)
    try:
        autowrap.install(["*"])
        import colorsys

        assert not is_traced(colorsys.rgb_to_hsv)
        assert is_traced(load("app").run)
        autowrap.uninstall()
        sys.modules.pop("colorsys", None)
        autowrap.install(["colorsys"])  # named explicitly: traced
        import colorsys as named

        assert is_traced(named.rgb_to_hsv)
        assert named.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    finally:
        autowrap.uninstall()
        sys.modules.pop("colorsys", None)


def test_already_imported_modules_are_wrapped_only_on_request(write: Write) -> None:
    write("early", "def f():\n    return 1\n")
    early = load("early")
    autowrap.install(["early"])
    assert not is_traced(early.f)
    autowrap.install(["early"], wrap_loaded=True)
    assert is_traced(early.f)
    assert len([f for f in sys.meta_path if type(f).__name__ == "_Finder"]) == 1


# -- what is wrapped ---------------------------------------------------------------------------

KINDS = """
    class Cart:
        def __init__(self):
            self.items = []

        def __repr__(self):
            return "Cart()"

        def __call__(self):
            return self.add(1)

        def add(self, item):
            self.items.append(item)
            return len(self.items)

        @staticmethod
        def tax(amount):
            return amount // 10

        @classmethod
        def empty(cls):
            return cls()

        @property
        def size(self):
            return len(self.items)

        async def fetch(self):
            return await self.parse()

        async def parse(self):
            return "parsed"

        def each(self):
            yield from self.items

        async def stream(self):
            for item in self.items:
                yield item

        class Line:
            def total(self):
                return 3

    def top_level_generator(n):
        yield from range(n)
"""


def test_methods_of_every_kind_are_traced_but_not_dunders_or_properties(write: Write) -> None:
    write("kinds", KINDS)
    autowrap.install(["kinds"])
    kinds = load("kinds")
    members = vars(kinds.Cart)
    for name in ("add", "__call__", "fetch", "parse", "each", "stream"):
        assert is_traced(members[name]), name
    assert is_traced(members["tax"].__func__)
    assert is_traced(members["empty"].__func__)
    assert is_traced(vars(kinds.Cart.Line)["total"])
    for name in ("__init__", "__repr__"):
        assert not is_traced(members[name]), name
    assert isinstance(members["size"], property)
    assert not is_traced(members["size"].fget)
    assert inspect.iscoroutinefunction(kinds.Cart.fetch)
    assert inspect.isgeneratorfunction(kinds.Cart.each)
    assert inspect.isasyncgenfunction(kinds.Cart.stream)
    assert inspect.isgeneratorfunction(kinds.top_level_generator)

    async def consume(cart: Any) -> list[Any]:
        return [await cart.fetch(), [item async for item in cart.stream()]]

    with capture() as trace:
        cart = kinds.Cart.empty()
        assert cart() == 1
        assert kinds.Cart.tax(50) == 5
        assert list(cart.each()) == [1]
        assert asyncio.run(consume(cart)) == ["parsed", [1]]
        assert kinds.Cart.Line().total() == 3
        assert cart.size == 1
        names = [i.name.removeprefix("kinds.") for i in trace.invocations()]
    assert names == [
        "Cart.empty",
        "Cart.__call__",
        "Cart.add",
        "Cart.tax",
        "Cart.each",
        "Cart.fetch",
        "Cart.parse",
        "Cart.stream",
        "Cart.Line.total",
    ]


def test_functions_already_traced_are_not_wrapped_twice(write: Write) -> None:
    write(
        "decorated",
        """
        import tracer

        @tracer.traced
        def f():
            return 1
        """,
    )
    autowrap.install(["decorated"])
    decorated = load("decorated")
    assert not is_traced(decorated.f.__wrapped__)
    with capture() as trace:
        decorated.f()
        assert len(trace.invocations()) == 1


def test_wrap_module_wraps_what_the_module_defines_and_reports_how_many(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    cart = load("shop.cart")
    assert autowrap.wrap_module(cart) == 3
    assert autowrap.wrap_module(cart) == 0
    assert is_traced(cart.checkout)


def test_functions_are_traced_as_soon_as_they_are_defined(write: Write) -> None:
    """What ``tracer run`` does for a script: module-level code calling a function it just
    defined already calls the traced one, and module-level name semantics are unchanged."""
    module = ModuleType("script_like")
    code = """
    import sys
    counter = 0

    def bump():
        global counter
        counter += 1
        return counter

    first = bump()
    assert counter == 1 and "bump" in locals() and globals()["bump"] is bump
    assert "print" not in locals() and locals().get("len") is None and len("ab") == 2
    del first
    class Greeter:
        def hello(self):
            return "hi"
    greeting = Greeter().hello()
    """
    with capture() as trace:
        exec(textwrap.dedent(code), vars(module), autowrap.DefiningNamespace(module))
        names = [i.name for i in trace.invocations()]
    assert names == ["script_like.bump", "script_like.Greeter.hello"]
    assert vars(module)["counter"] == 1
    assert "first" not in vars(module)
    assert vars(module)["greeting"] == "hi"
    assert is_traced(vars(module)["bump"])


# -- staying out of the way -------------------------------------------------------------------


def test_wrapped_functions_pickle_by_reference(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    write("shop.model", KINDS)
    autowrap.install(["shop.*"])
    cart = load("shop.cart")
    model = load("shop.model")
    for function in (cart.checkout, model.Cart.add, model.Cart.tax, model.top_level_generator):
        assert pickle.loads(pickle.dumps(function)) is function
    instance = model.Cart()
    instance.add(7)
    assert pickle.loads(pickle.dumps(instance)).items == [7]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
@pytest.mark.system
def test_process_pools_can_run_wrapped_functions(
    write: Write, start_method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INVOSEQ_ENABLED", "0")  # the workers need no repository
    write("shop.cart", SHOP_CART)
    autowrap.install(["shop.*"])
    cart = load("shop.cart")
    assert is_traced(cart.checkout)
    context = multiprocessing.get_context(start_method)
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        assert list(pool.map(cart.checkout, [[1], [2, 3]], timeout=60)) == [6, 10]


def test_uninstall_puts_back_every_original(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    write("shop.model", KINDS)
    autowrap.install(["shop.*"])
    cart = load("shop.cart")
    model = load("shop.model")
    wrapped = cart.checkout
    assert is_traced(wrapped)
    autowrap.uninstall()
    assert cart.checkout is wrapped.__wrapped__
    assert not is_traced(vars(model.Cart)["add"])
    assert not is_traced(vars(model.Cart)["tax"].__func__)
    assert type(cart.__loader__).__name__ == "SourceFileLoader"
    assert cart.__spec__ is not None
    assert cart.__spec__.loader is cart.__loader__
    assert autowrap.installed() is None
    autowrap.uninstall()  # harmless twice


def test_the_modules_own_import_errors_propagate_unchanged(write: Write) -> None:
    write("broken", "def f():\n    return 1\nraise ValueError('broken at import')\n")
    autowrap.install(["broken"])
    with pytest.raises(ValueError, match="broken at import"):
        load("broken")
    assert "broken" not in sys.modules


def test_a_failure_of_the_hook_never_breaks_an_import_and_is_logged_once(
    write: Write, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = """
        class Meta(type):
            @property
            def __module__(cls):
                raise RuntimeError("no module for you")

        class Hostile(metaclass=Meta):
            pass

        def still_works():
            return 42
    """
    write("hostile_one", hostile)
    write("hostile_two", hostile)
    autowrap.install(["hostile_*"])
    with caplog.at_level(logging.WARNING, logger="tracer"):
        assert load("hostile_one").still_works() == 42
        assert load("hostile_two").still_works() == 42
    warnings = [r for r in caplog.records if "could not wrap" in r.getMessage()]
    assert len(warnings) == 1
    assert "hostile_one" in warnings[0].getMessage()


class FailingFinder:
    """A third-party finder that breaks on one name."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == "doomed":
            raise LookupError("finder failed")


def test_errors_of_the_other_finders_surface_unchanged(
    write: Write, caplog: pytest.LogCaptureFixture
) -> None:
    write("doomed", "x = 1\n")
    autowrap.install(["doomed"])
    failing = FailingFinder()
    sys.meta_path.insert(1, failing)  # behind the hook
    try:
        with (
            caplog.at_level(logging.WARNING, logger="tracer"),
            pytest.raises(LookupError, match="finder failed"),
        ):
            load("doomed")
    finally:
        sys.meta_path.remove(failing)
    assert not caplog.records


def test_classes_that_refuse_new_attributes_are_skipped_quietly(write: Write) -> None:
    write(
        "frozen",
        """
        class Locked(type):
            def __setattr__(cls, name, value):
                raise AttributeError("locked")

        class Vault(metaclass=Locked):
            def open(self):
                return "open"

        def helper():
            return 1
        """,
    )
    autowrap.install(["frozen"])
    frozen = load("frozen")
    assert not is_traced(vars(frozen.Vault)["open"])
    assert frozen.Vault().open() == "open"
    assert is_traced(frozen.helper)


def test_tracer_is_never_traced_by_its_own_hook() -> None:
    assert not is_traced(tracer.configure)
    assert not IncludePatterns(["*", "tracer", "tracer.*"]).matches("tracer._runtime")
