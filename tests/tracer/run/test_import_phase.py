"""Imports at the top are service work: what a module's code calls while the program imports it,
nothing current, is one service sequence (``invoseq.service.import``); an import inside a traced
call is that call's; the module keeps its real loader."""

from __future__ import annotations

import pytest

from tests.tracer.run.hook_support import SHOP_CART, Write, load
from tracer import traced
from tracer.run import autowrap
from tracer.testing import CapturedInvocation, capture

BOOT = """
    import shop.cart

    TOTAL = shop.cart.checkout([1, 2])  # at import time
"""


def _tree(invocations: list[CapturedInvocation]) -> list[tuple[str, str]]:
    """Each invocation's name and its parent's, in start order."""
    by_iid = {i.iid: i.name for i in invocations}
    return [(i.name, by_iid.get(i.parent, "")) for i in invocations]


def test_calls_at_import_time_are_one_service_sequence_and_the_loader_is_the_real_one(
    write: Write,
) -> None:
    write("shop.cart", SHOP_CART)
    write("boot", BOOT)
    autowrap.install(["shop.*"])
    with capture() as trace:
        boot = load("boot")
        invocations = trace.invocations()
    assert boot.TOTAL == 8
    assert _tree(invocations) == [
        ("invoseq.service.import", ""),
        ("shop.cart.checkout", "invoseq.service.import"),
        ("shop.cart.price", "shop.cart.checkout"),
        ("shop.cart.shipping", "shop.cart.checkout"),
    ]
    assert len({i.seq for i in invocations}) == 1
    assert type(boot.__loader__).__name__ == "SourceFileLoader"
    assert boot.__spec__.loader is boot.__loader__
    cart = load("shop.cart")  # a traced module keeps the hook's own loader, as before
    assert type(cart.__loader__).__name__ == "_WrappingLoader"


def test_an_import_inside_a_traced_call_is_that_calls_work(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    write("boot", BOOT)
    autowrap.install(["shop.*"])

    @traced
    def handle() -> int:
        return int(load("boot").TOTAL)

    with capture() as trace:
        assert handle() == 8
        invocations = trace.invocations()
    names = [name for name, _ in _tree(invocations)]
    assert "invoseq.service.import" not in names
    assert ("shop.cart.checkout", names[0]) in _tree(invocations)
    assert names[0].endswith("handle")


def test_an_import_that_calls_nothing_traced_leaves_no_sequence(write: Write) -> None:
    write("shop.cart", SHOP_CART)
    write("quiet", "import shop.cart\n\nVALUE = 1\n")
    autowrap.install(["shop.*"])
    with capture() as trace:
        assert load("quiet").VALUE == 1
        assert trace.invocations() == []


def test_a_failing_import_fails_as_it_would_and_what_it_called_is_still_recorded(
    write: Write,
) -> None:
    write("shop.cart", SHOP_CART)
    write("broken", BOOT + "\n    raise LookupError('no config')\n")
    autowrap.install(["shop.*"])
    with capture() as trace:
        with pytest.raises(LookupError, match="no config"):
            load("broken")
        invocations = trace.invocations()
    assert [name for name, _ in _tree(invocations)][:2] == [
        "invoseq.service.import",
        "shop.cart.checkout",
    ]
    assert invocations[0].error == "LookupError"
