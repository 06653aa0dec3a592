"""Helpers and module sources the import hook's tests share (the ``write`` fixture is in
``conftest.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from tracer._core import decorator

Write = Callable[[str, str], Path]


def is_traced(obj: object) -> bool:
    return decorator.is_traced(obj)


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
