"""The knee pop of Blender's own IK constraint, measured as bench/solvers.py measures Reach IK's.

Run by ``bench/solvers.py`` in its own process (it imports the bpy wheel). A two-bone leg of length
L = 2 (thigh and shin 1.0 each, the knee bent forward), an IK constraint on the shin (chain length 2, a
pole target in front of the knee, Blender's default 'Standard' solver), the target moving from 0.9 L to
1.1 L in 200 equal steps along a fixed line from the hip. The knee angle (between the two bones' evaluated
Y axes) is read after each step; the measure is the largest per-step change over the median one. Prints
one JSON line.

.venv/bin/python bench/knee_pop_blender.py
"""

from __future__ import annotations

import json
import math
import os
import tempfile

os.environ.setdefault("BLENDER_USER_RESOURCES", tempfile.mkdtemp(prefix="reach_ik_knee_"))

import bpy  # (after BLENDER_USER_RESOURCES)
import numpy as np

STEPS = 200


def leg() -> tuple[bpy.types.Object, bpy.types.Object, float]:
    arm = bpy.data.armatures.new("Leg")
    rig = bpy.data.objects.new("Leg", arm)
    bpy.context.scene.collection.objects.link(rig)
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode="EDIT")
    thigh = arm.edit_bones.new("thigh")
    thigh.head, thigh.tail = (0.0, 0.0, 0.0), (0.0, 0.1, 0.995)
    shin = arm.edit_bones.new("shin")
    shin.head, shin.tail = (0.0, 0.1, 0.995), (0.0, 0.0, 1.99)
    shin.parent, shin.use_connect = thigh, True
    bpy.ops.object.mode_set(mode="OBJECT")
    length = arm.bones["thigh"].length + arm.bones["shin"].length
    target = bpy.data.objects.new("Target", None)
    pole = bpy.data.objects.new("Pole", None)
    for ob in (target, pole):
        bpy.context.scene.collection.objects.link(ob)
    pole.location = (0.0, 2.0, 1.0)
    ik = rig.pose.bones["shin"].constraints.new("IK")
    ik.target, ik.pole_target, ik.chain_count = target, pole, 2
    ik.pole_angle = math.radians(90.0)  # the knee toward the pole (+Y)
    return rig, target, length


def bend(rig: bpy.types.Object) -> float:
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    a = np.array(ev.pose.bones["thigh"].matrix)[:3, 1]
    b = np.array(ev.pose.bones["shin"].matrix)[:3, 1]
    return math.acos(max(-1.0, min(1.0, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))))


def main() -> None:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    rig, target, length = leg()
    direction = np.array([0.0, 0.25, 1.0]) / np.linalg.norm([0.0, 0.25, 1.0])
    angles = []
    for d in np.linspace(0.9 * length, 1.1 * length, STEPS + 1):
        target.location = tuple(d * direction)
        bpy.context.view_layer.update()
        angles.append(bend(rig))
    steps = np.abs(np.diff(angles))
    print(
        json.dumps(
            {
                "blender": bpy.app.version_string,
                "pop": float(steps.max() / np.median(steps)),
                "max_step_deg": math.degrees(float(steps.max())),
                "median_step_deg": math.degrees(float(np.median(steps))),
                "knee_at_1.1L_deg": math.degrees(angles[-1]),
            }
        )
    )


if __name__ == "__main__":
    main()
    if bpy.app.version < (5, 0, 0):
        os._exit(0)  # bpy 4.x may hang in its own interpreter shutdown
