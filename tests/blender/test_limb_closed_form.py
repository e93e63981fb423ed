"""The rig Set Up Character makes: its hinged limbs solve in closed form, measured from the evaluated pose.

The set-up's Knee/Elbow hinges bound on nearly every drag (the upper bone's twist left the hinge's axis off the
pole's plane), and the global stage (`solvers/search.py`) ran for the arm on each update. Here the hand and
foot controls go to places a limb reaches: the tips land on them, the elbows and knees stay inside their
hinges (checked on Blender's evaluated pose), bend toward their poles' side, and the global stage never runs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

import bpy
import numpy as np
import pytest
import rigs
from conftest import ADDON
from mathutils import Vector

from demo import rigs as demo_rigs


@pytest.fixture
def stage_calls() -> Iterator[list[int]]:
    search = sys.modules[f"{ADDON}.solvers.search"]
    original = search.search
    calls: list[int] = []

    def counting(batch, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(batch.size)
        return original(batch, *args, **kwargs)

    search.search = counting
    try:
        yield calls
    finally:
        search.search = original


def _set_up() -> bpy.types.Object:
    obj = demo_rigs.humanoid("mixamo", bent=True)
    rigs.update()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.auto_setup() == {"FINISHED"}
    rigs.update()
    return obj


def _inside_limits(obj: bpy.types.Object, bone: str) -> bool:
    """Whether the evaluated bone's direction lies in its cone about its reference frame (the parent's
    evaluated pose @ its rest relative to the parent), 0.5 degree of slack for float32."""
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    pb = ev.pose.bones[bone]
    rest_rel = pb.parent.bone.matrix_local.to_3x3().inverted() @ pb.bone.matrix_local.to_3x3()
    ref = pb.parent.matrix.to_3x3().normalized() @ rest_rel
    d = ref.inverted() @ pb.matrix.to_3x3().normalized().col[1]
    lim = obj.pose.bones[bone].reach_ik
    slack = math.radians(0.5)
    theta = math.atan2(math.hypot(d.x, d.z), d.y)
    if theta < 1e-9:
        return True
    a = (lim.cone_right if d.x >= 0 else lim.cone_left) + slack
    b = (lim.cone_up if d.z >= 0 else lim.cone_down) + slack
    cx, cz = theta * d.x / math.hypot(d.x, d.z), theta * d.z / math.hypot(d.x, d.z)
    return (cx / a) ** 2 + (cz / b) ** 2 <= 1.0


@pytest.mark.parametrize("chain", ["arm.L", "leg.R"])
def test_set_up_limbs_reach_inside_their_hinges_without_the_global_stage(chain: str, stage_calls: list[int]) -> None:
    obj = _set_up()
    ch = next(c for c in obj.reach_ik.chains if c.name == chain)
    tip = obj.pose.bones[ch.tip_bone]
    upper = tip.parent
    root = Vector(rigs.world_head(obj, upper.name))
    reach = upper.bone.length + tip.bone.length
    control = obj.pose.bones[ch.target_bone]
    start = Vector(rigs.world_head(obj, ch.target_bone))
    # Toward the root from where the control stands (the limb folds in its own plane: always reachable),
    # and a little forward or sideways of that line.
    ways = [(0.0, 0.0, 0.0), (0.0, -0.15, 0.0), (0.1, -0.1, 0.05), (-0.08, -0.12, 0.0)]
    checked = 0
    for frac in (0.5, 0.65, 0.8, 0.92):
        for way in ways:
            goal = root + ((start - root).normalized() + Vector(way)).normalized() * (reach * frac)
            m = obj.matrix_world.inverted() @ (obj.matrix_world @ control.matrix)
            m.translation = obj.matrix_world.inverted() @ goal
            control.matrix = m
            rigs.update()
            got = Vector(rigs.world_tail(obj, ch.tip_bone))
            ch = next(c for c in obj.reach_ik.chains if c.name == chain)
            if (got - goal).length < 2e-3:
                checked += 1
            else:
                # Out of reach under the limits: the chain says so and is not searched either.
                assert not ch.message.startswith("Reached"), ch.message
            assert _inside_limits(obj, ch.tip_bone), f"{chain}: the lower bone left its hinge at {goal}"
    assert checked >= 12, f"{chain}: only {checked} of 16 places reached"
    assert not stage_calls, f"the global stage searched {len(stage_calls)} times"
    assert np.isfinite(ch.residual)
