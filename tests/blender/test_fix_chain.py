"""`reach.fix_chain`: a chain refused for a bone setting its message names is fixed in one click (one undo
step); the tip then reaches, measured from Blender's evaluated pose. Nothing to fix: a clear refusal."""

from __future__ import annotations

import bpy
import numpy as np
import pytest
import rigs

TOL = 1e-3


def _miss(rig: bpy.types.Object, ch: bpy.types.PropertyGroup) -> float:
    return float(np.linalg.norm(rigs.world_tail(rig, ch.tip_bone) - np.array(ch.target.matrix_world.translation)))


def _stretching() -> tuple[bpy.types.Object, bpy.types.PropertyGroup]:
    """A default 3-bone chain (every bone Inherit Scale 'Full', Blender's default) with Stretch 1.5 and a
    target beyond its length: refused, naming b1."""
    rig = rigs.chain_rig(3)
    t = rigs.empty("T", (0.4, 0.3, 3.6))  # the chain is about 3.03 long: reachable only by stretching
    ch = rigs.add_chain(rig, "b2", 3, t)
    ch.stretch = 1.5
    bpy.context.view_layer.objects.active = rig
    rigs.update()
    assert not ch.is_valid and "'b1'" in ch.message and "Inherit Scale 'Full'" in ch.message, ch.message
    return rig, ch


def test_fix_a_stretching_default_rig_then_undo() -> None:
    rig, ch = _stretching()
    name = rig.name
    pose = rigs.pose_snapshot(rig)
    bpy.ops.ed.undo_push(message="before the fix")
    assert bpy.ops.reach.fix_chain() == {"FINISHED"}
    assert "UNDO" in bpy.types.REACH_OT_fix_chain.bl_options, "one undo step"
    rigs.update()
    assert [rig.data.bones[b].inherit_scale for b in ("b0", "b1", "b2")] == ["FULL", "ALIGNED", "ALIGNED"]
    assert ch.is_valid, ch.message
    assert _miss(rig, ch) <= TOL, f"the stretched tip is {_miss(rig, ch):.4g} from the target"
    # Headless, Blender pushes no step after an operator (no window): push the one the UNDO flag makes.
    bpy.ops.ed.undo_push(message="Fix Bone Settings")
    bpy.ops.ed.undo()
    rigs.update()
    rig = bpy.data.objects[name]
    ch = rig.reach_ik.chains[0]
    assert [rig.data.bones[b].inherit_scale for b in ("b0", "b1", "b2")] == ["FULL"] * 3, "undo restores"
    assert not ch.is_valid and "Inherit Scale 'Full'" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == pose, "refused again: the pose as before the fix"


def test_fix_inherit_rotation() -> None:
    rig = rigs.chain_rig(3)
    t = rigs.empty("T", (0.6, 0.2, 2.3))
    ch = rigs.add_chain(rig, "b2", 3, t)
    rig.data.bones["b1"].use_inherit_rotation = False
    bpy.context.view_layer.objects.active = rig
    rigs.update()
    assert not ch.is_valid and "Inherit Rotation" in ch.message, ch.message
    assert bpy.ops.reach.fix_chain(index=0) == {"FINISHED"}
    rigs.update()
    assert rig.data.bones["b1"].use_inherit_rotation
    assert ch.is_valid and _miss(rig, ch) <= TOL, ch.message


def test_fix_the_tip_of_a_stretching_chain_with_target_rotation() -> None:
    rig, ch = _stretching()
    for b in ("b1", "b2"):
        rig.data.bones[b].inherit_scale = "ALIGNED"
    ch.use_target_rotation = True
    rigs.update()
    assert not ch.is_valid and "Use Target Rotation" in ch.message, ch.message
    assert bpy.ops.reach.fix_chain() == {"FINISHED"}
    rigs.update()
    assert rig.data.bones["b2"].inherit_scale == "NONE"
    assert ch.is_valid, ch.message


@pytest.mark.parametrize("case", ["valid", "no target"])
def test_nothing_to_fix_is_refused_and_changes_nothing(case: str) -> None:
    rig = rigs.chain_rig(3)
    t = rigs.empty("T", (0.6, 0.2, 2.3))
    ch = rigs.add_chain(rig, "b2", 3, None if case == "no target" else t)
    bpy.context.view_layer.objects.active = rig
    rigs.update()
    before = rigs.pose_snapshot(rig), [(b.use_inherit_rotation, b.inherit_scale) for b in rig.data.bones]
    with pytest.raises(RuntimeError, match="has no bone setting Reach IK can fix"):
        bpy.ops.reach.fix_chain()
    after = rigs.pose_snapshot(rig), [(b.use_inherit_rotation, b.inherit_scale) for b in rig.data.bones]
    assert after == before
    assert ch.is_valid == (case == "valid")
