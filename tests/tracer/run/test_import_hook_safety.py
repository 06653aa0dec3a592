"""The import hook stays out of the way: wrapped functions pickle and run in process pools,
uninstalling puts back every original, and no failure of the hook or of the module breaks an
import."""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import pickle
import sys

import pytest

import tracer
from tests.tracer.run.hook_support import KINDS, SHOP_CART, Write, is_traced, load
from tracer._core import codes
from tracer.run import autowrap
from tracer.run.patterns import IncludePatterns

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
# Python 3.12+ warns that forking the (threaded) test process may deadlock the child; fork is the
# start method under test here, and the child runs only the pool's work.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
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
    assert cart.checkout is getattr(wrapped, "__wrapped__", wrapped)  # the function itself
    assert not is_traced(cart.checkout)
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


def test_classes_that_refuse_new_attributes_are_traced_in_place_or_skipped_quietly(
    write: Write,
) -> None:
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
    # traced where the code is instrumented (nothing is set on the class), else left alone
    assert is_traced(vars(frozen.Vault)["open"]) == codes.available()
    assert frozen.Vault().open() == "open"
    assert is_traced(frozen.helper)


def test_tracer_is_never_traced_by_its_own_hook() -> None:
    assert not is_traced(tracer.configure)
    assert not IncludePatterns(["*", "tracer", "tracer.*"]).matches("tracer._runtime")
