"""Which modules ``tracer run`` traces: the include patterns and what counts as external code."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from tracer.run import patterns
from tracer.run.patterns import IncludePatterns


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

    assert patterns.is_external(json_file())
    assert patterns.is_external(msgspec.__file__)
    assert patterns.is_external("built-in")
    assert patterns.is_external(None)
    assert not patterns.is_external(str(tmp_path / "app.py"))


def json_file() -> str:
    import json

    assert json.__file__ is not None
    return json.__file__


def test_patterns_are_validated_and_may_be_comma_separated() -> None:
    assert patterns.parse_patterns(["shop.*, billing", "x"]) == ("shop.*", "billing", "x")
    with pytest.raises(ValueError, match="looks like a file"):
        patterns.parse_patterns(["examples/shop.py"])
    with pytest.raises(ValueError, match="empty"):
        patterns.parse_patterns(["shop,,x"])
    with pytest.raises(ValueError, match="not a dotted module name"):
        patterns.parse_patterns(["shop cart"])
    assert patterns.parse_patterns(["shop_[a-c]?.*"]) == ("shop_[a-c]?.*",)
