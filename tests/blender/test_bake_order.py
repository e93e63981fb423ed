"""Bakes as continuous as playback: each frame starts from the previous frame's result, as live playback does.

A two-bone arm whose target (and pole) turn rigidly 5 degrees per frame about a tilted axis: live playback
turns each bone a few degrees per frame. The keys must be those of live playback from the range's first
frame, whatever frame is current when the bake runs, for every solver; with Start From Rest, every frame
starts from rest, live and baked alike. Measured on the keys Blender plays back (matrix_basis).
"""

from __future__ import annotations

import math

import bpy
import numpy as np
import pytest
import rigs
from mathutils import Matrix, Vector

N = 60
AXIS = Vector((0.3, 1.0, 0.6)).normalized()


def turning_arm(solver: str, start_from: str = "CURRENT", pole: bool = False, animated_root: bool = False):
    """The arm (root bone 'base', then 'b0' and 'b1'), its target (and pole) keyed along a rigid turn."""
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, N
    rig = rigs.armature(
        "Arm",
        [
            ("base", None, (0, 0, -0.5), (0, 0, 0), True),
            ("b0", "base", (0, 0, 0), (1, 0, 0.1), False),
            ("b1", "b0", (1, 0, 0.1), (2, 0, 0), True),
        ],
    )
    target = rigs.empty("T", (2, 0, 0))
    p = rigs.empty("P", (1, 0, 1)) if pole else None
    for f in range(1, N + 1):
        turn = Matrix.Rotation(math.radians(5.0 * (f - 1)), 3, AXIS)
        target.location = turn @ Vector((2, 0, 0))
        target.keyframe_insert("location", frame=f)
        if p is not None:
            p.location = turn @ Vector((1, 0, 1))
            p.keyframe_insert("location", frame=f)
    if animated_root:
        # A bone outside the chain keyed (the armature is animated: the bake steps the scene), still.
        rig.pose.bones["base"].keyframe_insert("location", frame=1)
        rig.pose.bones["base"].keyframe_insert("location", frame=N)
    rigs.add_chain(rig, "b1", 2, target, solver=solver, pole=p)
    rig.reach_ik.start_from = start_from
    bpy.context.view_layer.objects.active = rig
    return rig, target


def track(rig: bpy.types.Object, world: bool = False) -> np.ndarray:
    """(N, 2, 4) the arm bones' basis quaternions on every frame, played in order (`world`: their world
    rotations)."""
    out = []
    for f in range(1, N + 1):
        bpy.context.scene.frame_set(f)
        pbs = rig.pose.bones
        if world:
            out.append([np.array((rig.matrix_world @ pbs[b].matrix).to_quaternion()) for b in ("b0", "b1")])
        else:
            out.append([np.array(pbs[b].matrix_basis.to_quaternion()) for b in ("b0", "b1")])
    return np.array(out)


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def extra_twist(world_q: np.ndarray) -> np.ndarray:
    """(N-1, 2) how far each bone twists about its own axis between two frames beyond the rigid turn the
    targets make (degrees): the twist part of (turn @ before)^-1 @ after."""
    turn = np.array(Matrix.Rotation(math.radians(5.0), 3, AXIS).to_quaternion())
    moved = _qmul(np.broadcast_to(turn, world_q[:-1].shape), world_q[:-1])
    conj = moved * np.array([1.0, -1.0, -1.0, -1.0])
    d = _qmul(conj, world_q[1:])
    tw = 2.0 * np.arctan2(d[..., 2], d[..., 0])
    return np.degrees(np.abs((tw + math.pi) % (2.0 * math.pi) - math.pi))


def angle_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Degrees between unit quaternions (from the chord, not arccos: exact near zero in float32)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    chord = np.minimum(np.linalg.norm(a - b, axis=-1), np.linalg.norm(a + b, axis=-1))
    return np.degrees(4.0 * np.arcsin(np.clip(chord / 2.0, 0.0, 1.0)))


def bake(rig: bpy.types.Object, current: int = 1) -> set[str]:
    bpy.context.scene.frame_set(current)
    return bpy.ops.reach.bake(frame_start=1, frame_end=N)  # type: ignore[no-any-return]


def live_playback(rig: bpy.types.Object) -> np.ndarray:
    """Live playback from the first frame, the chain starting from its FK pose (rest here)."""
    bpy.context.scene.frame_set(1)
    return track(rig)


@pytest.mark.parametrize("solver", ["TWO_BONE", "FABRIK", "CCD"])
@pytest.mark.parametrize("case", ["plain", "pole", "animated armature"])
def test_a_bake_is_live_playback_from_the_first_frame(solver: str, case: str) -> None:
    rig, _t = turning_arm(solver, pole=case == "pole", animated_root=case == "animated armature")
    live = live_playback(rig)
    # Another frame current, the pose there left by live playback: the bake does not start from it.
    assert bake(rig, current=37) == {"FINISHED"}
    baked = track(rig)
    worst = float(angle_between(live, baked).max())
    assert worst < 0.2, f"{solver} {case}: the keys differ from live playback by {worst:.2f} degrees"
    steps = extra_twist(track(rig, world=True))
    assert steps.max() <= 2.0, f"{solver} {case}: a bone twists {steps.max():.1f} degrees in one frame"


@pytest.mark.parametrize("start_from", ["CURRENT", "REST"])
def test_the_same_keys_whatever_frame_is_current(start_from: str) -> None:
    keys = []
    for current in (1, 20):
        bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
        rig, _t = turning_arm("FABRIK", start_from)
        bpy.context.scene.frame_set(1)
        track(rig)  # live playback first: the channels hold its results when the bake starts
        assert bake(rig, current=current) == {"FINISHED"}
        keys.append(track(rig))
    worst = float(angle_between(keys[0], keys[1]).max())
    assert worst < 1e-3, f"Start From {start_from}: bakes from frames 1 and 20 differ by {worst:.3f} degrees"


def test_start_from_rest_bakes_what_live_playback_shows() -> None:
    rig, _t = turning_arm("CCD", "REST")
    live = live_playback(rig)
    assert bake(rig, current=12) == {"FINISHED"}
    worst = float(angle_between(live, track(rig)).max())
    assert worst < 1.0, f"Start From Rest: keys {worst:.2f} degrees from live playback"


def test_a_bake_that_misses_says_so_with_the_chain_the_frames_and_the_worst_frame() -> None:
    rig, target = turning_arm("FABRIK")
    # Frames 30-32 put the target 5 m out, far beyond the arm's 2 m.
    for f in (30, 31, 32):
        target.location = (5.0, 0.0, 0.0)
        target.keyframe_insert("location", frame=f)
    bpy.context.scene.frame_set(1)
    bake_mod = __import__("bpy_session").submodule("rig.bake")
    result = bake_mod.bake_rig(rig, bake_mod.BakeOptions(frame_start=1, frame_end=N))
    stats = result.chains[0]
    assert stats.frames_missed == 3 and stats.worst_frame in (30, 31, 32)
    assert stats.max_residual > 2.9
    text = " ".join(result.warnings)
    assert "'b1' missed its target on 3 of 60 frame(s)" in text and f"at frame {stats.worst_frame}" in text


@pytest.mark.parametrize("case", ["target rotation", "tree"])
def test_rigs_the_live_program_does_not_take_bake_as_live_playback_too(case: str) -> None:
    # Use Target Rotation, and two chains sharing bones (a tree), go through the full solver frame by frame.
    rig, target = turning_arm("FABRIK")
    ch = rig.reach_ik.chains[0]
    if case == "target rotation":
        ch.use_target_rotation = True
        for f in range(1, N + 1):
            target.rotation_euler = (0.0, 0.0, math.radians(3.0 * f))
            target.keyframe_insert("rotation_euler", frame=f)
    else:
        # The elbow's target turns with the hand's (one rigid arm: both reachable together).
        other = rigs.empty("T2", (1.0, 0.0, 0.1))
        for f in range(1, N + 1):
            other.location = Matrix.Rotation(math.radians(5.0 * (f - 1)), 3, AXIS) @ Vector((1.0, 0.0, 0.1))
            other.keyframe_insert("location", frame=f)
        rigs.add_chain(rig, "b0", 2, other, solver="FABRIK", name="upper")
    live = live_playback(rig)
    assert bake(rig, current=23) == {"FINISHED"}
    worst = float(angle_between(live, track(rig)).max())
    assert worst < 0.2, f"{case}: the keys differ from live playback by {worst:.2f} degrees"
