"""Bone targets and poles: control bones of the same armature or of another one, chains to the root.

Every result is measured from Blender's evaluated pose: the tip's tail against the control bone's head as
Blender evaluates it (after our write, so a control below a solved spine is where Blender shows it).
"""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Matrix, Vector

TOL = 1e-3


def _rig() -> bpy.types.Object:
    """A root, a two-bone spine ending at the chest, a two-bone arm on the chest, and control bones:
    'IK-hand' and 'Pole-elbow' on the root, 'IK-hand.chest' on the chest, 'IK-bad' on the forearm."""
    obj = rigs.armature(
        "Rig",
        [
            ("root", None, (0, 0, 0), (0, 0.3, 0), False),
            ("spine", "root", (0, 0, 0.2), (0, 0.02, 0.6), False),
            ("chest", "spine", (0, 0.02, 0.6), (0, 0, 1.0), True),
            ("upper_arm", "chest", (0, 0, 1.0), (0.5, 0.05, 1.0), True),
            ("forearm", "upper_arm", (0.5, 0.05, 1.0), (1.0, 0, 1.0), True),
            ("IK-hand", "root", (1.0, 0, 1.0), (1.1, 0, 1.0), False),
            ("Pole-elbow", "root", (0.5, 0.6, 1.0), (0.5, 0.7, 1.0), False),
            ("IK-hand.chest", "chest", (0.9, 0, 0.9), (1.0, 0, 0.9), False),
            ("IK-bad", "forearm", (1.0, 0, 1.0), (1.1, 0, 1.0), False),
        ],
    )
    for name in ("IK-hand", "Pole-elbow", "IK-hand.chest", "IK-bad"):
        obj.data.bones[name].use_deform = False
    return obj


def _arm(obj: bpy.types.Object, target_bone: str = "IK-hand", solver: str = "TWO_BONE") -> bpy.types.PropertyGroup:
    ch = rigs.add_chain(obj, "forearm", 2, obj, solver=solver, name="arm")
    ch.target_bone = target_bone
    return ch


def _miss(obj: bpy.types.Object, tip: str, target: bpy.types.Object, bone: str) -> float:
    goal = rigs.world_head(target, bone) if bone else np.array(target.matrix_world.translation)
    return float(np.linalg.norm(rigs.world_tail(obj, tip) - goal))


def _move(obj: bpy.types.Object, bone: str, offset: tuple[float, float, float]) -> None:
    """Set a root-parented bone's location channel so its head moves by `offset` in armature space."""
    obj.pose.bones[bone].location = obj.data.bones[bone].matrix_local.to_3x3().inverted() @ Vector(offset)


def _side(v: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """The part of `v` perpendicular to the unit `axis`."""
    return v - axis * float(v @ axis)


def _settle() -> None:
    rigs.update()
    rigs.update()


@pytest.mark.parametrize("solver", ["TWO_BONE", "FABRIK", "CCD"])
def test_root_parented_control_bone(solver: str) -> None:
    obj = _rig()
    ch = _arm(obj, solver=solver)
    _settle()
    assert ch.is_valid, ch.message
    for offset in ((-0.3, 0.1, -0.2), (-0.4, -0.2, 0.1), (-0.2, 0.3, 0.3)):
        _move(obj, "IK-hand", offset)  # toward the body, well inside reach
        _settle()
        moved = rigs.world_head(obj, "IK-hand")
        assert np.linalg.norm(moved - np.array((1.0, 0, 1.0))) > 0.2, "the control really moved"
        assert _miss(obj, "forearm", obj, "IK-hand") <= TOL, (solver, offset, ch.message)
        assert ch.is_valid and ch.residual <= TOL


def test_pole_bone_bends_the_elbow_toward_it() -> None:
    obj = _rig()
    ch = _arm(obj)
    ch.pole = obj
    ch.pole_bone = "Pole-elbow"
    _move(obj, "IK-hand", (-0.3, 0.0, 0.0))  # bring the hand in: the arm must bend
    for pole_offset in ((0.0, 0.0, 0.0), (0.0, -0.6, -1.2), (0.0, -0.6, 1.2)):
        _move(obj, "Pole-elbow", pole_offset)
        _settle()
        assert ch.is_valid, ch.message
        assert _miss(obj, "forearm", obj, "IK-hand") <= TOL
        root, tip = rigs.world_head(obj, "upper_arm"), rigs.world_head(obj, "IK-hand")
        elbow, pole = rigs.world_head(obj, "forearm"), rigs.world_head(obj, "Pole-elbow")
        axis = (tip - root) / np.linalg.norm(tip - root)

        bend, toward = _side(elbow - root, axis), _side(pole - root, axis)
        assert np.linalg.norm(bend) > 0.05, "the arm is bent"
        cos = float(bend @ toward) / (np.linalg.norm(bend) * np.linalg.norm(toward))
        assert cos > 1.0 - 1e-6, f"the elbow bends toward the pole bone (cos {cos:.6f})"


def test_control_below_a_spine_chain_follows_the_solved_spine() -> None:
    obj = _rig()
    spine_target = rigs.empty("spine.target", (0.0, 0.0, 1.0))
    spine = rigs.add_chain(obj, "chest", 2, spine_target, solver="FABRIK", name="spine")
    arm = _arm(obj, target_bone="IK-hand.chest", solver="FABRIK")
    _settle()
    assert spine.is_valid and arm.is_valid, (spine.message, arm.message)
    before = rigs.world_head(obj, "IK-hand.chest")
    live = bpy_session.submodule("rig.live")
    for k, loc in enumerate(((0.25, 0.1, 0.95), (-0.2, -0.15, 0.93), (0.1, 0.3, 0.9))):
        spine_target.location = loc
        solves = live.chain_solve_count(obj, 1)
        rigs.update()  # one update: the arm must follow the spine in the same update
        assert live.chain_solve_count(obj, 1) > solves, "moving the spine re-solves the arm hanging below it"
        control = rigs.world_head(obj, "IK-hand.chest")
        assert np.linalg.norm(control - before) > 0.05, f"step {k}: the spine carried the control"
        assert _miss(obj, "chest", spine_target, "") <= TOL
        miss = _miss(obj, "forearm", obj, "IK-hand.chest")
        assert miss <= TOL, f"step {k}: the arm reaches where the control is now, not where it was ({miss:.4g})"
        before = control


def test_moving_a_control_bone_solves_only_its_chain() -> None:
    obj = _rig()
    other_target = rigs.empty("spine.target", (0.0, 0.0, 1.0))
    rigs.add_chain(obj, "chest", 2, other_target, solver="FABRIK", name="spine")
    _arm(obj, target_bone="IK-hand")  # root-parented: independent of the spine
    _settle()
    live = bpy_session.submodule("rig.live")
    before = (live.chain_solve_count(obj, 0), live.chain_solve_count(obj, 1))
    _move(obj, "IK-hand", (-0.2, 0.1, 0.0))
    rigs.update()
    after = (live.chain_solve_count(obj, 0), live.chain_solve_count(obj, 1))
    assert after[1] == before[1] + 1 and after[0] == before[0], (before, after)
    assert _miss(obj, "forearm", obj, "IK-hand") <= TOL


def test_a_control_the_chain_moves_is_refused_with_the_dependency() -> None:
    obj = _rig()
    rigs.update()
    pose = rigs.pose_snapshot(obj)
    ch = _arm(obj, target_bone="IK-bad")
    _settle()
    assert not ch.is_valid
    assert "'IK-bad'" in ch.message and "'forearm'" in ch.message and "chase itself" in ch.message, ch.message
    assert rigs.pose_snapshot(obj) == pose, "nothing written"
    ch.target_bone = "forearm"  # a bone of the chain itself
    _settle()
    assert not ch.is_valid and "is one of its bones" in ch.message, ch.message
    ch.target_bone = "IK-hand"
    _settle()
    assert ch.is_valid, ch.message


def test_controls_that_hang_below_each_other_chains_are_refused() -> None:
    obj = rigs.armature(
        "Rig",
        [
            ("a0", None, (0, 0, 0), (0, 0, 1), False),
            ("a1", "a0", (0, 0, 1), (0, 0, 2), True),
            ("b0", None, (1, 0, 0), (1, 0, 1), False),
            ("b1", "b0", (1, 0, 1), (1, 0, 2), True),
            ("ctl_a", "b1", (0, 0, 2), (0, 0, 2.2), False),  # a's control rides on chain b
            ("ctl_b", "a1", (1, 0, 2), (1, 0, 2.2), False),  # and b's on chain a
        ],
    )
    ca = rigs.add_chain(obj, "a1", 2, obj, name="a")
    ca.target_bone = "ctl_a"
    cb = rigs.add_chain(obj, "b1", 2, obj, name="b")
    cb.target_bone = "ctl_b"
    _settle()
    assert not ca.is_valid and not cb.is_valid
    assert "'b'" in ca.message and "chase each other" in ca.message, ca.message


def test_renamed_or_deleted_control_bone_invalidates_with_its_name() -> None:
    obj = _rig()
    ch = _arm(obj)
    _settle()
    assert ch.is_valid
    _move(obj, "IK-hand", (-0.2, 0.0, 0.0))
    _settle()
    pose = rigs.pose_snapshot(obj)
    obj.data.bones["IK-hand"].name = "IK-hand.renamed"
    _settle()
    assert ch.target_bone == "IK-hand.renamed" and ch.is_valid, "a rename is followed (rig/renames.py)"
    assert rigs.pose_snapshot(obj) == pose, "the pose is untouched"
    for ob in bpy.context.view_layer.objects:
        ob.select_set(ob == obj)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    obj.data.edit_bones.remove(obj.data.edit_bones["IK-hand.renamed"])
    bpy.ops.object.mode_set(mode="POSE")
    _settle()
    assert not ch.is_valid and "'IK-hand.renamed'" in ch.message and "'Rig'" in ch.message, ch.message
    assert "renamed or deleted?" in ch.message, ch.message
    ch.target_bone = "IK-hand.chest"
    _settle()
    assert ch.is_valid, ch.message
    ch.target_bone = ""  # the armature itself, without a bone
    _settle()
    assert not ch.is_valid and "target bone" in ch.message, ch.message


def test_bone_of_another_armature() -> None:
    obj = _rig()
    ctl = rigs.armature("Controls", [("handle", None, (0, 0, 0), (0, 0.1, 0), False)])
    ctl.location = (0.8, 0.1, 1.1)
    ch = rigs.add_chain(obj, "forearm", 2, ctl, solver="TWO_BONE", name="arm")
    ch.target_bone = "handle"
    _settle()
    assert ch.is_valid, ch.message
    assert _miss(obj, "forearm", ctl, "handle") <= TOL
    ctl.pose.bones["handle"].location = (-0.2, 0.1, -0.1)  # the bone moves, not the object
    _settle()
    assert _miss(obj, "forearm", ctl, "handle") <= TOL
    ctl.location = (0.6, -0.2, 0.9)  # and the object
    _settle()
    assert _miss(obj, "forearm", ctl, "handle") <= TOL
    ctl.data.bones["handle"].name = "renamed"
    _settle()
    assert ch.target_bone == "renamed" and ch.is_valid, "a rename is followed (rig/renames.py)"
    for ob in bpy.context.view_layer.objects:
        ob.select_set(ob == ctl)
    bpy.context.view_layer.objects.active = ctl
    bpy.ops.object.mode_set(mode="EDIT")
    ctl.data.edit_bones["renamed"].name = "gone"
    ctl.data.edit_bones["gone"].head.x += 0.5  # renamed and moved: nothing says it is the same bone
    bpy.ops.object.mode_set(mode="OBJECT")
    _settle()
    assert not ch.is_valid and "'renamed'" in ch.message and "'Controls'" in ch.message, ch.message


def _key_control(obj: bpy.types.Object, frames: dict[int, tuple[float, float, float]]) -> None:
    pb = obj.pose.bones["IK-hand"]
    for frame, loc in frames.items():
        _move(obj, "IK-hand", loc)
        pb.keyframe_insert("location", frame=frame)


KEYS = {1: (0.0, 0.0, 0.0), 10: (-0.3, 0.2, -0.1), 20: (-0.4, -0.2, 0.3)}


def test_keyed_control_plays_back() -> None:
    obj = _rig()
    ch = _arm(obj, solver="FABRIK")
    _key_control(obj, KEYS)
    scene = bpy.context.scene
    heads = []
    for frame in range(1, 21, 3):
        scene.frame_set(frame)
        heads.append(rigs.world_head(obj, "IK-hand"))
        assert _miss(obj, "forearm", obj, "IK-hand") <= TOL, (frame, ch.message)
    assert np.ptp(np.array(heads), axis=0).max() > 0.2, "the keyed control moved over the frames"


def test_bake_reads_the_control_bone_every_frame() -> None:
    obj = _rig()
    ch = _arm(obj, solver="TWO_BONE")
    ch.pole = obj
    ch.pole_bone = "Pole-elbow"
    _key_control(obj, KEYS)
    bake = bpy_session.submodule("rig.bake")
    result = bake.bake_rig(obj, bake.BakeOptions(frame_start=1, frame_end=20))
    # The control bone's keys evaluated and the pose worked out from them (`fastread.read_posed`): no
    # constraint or driver moves it, so stepping frames would read the same.
    assert result.read_path == "pose"
    assert not ch.enabled, "baked chains are disabled so the keys play back"
    scene = bpy.context.scene
    for frame in range(1, 21):
        scene.frame_set(frame)
        assert _miss(obj, "forearm", obj, "IK-hand") <= TOL, frame


def test_chain_length_zero_reaches_up_to_the_root() -> None:
    obj = rigs.chain_rig(4)
    target = rigs.empty("t", (1.2, 0.3, 2.8))
    ch = rigs.add_chain(obj, "b3", 0, target, name="all")
    _settle()
    assert ch.is_valid, ch.message
    assert _miss(obj, "b3", target, "") <= TOL
    rotated = [b.name for b in obj.pose.bones if abs(b.rotation_quaternion.angle) > 1e-4]
    assert "b0" in rotated, f"the root bone is part of the chain: {rotated}"
    ch.solver = "TWO_BONE"
    _settle()
    assert not ch.is_valid and "not 4" in ch.message, ch.message


def test_pole_angle_turns_the_bend_plane_about_the_root_target_axis() -> None:
    obj = _rig()
    target = rigs.empty("hand.target", (0.75, 0.0, 1.0))
    pole = rigs.empty("elbow.pole", (0.5, 0.5, 1.0))
    ch = rigs.add_chain(obj, "forearm", 2, target, solver="TWO_BONE", pole=pole, name="arm")
    root = rigs.world_head(obj, "upper_arm")
    goal = np.array(target.matrix_world.translation)
    axis = (goal - root) / np.linalg.norm(goal - root)
    for degrees in (90.0, -90.0, 180.0, 30.0):
        ch.pole_angle = math.radians(degrees)
        _settle()
        assert ch.is_valid and _miss(obj, "forearm", target, "") <= TOL, ch.message
        elbow = rigs.world_head(obj, "forearm") - root
        bend = elbow - axis * float(elbow @ axis)
        # The pole turned about the axis by the angle (right-handed) must lie in the bend's direction.
        p = np.array(pole.matrix_world.translation) - root
        turned = Matrix.Rotation(math.radians(degrees), 3, Vector(axis)) @ Vector(p)
        side = np.array(turned) - axis * float(np.array(turned) @ axis)
        cos = float(bend @ side) / (np.linalg.norm(bend) * np.linalg.norm(side))
        assert cos > 1.0 - 1e-6, (degrees, cos)


def test_pole_angle_keyed_is_read_per_frame() -> None:
    obj = _rig()
    target = rigs.empty("hand.target", (0.75, 0.0, 1.0))
    pole = rigs.empty("elbow.pole", (0.5, 0.5, 1.0))
    ch = rigs.add_chain(obj, "forearm", 2, target, solver="TWO_BONE", pole=pole, name="arm")
    ch.pole_angle = 0.0
    obj.keyframe_insert("reach_ik.chains[0].pole_angle", frame=1)
    ch.pole_angle = math.pi
    obj.keyframe_insert("reach_ik.chains[0].pole_angle", frame=11)
    scene = bpy.context.scene
    sides = []
    for frame in (1, 11):
        scene.frame_set(frame)
        sides.append(rigs.world_head(obj, "forearm")[1])
    assert sides[0] > 0.05 and sides[1] < -0.05, f"the elbow flips with the keyed angle: {sides}"


def test_target_rotation_from_a_control_bone() -> None:
    obj = _rig()
    ch = rigs.add_chain(obj, "forearm", 2, obj, solver="FABRIK", name="arm")
    ch.target_bone = "IK-hand"
    ch.use_target_rotation = True
    pb = obj.pose.bones["IK-hand"]
    _move(obj, "IK-hand", (-0.3, 0.0, 0.1))
    pb.rotation_quaternion = Matrix.Rotation(0.6, 3, "Z").to_quaternion()
    _settle()
    assert ch.is_valid, ch.message
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    tip = np.array(ev.pose.bones["forearm"].matrix.to_3x3().normalized())
    ctl = np.array(ev.pose.bones["IK-hand"].matrix.to_3x3().normalized())
    assert np.abs(tip - ctl).max() < 1e-4, "the tip takes the control bone's orientation"


def test_overlay_links_end_at_the_control_bone() -> None:
    """The dashed target link runs to the control bone's head, not to the armature's origin."""
    obj = _rig()
    _arm(obj)
    _settle()
    geo = bpy_session.submodule("ui.overlay").geometry(obj)
    head = np.array(obj.matrix_world @ obj.pose.bones["IK-hand"].head)
    ends = geo.target_links.reshape(-1, 3)
    assert len(ends), "a target link is drawn"
    assert float(np.min(np.linalg.norm(ends - head, axis=1))) < 1e-5, "the link touches the control bone's head"
    origin = np.array(obj.matrix_world.translation)
    if np.linalg.norm(origin - head) > 1e-3:
        assert float(np.min(np.linalg.norm(ends - origin, axis=1))) > 1e-4, "not the armature's origin"
