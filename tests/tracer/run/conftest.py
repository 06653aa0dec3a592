"""What the import hook's tests share: modules written to a fresh path entry, loaded, and the
hook checked to be gone afterwards (``write``); the sources of the modules they trace."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tracer.run.hook_support import Write
from tracer.run import autowrap


@pytest.fixture(name="write")
def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Write]:
    """Write modules under a fresh sys.path entry; afterwards uninstall the hook and forget the
    modules, and check that sys.meta_path is exactly as before."""
    root = tmp_path / "src"
    root.mkdir()
    meta_path = list(sys.meta_path)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(autowrap, "_error_logged", False)

    def write(dotted: str, source: str) -> Path:
        parts = dotted.split(".")
        for depth in range(1, len(parts)):
            package = root.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
        path = root.joinpath(*parts[:-1], parts[-1] + ".py")
        path.write_text(textwrap.dedent(source))
        return path

    yield write
    autowrap.uninstall()
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(root)):
            del sys.modules[name]
    sys.path_importer_cache.pop(str(root), None)
    assert sys.meta_path == meta_path
    assert autowrap.installed() is None
