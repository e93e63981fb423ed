"""The bake's fast input path (F-Curves evaluated directly) gives the same inputs as stepping frames."""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs


def _scene(target_mode: str) -> tuple[bpy.types.Object, bpy.types.Object, bpy.types.Object]:
    rig = rigs.chain_rig(3)
    rig.location = (0.3, -0.2, 0.1)
    rig.rotation_euler = (0.1, 0.0, 0.4)
    target = rigs.empty("T", (0.8, 0.2, 2.0))
    pole = rigs.empty("P", (0.0, -2.0, 1.0))
    target.rotation_mode = target_mode
    for frame, loc, ang in ((1, (0.8, 0.2, 2.0), 0.0), (9, (-0.5, 0.7, 2.3), 1.0), (20, (0.2, -0.9, 1.6), 2.5)):
        target.location = loc
        target.keyframe_insert("location", frame=frame)
        if target_mode == "QUATERNION":
            target.rotation_quaternion = (math.cos(ang / 2), math.sin(ang / 2), 0.0, 0.0)
            target.keyframe_insert("rotation_quaternion", frame=frame)
        else:
            target.rotation_euler = (ang, 0.3 * ang, -ang)
            target.keyframe_insert("rotation_euler", frame=frame)
        target.scale = (1.0 + 0.1 * ang,) * 3
        target.keyframe_insert("scale", frame=frame)
    pole.location.x = 0.5
    pole.keyframe_insert("location", frame=5)
    rigs.add_chain(rig, "b2", 3, target, pole=pole)
    rig.reach_ik.live = False  # the bake reads with live solving suspended; so do we
    return rig, target, pole


@pytest.mark.parametrize("mode", ["XYZ", "ZXY", "QUATERNION"])
def test_fast_inputs_match_frame_set(mode: str) -> None:
    rig, _, _ = _scene(mode)
    solve = bpy_session.submodule("rig.solve")
    fastread = bpy_session.submodule("rig.fastread")
    bake = bpy_session.submodule("rig.bake")
    _report, _sk, plan = solve.prepare(rig)
    frames = list(range(1, 21, 2))
    fast = fastread.read_all(rig, plan, frames)
    assert fast is not None, "a simple scene takes the fast path"
    slow = solve.stack_inputs(bake._read_frames(rig, plan, frames, bpy.context.scene, None))
    assert np.allclose(fast.pose, slow.pose, atol=1e-6)
    assert np.allclose(fast.world, slow.world, atol=1e-6)
    for i in slow.targets:
        assert np.allclose(fast.targets[i], slow.targets[i], atol=1e-5), f"target matrices differ ({mode})"
        assert np.allclose(fast.poles[i], slow.poles[i], atol=1e-5)


@pytest.mark.parametrize("step", [1, 3, 50])
def test_sampled_curves_equal_evaluate_and_leave_no_action(step: int) -> None:
    """Curves sampled in C (`convert_to_samples` on a throwaway copy) give `FCurve.evaluate`'s float32 values
    bit for bit, muted curves and sparse frames fall back to `evaluate`, and the copy is gone afterwards."""
    _rig, target, _ = _scene("XYZ")
    fastread = bpy_session.submodule("rig.fastread")
    anim = bpy_session.submodule("rig.anim")
    action = target.animation_data.action
    curves = anim.all_fcurves(action, target)
    curves[4].mute = True
    frames = list(range(-3, 25 if step < 50 else 200, step))
    actions_before = list(bpy.data.actions)
    keys_before = [anim.read_keys(fc) for fc in curves]
    sampled = fastread._sampled(target, curves, frames)
    assert list(bpy.data.actions) == actions_before, "the throwaway copy of the action is removed"
    for fc, keys in zip(curves, keys_before, strict=True):
        after = anim.read_keys(fc)
        assert all(np.array_equal(keys[k], after[k]) for k in keys), "the target's own curves are untouched"
    for i, (fc, values) in enumerate(zip(curves, sampled, strict=True)):
        if i == 4 or step == 50:
            assert values is None, "muted curves and sparse frames are left to `evaluate`"
            continue
        assert values is not None
        assert np.array_equal(values, np.array([fc.evaluate(f) for f in frames], dtype=np.float32)), fc.data_path


def test_static_inputs_solve_as_every_frame_does() -> None:
    """The fast read marks the pose as the same in every frame; solving the start pose once and repeating it
    gives the bake exactly what working it out per frame gives."""
    from dataclasses import replace

    rig, _, _ = _scene("XYZ")
    rig.reach_ik.start_from = "REST"
    rig.pose.bones["b0"].rotation_mode = "XYZ"
    rig.pose.bones["b0"].location = (0.0, 0.05, 0.0)  # a channel the rest start keeps
    solve = bpy_session.submodule("rig.solve")
    fastread = bpy_session.submodule("rig.fastread")
    report, sk, plan = solve.prepare(rig)
    fast = fastread.read_all(rig, plan, list(range(1, 21)))
    assert fast is not None and fast.static
    once = solve.solve_inputs(rig, sk, plan, fast, report, smooth=True)
    every = solve.solve_inputs(rig, sk, plan, replace(fast, static=False), solve.RigReport(), smooth=True)
    assert once.bones == every.bones
    assert np.array_equal(once.basis, every.basis)


def test_fast_path_refuses_what_it_cannot_evaluate() -> None:
    rig, target, _ = _scene("XYZ")
    solve = bpy_session.submodule("rig.solve")
    fastread = bpy_session.submodule("rig.fastread")
    _, _, plan = solve.prepare(rig)
    target.parent = rigs.empty("Parent", (1, 0, 0))
    assert fastread.read_all(rig, plan, [1, 2]) is None, "a parented target needs frame_set"
    target.parent = None
    target.constraints.new("COPY_LOCATION")
    assert fastread.read_all(rig, plan, [1, 2]) is None, "a constrained target needs frame_set"
    target.constraints.clear()
    rig.pose.bones["b0"].keyframe_insert("location", frame=1)
    assert fastread.read_all(rig, plan, [1, 2]) is None, "an animated bone location needs frame_set"
