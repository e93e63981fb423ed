"""Start an in-process Blender (the bpy wheel) with Reach IK loaded as an extension, for tests/bench/demo.

`BLENDER_USER_RESOURCES` points at a temp folder before bpy is imported, so the user's own Blender config is
never read or written. The add-on is loaded from a temporary local extension repository that links to this
checkout, so it runs as `bl_ext.<repo>.reach_ik`, exactly as an installed extension.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
REPO_MODULE = "reach_test"
ADDON = f"bl_ext.{REPO_MODULE}.reach_ik"
_TMP = Path(tempfile.mkdtemp(prefix="reach_ik_bpy_"))
os.environ.setdefault("BLENDER_USER_RESOURCES", str(_TMP / "resources"))

import bpy  # noqa: E402  (must come after BLENDER_USER_RESOURCES)

# isort: split
import addon_utils  # noqa: E402  (only importable once bpy is)


def _setup_repo() -> None:
    repo = _TMP / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    link = repo / "reach_ik"
    if not link.exists():
        link.symlink_to(ROOT, target_is_directory=True)
    prefs = bpy.context.preferences
    if not any(r.module == REPO_MODULE for r in prefs.extensions.repos):
        prefs.extensions.repos.new(name=REPO_MODULE, module=REPO_MODULE, custom_directory=str(repo), source="USER")


def enable_addon() -> ModuleType:
    _setup_repo()
    mod = addon_utils.enable(ADDON, default_set=True, handle_error=None)
    if mod is None:
        raise RuntimeError(f"{ADDON} failed to enable (see the traceback above)")
    return mod


def disable_addon() -> None:
    if ADDON in bpy.context.preferences.addons:
        addon_utils.disable(ADDON, default_set=True, handle_error=None)


def submodule(name: str) -> ModuleType:
    """A submodule of the running add-on, e.g. submodule('rig.solve')."""
    return sys.modules[f"{ADDON}.{name}"]


def finish(status: int) -> None:
    """Unregister everything and leave with `status`.

    bpy 4.x may hang or segfault in its own interpreter shutdown even with nothing registered
    (BLENDER_NOTES), so below 5.0 we flush and exit hard with the real status.
    """
    disable_addon()
    if bpy.app.version < (5, 0, 0):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
