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


def test_a_fix_never_makes_another_chain_invalid() -> None:
    """Issue 35 item 7: fixing the tip of a stretching Target Rotation chain (Inherit Scale 'None' on b2) made
    the valid chain hanging from that tip invalid ("inherits the scale of a chain that stretches"), although a
    tip that takes the target's rotation keeps its length: nothing of the stretch reaches below it."""
    rig = rigs.chain_rig(5)
    t = rigs.empty("T", (0.4, 0.3, 3.6))
    ch = rigs.add_chain(rig, "b2", 3, t, name="upper")
    ch.stretch = 1.5
    for b in ("b1", "b2"):
        rig.data.bones[b].inherit_scale = "ALIGNED"
    ch.use_target_rotation = True
    low_t = rigs.empty("T.low", (1.0, 0.5, 4.4))
    low = rigs.add_chain(rig, "b4", 2, low_t, name="lower")
    bpy.context.view_layer.objects.active = rig
    rigs.update()
    assert not ch.is_valid and "Use Target Rotation" in ch.message, ch.message
    assert low.is_valid, low.message
    assert bpy.ops.reach.fix_chain(index=0) == {"FINISHED"}
    rigs.update()
    low_t.location = (0.9, 0.4, 4.5)
    rigs.update()
    assert ch.is_valid, ch.message
    assert low.is_valid, f"the fix made 'lower' invalid: {low.message}"
    assert abs(low.residual - _miss(rig, low)) < 1e-4, (low.residual, _miss(rig, low))
    # The lengths Blender shows below the upper chain's tip are the modelled ones (no stretch reached them).
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    for name in ("b2", "b3", "b4"):
        pb = ev.pose.bones[name]
        assert abs((pb.tail - pb.head).length - rig.data.bones[name].length) < 1e-5, name


def test_a_fix_that_would_refuse_another_chain_is_taken_back() -> None:
    """Issue 35 item 7: Inherit Scale 'Aligned' on b1, b2 lets 'upper' stretch, which would stretch and shear
    'lower' hanging below it through b3 (Inherit Scale 'Full'): the fix says so and changes nothing."""
    rig = rigs.chain_rig(5)
    ch = rigs.add_chain(rig, "b2", 3, rigs.empty("T", (0.4, 0.3, 3.6)), name="upper")
    ch.stretch = 1.5
    low = rigs.add_chain(rig, "b4", 2, rigs.empty("T.low", (1.0, 0.5, 4.4)), name="lower")
    bpy.context.view_layer.objects.active = rig
    rigs.update()
    assert not ch.is_valid and "Inherit Scale 'Full'" in ch.message, ch.message
    assert low.is_valid, low.message
    before = rigs.pose_snapshot(rig), [(b.use_inherit_rotation, b.inherit_scale) for b in rig.data.bones]
    with pytest.raises(RuntimeError, match=r"would refuse chain 'lower'.*nothing was changed"):
        bpy.ops.reach.fix_chain(index=0)
    rigs.update()
    assert (rigs.pose_snapshot(rig), [(b.use_inherit_rotation, b.inherit_scale) for b in rig.data.bones]) == before
    assert low.is_valid, low.message
