"""The corpus's plain functions, for the scenarios in ``inject_corpus_scenarios.py``: returns,
exceptions caught and escaping, finally, with, loops, closures, recursion, a lambda, methods and
super, match, a warning, a frame's caller and jumps over many instructions. Its generators and
coroutines are in ``inject_corpus_generators.py``.

Like the rest of the corpus it imports nothing from the tracer, so that a bare 3.12 runs it. Its
code is what ruff flags (returns in finally, a lambda assigned...): the noqa below.
"""

# ruff: noqa: B012, E731, TRY301, RET504, SIM107, PLR0912

from __future__ import annotations

import sys
import warnings

# -- plain functions ----------------------------------------------------------------------------


def plain(a, b=2, *args, k=3, **kw):
    return a + b + k + len(args) + len(kw)


def early(x):
    if x > 0:
        return "pos"
    if x < 0:
        return "neg"
    return "zero"


def caught(x):
    try:
        raise KeyError(x)
    except KeyError as e:
        return ("caught", e.args[0])


def escapes(x):
    y = x + 1
    raise ValueError(y)


def passes_through(x):
    z = escapes(x)
    return z


def finally_return(x):
    try:
        return x
    finally:
        return "finally"


def finally_swallows(x):
    try:
        raise ValueError(x)
    finally:
        return "swallowed"


def finally_reraises(x):
    done = []
    try:
        return 1 // x
    finally:
        done.append(x)


class Manager:
    def __init__(self, suppress):
        self.suppress = suppress

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return self.suppress


def with_statement(suppress):
    with Manager(suppress) as manager:
        raise KeyError(manager.suppress)
    return "after"


def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            continue
        if i > 6:
            break
        total += i
    else:
        total = -1
    while n:
        n -= 1
        if n == 2:
            break
    return total, n


def make_closure(x):
    cell = [x]

    def inner(y):
        cell[0] += y
        return cell[0] + x

    return len(cell)


def _closure_factory(x):
    cell = [x]

    def closure(y):
        return cell[0] + x + y

    return closure


closure = _closure_factory(10)  # free vars: cell and x


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


square = lambda v: v * v


class Methods:
    def method(self, x):
        return (self.__class__.__name__, x)

    @classmethod
    def klass(cls, x):
        return (cls.__name__, x)

    @staticmethod
    def static(x):
        return x + 1


class Sub(Methods):
    def method(self, x):
        return ("sub", super().method(x))


def matches(value):
    match value:
        case {"kind": "point", "x": int(x), "y": int(y)}:
            return ("point", x + y)
        case [first, *rest] if rest:
            return ("list", first, len(rest))
        case str() | bytes():
            return "text"
        case _:
            return sum(v for v in range(3))


def warns(message):
    warnings.warn(message, UserWarning, stacklevel=2)
    return "warned"


def caller_name():
    return sys._getframe(1).f_code.co_name


def many_jumps(x):
    total = 0
    for step in range(3):
        if x == 0:
            total += x * 0 + step - (x // 1) * 0
        elif x == 1:
            total += x * 1 + step - (x // 2) * 1
        elif x == 2:
            total += x * 2 + step - (x // 3) * 2
        elif x == 3:
            total += x * 3 + step - (x // 4) * 3
        elif x == 4:
            total += x * 4 + step - (x // 5) * 4
        elif x == 5:
            total += x * 5 + step - (x // 6) * 5
        elif x == 6:
            total += x * 6 + step - (x // 7) * 6
        elif x == 7:
            total += x * 7 + step - (x // 8) * 0
        elif x == 8:
            total += x * 8 + step - (x // 9) * 1
        elif x == 9:
            total += x * 9 + step - (x // 10) * 2
        elif x == 10:
            total += x * 10 + step - (x // 11) * 3
        elif x == 11:
            total += x * 11 + step - (x // 12) * 4
        elif x == 12:
            total += x * 12 + step - (x // 13) * 5
        elif x == 13:
            total += x * 13 + step - (x // 14) * 6
        elif x == 14:
            total += x * 14 + step - (x // 15) * 0
        elif x == 15:
            total += x * 15 + step - (x // 16) * 1
        elif x == 16:
            total += x * 16 + step - (x // 17) * 2
        elif x == 17:
            total += x * 17 + step - (x // 18) * 3
        elif x == 18:
            total += x * 18 + step - (x // 19) * 4
        elif x == 19:
            total += x * 19 + step - (x // 20) * 5
        elif x == 20:
            total += x * 20 + step - (x // 21) * 6
        elif x == 21:
            total += x * 21 + step - (x // 22) * 0
        elif x == 22:
            total += x * 22 + step - (x // 23) * 1
        elif x == 23:
            total += x * 23 + step - (x // 24) * 2
        elif x == 24:
            total += x * 24 + step - (x // 25) * 3
        elif x == 25:
            total += x * 25 + step - (x // 26) * 4
        elif x == 26:
            total += x * 26 + step - (x // 27) * 5
        elif x == 27:
            total += x * 27 + step - (x // 28) * 6
        elif x == 28:
            total += x * 28 + step - (x // 29) * 0
        elif x == 29:
            total += x * 29 + step - (x // 30) * 1
        elif x == 30:
            total += x * 30 + step - (x // 31) * 2
        elif x == 31:
            total += x * 31 + step - (x // 32) * 3
        elif x == 32:
            total += x * 32 + step - (x // 33) * 4
        elif x == 33:
            total += x * 33 + step - (x // 34) * 5
        elif x == 34:
            total += x * 34 + step - (x // 35) * 6
        elif x == 35:
            total += x * 35 + step - (x // 36) * 0
        elif x == 36:
            total += x * 36 + step - (x // 37) * 1
        elif x == 37:
            total += x * 37 + step - (x // 38) * 2
        elif x == 38:
            total += x * 38 + step - (x // 39) * 3
        elif x == 39:
            total += x * 39 + step - (x // 40) * 4
        else:
            total -= step
        x = (x + step) % 41
    return total
