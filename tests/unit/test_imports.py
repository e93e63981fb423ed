"""The add-on's modules import each other without cycles (data flows one way: rig -> core -> solvers).

Read from the source with `ast`, so every relative import counts, also those inside functions (a deferred
import hides a cycle from Python's import machinery but not from a reader).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("solvers", "core", "rig", "operators", "ui")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _edges(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, for the relative imports between the add-on's modules."""
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = here[: len(here) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            found = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            # `from . import x` of a submodule runs the package's __init__ only as the parent of `x`, which is
            # already importing: an edge to the package itself only when a name is not a submodule.
            if target in modules and len(found) < len(node.names):
                found.append(target)
            for other in found:
                if other != name:
                    edges[name].setdefault(other, node.lineno)
    return edges


def _cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def _describe(cycle: list[str], edges: dict[str, dict[str, int]]) -> str:
    links = [f"{a} -> {b} (line {edges[a][b]})" for a in cycle for b in edges[a] if b in cycle]
    return "; ".join(links)


def _cycles_in(packages: tuple[str, ...]) -> str:
    edges = _edges(_modules())
    found = [c for c in _cycles(edges) if any(m.split(".")[0] in packages for m in c)]
    return "\n".join(_describe(c, edges) for c in found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycle_in_core_rig_operators_ui() -> None:
    cycles = _cycles_in(("core", "rig", "operators", "ui"))
    assert not cycles, f"import cycles (move the shared piece to the module that owns it): {cycles}"


def test_no_import_cycle_in_solvers() -> None:
    cycles = _cycles_in(("solvers",))
    assert not cycles, f"import cycles (move the shared piece to the module that owns it): {cycles}"
