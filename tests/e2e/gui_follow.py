"""Run inside the real Blender GUI (tests/e2e/test_gui_follow.py): a chain whose target follows another rig's
bone through a Child Of at half influence (which live solving cannot predict) is solved again right after
the leader's update, by the timer Reach IK schedules, without any further edit. Writes JSON to the path in
``builtins.REACH_FOLLOW`` and quits."""

from __future__ import annotations

import builtins
import sys
import traceback
from pathlib import Path

import bpy
from mathutils import Vector

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gui_script import finish, guarded

OUT = builtins.REACH_FOLLOW  # type: ignore[attr-defined]
result: dict[str, object] = {"ok": False, "errors": [], "steps": []}


def _chain_rig(name: str, x: float) -> bpy.types.Object:
    arm = bpy.data.armatures.new(name)
    obj = bpy.data.objects.new(name, arm)
    obj.location = (x, 0.0, 0.0)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    head = Vector((0.0, 0.0, 0.0))
    for i in range(3):
        tail = head + Vector((0.15 * (1 if i % 2 else -1), 0.0, 1.0))
        eb = arm.edit_bones.new(f"b{i}")
        eb.head, eb.tail = head, tail
        if i:
            eb.parent = arm.edit_bones[f"b{i - 1}"]
            eb.use_connect = True
        head = tail
    bpy.ops.object.mode_set(mode="OBJECT")
    return obj


def _empty(name: str, loc: tuple[float, float, float]) -> bpy.types.Object:
    ob = bpy.data.objects.new(name, None)
    bpy.context.scene.collection.objects.link(ob)
    ob.location = loc
    return ob


def _chain(rig: bpy.types.Object, target: bpy.types.Object, name: str) -> None:
    ch = rig.reach_ik.chains.add()
    ch.name, ch.tip_bone, ch.chain_length, ch.solver, ch.target = name, "b2", 3, "FABRIK", target


def _measure(tag: str) -> None:
    deps = bpy.context.evaluated_depsgraph_get()
    a, ta = bpy.data.objects["A"], bpy.data.objects["TA"]
    ev = a.evaluated_get(deps)
    tip = ev.matrix_world @ ev.pose.bones["b2"].tail
    goal = ta.evaluated_get(deps).matrix_world.translation
    ch = a.reach_ik.chains[0]
    result["steps"].append(  # type: ignore[union-attr]
        {"tag": tag, "miss": (tip - goal).length, "valid": ch.is_valid, "message": ch.message, "residual": ch.residual}
    )


STEPS = [(0.6, 0.3, 2.4), (0.3, -0.2, 2.6), (0.7, 0.1, 2.2)]
state = {"k": 0}


@guarded(result, OUT)
def _step() -> float | None:
    k = state["k"]
    if k:
        _measure(f"after move {k - 1}")  # one second after the move: the timers have run
    if k == len(STEPS):
        result["ok"] = True
        return finish(result, OUT)
    bpy.data.objects["TB"].location = STEPS[k]  # as a drag would: the WM evaluates after this timer
    state["k"] = k + 1
    return 1.0


try:
    b = _chain_rig("B", 0.0)
    _chain(b, _empty("TB", (0.5, 0.2, 2.5)), "lead")
    b.reach_ik.start_from = "REST"
    a = _chain_rig("A", 1.5)
    ta = _empty("TA", (0.9, 0.1, 2.4))
    bpy.context.view_layer.update()
    con = ta.constraints.new("CHILD_OF")
    con.target, con.subtarget, con.influence = b, "b2", 0.5
    bpy.context.view_layer.update()
    con.inverse_matrix = (b.matrix_world @ b.pose.bones["b2"].matrix).inverted()
    _chain(a, ta, "follow")
    bpy.context.view_layer.update()
    bpy.app.timers.register(_step, first_interval=2.0)
except Exception:
    result["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
    finish(result, OUT)
