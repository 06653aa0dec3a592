"""Imports point down: every import of every module of `invoseq`, `tracer` and `cmr` (lazy ones
inside functions and type-checking ones too) against the layer table in docs/architecture.md, and no
import cycle between modules (type-checking imports aside: they never run).

Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` first, so what those import counts
as imported by the module that imports `a.b.c` (`effective_imports`): `tracer.wire` sits in the
protocol layer, yet importing it from outside `tracer` runs `tracer/__init__`, the runtime. A
module's own packages are left out: `tracer/__init__` is the front door above `tracer._core`,
and every module of a package runs its package's `__init__` whichever way it is reached."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("invoseq", "tracer", "cmr")
TABLE = re.compile(r"<!-- layers: .*? -->\n(.*?)<!-- end of layers -->", re.S)


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]
    below: tuple[str, ...]


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    runs: bool  # False: only under `if TYPE_CHECKING:`


def read_layers() -> list[Layer]:
    found = TABLE.search((ROOT / "docs" / "architecture.md").read_text())
    assert found, "docs/architecture.md has no layer table"
    layers = []
    for row in found.group(1).splitlines()[2:]:  # after the header and its rule
        name, modules, below = (cell.strip() for cell in row.strip().strip("|").split("|"))
        layers.append(
            Layer(
                name,
                tuple(re.findall(r"`([\w.]+)`", modules)),
                tuple(n.strip() for n in below.split(",") if n.strip()),
            )
        )
    return layers


def find_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
        # A C extension is a module too, known by its stub: importing it imports nothing else.
        for path in sorted((ROOT / package).rglob("*.pyi")):
            if not path.with_suffix(".py").exists():
                modules[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return modules


MODULES = find_modules()


def _module_of(name: str) -> str | None:
    """The module an imported name lives in: the longest known module that prefixes it."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def read_imports(name: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    type_only = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # `from package import module` imports the module; `from module import name`, the module
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for target in targets:
            module = _module_of(target)
            if module is not None and module != name:
                found.append(Import(name, module, node.lineno, node.lineno not in type_only))
    return found


DIRECT_IMPORTS = [i for name, path in MODULES.items() for i in read_imports(name, path)]


def _packages_above(module: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``module``: ``a``, ``a.b`` for ``a.b.c``."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def effective_imports(direct: list[Import]) -> list[Import]:
    """``direct`` plus, for each import of a module inside another package, what that package's
    ``__init__`` (and those above it) imports, as imported by the importing module, at the line of
    its import (to a fixed point: an ``__init__``'s imports may cross into a third package)."""
    by_source: dict[str, list[Import]] = {}
    for edge in direct:
        by_source.setdefault(edge.source, []).append(edge)
    found = list(direct)
    seen = {(edge.source, edge.target) for edge in direct}
    pending = list(direct)
    while pending:
        edge = pending.pop()
        own = {edge.source, *_packages_above(edge.source)}
        for package in _packages_above(edge.target):
            if package in own:
                continue
            for init_edge in by_source.get(package, []):
                if init_edge.target == edge.source or (edge.source, init_edge.target) in seen:
                    continue
                derived = Import(
                    edge.source, init_edge.target, edge.line, edge.runs and init_edge.runs
                )
                seen.add((edge.source, init_edge.target))
                found.append(derived)
                pending.append(derived)
    return found


IMPORTS = effective_imports(DIRECT_IMPORTS)


def layer_of(module: str, layers: list[Layer]) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for covered in layer.modules:
            covers = module == covered or module.startswith(covered + ".")
            if covers and (best is None or len(covered) > best[0]):
                best = (len(covered), layer)
    return None if best is None else best[1]


def reachable(layer: Layer, by_name: dict[str, Layer]) -> set[str]:
    """The layer itself and every layer below it."""
    seen, pending = {layer.name}, list(layer.below)
    while pending:
        name = pending.pop()
        if name not in seen:
            seen.add(name)
            pending += by_name[name].below
    return seen


def test_the_layer_table_names_real_modules_and_layers() -> None:
    layers = read_layers()
    names = {layer.name for layer in layers}
    assert len(names) == len(layers), "a layer is named twice"
    for layer in layers:
        assert set(layer.below) <= names, f"{layer.name} lists an unknown layer"
        for module in layer.modules:
            assert module in MODULES, f"{module} (layer {layer.name}) is no module"


def test_every_module_has_a_layer() -> None:
    layers = read_layers()
    assert [m for m in MODULES if layer_of(m, layers) is None] == []


def test_imports_point_down() -> None:
    layers = read_layers()
    by_name = {layer.name: layer for layer in layers}
    upward = []
    for edge in IMPORTS:
        source, target = layer_of(edge.source, layers), layer_of(edge.target, layers)
        assert source is not None
        assert target is not None
        if target.name not in reachable(source, by_name):
            through = "" if edge in DIRECT_IMPORTS else " (through a package's __init__)"
            upward.append(
                f"{MODULES[edge.source].relative_to(ROOT)}:{edge.line} imports {edge.target}"
                f"{through} ({source.name} -> {target.name})"
            )
    assert upward == []


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in DIRECT_IMPORTS:
        if edge.runs:
            graph[edge.source].add(edge.target)
    cycles = _cycles(graph)
    assert cycles == [], "\n".join(" -> ".join(sorted(c)) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root, edges in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert [sorted(c) for c in _cycles(graph)] == expected


def test_the_layer_check_sees_an_upward_import() -> None:
    """The check is not vacuous: a core module importing the runtime is refused."""
    layers = read_layers()
    by_name = {layer.name: layer for layer in layers}
    core, runtime = layer_of("tracer._core.recorder", layers), layer_of("tracer._runtime", layers)
    assert core is not None
    assert runtime is not None
    assert runtime.name not in reachable(core, by_name)
    assert any(edge.source.startswith("tracer._core") for edge in IMPORTS)


def test_an_import_runs_the_init_of_the_packages_above_it() -> None:
    """The init rule is not vacuous: `tracer.wire` is in the protocol layer, but a store module
    importing it would run `tracer/__init__`, and with it the runtime."""
    layers = read_layers()
    by_name = {layer.name: layer for layer in layers}
    store = layer_of("cmr.store.base", layers)
    assert store is not None
    assert "protocol" in reachable(store, by_name)
    imagined = Import("cmr.store.base", "tracer.wire", 1, runs=True)
    reached = {
        edge.target
        for edge in effective_imports([*DIRECT_IMPORTS, imagined])
        if edge.source == "cmr.store.base"
    }
    assert "tracer._runtime" in reached
    runtime = layer_of("tracer._runtime", layers)
    assert runtime is not None
    assert runtime.name not in reachable(store, by_name)


def test_cmr_reaches_no_module_of_the_tracer() -> None:
    """The repository stands alone: no module of `cmr` imports one of `tracer`, directly or
    through the packages above what it imports (lazy and type-checking imports too); the
    protocol is `invoseq`. `tests/test_startup.py` checks the same of what loads at run time."""
    reached: dict[str, set[str]] = {}
    for edge in IMPORTS:
        reached.setdefault(edge.source, set()).add(edge.target)
    crossing = []
    for module in MODULES:
        if module != "cmr" and not module.startswith("cmr."):
            continue
        seen, pending = {module}, [module]
        while pending:
            for target in reached.get(pending.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    pending.append(target)
        crossing += [f"{module} -> {t}" for t in sorted(seen) if t.split(".")[0] == "tracer"]
    assert crossing == []
