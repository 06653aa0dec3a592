"""The import hook: which modules it wraps, what it wraps in them, and that it never gets in the way
(pickling, process pools, failing imports, uninstalling)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

import pytest

from tests.tracer.run.hook_support import KINDS, SHOP_CART, Write, is_traced, load
from tracer._core import codes
from tracer.run import autowrap
from tracer.testing import capture


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
    assert not is_traced(getattr(decorated.f, "__wrapped__", None))  # a wrapper: not wrapped again
    with capture() as trace:
        decorated.f()
        assert len(trace.invocations()) == 1


def test_wrap_module_wraps_what_the_module_defines_and_reports_how_many(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    cart = load("shop.cart")
    assert autowrap.wrap_module(cart) == 3
    assert autowrap.wrap_module(cart) == 0
    assert is_traced(cart.checkout)


def test_references_taken_while_the_module_ran_are_the_traced_functions(write: Write) -> None:
    """Nothing is replaced: a registry, a class attribute and a default argument filled while
    the module ran hold the module's functions, and calling them through those is traced."""
    if not codes.available():
        pytest.skip("code is not instrumented on this path: functions are wrapped")
    write(
        "captured",
        """
        def f(x):
            return x + 1

        REGISTRY = {"f": f}

        class Holder:
            method = staticmethod(f)

        def call(fn=f):
            return fn(1)
        """,
    )
    autowrap.install(["captured"])
    captured = load("captured")
    assert captured.REGISTRY["f"] is captured.f
    assert vars(captured.Holder)["method"].__func__ is captured.f
    with capture() as trace:
        assert captured.REGISTRY["f"](1) == captured.Holder.method(1) == 2
        assert captured.call() == 2
        names = [i.name for i in trace.invocations()]
    assert names == ["captured.f", "captured.f", "captured.call", "captured.f"]
