"""The built zip validates, installs with Blender's installer, and registers in a fresh process."""

from __future__ import annotations

import zipfile
from pathlib import Path

from conftest import Blender

CHECK = r"""
import bpy, json
mod = "bl_ext.user_default.reach_ik"
print("RESULT " + json.dumps({
    "version": bpy.app.version_string,
    "enabled": mod in bpy.context.preferences.addons,
    "prop": hasattr(bpy.types.Object, "reach_ik") and hasattr(bpy.types.PoseBone, "reach_ik"),
    "op": hasattr(bpy.ops.reach, "solve") and "REACH_OT_solve" in dir(bpy.types),
}))
"""


def test_zip_ships_no_tooling(addon_zip: Path) -> None:
    names = zipfile.ZipFile(addon_zip).namelist()
    assert "blender_manifest.toml" in names and "__init__.py" in names, names
    leaked = [n for n in names if n.split("/")[0] in {"tests", "bench", "tools", "demo", "docs", ".venv"}]
    assert not leaked, f"the shipped zip must not contain tests/bench/tooling: {leaked}"


def test_installed_and_registered(installed: Blender) -> None:
    result = installed.python(CHECK)
    assert result["enabled"], f"reach_ik is not enabled after install-file -e: {result}"
    assert result["prop"] and result["op"], f"reach_ik did not register its properties/operators: {result}"
    assert not (Path.home() / ".config" / "blender" / "4.3" / "extensions" / "user_default" / "reach_ik").exists()
