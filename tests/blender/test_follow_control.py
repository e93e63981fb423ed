"""The hands' and feet's follow constraint ("Reach IK: follow control", made by Set Up Character) when its
control is deleted: the chain is refused with a message naming the control, the constraint is muted so the
hand keeps its own (FK) rotation instead of copying the armature's, and it follows again once the control is
back or another is picked. Removing the chain removes the constraint it drives. Measured from Blender's
evaluated pose."""

from __future__ import annotations

import bpy
import bpy_session
import pytest
import rigs
from mathutils import Matrix
from test_ikfk_follow import FOLLOW, HAND, _hand, _rig, _rotate_control, _turn

KEY = "reach_ik_follow_muted"


def _own(obj: bpy.types.Object) -> Matrix:
    """The hand's world matrix from its parent's evaluated pose and its own channels (no constraint)."""
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    pb = ev.pose.bones[HAND]
    parent = pb.parent
    local = parent.bone.matrix_local.inverted() @ pb.bone.matrix_local
    return (ev.matrix_world @ parent.matrix @ local @ obj.pose.bones[HAND].matrix_basis).copy()


def _assert_honest(obj: bpy.types.Object, what: str) -> None:
    """Every valid chain at Influence 1 reports the distance Blender shows between its tip and its control."""
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    for ch in obj.reach_ik.chains:
        if not ch.enabled or not ch.is_valid or ch.influence != 1.0:
            continue
        goal = ch.target.evaluated_get(deps)
        at = (
            goal.matrix_world @ goal.pose.bones[ch.target_bone].head
            if ch.target_bone
            else goal.matrix_world.translation
        )
        shown = ((ev.matrix_world @ ev.pose.bones[ch.tip_bone].tail) - at).length
        assert abs(ch.residual - shown) <= 1e-4 + 1e-3 * shown, (
            f"{what}: '{ch.name}' says {ch.residual:.4g}, shows {shown:.4g}"
        )


def _delete_control(obj: bpy.types.Object, bone: str, how: str) -> None:
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    edit = obj.data.edit_bones
    if how == "OPERATOR":  # Blender's Delete clears the constraint's bone
        for eb in edit:
            eb.select = eb.select_head = eb.select_tail = False
        eb = edit[bone]
        eb.select = eb.select_head = eb.select_tail = True
        edit.active = eb
        assert bpy.ops.armature.delete() == {"FINISHED"}
    else:  # a script's remove leaves the constraint naming a bone that is not there
        edit.remove(edit[bone])
    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.update()


def _relations_again(obj: bpy.types.Object) -> None:
    """Make Blender build the depsgraph's relations again (where a dangling bone name is reported)."""
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.update()


def _setup() -> tuple[bpy.types.Object, bpy.types.PropertyGroup, str]:
    obj, ch = _rig("BONE")
    _rotate_control(obj, ch, (0.4, -0.3, 0.2))
    obj.rotation_euler = (0.0, 0.0, 0.7)  # so that copying the armature's rotation shows
    rigs.update()
    assert _turn(_hand(obj), obj.matrix_world) > 5.0
    return obj, ch, ch.target_bone


@pytest.mark.parametrize("how", ["OPERATOR", "SCRIPT"])
def test_a_deleted_control_mutes_the_follow_constraint(how: str, capfd: pytest.CaptureFixture[str]) -> None:
    obj, ch, control = _setup()
    _delete_control(obj, control, how)
    assert not ch.is_valid and f"'{control}'" in ch.message, ch.message
    _assert_honest(obj, f"control deleted ({how})")
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    assert con.mute, "the follow constraint of a missing control must be muted"
    turn = _turn(_hand(obj), _own(obj))
    assert turn < 0.05, f"the hand must keep its own rotation, it is {turn:.3g}° from it"
    assert _turn(_hand(obj), obj.matrix_world) > 5.0, "the hand copies the armature's rotation"
    capfd.readouterr()
    _relations_again(obj)
    err = capfd.readouterr().err
    assert "find_node_operation" not in err and "Failed to add relation" not in err, err


@pytest.mark.parametrize("how", ["OPERATOR", "SCRIPT"])
def test_the_control_back_gives_the_follow_back(how: str) -> None:
    obj, ch, control = _setup()
    head, tail = obj.data.bones[control].head_local.copy(), obj.data.bones[control].tail_local.copy()
    _delete_control(obj, control, how)
    bpy.ops.object.mode_set(mode="EDIT")
    eb = obj.data.edit_bones.new(control)
    eb.head, eb.tail = head, tail
    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.update()
    assert ch.is_valid, ch.message
    _assert_honest(obj, f"control back ({how})")
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    assert not con.mute and con.subtarget == control and KEY not in obj.pose.bones[HAND]
    _rotate_control(obj, ch, (-0.3, 0.5, 0.2))
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    shown = ev.matrix_world @ ev.pose.bones[control].matrix
    assert _turn(_hand(obj), shown) < 0.05, "the hand follows its control again"


def test_picking_another_control_gives_the_follow_back_on_it() -> None:
    obj, ch, control = _setup()
    _delete_control(obj, control, "OPERATOR")
    other = "IK-hand.R"
    assert other in obj.data.bones
    ch.target_bone = other
    rigs.update()
    assert ch.is_valid, ch.message
    _assert_honest(obj, "another control picked")
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    assert not con.mute and con.subtarget == other
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    assert _turn(_hand(obj), ev.matrix_world @ ev.pose.bones[other].matrix) < 0.05


def test_a_constraint_the_user_muted_stays_muted() -> None:
    obj, ch, control = _setup()
    obj.pose.bones[HAND].constraints[FOLLOW].mute = True
    head, tail = obj.data.bones[control].head_local.copy(), obj.data.bones[control].tail_local.copy()
    _delete_control(obj, control, "SCRIPT")
    bpy.ops.object.mode_set(mode="EDIT")
    eb = obj.data.edit_bones.new(control)
    eb.head, eb.tail = head, tail
    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.update()
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    assert ch.is_valid and con.mute and con.subtarget == control


@pytest.mark.parametrize("remove_follow", [True, False])
def test_removing_the_chain_removes_its_follow_constraint(
    remove_follow: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    obj, ch, _control = _setup()
    settings = obj.reach_ik
    settings.active_chain_index = list(settings.chains).index(ch)
    bpy.context.view_layer.objects.active = obj
    capfd.readouterr()
    assert bpy.ops.reach.chain_remove(remove_follow=remove_follow) == {"FINISHED"}
    rigs.update()
    assert "arm.L" not in settings.chains
    path = f'pose.bones["{HAND}"].constraints["{FOLLOW}"].influence'
    assert obj.animation_data.drivers.find(path) is None, "a driver left pointing at the removed chain"
    con = obj.pose.bones[HAND].constraints.get(FOLLOW)
    if remove_follow:
        assert con is None
        assert _turn(_hand(obj), _own(obj)) < 0.05, "the hand shows its own rotation"
    else:
        assert con is not None
    assert "Error" not in capfd.readouterr().err


def test_a_deleted_control_empty_mutes_the_follow_constraint() -> None:
    """An Empty deleted in the viewport lingers in the file until it is saved: the hand must not keep
    copying it."""
    obj, ch = _rig("EMPTY")
    _rotate_control(obj, ch, (0.4, -0.3, 0.2))
    empty = ch.target
    bpy.ops.object.mode_set(mode="OBJECT")
    for ob in bpy.context.view_layer.objects:
        ob.select_set(ob == empty)
    bpy.context.view_layer.objects.active = empty
    assert bpy.ops.object.delete() == {"FINISHED"}
    rigs.update()
    assert not ch.is_valid, "the chain's control is gone"
    con = obj.pose.bones[HAND].constraints[FOLLOW]
    assert con.target is None or con.mute, "the hand must not follow a deleted control"
    assert _turn(_hand(obj), _own(obj)) < 0.05, "the hand keeps its own rotation"


def test_symmetrize_a_chain_whose_control_is_deleted() -> None:
    """Both hands' controls deleted, Symmetrize on the left arm: no traceback (it tried to mirror a bone that
    is not there); the right chain names the bone that would mirror the left's control, and says it is missing."""
    obj, ch, control = _setup()
    _delete_control(obj, control, "OPERATOR")
    other = obj.reach_ik.chains["arm.R"].target_bone
    _delete_control(obj, other, "OPERATOR")
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="POSE")
    compat = bpy_session.submodule("rig.compat")
    for pb in obj.pose.bones:
        compat.select_bone(pb, pb.name == ch.tip_bone)
    assert bpy.ops.reach.symmetrize() == {"FINISHED"}
    rigs.update()
    right = obj.reach_ik.chains["arm.R"]
    assert right.target_bone == other and not right.is_valid and f"'{other}'" in right.message, right.message
    assert obj.pose.bones["mixamorig:RightHand"].constraints[FOLLOW].mute
