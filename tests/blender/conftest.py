"""In-process tests on the `bpy` wheel, with Reach IK loaded the way Blender loads an extension.

`tools/bpy_session.py` sets a temporary `BLENDER_USER_RESOURCES` before importing bpy and loads the add-on
from a temporary local extension repository, so it runs as `bl_ext.reach_test.reach_ik`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]  # tools/bpy_session.py, and demo/rigs.py for the rig builders

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402

ADDON = bpy_session.ADDON
enable_addon = bpy_session.enable_addon
disable_addon = bpy_session.disable_addon
_exit_status = 0


def pytest_sessionstart(session: pytest.Session) -> None:
    print(f"\nbpy {bpy.app.version_string} (Python {sys.version.split()[0]}), add-on as {ADDON}")
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
    disable_addon()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The summary line is printed by now; leave with pytest's real status (a failure still fails the run).
    if bpy.app.version < (5, 0, 0):
        bpy_session.finish(_exit_status)
