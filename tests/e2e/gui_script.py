"""What the scripts that run inside the real Blender GUI share (tests/e2e/gui_*.py): each imports this from
its own folder, writes its result as JSON and quits Blender."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import bpy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: `demo`


def module(name: str) -> ModuleType:
    """The installed extension's module `rig.<name>` (its package name depends on the repository)."""
    return next(m for key, m in sys.modules.items() if key.endswith(f"reach_ik.rig.{name}"))


def view3d() -> tuple[bpy.types.Window, bpy.types.Area, bpy.types.Region]:
    """The first 3D viewport's window, area and main region (for operator overrides)."""
    for window in bpy.context.window_manager.windows:
        for area in window.screen.areas:
            if area.type == "VIEW_3D":
                return window, area, next(r for r in area.regions if r.type == "WINDOW")
    raise RuntimeError("no 3D viewport")


def finish(result: dict[str, object], out: str) -> None:
    """Write `result` to `out` as JSON and quit (returns None: a timer that calls it last stops)."""
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    bpy.ops.wm.quit_blender()


def guarded(result: dict[str, object], out: str) -> Callable[[Callable[[], float | None]], Callable[[], float | None]]:
    """A timer step whose error ends the script: recorded in `result["errors"]`, written, Blender quit."""

    def wrap(step: Callable[[], float | None]) -> Callable[[], float | None]:
        def run() -> float | None:
            try:
                return step()
            except Exception:
                result["errors"].append(traceback.format_exc())  # type: ignore[attr-defined]
                finish(result, out)
                return None

        return run

    return wrap


def set_up_humanoid() -> bpy.types.Object:
    """An empty scene with the demo's Mixamo-named humanoid (arms bent), set up in one click."""
    from demo import rigs as demo_rigs

    for ob in list(bpy.data.objects):
        bpy.data.objects.remove(ob)
    obj = demo_rigs.humanoid("mixamo", bent=True)
    bpy.context.view_layer.update()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.auto_setup() == {"FINISHED"}
    bpy.context.view_layer.update()
    return obj
