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
    snapshot = bpy_session.submodule("rig.snapshot")
    fastread = bpy_session.submodule("rig.fastread")
    bake = bpy_session.submodule("rig.bake")
    _report, _sk, plan = snapshot.prepare(rig)
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
    snapshot = bpy_session.submodule("rig.snapshot")
    fastread = bpy_session.submodule("rig.fastread")
    report, sk, plan = snapshot.prepare(rig)
    fast = fastread.read_all(rig, plan, list(range(1, 21)))
    assert fast is not None and fast.static
    once = solve.solve_inputs(rig, sk, plan, fast, report, smooth=True)
    every = solve.solve_inputs(rig, sk, plan, replace(fast, static=False), solve.RigReport(), smooth=True)
    assert once.bones == every.bones
    assert np.array_equal(once.basis, every.basis)


def test_fast_path_refuses_what_it_cannot_evaluate() -> None:
    rig, target, _ = _scene("XYZ")
    snapshot = bpy_session.submodule("rig.snapshot")
    fastread = bpy_session.submodule("rig.fastread")
    _, _, plan = snapshot.prepare(rig)
    target.parent = rigs.empty("Parent", (1, 0, 0))
    assert fastread.read_all(rig, plan, [1, 2]) is None, "a parented target needs frame_set"
    target.parent = None
    target.constraints.new("COPY_LOCATION")
    assert fastread.read_all(rig, plan, [1, 2]) is None, "a constrained target needs frame_set"
    target.constraints.clear()
    rig.pose.bones["b0"].keyframe_insert("location", frame=1)
    assert fastread.read_all(rig, plan, [1, 2]) is None, "an animated bone location needs frame_set"


def _posed_pair(frames: list[int]):  # type: ignore[no-untyped-def]
    """The CMU walk set up in one click (`test_lookahead._cmu`): its inputs over `frames` read both ways."""
    from test_lookahead import _cmu

    obj, start = _cmu()
    obj.location, obj.rotation_euler = (0.3, -0.2, 0.1), (0.1, 0.0, 0.4)  # the armature's matrix counts too
    rigs.update()
    solve = bpy_session.submodule("rig.solve")
    snapshot = bpy_session.submodule("rig.snapshot")
    fastread = bpy_session.submodule("rig.fastread")
    bake = bpy_session.submodule("rig.bake")
    live = bpy_session.submodule("rig.live")
    _report, sk, plan = snapshot.prepare(obj)
    frames = [start + f for f in frames]
    with live.suspended(obj):
        posed = fastread.read_posed(obj, plan, frames)
        stepped = solve.stack_inputs(bake._read_frames(obj, plan, frames, bpy.context.scene, None))
    return obj, sk, plan, posed, stepped


def test_motion_capture_posed_from_its_keys_matches_frame_set() -> None:
    """An armature its own action animates, its targets and poles its own bones: the channels from the
    F-Curves and the pose by forward kinematics give what stepping frames reads, for every bone a chain's
    solve reads (the chains, the bones above them, the controls); the target and pole matrices too."""
    obj, sk, plan, posed, stepped = _posed_pair(list(range(0, 24, 3)))
    assert posed is not None, "the set-up clip takes the posed read"
    parents = sk.parent.tolist()
    read: set[int] = set()
    for c in (c for g in plan.groups for c in g.chains):
        tip = sk.index[obj.reach_ik.chains[c.index].tip_bone]
        for b in (*c.bones, c.target_local, c.pole_local, tip):
            while b >= 0:
                read.add(b)
                b = parents[b]
    rows = sorted(read)
    assert np.allclose(posed.pose[:, rows], stepped.pose[:, rows], atol=1e-5)
    assert np.array_equal(posed.world, stepped.world)
    assert np.array_equal(posed.scale, stepped.scale)
    for i in stepped.targets:
        assert np.allclose(posed.targets[i], stepped.targets[i], atol=1e-5)
    for i in stepped.poles:
        assert np.allclose(posed.poles[i], stepped.poles[i], atol=1e-5)
    # The hands and feet follow their controls by constraints: the read leaves them as their channels pose
    # them (no chain reads them), which is why the rows compared are the ones the solve reads.
    wrist = sk.index[obj.reach_ik.chains[0].tip_bone]
    assert wrist in read


def test_motion_capture_baked_through_the_posed_read_keys_what_stepping_frames_keys() -> None:
    from test_lookahead import FRAMES, _cmu

    anim = bpy_session.submodule("rig.anim")
    fastread = bpy_session.submodule("rig.fastread")
    keys = {}
    for path in ("pose", "frame_set"):
        obj, start = _cmu()
        bpy.context.view_layer.objects.active = obj
        real = fastread.read_posed
        if path == "frame_set":
            fastread.read_posed = lambda *_a: None
        try:
            bake = bpy_session.submodule("rig.bake")
            result = bake.bake_rig(obj, bake.BakeOptions(frame_start=start, frame_end=start + FRAMES))
        finally:
            fastread.read_posed = real
        assert result.read_path == path
        keys[path] = {
            (fc.data_path, fc.array_index): np.array([fc.evaluate(f) for f in range(start, start + FRAMES + 1)])
            for fc in anim.all_fcurves(obj.animation_data.action, obj)
        }
    assert keys["pose"].keys() == keys["frame_set"].keys()
    worst = max(float(np.abs(keys["pose"][k] - keys["frame_set"][k]).max()) for k in keys["pose"])
    assert worst < 1e-4, worst


def test_posed_read_refuses_a_constraint_on_a_bone_the_solve_reads() -> None:
    from test_lookahead import _cmu

    obj, _start = _cmu()
    snapshot = bpy_session.submodule("rig.snapshot")
    fastread = bpy_session.submodule("rig.fastread")
    _report, _sk, plan = snapshot.prepare(obj)
    chain = next(c for g in plan.groups for c in g.chains)
    assert fastread.read_posed(obj, plan, [1, 2]) is not None
    con = obj.pose.bones[chain.bones[0]].constraints.new("COPY_ROTATION")
    assert fastread.read_posed(obj, plan, [1, 2]) is None, "a constrained chain bone needs frame_set"
    obj.pose.bones[chain.bones[0]].constraints.remove(con)
    obj.reach_ik.chains[chain.index].influence = 0.5
    assert fastread.read_posed(obj, plan, [1, 2]) is None, "a blend with FK reads each frame's channels"
