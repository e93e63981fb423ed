"""Playback on the compiled live program (`rig.live_program.program_full`): frame changes, and other full-path updates
(a bone posed by hand), solved by the program instead of `core.solve` where nothing but the pose, targets,
poles and pole angles changed.

Each test plays the same frames with the program on and off (`live.use_program`) and compares what Blender
evaluates, the chains' statuses and, once the chains let go, the FK pose each run stored; the counter
`full_program_solve_count` proves which path ran. Real motion: a CMU clip set up in one click, its controls
snapped over a range (the user's workflow of issue 33).
"""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import rigs
from test_live_program import TOL, _evaluated_pose, _program
from test_mocap import import_clip, set_up

from demo import rigs as demo_rigs

FRAMES = 30


def _live():  # type: ignore[no-untyped-def]
    return bpy_session.submodule("rig.live")


def _statuses(obj: bpy.types.Object) -> list[tuple[bool, str, float]]:
    return [(ch.is_valid, ch.message.split(":")[0], ch.residual) for ch in obj.reach_ik.chains]


def _channels(obj: bpy.types.Object) -> np.ndarray:
    """Every bone's rotation and location channels, as Blender holds them."""
    return np.array(
        [[*pb.rotation_quaternion, *pb.rotation_euler, *pb.location] for pb in obj.pose.bones], dtype=np.float64
    )


def _released(obj: bpy.types.Object) -> np.ndarray:
    """The chains let go: each bone shows the FK pose the run stored (its channels)."""
    for ch in obj.reach_ik.chains:
        ch.enabled = False
    rigs.update()
    return _channels(obj)


def _same_poses(lean: list[np.ndarray], full: list[np.ndarray], first: int = 0) -> None:
    for f, (a, b) in enumerate(zip(lean, full, strict=True)):
        worst = float(np.abs(a - b).max())
        assert worst < 5 * TOL, f"frame {first + f}: the program's pose differs from the full solve's by {worst}"


def _cmu_played(program: bool) -> tuple[list[np.ndarray], list[list], np.ndarray, int]:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    with _program(program):
        obj = import_clip("cmu_131_01")
        start = int(obj.animation_data.action.frame_range[0])
        bpy.context.scene.frame_set(start)
        assert set_up(obj) == {"FINISHED"}
        done = bpy.ops.reach.snap_to_pose(chains="ALL", use_range=True, frame_start=start, frame_end=start + FRAMES)
        assert done == {"FINISHED"}
        live = _live()
        before = live.full_program_solve_count(obj)
        poses, statuses = [], []
        scene = bpy.context.scene
        for f in range(start, start + FRAMES + 1):
            scene.frame_set(f)
            poses.append(_evaluated_pose(obj))
            statuses.append(_statuses(obj))
        count = live.full_program_solve_count(obj) - before
        return poses, statuses, _released(obj), count


def test_mocap_playback_takes_the_program_and_matches_the_full_solve() -> None:
    lean_poses, lean_status, lean_fk, lean_count = _cmu_played(True)
    full_poses, full_status, full_fk, full_count = _cmu_played(False)
    assert full_count == 0
    assert lean_count >= FRAMES - 1, f"frame changes took the compiled program: {lean_count} of {FRAMES + 1}"
    _same_poses(lean_poses, full_poses)
    for f, (a, b) in enumerate(zip(lean_status, full_status, strict=True)):
        for (valid_a, text_a, res_a), (valid_b, text_b, res_b) in zip(a, b, strict=True):
            assert valid_a == valid_b and text_a == text_b, f"frame {f}: '{text_a}' vs '{text_b}'"
            assert abs(res_a - res_b) < 5 * TOL
    assert np.abs(lean_fk - full_fk).max() < 1e-6, "the FK pose stored during playback differs"


def _keyed_character_played(program: bool) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, int]:
    """The demo character with its spine keyed (FK animation under a chain), its arms not keyed (they start
    from where the IK left them), a target and a Pole Angle keyed, played; a chain bone posed by hand
    halfway."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    with _program(program):
        rig = demo_rigs.character()
        demo_rigs.use_reach(rig)
        obj = rig.obj
        spine = obj.pose.bones["spine"]
        spine.rotation_mode = "QUATERNION"
        for f, angle in ((1, 0.0), (12, 0.3)):
            spine.rotation_quaternion = (math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0)
            spine.keyframe_insert("rotation_quaternion", frame=f)
        target = obj.reach_ik.chains[1].target
        for f, dx in ((1, 0.0), (12, 0.15)):
            target.location.x += dx
            target.keyframe_insert("location", frame=f)
        # A keyed Pole Angle (the bent left leg's): a per-frame number the program takes.
        poled = next(i for i, ch in enumerate(obj.reach_ik.chains) if ch.name == "leg.L")
        assert obj.reach_ik.chains[poled].pole is not None
        for f, angle in ((1, 0.0), (12, 1.2)):
            obj.reach_ik.chains[poled].pole_angle = angle
            obj.keyframe_insert(f"reach_ik.chains[{poled}].pole_angle", frame=f)
        scene = bpy.context.scene
        scene.frame_set(1)
        rigs.update()
        live = _live()
        before = live.full_program_solve_count(obj)
        poses = []
        for f in range(1, 13):
            scene.frame_set(f)
            if f == 6:
                # An FK edit of a chain bone by hand: the store keeps it as the bone's FK value.
                obj.pose.bones["forearm.L"].rotation_mode = "XYZ"
                obj.pose.bones["forearm.L"].rotation_euler = (0.4, 0.0, 0.1)
                rigs.update()
            poses.append(_evaluated_pose(obj))
        count = live.full_program_solve_count(obj) - before
        held = _channels(obj)
        return poses, held, _released(obj), count


def test_keyed_fk_and_a_hand_edit_during_playback_keep_their_fk_values() -> None:
    lean_poses, lean_held, lean_fk, lean_count = _keyed_character_played(True)
    full_poses, full_held, full_fk, full_count = _keyed_character_played(False)
    assert full_count == 0 and lean_count >= 8, f"the program solved {lean_count} of 12 frames"
    _same_poses(lean_poses, full_poses, first=1)
    names = [pb.name for pb in bpy.data.objects["Character"].pose.bones]
    shin = names.index("shin.L")
    assert np.abs(lean_poses[-1][shin] - lean_poses[0][shin]).max() > 0.03, "the keyed Pole Angle swings the knee"
    assert np.abs(lean_held - full_held).max() < 5 * TOL
    assert np.abs(lean_fk - full_fk).max() < 1e-6, "the FK pose stored during playback differs"
    # Both keep the hand edit as the forearm's FK value, and the spine's keyed one.
    names = [pb.name for pb in bpy.data.objects["Character"].pose.bones]
    forearm = names.index("forearm.L")
    assert np.allclose(lean_fk[forearm, 4:7], (0.4, 0.0, 0.1), atol=1e-6)
