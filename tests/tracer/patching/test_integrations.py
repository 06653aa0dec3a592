"""The integration mechanism: a library is patched when the program imports it, never before,
exactly once, undone exactly, switchable off by name, and a hook that fails costs the program
nothing but one warning."""

from __future__ import annotations

import importlib
import importlib.machinery
import logging
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tracer
from tracer._patching import integrations

LIBRARY = "invoseq_fake_library"


def _hook(module: types.ModuleType) -> Iterable[integrations.PatchSpec]:
    def make(original: Any) -> Any:
        def greet(name: str) -> str:
            return "patched " + original(name)

        return greet

    return [(module, "greet", make)]


def _broken_hook(module: types.ModuleType) -> Iterable[integrations.PatchSpec]:
    raise RuntimeError(f"unknown version {module.VERSION}")


@pytest.fixture(name="library")
def _library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A library on sys.path, not imported yet, and an integration ``fake`` that patches it."""
    (tmp_path / f"{LIBRARY}.py").write_text(
        "VERSION = '9.9'\ndef greet(name):\n    return 'hello ' + name\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = types.ModuleType(f"{integrations.__name__}.fake")
    fake.HOOKS = {LIBRARY: _hook}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(integrations, "INTEGRATIONS", (*integrations.INTEGRATIONS, "fake"))
    monkeypatch.delenv(integrations.DISABLED_ENV, raising=False)
    yield tmp_path
    tracer.uninstrument()
    sys.modules.pop(LIBRARY, None)


def _import() -> Any:
    return importlib.import_module(LIBRARY)


def test_a_library_imported_after_instrumenting_is_patched_on_import(library: Path) -> None:
    tracer.instrument()
    assert LIBRARY not in sys.modules
    assert _import().greet("ada") == "patched hello ada"


def test_a_library_imported_before_instrumenting_is_patched_at_once(library: Path) -> None:
    module = _import()
    tracer.instrument()
    assert module.greet("ada") == "patched hello ada"


def test_instrumenting_twice_patches_once_and_uninstrument_restores_exactly(
    library: Path,
) -> None:
    module = _import()
    original = module.greet
    tracer.instrument()
    tracer.instrument()
    assert module.greet("ada") == "patched hello ada"
    tracer.uninstrument()
    assert module.greet is original


def test_after_uninstrument_an_import_is_not_patched(library: Path) -> None:
    tracer.instrument()
    tracer.uninstrument()
    assert _import().greet("ada") == "hello ada"


def test_the_module_keeps_its_own_loader_and_reloads(library: Path) -> None:
    tracer.instrument()
    module = _import()
    assert isinstance(module.__loader__, importlib.machinery.SourceFileLoader)
    assert module.__spec__.loader is module.__loader__
    reloaded = importlib.reload(module)
    assert reloaded.greet("ada") == "patched hello ada"  # a reload runs the hooks again


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_an_integration_is_switched_off_by_name(
    library: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "argument":
        tracer.instrument(disable=["fake"])
    else:
        monkeypatch.setenv(integrations.DISABLED_ENV, "flask, fake")
        tracer.instrument()
    assert _import().greet("ada") == "hello ada"


def test_an_unknown_name_to_disable_is_an_error_that_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown integration 'flaks'; known: wsgi, flask"):
        tracer.instrument(disable=["flaks"])
    assert not tracer._patching.instrumented()


def test_an_unknown_name_in_the_environment_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(integrations.DISABLED_ENV, "flaks")
    with caplog.at_level(logging.WARNING, logger="tracer"):
        tracer.instrument()
    tracer.uninstrument()
    assert "INVOSEQ_DISABLED_INTEGRATIONS: unknown integration 'flaks' ignored" in caplog.text


def test_a_hook_that_fails_skips_its_integration_with_one_warning(
    library: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules[f"{integrations.__name__}.fake"].HOOKS, LIBRARY, _broken_hook)
    integrations._warned.clear()
    with caplog.at_level(logging.WARNING, logger="tracer"):
        tracer.instrument()
        assert _import().greet("ada") == "hello ada"
        sys.modules.pop(LIBRARY)
        tracer.instrument()
        _import()
    warnings = [r.getMessage() for r in caplog.records if "integration fake" in r.getMessage()]
    assert warnings == [
        f"invoseq: integration fake skipped for {LIBRARY}: RuntimeError('unknown version 9.9')"
    ]


def test_instrumenting_imports_none_of_the_libraries_it_integrates_with() -> None:
    program = textwrap.dedent(
        """
        import sys
        import tracer
        tracer.instrument()
        libraries = ("flask", "django", "starlette", "fastapi", "aiohttp", "requests",
                     "urllib3", "httpx", "werkzeug", "anyio")
        print(sorted(name for name in libraries if name in sys.modules))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("otel", "expected"),
    [
        ("aiohttp-client,grpc_aio_server", {"aiohttp_client", "grpc_server"}),
        ("flask, sqlalchemy", {"flask"}),  # a name of no invoseq integration: ignored, quietly
        ("*", set(integrations.INTEGRATIONS)),
    ],
)
def test_opentelemetrys_disabled_instrumentations_turn_integrations_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, otel: str, expected: set[str]
) -> None:
    monkeypatch.delenv(integrations.DISABLED_ENV, raising=False)
    monkeypatch.setenv(integrations.OTEL_DISABLED_ENV, otel)
    with caplog.at_level(logging.WARNING, logger="tracer"):
        found = integrations.disabled(None)
    assert set(found) == expected
    assert set(found.values()) == {integrations.OTEL_DISABLED_ENV}
    assert caplog.text == ""


def test_a_disabled_integration_says_which_setting_disabled_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(integrations.DISABLED_ENV, "requests")
    monkeypatch.setenv(integrations.OTEL_DISABLED_ENV, "requests,httpx")
    tracer.instrument(disable=["flask"])
    try:
        states = {s.name: s for s in integrations.report()}
    finally:
        tracer.uninstrument()
    assert states["flask"].why == "by instrument(disable=...)"
    assert states["requests"].why == "by INVOSEQ_DISABLED_INTEGRATIONS"
    assert states["httpx"].why == "by OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
    assert {states[n].state for n in ("flask", "requests", "httpx")} == {"disabled"}


@pytest.mark.parametrize(
    ("versions", "version", "supported"),
    [
        (">=2.2", "3.1.3", True),
        (">=2.2", "2.1.9", False),
        (">=2.2", "2.2", True),
        (">=1,<3", "3.0.0", False),
        (">=1,<3", "2.99", True),
        (">=0.24", "0.24.0rc1", True),  # compared by release numbers
        ("", "0.0.1", True),
        (">=2", "unreadable", True),  # cannot tell: patched, the hooks check what they patch
    ],
)
def test_supported_versions_compare_by_release_numbers(
    versions: str, version: str, supported: bool
) -> None:
    from tracer._patching.integrations.registry import supports

    assert supports(versions, version) is supported


def test_every_integration_module_hooks_the_modules_its_record_declares() -> None:
    from tracer._patching.integrations.registry import REGISTRY

    for record in REGISTRY:
        module = importlib.import_module(f"{integrations.__name__}.{record.name}")
        assert tuple(module.HOOKS) == record.modules, record.name


@pytest.fixture(name="fresh_versions")
def _fresh_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer._patching.integrations import states

    monkeypatch.setattr(states, "_dist_infos", None)
    monkeypatch.setattr(states, "_versions", {})


def test_an_installed_version_is_the_first_dist_info_on_sys_path_by_normalized_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_versions: None
) -> None:
    from tracer._patching.integrations import states

    first, second = tmp_path / "first", tmp_path / "second"
    (first / "Shop_Pricing-2.0.1.dist-info").mkdir(parents=True)
    (second / "shop_pricing-1.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    assert states.installed_version("shop-pricing") == "2.0.1"
    assert states.installed_version("Shop.Pricing") == "2.0.1"


def test_a_distribution_without_a_dist_info_is_read_through_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_versions: None
) -> None:
    """An egg-info (a legacy or develop install) is read the slow way; none at all: None."""
    from tracer._patching.integrations import states

    info = tmp_path / "legacy_shop.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy-shop\nVersion: 0.9\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert states.installed_version("legacy-shop") == "0.9"
    assert states.installed_version("no-such-distribution") is None
