"""Convert IK Constraints: Blender's IK constraints become chains that pose the rig as the constraint did.

A reference rig keeps its constraints; an identical rig is converted. Both reach for the same targets and
poles (shared Empties, or bones of a shared control armature), so Blender's own result is measured on the
reference at every target position, from Blender's evaluated pose, and compared with the converted rig.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Vector

TOL = 1e-3

ARM = [
    ("upper", None, (0, 0, 1), (0.5, 0.05, 1), False),
    ("fore", "upper", (0.5, 0.05, 1), (1, 0, 1), True),
    ("hand", "fore", (1, 0, 1), (1.1, 0, 1), True),
]
LEG = [
    ("thigh", None, (0, 0, 1), (0, -0.05, 0.5), False),
    ("shin", "thigh", (0, -0.05, 0.5), (0, 0, 0), True),
    ("foot", "shin", (0, 0, 0), (0, -0.15, 0), True),
]


def _convert() -> object:
    return bpy_session.submodule("operators.convert")


def _pair(bones: Sequence[tuple], name: str = "Rig") -> tuple[bpy.types.Object, bpy.types.Object]:
    """The reference rig (constraints kept) and an identical one to convert, at the same place."""
    return rigs.armature(f"{name}.ref", bones), rigs.armature(name, bones)


def _ik(
    obj: bpy.types.Object,
    bone: str,
    target: bpy.types.Object,
    subtarget: str = "",
    pole: bpy.types.Object | None = None,
    pole_subtarget: str = "",
    pole_angle: float = 0.0,
    count: int = 2,
) -> bpy.types.Constraint:
    con = obj.pose.bones[bone].constraints.new("IK")
    con.target = target
    con.subtarget = subtarget
    if pole is not None:
        con.pole_target = pole
        con.pole_subtarget = pole_subtarget
        con.pole_angle = pole_angle
    con.chain_count = count
    return con


def _joints(obj: bpy.types.Object, names: Sequence[str]) -> np.ndarray:
    """World heads of `names` and the last one's tail, from Blender's evaluated pose."""
    return np.array([rigs.world_head(obj, n) for n in names] + [rigs.world_tail(obj, names[-1])])


def _bend(points: np.ndarray, goal: np.ndarray) -> np.ndarray:
    root = points[0]
    axis = (goal - root) / np.linalg.norm(goal - root)
    rel = points[1:-1] - root
    return (rel - np.outer(rel @ axis, axis)).sum(axis=0)


def _compare(ref: bpy.types.Object, obj: bpy.types.Object, names: Sequence[str], goal: np.ndarray) -> None:
    """The converted rig reaches the goal and bends to the same side as Blender's constraint."""
    rigs.update()
    rigs.update()
    theirs, ours = _joints(ref, names), _joints(obj, names)
    assert np.linalg.norm(ours[-1] - goal) <= TOL, f"our tip misses by {np.linalg.norm(ours[-1] - goal):.4g}"
    assert np.linalg.norm(ours[-1] - theirs[-1]) <= 2 * TOL, "tips where Blender put them"
    b_theirs, b_ours = _bend(theirs, goal), _bend(ours, goal)
    cos = float(b_theirs @ b_ours) / (np.linalg.norm(b_theirs) * np.linalg.norm(b_ours))
    assert cos > 0.99, f"the chain bends to the same side as Blender's (cos {cos:.4f})"
    if len(names) == 2:
        assert np.linalg.norm(ours[1] - theirs[1]) <= 1e-2, "the elbow/knee is where Blender put it"


@pytest.mark.parametrize("degrees", [0.0, 90.0, -90.0, 180.0])
@pytest.mark.parametrize("limb", ["arm", "leg"])
def test_two_bone_with_pole_and_pole_angle(limb: str, degrees: float) -> None:
    bones, names = (ARM, ["upper", "fore"]) if limb == "arm" else (LEG, ["thigh", "shin"])
    ref, obj = _pair(bones)
    target = rigs.empty("target", (0.7, 0.1, 0.8) if limb == "arm" else (0.1, -0.2, 0.2))
    pole = rigs.empty("pole", (0.4, 0.6, 1.3) if limb == "arm" else (0.3, -0.8, 0.5))
    for rig in (ref, obj):
        _ik(rig, names[1], target, pole=pole, pole_angle=math.radians(degrees))
    rigs.update()
    entries = _convert().convert_constraints(obj)
    assert [e.chain for e in entries] == [names[1]] and not entries[0].skipped
    ch = obj.reach_ik.chains[0]
    assert (ch.tip_bone, ch.chain_length, ch.solver, ch.target, ch.pole) == (names[1], 2, "TWO_BONE", target, pole)
    assert obj.pose.bones[names[1]].constraints[0].mute, "the constraint is muted, not deleted"
    moves = [(0.7, 0.1, 0.8), (0.5, -0.3, 1.2), (0.2, 0.4, 0.6)]
    if limb == "leg":
        moves = [(0.1, -0.2, 0.2), (-0.1, -0.4, 0.4), (0.2, 0.1, 0.3)]
    for loc in moves:
        target.location = loc
        _compare(ref, obj, names, np.array(loc))
    pole.location.z += 0.5  # the pole moves: both follow
    _compare(ref, obj, names, np.array(moves[-1]))
    assert ch.is_valid and ch.residual <= TOL, ch.message


def test_bone_targets_of_a_control_armature_and_of_the_rig_itself() -> None:
    bones = [*ARM, ("IK-hand", None, (0.8, 0.1, 0.9), (0.9, 0.1, 0.9), False)]
    ref, obj = _pair(bones)
    controls = rigs.armature("Controls", [("pole_ctl", None, (0.4, 0.6, 1.3), (0.4, 0.7, 1.3), False)])
    for rig in (ref, obj):
        _ik(rig, "fore", rig, "IK-hand", controls, "pole_ctl", math.radians(-90.0))
    rigs.update()
    entries = _convert().convert_constraints(obj)
    ch = obj.reach_ik.chains[0]
    assert (ch.target, ch.target_bone, ch.pole, ch.pole_bone) == (obj, "IK-hand", controls, "pole_ctl")
    assert "target 'Rig' bone 'IK-hand'" in entries[0].text(), entries[0].text()
    for offset in ((0.0, 0.0, 0.0), (-0.2, 0.2, -0.1), (0.1, -0.3, 0.2)):
        for rig in (ref, obj):  # the same control move on both rigs
            rest = rig.data.bones["IK-hand"].matrix_local.to_3x3()
            rig.pose.bones["IK-hand"].location = rest.inverted() @ Vector(offset)
        _compare(ref, obj, ["upper", "fore"], rigs.world_head(obj, "IK-hand"))


def test_chain_count_zero_four_bones_to_the_root() -> None:
    ref, obj = rigs.chain_rig(4, name="Chain.ref"), rigs.chain_rig(4, name="Chain")
    target = rigs.empty("target", (1.0, 0.4, 2.6))
    pole = rigs.empty("pole", (-2.0, 0.0, 2.0))
    for rig in (ref, obj):
        _ik(rig, "b3", target, pole=pole, pole_angle=0.0, count=0)
    rigs.update()
    _convert().convert_constraints(obj)
    ch = obj.reach_ik.chains[0]
    assert (ch.chain_length, ch.solver) == (0, "FABRIK")
    for loc in ((1.0, 0.4, 2.6), (-1.2, 0.5, 2.4), (0.5, -1.0, 3.0)):
        target.location = loc
        _compare(ref, obj, ["b0", "b1", "b2", "b3"], np.array(loc))


def test_limits_and_locks_become_cones_and_twist() -> None:
    ref, obj = _pair(ARM)
    target = rigs.empty("target", (0.6, 0.2, 0.9))
    pole = rigs.empty("pole", (0.4, 0.6, 1.3))
    for rig in (ref, obj):
        _ik(rig, "fore", target, pole=pole, pole_angle=math.radians(90.0))
        fore = rig.pose.bones["fore"]  # an elbow: limited both ways (not binding here), no twist
        fore.lock_ik_y = True
        fore.use_ik_limit_x = fore.use_ik_limit_z = True
        fore.ik_min_x, fore.ik_max_x = math.radians(-100.0), math.radians(120.0)
        fore.ik_min_z, fore.ik_max_z = math.radians(-150.0), math.radians(60.0)
        upper = rig.pose.bones["upper"]  # a shoulder: wide limits on X only, and some stiffness
        upper.use_ik_limit_x = True
        upper.ik_min_x, upper.ik_max_x = math.radians(-80.0), math.radians(85.0)
        upper.ik_stiffness_x = 0.3
    rigs.update()
    (entry,) = _convert().convert_constraints(obj)

    def cone(bone: str) -> list[float]:
        lim = obj.pose.bones[bone].reach_ik
        assert lim.use_cone
        return [math.degrees(v) for v in (lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right)]

    # X rotation swings +Y toward +Z (up) when positive; Z rotation toward -X (left) when positive.
    assert np.allclose(cone("fore"), [120.0, 100.0, 60.0, 150.0], atol=1e-4), cone("fore")
    assert np.allclose(cone("upper"), [85.0, 80.0, 179.9, 179.9], atol=1e-4), cone("upper")
    lim = obj.pose.bones["fore"].reach_ik
    assert lim.use_twist and abs(lim.twist_min) < 1e-6 and abs(lim.twist_max) < 1e-6
    assert not obj.pose.bones["upper"].reach_ik.use_twist, "the shoulder's twist is free"
    assert any("'upper' IK stiffness" in d for d in entry.dropped), entry.text()
    assert any("'upper': one free swing axis" in a for a in entry.approximated), entry.text()
    for loc in ((0.6, 0.2, 0.9), (0.5, -0.2, 1.1), (0.4, 0.3, 0.7)):
        target.location = loc
        _compare(ref, obj, ["upper", "fore"], np.array(loc))


@pytest.mark.parametrize("pole", [False, True])
@pytest.mark.parametrize("lock", ["x", "z"])
@pytest.mark.parametrize("limb", ["arm", "leg"])
def test_converted_hinges_reach_where_blender_reaches(limb: str, lock: str, pole: bool) -> None:
    """An elbow or knee locked to one axis (IK Lock Y and X or Z: a tight hinge) reaches every target; where
    Blender's constraint reaches, the tip is where Blender's is, and with a pole so is the elbow (the root
    bone rolls the hinge into the pole's plane, as Blender does). Before the global stage of
    solvers/search.py the converted chain clamped its two-bone answer and stopped 0.03-0.68 short."""
    bones, names = (ARM, ["upper", "fore"]) if limb == "arm" else (LEG, ["thigh", "shin"])
    ref, obj = _pair(bones)
    target = rigs.empty("target", (0.7, 0.1, 0.8) if limb == "arm" else (0.1, -0.2, 0.2))
    pole_ob = rigs.empty("pole", (0.4, 0.6, 1.3) if limb == "arm" else (0.3, -0.8, 0.5)) if pole else None
    for rig in (ref, obj):
        _ik(rig, names[1], target, pole=pole_ob)
        hinge = rig.pose.bones[names[1]]
        hinge.lock_ik_y = True
        setattr(hinge, f"lock_ik_{lock}", True)
    rigs.update()
    _convert().convert_constraints(obj)
    ch = obj.reach_ik.chains[0]
    lim = obj.pose.bones[names[1]].reach_ik
    sides = (lim.cone_left, lim.cone_right) if lock == "z" else (lim.cone_up, lim.cone_down)
    assert lim.use_cone and max(sides) == 0.0, "the locked axis became a hinge"
    moves = [(0.7, 0.1, 0.8), (0.5, -0.3, 1.2), (0.2, 0.4, 0.6), (0.6, 0.3, 1.3)]
    if limb == "leg":
        moves = [(0.1, -0.2, 0.2), (-0.1, -0.4, 0.4), (0.2, 0.1, 0.3), (0.3, 0.2, 0.6)]
    blender_reached = 0
    for loc in moves:
        target.location = loc
        rigs.update()
        rigs.update()
        goal = np.array(loc)
        theirs, ours = _joints(ref, names), _joints(obj, names)
        assert np.linalg.norm(ours[-1] - goal) <= TOL, f"{loc}: our tip misses by {np.linalg.norm(ours[-1] - goal):.4g}"
        assert ch.is_valid and ch.residual <= TOL, ch.message
        if np.linalg.norm(theirs[-1] - goal) <= TOL:
            blender_reached += 1
            assert np.linalg.norm(ours[-1] - theirs[-1]) <= 2 * TOL, "tips where Blender put them"
            if pole:
                assert np.linalg.norm(ours[1] - theirs[1]) <= 1e-2, f"{loc}: the elbow/knee is where Blender put it"
    assert blender_reached or pole, "Blender's constraint reaches these targets without a pole"


def test_use_tail_off_makes_the_parent_the_tip() -> None:
    ref, obj = _pair(ARM)
    target = rigs.empty("target", (0.7, 0.1, 0.8))
    pole = rigs.empty("pole", (0.4, 0.6, 1.3))
    for rig in (ref, obj):
        con = _ik(rig, "hand", target, pole=pole)
        con.use_tail = False
    rigs.update()
    _convert().convert_constraints(obj)
    ch = obj.reach_ik.chains[0]
    assert (ch.tip_bone, ch.chain_length) == ("fore", 2)
    _compare(ref, obj, ["upper", "fore"], np.array(target.location))


def test_muted_targetless_and_the_report() -> None:
    obj = rigs.armature("Rig", [*ARM, ("spare", None, (0, 1, 0), (0, 1, 1), False)])
    target = rigs.empty("target", (0.7, 0.1, 0.8))
    muted = _ik(obj, "fore", target)
    muted.mute = True
    free = obj.pose.bones["spare"].constraints.new("IK")  # targetless (Auto IK style)
    con = _ik(obj, "hand", target, count=3)
    con.influence = 0.5
    con.use_stretch = True
    con.iterations = 120
    obj.pose.bones["upper"].ik_stretch = 0.2
    rigs.update()
    entries = {e.bone: e for e in _convert().convert_constraints(obj)}
    assert muted.mute and not free.mute, "the muted and the targetless constraints are left alone"
    assert "muted" in entries["fore"].skipped and not entries["fore"].chain
    assert "no target" in entries["spare"].skipped and not entries["spare"].chain
    hand = entries["hand"]
    assert con.mute and hand.chain == "hand"
    assert [(ch.tip_bone, ch.chain_length, ch.solver) for ch in obj.reach_ik.chains] == [("hand", 3, "FABRIK")]
    text = hand.text()
    assert "influence 0.5" in text and "'upper' IK stretch 0.2" in text and "muted" in text, text
    assert obj.reach_ik.chains[0].influence == 0.5, "the constraint's influence becomes the chain's"
    assert obj.reach_ik.max_iterations == 120, "the constraint's iterations become the rig's cap"


def test_operator_reports_and_unmuting_restores_blender() -> None:
    ref, obj = _pair(ARM)
    target = rigs.empty("target", (0.6, 0.2, 0.9))
    pole = rigs.empty("pole", (0.4, 0.6, 1.3))
    for rig in (ref, obj):
        _ik(rig, "fore", target, pole=pole, pole_angle=math.radians(-90.0))
    rigs.update()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.convert_constraints() == {"FINISHED"}
    _compare(ref, obj, ["upper", "fore"], np.array(target.location))
    assert bpy.ops.reach.convert_constraints() == {"CANCELLED"}, "nothing left to convert: all muted"
    # Back to Blender: unmute, disable the chain and reset the rotations live solving wrote (Blender's IK
    # starts from the bones' own channels, which were at rest here before converting).
    obj.pose.bones["fore"].constraints[0].mute = False
    obj.reach_ik.chains[0].enabled = False
    for name in ("upper", "fore"):
        obj.pose.bones[name].rotation_quaternion = (1.0, 0.0, 0.0, 0.0)
    for loc in ((0.6, 0.2, 0.9), (0.5, -0.3, 1.2)):
        target.location = loc
        rigs.update()
        theirs, ours = _joints(ref, ["upper", "fore"]), _joints(obj, ["upper", "fore"])
        assert np.abs(theirs - ours).max() <= 1e-4, "Blender's constraint poses the rig as before"


def test_drivers_on_mute_and_influence() -> None:
    """A driver on Mute (Rigify drives it from its pole toggle) would unmute the converted constraint: it is
    muted too; a driver on Influence is reported; a muted constraint whose Mute is driven says so."""
    ref, obj = _pair(ARM)
    obj["switch"] = 0.0
    target = rigs.empty("target", (0.6, 0.2, 0.9))
    pole = rigs.empty("pole", (0.4, 0.6, 1.3))
    for rig in (ref, obj):
        _ik(rig, "fore", target, pole=pole)
    con = obj.pose.bones["fore"].constraints[0]
    spare = _ik(obj, "hand", target, count=3)
    for c, prop, expression in ((con, "mute", "var"), (con, "influence", "1.0 - var"), (spare, "mute", "1 - var")):
        fcu = c.driver_add(prop)
        var = fcu.driver.variables.new()
        var.targets[0].id = obj
        var.targets[0].data_path = '["switch"]'
        fcu.driver.expression = expression
    rigs.update()
    assert not con.mute and spare.mute
    entries = {e.bone: e for e in _convert().convert_constraints(obj)}
    rigs.update()
    rigs.update()
    drivers = obj.animation_data.drivers
    assert con.mute and drivers.find(con.path_from_id("mute")).mute, "the driver does not unmute it"
    text = entries["fore"].text()
    assert 'Mute was set by a driver on ["switch"]' in text and "influence set by a driver" in text, text
    assert 'a driver on ["switch"] sets its Mute' in entries["hand"].skipped, entries["hand"].skipped
    assert not drivers.find(spare.path_from_id("mute")).mute, "a constraint left alone keeps its driver"
    _compare(ref, obj, ["upper", "fore"], np.array(target.location))
