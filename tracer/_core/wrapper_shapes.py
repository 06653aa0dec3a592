"""Pure-Python wrappers that take the wrapped function's own parameters.

A wrapper ``def traced_call(*args, **kwargs)`` packs a tuple and a dict at every call and unpacks
them into the function again: 125 ns above a bare call here, most of what the pure-Python path
cost beyond recording. A wrapper with the function's own parameters passes them on in an
ordinary Python-to-Python call (24 ns; docs/architecture.md, "The invocation stack").

More in docs/architecture.md, "tracer/_core/wrapper_shapes.py".
"""

from __future__ import annotations

import keyword
import re
import threading
from collections.abc import Callable
from types import FunctionType
from typing import Any, Final, NamedTuple

from tracer._core import wrapper_frames
from tracer._core.codes import CO_VARARGS, CO_VARKEYWORDS

#: What the template's own names start with (the function, the method, locals).
PREFIX: Final = "_ivq_"


class Shape(NamedTuple):
    positional_only: tuple[str, ...]
    positional: tuple[str, ...]
    varargs: str | None
    keyword_only: tuple[str, ...]
    varkw: str | None

    def names(self) -> tuple[str, ...]:
        extra = tuple(name for name in (self.varargs, self.varkw) if name is not None)
        return self.positional_only + self.positional + self.keyword_only + extra

    def parameters(self) -> str:
        parts = [*self.positional_only, *(["/"] if self.positional_only else []), *self.positional]
        if self.varargs is not None:
            parts.append("*" + self.varargs)
        elif self.keyword_only:
            parts.append("*")
        parts += self.keyword_only
        if self.varkw is not None:
            parts.append("**" + self.varkw)
        return ", ".join(parts)

    def arguments(self) -> str:
        parts = [*self.positional_only, *self.positional]
        if self.varargs is not None:
            parts.append("*" + self.varargs)
        parts += [f"{name}={name}" for name in self.keyword_only]
        if self.varkw is not None:
            parts.append("**" + self.varkw)
        return ", ".join(parts)


GENERIC: Final = Shape((), (), "args", (), "kwargs")


def shape_of(fn: Any) -> Shape:
    """The parameters of a plain function, read from its code; the generic shape otherwise."""
    if type(fn) is not FunctionType:
        return GENERIC
    code = fn.__code__
    names = code.co_varnames
    positional, only = code.co_argcount, code.co_posonlyargcount
    keyword_end = positional + code.co_kwonlyargcount
    varargs = names[keyword_end] if code.co_flags & CO_VARARGS else None
    varkw_at = keyword_end + (varargs is not None)
    varkw = names[varkw_at] if code.co_flags & CO_VARKEYWORDS else None
    keyword_only = names[positional:keyword_end]
    return Shape(names[:only], names[only:positional], varargs, keyword_only, varkw)


_lock = threading.Lock()
_factories: dict[tuple[str, str, Shape], Callable[..., Any]] = {}


def _reserved(template: str) -> frozenset[str]:
    """The names a template reads (globals, builtins): parameters must not hide them."""
    return frozenset(re.findall(r"[A-Za-z_]\w*", template)) - frozenset(keyword.kwlist)


def make(
    template: str,
    name: str,
    namespace: dict[str, Any],
    fn: Any,
    *closure: Any,
    kind: str = "def",
) -> Callable[..., Any]:
    """A wrapper of ``fn`` with ``fn``'s parameters (``kind``: ``def`` or ``async def``), whose
    body is ``template``: lines that call the function as ``{call}`` and see ``closure`` as
    ``_ivq_0, _ivq_1, ...``."""
    shape = shape_of(fn)
    names = shape.names()
    if any(n.startswith(PREFIX) for n in names) or _reserved(template).intersection(names):
        shape = GENERIC
    key = (template, kind, shape)
    factory = _factories.get(key)
    if factory is None:
        with _lock:
            factory = _factories.get(key)
            if factory is None:
                factory = _compile(template, (kind, name), namespace, shape, len(closure))
                _factories[key] = factory
    wrapper: Callable[..., Any] = factory(fn, *closure)
    if shape is not GENERIC:
        wrapper.__defaults__ = fn.__defaults__
        wrapper.__kwdefaults__ = fn.__kwdefaults__
    return wrapper


def _compile(
    template: str, header: tuple[str, str], namespace: dict[str, Any], shape: Shape, extra: int
) -> Callable[..., Any]:
    kind, name = header
    closure = ", ".join([f"{PREFIX}fn", *(f"{PREFIX}{i}" for i in range(extra))])
    body = template.replace("{call}", f"{PREFIX}fn({shape.arguments()})")
    source = f"def {PREFIX}make({closure}):\n    {kind} {name}({shape.parameters()}):\n"
    source += "".join(f"        {line}\n" for line in body.splitlines())
    source += f"    return {name}\n"
    code = compile(source, f"<invoseq {name}>", "exec")
    scope: dict[str, Any] = {}
    exec(code, namespace, scope)  # our own template and names (see above)
    factory: Callable[..., Any] = scope[f"{PREFIX}make"]
    wrapper_frames.register_factories(factory)
    return factory


__all__ = ["GENERIC", "PREFIX", "Shape", "make", "shape_of"]
