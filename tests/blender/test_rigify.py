"""A real rig nobody on this project wrote: Rigify's generated human, its IK constraints converted.

Rigify ships with Blender (the bpy wheel included). Its human metarig is generated into a full rig, which is
duplicated: the reference keeps Blender's constraints, the copy is converted with `reach.convert_constraints`.
Both rigs are set to full IK (the IK/FK sliders at 0, the default pole toggle off), their hand and foot IK
controls (`hand_ik.L/R`, `foot_ik.L/R`) are moved identically, and Blender's evaluated pose of the reference
is compared with the converted rig's. Each limb's IK constraint sits on the MCH IK chain
(`upper_arm_ik` -> `MCH-forearm_ik`, `thigh_ik` -> `MCH-shin_ik`), which the ORG/DEF bones copy at full IK:
those are the bones compared (the chain the conversion replaces).

What Rigify does that matters here:
- each limb has two IK constraints on the same bone, `IK` (no pole, on) and `IK.001` (pole, muted), and a
  driver on each one's Mute (the limb's `pole_vector` toggle). The driver would unmute the converted constraint
  at the next update, so the conversion mutes that driver too; `IK.001` stays muted and is reported with its
  driver.
- IK Stretch 0.1 on the chain bones. Blender's solver uses that stretch even for targets well within reach
  (measured on this rig at the moves below, targets 72-90 % of the limb's length from its root: bone lengths
  off by up to 2.5 % on the arms and 3.7 % on the legs, elbows 1.0 cm and knees 2.6 cm from the unstretched
  pose, tips still on the target). Reach IK never stretches (reported by the
  conversion), so the reference's constraints get Stretch off for the comparison, and the targets are kept
  within reach (checked below) where no stretch is needed.
"""

from __future__ import annotations

from collections.abc import Iterator

import addon_utils
import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Vector
from test_convert import TOL, _compare

# limb: (IK control moved by the animator, the IK chain root first, the bone the IK constraint aims at)
LIMBS = {
    "arm.L": ("hand_ik.L", ["upper_arm_ik.L", "MCH-forearm_ik.L"], "MCH-upper_arm_ik_target.L"),
    "leg.L": ("foot_ik.L", ["thigh_ik.L", "MCH-shin_ik.L"], "MCH-thigh_ik_target.L"),
}
LIMBS |= {
    limb[:-1] + "R": (control[:-1] + "R", [n[:-1] + "R" for n in names], target[:-1] + "R")
    for limb, (control, names, target) in LIMBS.items()
}
# The controls' moves from their rest place (armature space, metres, left side; mirrored in X on the right):
# toward the body so every target stays within reach (72-90 % of the limb's length from its root).
ARM_MOVES = [(-0.05, 0.0, 0.05), (-0.10, -0.10, 0.10), (-0.15, -0.15, 0.0), (-0.10, 0.10, 0.0)]
LEG_MOVES = [(0.0, -0.05, 0.10), (0.05, -0.15, 0.20), (-0.05, 0.0, 0.15), (0.0, -0.20, 0.30)]
SWITCHES = ("upper_arm_parent.L", "upper_arm_parent.R", "thigh_parent.L", "thigh_parent.R")


@pytest.fixture
def rigify() -> Iterator[None]:
    """Blender's bundled Rigify, enabled for the test and disabled again so nothing stays registered."""
    mod = addon_utils.enable("rigify", default_set=True, handle_error=None)
    if mod is None:
        pytest.skip("the bundled rigify add-on cannot be enabled in this bpy build")
    before = set(dir(bpy.types))
    try:
        yield
    finally:
        # A generated rig runs its UI script (rig_ui.py), which registers operators and panels named after the
        # rig's id; they outlive the file, so unregister them before Rigify itself.
        for name in sorted(set(dir(bpy.types)) - before):
            bpy.utils.unregister_class(getattr(bpy.types, name))
        addon_utils.disable("rigify", default_set=True, handle_error=None)
    left = [name for name in dir(bpy.types) if "rigify" in name.lower() or name not in before]
    assert not left, f"Rigify or the generated rig left classes registered: {left[:5]}"


def _generate() -> tuple[bpy.types.Object, bpy.types.Object]:
    """Rigify's human, generated (the reference) and duplicated (to convert), at the same place."""
    bpy.ops.object.armature_human_metarig_add()
    assert bpy.ops.pose.rigify_generate() == {"FINISHED"}
    ref = bpy.context.active_object
    if ref.mode != "OBJECT":
        bpy.ops.object.mode_set(mode="OBJECT")
    ref.name = "rig.ref"
    bpy.ops.object.select_all(action="DESELECT")
    ref.select_set(True)
    bpy.context.view_layer.objects.active = ref
    assert bpy.ops.object.duplicate() == {"FINISHED"}
    obj = bpy.context.active_object
    obj.name = "rig"
    assert obj is not ref and obj.data is not ref.data
    con = obj.pose.bones["MCH-forearm_ik.L"].constraints["IK"]
    assert con.target is obj, "the copy's IK constraints aim at the copy's own bones"
    for rig in (ref, obj):
        for switch in SWITCHES:
            pb = rig.pose.bones[switch]
            pb["IK_FK"] = 0.0  # full IK
            pb["pole_vector"] = False  # Rigify's default: the pole-less `IK` constraint is the one on
    rigs.update()
    return ref, obj


def _move(rig: bpy.types.Object, control: str, delta: Vector) -> None:
    """Put the control `delta` (armature space) away from its rest place."""
    pb = rig.pose.bones[control]
    pb.location = (0.0, 0.0, 0.0)
    rigs.update()
    m = pb.matrix.copy()
    m.translation += delta
    pb.matrix = m


def test_rigify_human_converted_follows_its_ik_controls_as_blender_does(rigify: None) -> None:
    ref, obj = _generate()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.convert_constraints() == {"FINISHED"}
    drivers = obj.animation_data.drivers
    chains = {ch.tip_bone: ch for ch in obj.reach_ik.chains}
    assert sorted(chains) == sorted(names[-1] for _c, names, _t in LIMBS.values()), sorted(chains)
    for _control, names, target in LIMBS.values():
        ch = chains[names[-1]]
        assert (ch.chain_length, ch.solver, ch.target, ch.target_bone, ch.pole) == (2, "TWO_BONE", obj, target, None)
        cons = obj.pose.bones[names[-1]].constraints
        path = cons["IK"].path_from_id("mute")
        assert cons["IK"].mute and drivers.find(path).mute, "the constraint and the driver on its Mute are muted"
        assert cons["IK.001"].mute and not drivers.find(cons["IK.001"].path_from_id("mute")).mute
    rigs.update()
    rigs.update()
    # Nothing left to convert; the report (run again) names the driver that can turn the pole IK back on.
    again = {(e.bone, e.constraint): e for e in bpy_session.submodule("operators.convert").convert_constraints(obj)}
    for _control, names, _target in LIMBS.values():
        assert obj.pose.bones[names[-1]].constraints["IK"].mute, "no driver unmuted a converted constraint"
        assert not again[names[-1], "IK"].chain and "driver" not in again[names[-1], "IK"].skipped
        pole_ik = again[names[-1], "IK.001"].skipped
        assert "muted" in pole_ik and "pole_vector" in pole_ik and "on top of the chain" in pole_ik, pole_ik
    # The fair reference: Blender's constraint without IK Stretch (see the module docstring).
    for _control, names, _target in LIMBS.values():
        ref.pose.bones[names[-1]].constraints["IK"].use_stretch = False
    for step, (arm, leg) in enumerate(zip(ARM_MOVES, LEG_MOVES, strict=True)):
        for limb, (control, _names, _target) in LIMBS.items():
            delta = Vector(arm if limb.startswith("arm") else leg)
            if limb.endswith(".R"):
                delta.x = -delta.x
            for rig in (ref, obj):
                _move(rig, control, delta)
        rigs.update()
        for limb, (_control, names, target) in LIMBS.items():
            goal = rigs.world_head(ref, target)
            assert np.allclose(rigs.world_head(obj, target), goal, atol=1e-6), "both rigs' controls moved alike"
            root = rigs.world_head(ref, names[0])
            reach = sum(ref.data.bones[n].length for n in names)
            assert np.linalg.norm(goal - root) < 0.92 * reach, f"step {step}: {limb}'s target within reach"
            _compare(ref, obj, names, goal)
            assert chains[names[-1]].is_valid and chains[names[-1]].residual <= TOL, chains[names[-1]].message
