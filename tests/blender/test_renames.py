"""Renamed bones are followed (as Blender's constraints follow a renamed subtarget); deleted ones are refused.

Every check is measured from Blender's evaluated pose: the tip's world position against the target's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import bpy
import numpy as np
import pytest
import rigs
from conftest import ADDON
from mathutils import Quaternion, Vector

TOL = 1e-3


def _rig() -> bpy.types.Object:
    """A root, a three-bone arm b0..b2 on it, a control bone 'ctl' and a pole bone 'pole' on the root, and
    'ORG-b2' / 'DEF-b2': two bones exactly where b2 is (Rigify's layers share their geometry)."""
    return rigs.armature(
        "Rig",
        [
            ("root", None, (0, 0, 0), (0, 0.3, 0), False),
            ("b0", "root", (0, 0, 0.2), (0.1, 0, 1.0), False),
            ("b1", "b0", (0.1, 0, 1.0), (-0.05, 0, 1.8), True),
            ("b2", "b1", (-0.05, 0, 1.8), (0.05, 0, 2.5), True),
            ("ORG-b2", "root", (-0.05, 0, 1.8), (0.05, 0, 2.5), False),
            ("DEF-b2", "root", (-0.05, 0, 1.8), (0.05, 0, 2.5), False),
            ("ctl", "root", (0.7, 0.2, 1.9), (0.7, 0.4, 1.9), False),
            ("pole", "root", (0.3, -1.0, 1.0), (0.3, -1.2, 1.0), False),
        ],
    )


def _chain(obj: bpy.types.Object, tip: str = "b2") -> bpy.types.PropertyGroup:
    ch = rigs.add_chain(obj, tip, 3, obj, name="arm")
    ch.target_bone = "ctl"
    ch.pole = obj
    ch.pole_bone = "pole"
    return ch


def _settle() -> None:
    rigs.update()
    rigs.update()


def _miss(obj: bpy.types.Object, tip: str, control: str = "") -> float:
    ch = obj.reach_ik.chains[0]
    return float(np.linalg.norm(rigs.world_tail(obj, tip) - rigs.world_head(obj, control or ch.target_bone)))


def _move(obj: bpy.types.Object, bone: str, offset: tuple[float, float, float]) -> None:
    """Set a root-parented bone's location so its head moves by `offset` in armature space."""
    obj.pose.bones[bone].location = obj.data.bones[bone].matrix_local.to_3x3().inverted() @ Vector(offset)


def _edit(obj: bpy.types.Object) -> None:
    for ob in bpy.context.view_layer.objects:
        ob.select_set(ob == obj)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")


def _delete(obj: bpy.types.Object, bone: str) -> None:
    _edit(obj)
    obj.data.edit_bones.remove(obj.data.edit_bones[bone])
    bpy.ops.object.mode_set(mode="OBJECT")


def _solved() -> tuple[bpy.types.Object, bpy.types.PropertyGroup]:
    obj = _rig()
    ch = _chain(obj)
    _settle()
    assert ch.is_valid and _miss(obj, "b2") <= TOL, ch.message
    return obj, ch


@pytest.mark.parametrize(
    "old,new,attr",
    [("b2", "hand", "tip_bone"), ("ctl", "IK-hand", "target_bone"), ("pole", "Pole-elbow", "pole_bone")],
    ids=["tip", "target", "pole"],
)
def test_renamed_bone_is_followed(old: str, new: str, attr: str) -> None:
    obj, ch = _solved()
    obj.data.bones[old].name = new
    _settle()
    assert getattr(ch, attr) == new, f"the chain follows the rename of '{old}'"
    assert ch.is_valid, ch.message
    tip = ch.tip_bone
    assert _miss(obj, tip) <= TOL
    _move(obj, ch.target_bone, (-0.2, 0.1, -0.3))  # the chain still follows its control
    _settle()
    assert ch.is_valid and _miss(obj, tip) <= TOL, f"{ch.message}: {_miss(obj, tip):.4g}"
    if attr == "pole_bone":
        # The pole still decides the bend: the elbow (b0's tail) is on the pole's side of the root-target line.
        root, goal = rigs.world_head(obj, "b0"), rigs.world_head(obj, "ctl")
        axis = (goal - root) / np.linalg.norm(goal - root)
        elbow, pole = rigs.world_tail(obj, "b0") - root, rigs.world_head(obj, "Pole-elbow") - root
        side = lambda v: v - axis * float(v @ axis)  # noqa: E731
        assert float(side(elbow) @ side(pole)) > 0.0, "the renamed pole still sets the bend plane"


def test_renamed_in_edit_mode_is_followed() -> None:
    obj, ch = _solved()
    _edit(obj)
    obj.data.edit_bones["b2"].name = "hand"
    obj.data.edit_bones["ctl"].name = "IK-hand"
    rigs.update()
    bpy.ops.object.mode_set(mode="POSE")
    _settle()
    assert (ch.tip_bone, ch.target_bone) == ("hand", "IK-hand")
    assert ch.is_valid and _miss(obj, "hand") <= TOL, ch.message


def test_renamed_bone_of_another_armature_is_followed() -> None:
    obj = _rig()
    ctl = rigs.armature("Controls", [("handle", None, (0, 0, 0), (0, 0.1, 0), False)])
    ctl.location = (0.6, 0.2, 2.0)
    ch = rigs.add_chain(obj, "b2", 3, ctl, name="arm")
    ch.target_bone = "handle"
    _settle()
    assert ch.is_valid, ch.message
    ctl.data.bones["handle"].name = "IK-handle"
    _settle()
    assert ch.target_bone == "IK-handle" and ch.is_valid, ch.message
    ctl.pose.bones["IK-handle"].location = (-0.2, 0.1, -0.1)
    _settle()
    goal = rigs.world_head(ctl, "IK-handle")
    assert np.linalg.norm(rigs.world_tail(obj, "b2") - goal) <= TOL


def test_the_renamed_bone_is_followed_not_its_twins() -> None:
    """ORG-b2 and DEF-b2 sit exactly where b2 is: the rename goes to the bone that was b2, never to them."""
    obj, ch = _solved()
    obj.data.bones["b2"].name = "hand"
    _settle()
    assert ch.tip_bone == "hand" and ch.is_valid, ch.message


def test_renamed_limited_bone_keeps_its_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Limits live on the pose bone, which Blender renames with the bone: the solve still clamps it."""
    # The target is out of reach under the limit: unbounded, the global stage gives the same pose each time
    # (bounded, it goes on over updates and lands where the clock let it).
    monkeypatch.setattr(sys.modules[f"{ADDON}.rig.live"], "stage_budget", None)
    obj = _rig()
    ch = _chain(obj)
    ch.pole = None
    obj.reach_ik.start_from = "REST"  # the pose depends on the target only: comparable before and after
    lim = obj.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(10)
    _move(obj, "ctl", (-0.5, 0.0, -0.9))  # a target that bends b1 far more than 10 degrees unlimited
    _settle()
    limited = rigs.world_tail(obj, "b1")
    obj.data.bones["b1"].name = "mid"
    _move(obj, "ctl", (0.0, 0.0, 0.0))
    _settle()
    _move(obj, "ctl", (-0.5, 0.0, -0.9))
    _settle()
    assert ch.is_valid, ch.message
    assert np.linalg.norm(rigs.world_tail(obj, "mid") - limited) <= 1e-4, "same limited pose after the rename"
    obj.pose.bones["mid"].reach_ik.use_cone = False
    _settle()
    assert np.linalg.norm(rigs.world_tail(obj, "mid") - limited) > 0.01, "the limit made a difference"


@pytest.mark.parametrize("bone,role", [("b2", "tip"), ("ctl", "target"), ("pole", "pole")])
def test_deleted_bone_stays_refused(bone: str, role: str) -> None:
    obj, ch = _solved()
    chain = ("b0", "b1", "b2")
    pose = {b: tuple(obj.pose.bones[b].rotation_quaternion) for b in chain}
    _delete(obj, bone)
    _settle()
    assert not ch.is_valid and f"'{bone}'" in ch.message and "renamed or deleted?" in ch.message, ch.message
    assert f"pick the {role} bone again" in ch.message, ch.message
    left = {b: tuple(obj.pose.bones[b].rotation_quaternion) for b in chain if b in obj.pose.bones}
    assert left == {b: q for b, q in pose.items() if b != bone}, "nothing written"


def test_rename_undo_and_redo() -> None:
    obj, ch = _solved()
    name = obj.name
    bpy.ops.ed.undo_push(message="solved")
    obj.data.bones["b2"].name = "hand"
    _settle()
    bpy.ops.ed.undo_push(message="rename")
    bpy.ops.ed.undo()
    _settle()
    obj = bpy.data.objects[name]
    ch = obj.reach_ik.chains[0]
    assert "b2" in obj.data.bones and ch.tip_bone == "b2" and ch.is_valid, ch.message
    assert _miss(obj, "b2") <= TOL
    bpy.ops.ed.redo()
    _settle()
    obj = bpy.data.objects[name]
    ch = obj.reach_ik.chains[0]
    assert "hand" in obj.data.bones and ch.tip_bone == "hand" and ch.is_valid, ch.message
    assert _miss(obj, "hand") <= TOL


def test_rename_with_live_off_followed_after_reload(tmp_path: Path) -> None:
    """Renamed while nothing watched (Live off), saved and reopened: the chain's record comes with the file."""
    obj, ch = _solved()
    obj.reach_ik.live = False
    obj.data.bones["b2"].name = "hand"
    obj.data.bones["ctl"].name = "IK-hand"
    rigs.update()
    path = tmp_path / "renamed.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    bpy.ops.wm.open_mainfile(filepath=str(path))
    obj = bpy.data.objects["Rig"]
    ch = obj.reach_ik.chains[0]
    obj.reach_ik.live = True
    _settle()
    assert (ch.tip_bone, ch.target_bone) == ("hand", "IK-hand")
    _move(obj, "IK-hand", (-0.2, 0.1, -0.3))
    _settle()
    assert ch.is_valid and _miss(obj, "hand") <= TOL, ch.message


def test_bake_follows_a_rename() -> None:
    """A bake (not live) follows a rename made with Live off too."""
    obj, ch = _solved()
    obj.reach_ik.live = False
    obj.data.bones["b2"].name = "hand"
    pb = obj.pose.bones["ctl"]
    for frame, loc in ((1, (0.0, 0.0, 0.0)), (10, (-0.2, 0.1, -0.3))):
        _move(obj, "ctl", loc)
        pb.keyframe_insert("location", frame=frame)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.bake(frame_start=1, frame_end=10) == {"FINISHED"}
    assert ch.tip_bone == "hand"
    for frame in (1, 5, 10):
        bpy.context.scene.frame_set(frame)
        rigs.update()
        assert _miss(obj, "hand", "ctl") <= TOL, f"frame {frame}: {_miss(obj, 'hand', 'ctl'):.4g}"


def test_renamed_chain_bone_gives_its_fk_pose_back() -> None:
    """The FK store is kept by bone name: a chain bone renamed while live still gets its FK pose back when
    the chain is turned off (the store's row follows the rename)."""
    obj = _rig()
    fk = Quaternion((0.95, 0.1, 0.2, 0.0)).normalized()
    obj.pose.bones["b1"].rotation_quaternion = fk
    rigs.update()
    ch = _chain(obj)
    _settle()
    assert ch.is_valid and tuple(obj.pose.bones["b1"].rotation_quaternion) != tuple(fk), "IK posed b1"
    obj.data.bones["b1"].name = "mid"
    _settle()
    ch.enabled = False
    _settle()
    back = np.array(obj.pose.bones["mid"].rotation_quaternion)
    assert np.abs(back - np.array(fk, dtype=np.float32)).max() == 0.0, f"FK pose given back exactly: {back}"


@pytest.mark.parametrize("refusal", ["non-uniform scale", "tiny scale"])
def test_moved_while_refused_then_renamed_is_followed(refusal: str) -> None:
    """Issue 35 item 6: a tip bone moved at rest while the whole armature was refused, then renamed, was never
    followed (the record still held where it was before the move)."""
    obj, ch = _solved()
    obj.scale = (1.0, 2.0, 1.0) if refusal == "non-uniform scale" else (1e-20,) * 3
    _settle()
    assert not ch.is_valid
    _edit(obj)
    eb = obj.data.edit_bones["b2"]
    eb.tail = eb.tail + Vector((0.05, 0.0, 0.1))  # moved at rest (its own edit)
    bpy.ops.object.mode_set(mode="POSE")
    _settle()
    obj.data.bones["b2"].name = "hand"  # renamed (another edit)
    _settle()
    obj.scale = (1.0, 1.0, 1.0)  # the refusal fixed
    _settle()
    assert ch.tip_bone == "hand", f"the rename was not followed: {ch.message}"
    assert ch.is_valid and _miss(obj, "hand") <= TOL, ch.message
