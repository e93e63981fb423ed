"""Full Body (`Object.reach_ik.full_body`): pull a hand and the body follows, the feet stay planted.

Measured from Blender's evaluated pose, on the one-click humanoid (`demo/humanoids.py` + Set Up Character)
and on Rigify's human metarig.
"""

from __future__ import annotations

import bpy
import numpy as np
import pytest
import rigs
from mathutils import Vector

from demo import rigs as demo_rigs


def _chain(obj: bpy.types.Object, name: str) -> bpy.types.PropertyGroup:
    return next(c for c in obj.reach_ik.chains if c.name == name)


def _control(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> np.ndarray:
    if ch.target_bone:
        return rigs.world_head(ch.target, ch.target_bone)
    return np.array(ch.target.matrix_world.translation)


def _move_control(obj: bpy.types.Object, ch: bpy.types.PropertyGroup, where: np.ndarray) -> None:
    if ch.target_bone:
        pb = ch.target.pose.bones[ch.target_bone]
        m = ch.target.matrix_world @ pb.matrix
        m.translation = Vector(where.tolist())
        pb.matrix = ch.target.matrix_world.inverted() @ m
    else:
        ch.target.matrix_world.translation = Vector(where.tolist())
    rigs.update()


def _tip(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> np.ndarray:
    return rigs.world_tail(obj, ch.tip_bone)


def _root_bone(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> str:
    pb = obj.pose.bones[ch.tip_bone]
    for _ in range(ch.chain_length - 1):
        pb = pb.parent
    return pb.name


def _arm_length(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> float:
    pb = obj.pose.bones[ch.tip_bone]
    total = 0.0
    for _ in range(ch.chain_length):
        total += (obj.matrix_world.to_3x3() @ (pb.tail - pb.head)).length
        pb = pb.parent
    return total


def humanoid(full_body: bool = True, convention: str = "mixamo") -> tuple[bpy.types.Object, str]:
    """The one-click humanoid with Full Body; returns it and its hips' name."""
    obj = demo_rigs.humanoid(convention)
    rigs.update()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.auto_setup(full_body=full_body) == {"FINISHED"}
    rigs.update()
    return obj, obj.reach_ik.body_root or obj.pose.bones[0].name


def _past_reach(obj: bpy.types.Object, side: str, beyond: float) -> np.ndarray:
    """A point `beyond` past the straight arm of `side`, forward, out and a little down from its shoulder."""
    ch = _chain(obj, f"arm.{side}")
    shoulder = rigs.world_head(obj, _root_bone(obj, ch))
    out = 1.0 if side == "L" else -1.0
    # The character faces -Y (demo/humanoids.py), its left is +X.
    direction = np.array([0.5 * out, -0.8, -0.3])
    direction /= np.linalg.norm(direction)
    return shoulder + direction * (_arm_length(obj, ch) + beyond)


def _feet_held(obj: bpy.types.Object, tol: float) -> None:
    for side in ("L", "R"):
        ch = _chain(obj, f"leg.{side}")
        miss = float(np.linalg.norm(_tip(obj, ch) - _control(obj, ch)))
        assert miss <= tol, f"the {side} foot is {miss:.5f} off its control (Tolerance {tol})"


def _world_pose(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    return {pb.name: np.array(ev.matrix_world @ pb.matrix) for pb in ev.pose.bones}


def test_setting_up_with_full_body_moves_nothing() -> None:
    obj = demo_rigs.humanoid("mixamo")
    rigs.update()
    before = _world_pose(obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.auto_setup(full_body=True) == {"FINISHED"}
    rigs.update()
    after = _world_pose(obj)
    worst = max(float(np.abs(after[n] - before[n]).max()) for n in before)
    assert worst < 1e-4, f"the set-up moved a bone by {worst:.6f}"
    s = obj.reach_ik
    assert s.full_body and s.body_root
    assert _chain(obj, "leg.L").pin and _chain(obj, "leg.R").pin
    assert not _chain(obj, "arm.L").pin and _chain(obj, "arm.L").pull > 0.0


def test_a_hand_pulled_past_the_straight_arm_is_reached_hips_moved_feet_planted() -> None:
    obj, hips = humanoid()
    hips_before = rigs.world_head(obj, hips)
    arm = _chain(obj, "arm.L")
    goal = _past_reach(obj, "L", 0.15)
    _move_control(obj, arm, goal)
    tol = obj.reach_ik.tolerance
    miss = float(np.linalg.norm(_tip(obj, arm) - goal))
    assert miss <= tol, f"the hand is {miss:.4f} from a target 0.15 past the straight arm ({arm.message})"
    assert arm.is_valid and arm.residual <= tol
    assert np.linalg.norm(rigs.world_head(obj, hips) - hips_before) > 1e-3, "the hips did not move"
    _feet_held(obj, tol)


def test_full_body_off_keeps_the_hips_still() -> None:
    obj, hips = humanoid(full_body=False)
    hips_before = rigs.world_head(obj, hips)
    arm = _chain(obj, "arm.L")
    _move_control(obj, arm, _past_reach(obj, "L", 0.15))
    np.testing.assert_allclose(rigs.world_head(obj, hips), hips_before, atol=1e-9)
    assert not arm.residual <= obj.reach_ik.tolerance


def test_pull_zero_leaves_the_body() -> None:
    obj, hips = humanoid()
    before = _world_pose(obj)
    arm = _chain(obj, "arm.L")
    arm.pull = 0.0
    _move_control(obj, arm, _past_reach(obj, "L", 0.15))
    after = _world_pose(obj)
    np.testing.assert_allclose(after[hips], before[hips], atol=1e-6)
    assert arm.residual == pytest.approx(0.15, abs=2e-3)


def test_an_unreachable_pull_keeps_the_feet_planted_and_says_not_reached() -> None:
    obj, _hips = humanoid()
    arm = _chain(obj, "arm.L")
    _move_control(obj, arm, _past_reach(obj, "L", 2.0))
    tol = obj.reach_ik.tolerance
    _feet_held(obj, tol)
    assert arm.is_valid and arm.residual > 0.1
    assert "not reached" in arm.message and "cannot reach further" in arm.message, arm.message
    assert all(np.isfinite(m).all() for m in _world_pose(obj).values())
