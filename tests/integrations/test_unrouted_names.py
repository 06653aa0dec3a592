"""A request no route names is named by its path with the ids folded, and a process gives a
bounded number of such names (``_http_served.unrouted_name``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tracer._patching.integrations import _http_served


@pytest.fixture(autouse=True)
def _no_names_yet() -> Iterator[None]:
    saved = set(_http_served._templates)
    _http_served._templates.clear()
    yield
    _http_served._templates.clear()
    _http_served._templates.update(saved)


@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/", "/"),
        ("/orders/42", "/orders/{int}"),
        ("/users/9f1c2e4a-8b7d-4c3e-a1f2-0123456789ab/cart", "/users/{uuid}/cart"),
        ("/blobs/deadbeef01", "/blobs/{hex}"),
        ("/about/facade", "/about/facade"),  # hex letters alone are a word, not an id
        ("/static/app.js", "/static/app.js"),
        ("/t/" + "x" * 41, "/t/{long}"),
        ("/a/b/c/d/e/f/g/h/i/j", "/a/b/c/d/e/f/g/h/..."),
        ("/v2/items/7/", "/v2/items/{int}/"),
    ],
)
def test_ids_in_a_path_are_folded(path: str, template: str) -> None:
    assert _http_served.path_template(path) == template


def test_requests_of_one_shape_share_one_name() -> None:
    assert _http_served.unrouted_name("GET", "/orders/1") == _http_served.unrouted_name(
        "GET", "/orders/2"
    )
    assert _http_served.unrouted_name("POST", "/orders/1") == "POST /orders/{int}"


def test_past_the_bound_a_new_path_is_named_by_its_verb_alone() -> None:
    names = {
        _http_served.unrouted_name("GET", f"/scan/word{n}x")
        for n in range(_http_served.MAX_TEMPLATES)
    }
    assert len(names) == _http_served.MAX_TEMPLATES
    assert _http_served.unrouted_name("GET", "/scan/another") == "GET"
    assert _http_served.unrouted_name("GET", "/scan/word0x") == "GET /scan/word0x"  # known: kept
