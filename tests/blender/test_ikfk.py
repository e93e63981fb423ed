"""IK <-> FK: Influence blends each chain bone from its kept FK pose toward the IK solution (rig/fk.py).

Everything is measured from what Blender holds and evaluates: the channels (byte for byte where the promise
is "exactly"), the evaluated matrix_basis of each bone, and the evaluated world-space tails.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType

import bpy
import conftest
import numpy as np
import pytest
import rigs
from mathutils import Euler, Quaternion, Vector

from demo import rigs as demo_rigs

ARM = ("upper_arm.L", "forearm.L")
SPINE = ("spine", "spine.001", "chest")


def _module(name: str) -> ModuleType:
    return sys.modules[f"{conftest.ADDON}.{name}"]


def _character(rotation_mode: str = "QUATERNION") -> demo_rigs.Rig:
    rig = demo_rigs.character()
    for pb in rig.obj.pose.bones:
        pb.rotation_mode = rotation_mode
    return rig


def _fk_pose(obj: bpy.types.Object, t: float = 0.3) -> None:
    """A hand-made FK pose on every bone (Euler values set by a 'script': not Reach IK's)."""
    for i, pb in enumerate(obj.pose.bones):
        e = (0.3 * math.sin(t + i), 0.2 * math.cos(2 * t + i), 0.25 * math.sin(3 * t + 0.5 * i))
        q = Quaternion((1, 0, 0, 0))
        q.rotate(Euler(e))
        if pb.rotation_mode == "QUATERNION":
            pb.rotation_quaternion = q
        elif pb.rotation_mode == "AXIS_ANGLE":
            axis, angle = q.to_axis_angle()
            pb.rotation_axis_angle = (angle, *axis)
        else:
            pb.rotation_euler = q.to_euler(pb.rotation_mode)


def _move_targets(rig: demo_rigs.Rig) -> None:
    """Reachable targets away from where the FK pose puts the tips: 15% of the way toward the chain root."""
    rigs.update()
    for spec in rig.chains:
        root = spec.tip
        for _ in range(spec.length - 1):
            root = rig.obj.pose.bones[root].parent.name
        tip, head = rigs.world_tail(rig.obj, spec.tip), rigs.world_head(rig.obj, root)
        spec.target.location = Vector(tip + 0.15 * (head - tip) + np.array((0.0, 0.01, 0.0)))


def _chain(obj: bpy.types.Object, name: str) -> bpy.types.PropertyGroup:
    return next(ch for ch in obj.reach_ik.chains if ch.name == name)


def _basis(obj: bpy.types.Object, bone: str) -> Quaternion:
    deps = bpy.context.evaluated_depsgraph_get()
    return obj.evaluated_get(deps).pose.bones[bone].matrix_basis.to_quaternion()


def _angle(a: Quaternion, b: Quaternion) -> float:
    return float(a.rotation_difference(b).angle)


def _settle() -> None:
    for _ in range(3):
        rigs.update()


def _setup(rotation_mode: str = "QUATERNION") -> tuple[demo_rigs.Rig, bytes]:
    """The character in an FK pose (its channels before any chain), then driven by Reach IK."""
    rig = _character(rotation_mode)
    _fk_pose(rig.obj)
    rigs.update()
    fk = rigs.pose_snapshot(rig.obj)
    demo_rigs.use_reach(rig)
    _move_targets(rig)
    _settle()
    assert rigs.pose_snapshot(rig.obj) != fk, "IK should have moved the pose"
    return rig, fk


@pytest.mark.parametrize("rotation_mode", ["QUATERNION", "XYZ", "ZXY", "AXIS_ANGLE"])
def test_influence_zero_shows_the_fk_pose_exactly(rotation_mode: str) -> None:
    rig, fk = _setup(rotation_mode)
    for ch in rig.obj.reach_ik.chains:
        ch.influence = 0.0
    _settle()
    assert rigs.pose_snapshot(rig.obj) == fk
    for ch in rig.obj.reach_ik.chains:
        assert "reached" not in ch.message or "not" in ch.message
    # And back: IK again reaches every target.
    for ch in rig.obj.reach_ik.chains:
        ch.influence = 1.0
    _settle()
    for spec in rig.chains:
        tip = rigs.world_tail(rig.obj, spec.tip)
        far = np.linalg.norm(tip - np.array(spec.target.matrix_world.translation))
        assert far <= 2e-3, (spec.name, _chain(rig.obj, spec.name).message)


def test_disable_and_remove_give_the_fk_pose_back_exactly() -> None:
    rig, fk = _setup()
    for ch in rig.obj.reach_ik.chains:
        ch.enabled = False
    _settle()
    assert rigs.pose_snapshot(rig.obj) == fk
    for ch in rig.obj.reach_ik.chains:
        ch.enabled = True
    _settle()
    assert rigs.pose_snapshot(rig.obj) != fk
    bpy.context.view_layer.objects.active = rig.obj
    while len(rig.obj.reach_ik.chains):
        rig.obj.reach_ik.active_chain_index = 0
        bpy.ops.reach.chain_remove(delete_empties=False)
    _settle()
    assert rigs.pose_snapshot(rig.obj) == fk


@pytest.mark.parametrize(("chain", "bones"), [("arm.L", ARM), ("spine", SPINE)])
def test_half_influence_is_the_slerp_of_fk_and_ik_per_bone(chain: str, bones: tuple[str, ...]) -> None:
    rig, _fk = _setup()
    obj = rig.obj
    _chain(obj, chain).influence = 0.0
    _settle()
    fk = {b: _basis(obj, b) for b in bones}
    # The IK solution from the FK pose (a blended chain's IK always starts there: `core.blend.fk_start`).
    _chain(obj, chain).influence = 1.0
    _settle()
    ik = {b: _basis(obj, b) for b in bones}
    _chain(obj, chain).influence = 0.0
    _settle()
    _chain(obj, chain).influence = 0.5
    _settle()
    for b in bones:
        want = fk[b].slerp(ik[b], 0.5)
        assert _angle(_basis(obj, b), want) < 1e-4, b
    ch = _chain(obj, chain)
    tip = rigs.world_tail(obj, bones[-1])
    far = np.linalg.norm(tip - np.array(ch.target.matrix_world.translation))
    assert far > 1e-3 and ch.message.startswith("blended"), ch.message
    assert ch.residual == pytest.approx(far, rel=1e-3, abs=1e-5)


def _quaternion_bytes(obj: bpy.types.Object, bone: str) -> bytes:
    return np.array(obj.pose.bones[bone].rotation_quaternion, dtype=np.float32).tobytes()


def test_posing_a_bone_by_hand_under_influence_updates_its_fk_pose() -> None:
    rig, fk = _setup()
    obj = rig.obj
    n = len(obj.pose.bones)
    forearm_fk = np.frombuffer(fk, dtype=np.float32)[: 4 * n].reshape(n, 4)[obj.pose.bones.find("forearm.L")]
    arm = _chain(obj, "arm.L")
    arm.influence = 0.5
    _settle()
    before = _basis(obj, "upper_arm.L")
    new_fk = Quaternion((0.9, 0.1, 0.3, -0.2)).normalized()
    obj.pose.bones["upper_arm.L"].rotation_quaternion = new_fk
    _settle()
    shown = _basis(obj, "upper_arm.L")
    assert _angle(shown, before) > 1e-3 and _angle(shown, new_fk) > 1e-3, "the blend with the new FK pose"
    arm.influence = 0.0
    _settle()
    # The hand-posed value is the FK pose now, exactly; the forearm's FK pose is still the one it had: the
    # IK result it showed was never taken for FK.
    assert _quaternion_bytes(obj, "upper_arm.L") == np.array(new_fk, dtype=np.float32).tobytes()
    assert _quaternion_bytes(obj, "forearm.L") == forearm_fk.tobytes()
    arm.influence = 1.0
    _settle()
    ik = _basis(obj, "upper_arm.L")
    arm.influence = 0.0
    _settle()
    arm.influence = 0.5
    _settle()
    assert _angle(_basis(obj, "upper_arm.L"), shown) < 1e-5, "the same blend however it was reached"
    assert _angle(shown, Quaternion(new_fk).slerp(ik, 0.5)) < 1e-4


def test_a_chain_below_reaches_from_its_parents_blended_pose() -> None:
    rig, _fk = _setup()
    obj = rig.obj
    arm = _chain(obj, "arm.L")
    # Well within reach, so a moved shoulder does not take the hand target out of it.
    root, tip = rigs.world_head(obj, "upper_arm.L"), rigs.world_tail(obj, "forearm.L")
    arm.target.location = Vector(root + 0.6 * (tip - root))
    _settle()
    count = _module("rig.live").chain_solve_count
    solves = count(obj, list(obj.reach_ik.chains).index(arm))
    _chain(obj, "spine").influence = 0.4
    rigs.update()  # the handler solves the spine (blended) and the arm below it, in one go
    rigs.update()  # Blender evaluates what was written; nothing needs solving again
    assert count(obj, list(obj.reach_ik.chains).index(arm)) == solves + 1
    tip = rigs.world_tail(obj, "forearm.L")
    assert np.linalg.norm(tip - np.array(arm.target.matrix_world.translation)) <= 2e-3
    assert arm.message == "", arm.message


def test_fk_pose_survives_save_and_reload(tmp_path: Path) -> None:
    rig, fk = _setup()
    name = rig.obj.name
    path = str(tmp_path / "ikfk.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path)
    bpy.ops.wm.open_mainfile(filepath=path)
    obj = bpy.data.objects[name]
    _settle()
    for ch in obj.reach_ik.chains:
        ch.influence = 0.0
    _settle()
    assert rigs.pose_snapshot(obj) == fk


def _key_fk_animation(obj: bpy.types.Object, frames: range) -> None:
    for f in frames:
        _fk_pose(obj, 0.1 * f)
        for b in (*ARM, *SPINE):
            obj.pose.bones[b].keyframe_insert("rotation_quaternion", frame=f)


def test_keyed_influence_over_keyed_fk_plays_back_and_bakes_alike() -> None:
    rig = _character()
    obj = rig.obj
    scene = bpy.context.scene
    _key_fk_animation(obj, range(1, 11))
    demo_rigs.use_reach(rig)
    _move_targets(rig)
    for name in ("arm.L", "spine"):
        ch = _chain(obj, name)
        ch.influence = 0.0
        obj.keyframe_insert(f"reach_ik.chains[{list(obj.reach_ik.chains).index(ch)}].influence", frame=1)
        ch.influence = 1.0
        obj.keyframe_insert(f"reach_ik.chains[{list(obj.reach_ik.chains).index(ch)}].influence", frame=10)
    played = {}
    fk_at = {}
    for f in range(1, 11):
        scene.frame_set(f)
        _settle()
        played[f] = {b: _basis(obj, b) for b in (*ARM, *SPINE)}
        curves = _module("rig.anim").all_fcurves(obj.animation_data.action, obj)  # layered actions in 5.x too
        fcurves = {fc.data_path + str(fc.array_index): fc for fc in curves}
        fk_at[f] = {
            b: Quaternion([fcurves[f'pose.bones["{b}"].rotation_quaternion{i}'].evaluate(f) for i in range(4)])
            for b in (*ARM, *SPINE)
        }
    for b in (*ARM, *SPINE):
        assert _angle(played[1][b], fk_at[1][b]) < 1e-5, b  # influence 0: the FK animation itself
    tip = rigs.world_tail(obj, "forearm.L")
    assert np.linalg.norm(tip - np.array(_chain(obj, "arm.L").target.matrix_world.translation)) <= 2e-3
    for b in ARM:
        # Between, the pose is between FK and IK (not FK, not yet where frame 10 is).
        assert _angle(played[5][b], fk_at[5][b]) > 1e-3, b
    bake = _module("rig.bake")
    bake.bake_rig(obj, bake.BakeOptions(1, 10, chains="ALL", disable_after=True))
    for f in range(1, 11):
        scene.frame_set(f)
        rigs.update()
        for b in (*ARM, *SPINE):
            assert _angle(_basis(obj, b), played[f][b]) < 2e-3, (f, b)


def test_baking_at_influence_zero_writes_the_fk_pose() -> None:
    rig, _fk = _setup()
    obj = rig.obj
    for ch in obj.reach_ik.chains:
        ch.influence = 0.0
    _settle()
    want = {b: _basis(obj, b) for b in (*ARM, *SPINE)}
    bake = _module("rig.bake")
    bake.bake_rig(obj, bake.BakeOptions(1, 3, chains="ALL", disable_after=True))
    for f in (1, 2, 3):
        bpy.context.scene.frame_set(f)
        rigs.update()
        for b in want:
            assert _angle(_basis(obj, b), want[b]) < 1e-5, (f, b)


def _undo_push(message: str) -> None:
    bpy.ops.ed.undo_push(message=message)


def test_undo_and_redo_never_take_an_ik_result_for_fk() -> None:
    """Memfile undo in the bpy wheel (`ed.undo` runs though its poll says no window): after undoing and
    redoing a target move and a hand pose, Influence 0 still shows the FK pose of that moment, exactly."""
    rig, fk = _setup()
    name = rig.obj.name
    _undo_push("setup")
    target = rig.chains[1].target.name
    bpy.data.objects[target].location.x += 0.02
    _settle()
    _undo_push("move target")
    obj = bpy.data.objects[name]
    moved = rigs.pose_snapshot(obj)
    bpy.ops.ed.undo()
    _settle()
    obj = bpy.data.objects[name]
    assert rigs.pose_snapshot(obj) != moved, "undo brings back the pose before the move"
    bpy.ops.ed.redo()
    _settle()
    obj = bpy.data.objects[name]
    # (Redo drops every session cache, so iterative chains are solved again: the pose may move by rounding.)
    for ch in obj.reach_ik.chains:
        ch.influence = 0.0
    _settle()
    assert rigs.pose_snapshot(obj) == fk
    _undo_push("influence 0")
    # Hand posing at Influence 0.5, then undo and redo: the hand-posed value is FK, the IK result is not.
    _chain(obj, "arm.L").influence = 0.5
    _settle()
    _undo_push("influence 0.5")
    posed = Quaternion((0.9, 0.1, 0.3, -0.2)).normalized()
    obj.pose.bones["upper_arm.L"].rotation_quaternion = posed
    _settle()
    _undo_push("pose by hand")
    bpy.ops.ed.undo()
    _settle()
    bpy.ops.ed.redo()
    _settle()
    obj = bpy.data.objects[name]
    _chain(obj, "arm.L").influence = 0.0
    _settle()
    assert _quaternion_bytes(obj, "upper_arm.L") == np.array(posed, dtype=np.float32).tobytes()
    n = len(obj.pose.bones)
    forearm_fk = np.frombuffer(fk, dtype=np.float32)[: 4 * n].reshape(n, 4)[obj.pose.bones.find("forearm.L")]
    assert _quaternion_bytes(obj, "forearm.L") == forearm_fk.tobytes()


@pytest.mark.parametrize("solver", ["FABRIK", "TWO_BONE"])
def test_stretch_blends_with_influence_and_gives_the_fk_scale_back(solver: str) -> None:
    """A stretching chain at Influence 0.5 stretches half-way (its Y scale from the FK value toward IK's);
    its status is measured on that pose; at 0 the rotations and Y scales are the FK channels exactly."""
    n = 2 if solver == "TWO_BONE" else 3
    rig = rigs.chain_rig(n)
    for bone in list(rig.data.bones)[1:]:
        bone.inherit_scale = "ALIGNED"
    rigs.update()
    fk = rigs.pose_snapshot(rig)
    names = [f"b{i}" for i in range(n)]
    length = sum(rig.data.bones[b].length for b in names)
    root = rigs.world_head(rig, "b0")
    target = rigs.empty("T", tuple(root + np.array([0.0, 0.3, 1.25 * length])))
    ch = rigs.add_chain(rig, names[-1], n, target, solver=solver)
    ch.stretch = 1.5
    _settle()
    ik_y = float(rig.pose.bones["b0"].scale[1])
    assert ik_y > 1.1, "the chain stretches to reach"
    ch.influence = 0.5
    _settle()
    assert float(rig.pose.bones["b0"].scale[1]) == pytest.approx(1.0 + 0.5 * (ik_y - 1.0), abs=1e-5)
    tip = rigs.world_tail(rig, names[-1])
    far = float(np.linalg.norm(tip - np.array(target.matrix_world.translation)))
    assert far > 1e-2 and ch.residual == pytest.approx(far, rel=1e-3, abs=1e-5), ch.message
    ch.influence = 0.0
    _settle()
    assert rigs.pose_snapshot(rig) == fk
