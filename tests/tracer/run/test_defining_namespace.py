"""The namespace ``tracer run`` runs a traced script's module code in: what module-level code
sees through it is what it sees untraced, in the Python class and in the C one alike, and the
C one is what ``tracer run`` uses where it is built."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, MutableMapping
from types import ModuleType
from typing import Any

import pytest

from tests.tracer.run.hook_support import Write, is_traced
from tracer._core import accel
from tracer.run import autowrap
from tracer.testing import capture

Factory = Callable[[ModuleType], MutableMapping[str, Any]]

FACTORIES: dict[str, Factory] = {
    "python": autowrap.DefiningNamespace,
    "default": autowrap.defining_namespace,  # the C one where it is built
}


@pytest.fixture(name="namespace", params=sorted(FACTORIES))
def _namespace(request: pytest.FixtureRequest, write: Write) -> Factory:
    return FACTORIES[request.param]


def _run(code: str, namespace: Factory, name: str = "script_like") -> ModuleType:
    module = ModuleType(name)
    compiled = compile(textwrap.dedent(code), "<script>", "exec", dont_inherit=True)
    exec(compiled, vars(module), namespace(module))  # as tracer run runs a script
    return module


def test_the_c_namespace_is_the_one_tracer_run_uses_where_it_is_built(write: Write) -> None:
    if accel.speedups is None:
        pytest.skip("pure Python: the Python namespace is the one used")
    from tracer.run import _namespace

    assert isinstance(autowrap.defining_namespace(ModuleType("m")), _namespace.Namespace)


def test_functions_and_methods_are_traced_when_defined_and_module_names_behave_as_untraced(
    namespace: Factory,
) -> None:
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
    total = 0
    for i in range(5):
        total += abs(-i)
    """
    with capture() as trace:
        module = _run(code, namespace)
        names = [i.name for i in trace.invocations()]
    assert names == ["script_like.bump", "script_like.Greeter.hello"]
    assert vars(module)["counter"] == 1
    assert "first" not in vars(module)
    assert vars(module)["greeting"] == "hi"
    assert vars(module)["total"] == 10
    assert vars(module)["i"] == 4
    assert is_traced(vars(module)["bump"])


def test_a_missing_name_raises_name_error_on_read_and_on_delete(namespace: Factory) -> None:
    with pytest.raises(NameError, match="nowhere"):
        _run("value = nowhere\n", namespace)
    with pytest.raises(NameError, match="gone"):
        _run("del gone\n", namespace)


def test_star_imports_annotations_and_shadowed_builtins_land_in_the_modules_globals(
    namespace: Factory,
) -> None:
    code = """
    from json import *
    limit: int = 3
    len = lambda value: -1
    shadowed = len("abc")
    names = sorted(locals())
    """
    module = _run(code, namespace)
    found = vars(module)
    assert found["dumps"]({"a": 1}) == '{"a": 1}'
    assert found["__annotations__"] == {"limit": int}
    assert found["shadowed"] == -1
    assert {"dumps", "limit", "len", "shadowed"} <= set(found["names"])
    assert not is_traced(found["len"])  # a lambda is left alone


def test_the_namespace_reads_as_a_mapping_of_the_modules_globals(namespace: Factory) -> None:
    module = ModuleType("m")
    vars(module)["kept"] = 1
    mapping = namespace(module)
    mapping["added"] = 2
    assert vars(module)["added"] == 2
    assert "kept" in mapping
    assert "print" not in mapping
    assert mapping["kept"] == 1
    assert mapping["print"] is print
    assert mapping.get("print") is None
    assert mapping.get("kept") == 1
    assert len(mapping) == len(vars(module))
    assert sorted(mapping) == sorted(vars(module))
    del mapping["added"]
    assert "added" not in vars(module)
    with pytest.raises(KeyError):
        mapping["nowhere"]
    with pytest.raises(KeyError):
        del mapping["nowhere"]


def test_only_functions_and_classes_pass_through_define(write: Write) -> None:
    if accel.speedups is None:
        pytest.skip("the C namespace goes with the accelerator")
    from tracer.run import _namespace

    seen: list[tuple[str, object]] = []

    def define(key: str, value: object) -> object:
        seen.append((key, value))
        return value

    module = ModuleType("m")
    mapping = _namespace.Namespace(vars(module), {}, define)
    exec("x = 1\ndef f(): pass\nclass C: pass\ny = [f]\n", vars(module), mapping)
    assert [key for key, _ in seen] == ["f", "C"]
    with pytest.raises(TypeError):
        _namespace.Namespace(vars(module), {}, "not callable")  # type: ignore[arg-type]
