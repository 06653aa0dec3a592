"""The public surface: ``tracer`` and its public modules say what they export (``__all__``),
every name there exists, and the API's types are importable from ``tracer`` itself."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = ["tracer", "tracer.config", "tracer.wire", "invoseq.wire", "tracer.propagation"]
PUBLIC += ["tracer.otel", "tracer.testing", "tracer.web"]


@pytest.mark.parametrize("name", PUBLIC)
def test_a_public_module_names_its_exports_and_each_exists(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    assert len(set(exported)) == len(exported)
    assert [n for n in exported if not hasattr(module, n)] == []
    assert [n for n in exported if n.startswith("_")] == []


def test_the_api_s_types_come_from_tracer_itself() -> None:
    import tracer

    for name in ("Config", "ConfigError", "Settings", "TracerStats", "SequenceContext"):
        assert name in tracer.__all__
    assert isinstance(tracer.stats(), tracer.TracerStats)
