"""Project-wide rules that hold without Blender: pure solvers, a complete manifest."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# numpy and Python's standard library; never bpy (mathutils only in solvers/scalar/ and the live program, see below).
ALLOWED_IN_SOLVERS = {"numpy", "__future__"} | set(sys.stdlib_module_names)
LIVE_PROGRAM = {"core/live.py", "core/lookahead.py"}


def test_solvers_import_numpy_only() -> None:
    offenders = []
    for path in sorted([*(ROOT / "solvers").rglob("*.py"), *(ROOT / "core").glob("*.py")]):
        # The scalar kernels (solvers/scalar/), the live program that keeps a rig's chains as their objects
        # between updates (core/live.py) and the playback it solves ahead (core/lookahead.py) may use mathutils,
        # Blender's C math module; nothing else may.
        scalar = path.parent.name == "scalar" or path.relative_to(ROOT).as_posix() in LIVE_PROGRAM
        allowed = ALLOWED_IN_SOLVERS | ({"mathutils"} if scalar else set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] not in allowed]
    rule = "solvers/ and core/ must stay pure numpy (no bpy; mathutils only in solvers/scalar/ and the live program): "
    assert not offenders, rule + "; ".join(offenders)


def test_solvers_use_relative_imports() -> None:
    # Inside Blender the package is bl_ext.<repo>.reach_ik.solvers: an absolute `import solvers` would break.
    bad = [
        f"{p.name}: {line.strip()}"
        for p in sorted([*(ROOT / "solvers").rglob("*.py"), *(ROOT / "core").glob("*.py")])
        for line in p.read_text().splitlines()
        if line.lstrip().startswith(("from solvers", "import solvers", "from reach_ik", "import reach_ik"))
    ]
    assert not bad, f"use relative imports in solvers/: {bad}"


def test_manifest_complete() -> None:
    m = tomllib.loads((ROOT / "blender_manifest.toml").read_text())
    required = {
        "schema_version",
        "id",
        "name",
        "tagline",
        "version",
        "type",
        "maintainer",
        "license",
        "blender_version_min",
    }
    assert required <= m.keys(), f"manifest lacks {required - m.keys()}"
    assert m["id"] == "reach_ik" and m["id"].isidentifier()
    assert m["blender_version_min"] == "4.2.0"
    assert len(m["tagline"]) <= 64 and not m["tagline"].endswith((".", "!", "?"))
    assert m["license"] == ["SPDX:GPL-3.0-or-later"]
    for pattern in ("/tests/", "/bench/", "/tools/", "/.venv*/"):
        assert pattern in m["build"]["paths_exclude_pattern"], f"{pattern} must be excluded from the zip"


def test_unit_tier_runs_without_bpy() -> None:
    """Nothing in this tier (test modules, fixtures, pytest's own collection) may import Blender."""
    import sys

    loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"bpy", "mathutils", "bl_ext"})
    assert not loaded, f"the unit tier imported Blender modules: {loaded[:5]}"
