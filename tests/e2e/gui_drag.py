"""Run inside the real Blender GUI (tests/e2e/test_gui_drag.py): the humanoid set up in one click, its left
hand's control bone moved by Blender's own Move operator (`transform.translate`, as a drag's steps are) in the
3D viewport; after each move the viewport has redrawn (Blender evaluated the move): records how many of Reach
IK's solves were made before the evaluation (`rig.live.guess_count`) and in all (`solve_count`), the hand's
distance to its control as Blender shows it and the chain's status. Writes JSON to the path in
``builtins.REACH_DRAG`` and quits."""

from __future__ import annotations

import builtins
import sys
import traceback
from pathlib import Path

import bpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gui_script import finish, guarded, module, set_up_humanoid, view3d

OUT = builtins.REACH_DRAG  # type: ignore[attr-defined]
result: dict[str, object] = {"ok": False, "errors": [], "steps": []}
# Toward the body and around, within the arm's reach (the set-up humanoid's arm is nearly straight).
MOVES = [(-0.06, 0.0, 0.02), (-0.05, -0.03, 0.0), (0.02, 0.0, -0.05), (0.0, 0.04, 0.03), (-0.04, 0.0, 0.0)]
state = {"k": 0, "guessed": 0, "solved": 0}


def _measure(tag: str, guessed: int, solved: int) -> None:
    obj = bpy.data.objects["Character"]
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    ch = next(c for c in obj.reach_ik.chains if c.name == "arm.L")
    tip = ev.matrix_world @ ev.pose.bones[ch.tip_bone].tail
    goal = ev.matrix_world @ ev.pose.bones[ch.target_bone].head
    result["steps"].append(  # type: ignore[union-attr]
        {
            "tag": tag,
            "guesses": module("live").guess_count(obj) - guessed,
            "solves": module("live").solve_count(obj) - solved,
            "miss": (tip - goal).length,
            "valid": ch.is_valid,
            "message": ch.message,
            "residual": ch.residual,
            "tolerance": obj.reach_ik.tolerance,
        }
    )


@guarded(result, OUT)
def _step() -> float | None:
    k = state["k"]
    if k:
        _measure(f"after move {k - 1}", state["guessed"], state["solved"])
    if k == len(MOVES):
        result["ok"] = True
        return finish(result, OUT)
    obj = bpy.data.objects["Character"]
    state["guessed"] = module("live").guess_count(obj)
    state["solved"] = module("live").solve_count(obj)
    window, area, region = view3d()
    with bpy.context.temp_override(window=window, area=area, region=region, active_object=obj, object=obj):
        bpy.ops.transform.translate(value=MOVES[k], orient_type="GLOBAL")
    state["k"] = k + 1
    return 0.5  # the viewport redraws (Blender evaluates the move) before the next step


try:
    obj = set_up_humanoid()
    bpy.ops.object.mode_set(mode="POSE")
    for pb in obj.pose.bones:
        pb.bone.select = pb.name == "IK-hand.L"
    obj.data.bones.active = obj.data.bones["IK-hand.L"]
    bpy.context.view_layer.update()
    bpy.app.timers.register(_step, first_interval=2.0)
except Exception:
    result["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
    finish(result, OUT)
