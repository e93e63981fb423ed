"""IK/FK on a rig made by Set Up Character: the hands' and feet's follow constraint ("Reach IK: follow control",
a Copy Rotation to the IK control) is off in FK, on in IK, blended with the chain's Influence, and switching
either way leaves the hand where it was (issue 35 item 13). Measured from Blender's evaluated pose."""

from __future__ import annotations

import math

import bpy
import numpy as np
import pytest
import rigs
from mathutils import Euler, Matrix, Quaternion

from demo import rigs as demo_rigs

HAND = "mixamorig:LeftHand"
FOLLOW = "Reach IK: follow control"


def _rig(controls: str = "BONE") -> tuple[bpy.types.Object, bpy.types.PropertyGroup]:
    obj = demo_rigs.humanoid("mixamo")
    bpy.context.view_layer.objects.active = obj
    rigs.update()
    assert bpy.ops.reach.auto_setup(controls=controls) == {"FINISHED"}
    rigs.update()
    ch = obj.reach_ik.chains["arm.L"]
    assert obj.pose.bones[HAND].constraints.get(FOLLOW) is not None
    return obj, ch


def _hand(obj: bpy.types.Object) -> Matrix:
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    return (ev.matrix_world @ ev.pose.bones[HAND].matrix).copy()


def _turn(m: Matrix, other: Matrix) -> float:
    """Degrees between two orientations."""
    q = m.to_quaternion().rotation_difference(other.to_quaternion())
    return math.degrees(min(q.angle, 2 * math.pi - q.angle))


def _rotate_control(obj: bpy.types.Object, ch: bpy.types.PropertyGroup, euler: tuple[float, float, float]) -> None:
    owner = ch.target.pose.bones[ch.target_bone] if ch.target_bone else ch.target
    owner.rotation_mode = "XYZ"
    owner.rotation_euler = Euler(euler)
    rigs.update()


def _switch(obj: bpy.types.Object, mode: str) -> None:
    bpy.context.view_layer.objects.active = obj
    obj.reach_ik.active_chain_index = list(obj.reach_ik.chains).index(obj.reach_ik.chains["arm.L"])
    assert bpy.ops.reach.switch(mode=mode, chains="ACTIVE") == {"FINISHED"}
    rigs.update()


@pytest.mark.parametrize("controls", ["BONE", "EMPTY"])
def test_follow_is_off_in_fk_on_in_ik_and_switching_keeps_the_hand(controls: str) -> None:
    obj, ch = _rig(controls)
    _rotate_control(obj, ch, (0.4, -0.3, 0.2))
    in_ik = _hand(obj)
    _switch(obj, "FK")
    assert ch.influence == 0.0
    assert _turn(_hand(obj), in_ik) < 0.05, f"switching to FK turned the hand {_turn(_hand(obj), in_ik):.3g}°"
    _rotate_control(obj, ch, (-0.5, 0.6, 0.1))
    assert _turn(_hand(obj), in_ik) < 0.05, "in FK the hand must not take the IK control's rotation"
    # The animator poses the hand in FK: it shows its own rotation.
    pb = obj.pose.bones[HAND]
    pb.rotation_mode = "QUATERNION"
    pb.rotation_quaternion = pb.rotation_quaternion @ Quaternion((1, 0, 0), 0.3)
    rigs.update()
    in_fk = _hand(obj)
    assert _turn(in_fk, in_ik) > 10.0, "the hand's own rotation shows in FK"
    _switch(obj, "IK")
    assert ch.influence == 1.0
    assert _turn(_hand(obj), in_fk) < 0.05, f"switching to IK turned the hand {_turn(_hand(obj), in_fk):.3g}°"
    before = _hand(obj)
    _rotate_control(obj, ch, (0.2, 0.2, -0.4))
    assert _turn(_hand(obj), before) > 10.0, "in IK the hand follows the control's rotation"


def test_follow_blends_with_influence() -> None:
    obj, ch = _rig()
    _rotate_control(obj, ch, (0.9, -0.3, 0.2))
    ik = _hand(obj)
    ch.influence = 0.0
    rigs.update()
    fk = _hand(obj)
    assert _turn(ik, fk) > 20.0
    ch.influence = 0.5
    rigs.update()
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    assert abs(ev.pose.bones[HAND].constraints[FOLLOW].influence - 0.5) < 1e-6, con.influence
    half = _turn(_hand(obj), fk)
    assert 0.2 * _turn(ik, fk) < half < 0.8 * _turn(ik, fk), (half, _turn(ik, fk))
    np.testing.assert_allclose(ch.influence, 0.5)


def test_a_rig_set_up_without_the_driver_gets_it_at_the_switch() -> None:
    """A rig set up before the follow constraint was driven: the switch drives it, and keeps the hand."""
    obj, ch = _rig()
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    con.driver_remove("influence")
    con.influence = 1.0
    _rotate_control(obj, ch, (0.4, -0.3, 0.2))
    in_ik = _hand(obj)
    _switch(obj, "FK")
    assert obj.animation_data.drivers.find(f'pose.bones["{HAND}"].constraints["{FOLLOW}"].influence') is not None
    assert _turn(_hand(obj), in_ik) < 0.05
    _rotate_control(obj, ch, (-0.5, 0.6, 0.1))
    assert _turn(_hand(obj), in_ik) < 0.05, "in FK the hand must not take the IK control's rotation"


def test_snap_ik_to_pose_turns_the_control_to_the_hand() -> None:
    """Snap IK to Pose on a chain whose hand follows the control: the control takes the hand's orientation,
    so turning IK on (Influence 1) leaves the hand as it is."""
    obj, ch = _rig()
    ch.influence = 0.0
    rigs.update()
    pb = obj.pose.bones[HAND]
    pb.rotation_mode = "QUATERNION"
    pb.rotation_quaternion = Quaternion((0, 0, 1), 0.6)
    rigs.update()
    fk = _hand(obj)
    bpy.context.view_layer.objects.active = obj
    obj.reach_ik.active_chain_index = list(obj.reach_ik.chains).index(ch)
    assert bpy.ops.reach.snap_to_pose(chains="ACTIVE") == {"FINISHED"}
    ch.influence = 1.0
    rigs.update()
    assert _turn(_hand(obj), fk) < 0.05, f"the hand turned {_turn(_hand(obj), fk):.3g}° when IK came on"
