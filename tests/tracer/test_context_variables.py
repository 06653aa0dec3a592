"""Every ContextVar the tracer keeps is written through ``tracer._core.context``'s guard: before
3.12 a write inside a cyclic collection (a finalizer the collector runs, in the middle of another
write of the same context) corrupts the context's mapping (tests/tracer/core/test_finalizers.py).
A module that called a ContextVar's own ``set`` or ``reset`` would bring that back."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

TRACER = Path(__file__).resolve().parents[2] / "tracer"
#: Where the guard itself is: the only module that touches a ContextVar's own set and reset.
GUARD = TRACER / "_core" / "context.py"
#: Writes that cannot meet a collection's: into a context copied for a thread, a task or a
#: callback (it holds its own reference to the mapping), or once at start-up, on the main thread,
#: before the program runs (the parent's sequence a child process is given).
ELSEWHERE: Final = {
    "_patching/contexts.py": ["21: context.current.set"],
    "_patching/tasks.py": ["26: context.current.set"],
    "_runtime.py": ["306: context.current.set"],
}


def _context_variables(tree: ast.Module) -> set[str]:
    """The module-level names a module binds to a new ``ContextVar``."""
    names: set[str] = set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Call)
            and ast.unparse(value.func).endswith("ContextVar")
        ):
            names.add(target.id)
    return names


def _named(node: ast.expr) -> str | None:
    """The name an expression ends in: ``_sending``, ``_http.excluding``'s ``excluding``."""
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def unguarded_writes(source: str, variables: set[str]) -> list[str]:
    """``.set``/``.reset`` of the ContextVars named ``variables`` (a module's own or another's,
    ``_http.excluding.set``), as ``line: code``."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in ("set", "reset")
        and _named(node.value) in variables
    ]


def test_the_check_sees_a_context_variable_written_around_the_guard() -> None:
    source = (
        "import contextvars\n"
        "_running: contextvars.ContextVar[int] = contextvars.ContextVar('r', default=0)\n"
        "def attach():\n"
        "    return _running.set(1)\n"
    )
    variables = _context_variables(ast.parse(source))
    assert unguarded_writes(source, variables) == ["4: _running.set"]
    assert unguarded_writes("def f():\n    _http.excluding.reset(t)\n", {"excluding"}) == [
        "2: _http.excluding.reset"
    ]


def test_no_module_of_the_tracer_writes_a_context_variable_around_the_guard() -> None:
    sources = {path: path.read_text() for path in sorted(TRACER.rglob("*.py"))}
    variables = set().union(*(_context_variables(ast.parse(text)) for text in sources.values()))
    assert {"current", "_sending", "excluding", "_running", "_serving"} <= variables
    found = {
        str(path.relative_to(TRACER)): writes
        for path, text in sources.items()
        if path != GUARD and (writes := unguarded_writes(text, variables))
    }
    assert found == ELSEWHERE
