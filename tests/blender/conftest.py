"""In-process tests on the `bpy` wheel, with Reach IK loaded the way Blender loads an extension.

A local extension repository (in a temp folder) holds a link to this checkout, so the add-on runs as
`bl_ext.reach_test.reach_ik` with relative imports, exactly as an installed extension would.
`BLENDER_USER_RESOURCES` points at a temp folder *before* bpy is imported, so the user's own Blender
configuration is never read or written.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
_TMP = Path(tempfile.mkdtemp(prefix="reach_ik_bpy_"))
os.environ["BLENDER_USER_RESOURCES"] = str(_TMP / "resources")

import bpy  # noqa: E402  (bpy must see BLENDER_USER_RESOURCES first)

# isort: split
import addon_utils  # noqa: E402  (only importable once bpy is)

REPO_MODULE = "reach_test"
ADDON = f"bl_ext.{REPO_MODULE}.reach_ik"
_exit_status = 0


def _setup_repo() -> None:
    repo = _TMP / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    link = repo / "reach_ik"
    if not link.exists():
        link.symlink_to(ROOT, target_is_directory=True)
    bpy.context.preferences.extensions.repos.new(
        name=REPO_MODULE, module=REPO_MODULE, custom_directory=str(repo), source="USER"
    )


def enable_addon() -> ModuleType:
    mod = addon_utils.enable(ADDON, default_set=True, handle_error=None)
    assert mod is not None, f"{ADDON} failed to enable (see the traceback above)"
    return mod


def disable_addon() -> None:
    addon_utils.disable(ADDON, default_set=True, handle_error=None)


def pytest_sessionstart(session: pytest.Session) -> None:
    print(f"\nbpy {bpy.app.version_string} (Python {sys.version.split()[0]}), add-on as {ADDON}")
    _setup_repo()
    enable_addon()


@pytest.fixture(autouse=True)
def fresh_scene() -> Iterator[None]:
    """Each test starts from an empty factory scene; add-ons stay enabled (read_homefile keeps them)."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    yield


@pytest.fixture
def addon() -> ModuleType:
    return sys.modules[ADDON]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)
    # Leave nothing registered: bpy < 5.0 can hang or crash at exit if anything of ours still is.
    if ADDON in bpy.context.preferences.addons:
        disable_addon()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # bpy 4.x may hang or segfault in its own interpreter shutdown even with everything unregistered
    # (BLENDER_NOTES). The summary line is already printed; leave with pytest's real status so a
    # failure still fails the run. 5.0 exits cleanly, so it takes the normal path.
    if bpy.app.version < (5, 0, 0):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status)
