"""Drags of Set Up Character's control bones solved before Blender evaluates them (`rig.live_pre`).

Each test drags control bones with `live.solve_before` on and off and compares what Blender evaluates: the
pose, and each chain's status against the distance Blender shows between its tip and its control. A solve
made before the evaluation counts once (`live.guess_count`); one the evaluation did not confirm is made again
after it (`live.program_solve_count` counts both), so the counts say which path each update took.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from test_live_program import _CHEST_HEAD, _HANDS_FEET, TOL, _drag_controls, _evaluated_pose, _live, _set_up_rig

_ALL = ("IK-hand.L", "IK-hand.R", "IK-foot.L", "IK-foot.R")


@contextmanager
def _before(on: bool) -> Iterator[None]:
    live = _live()
    was, budget = live.solve_before, live.stage_budget
    live.solve_before = on
    live.stage_budget = None  # poses compared for equality: the global stage unbounded on both sides
    try:
        yield
    finally:
        live.solve_before, live.stage_budget = was, budget


def _shown_residual(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> float:
    """The distance Blender shows between the chain's tip and its control bone (world space)."""
    return float(np.linalg.norm(rigs.world_tail(obj, ch.tip_bone) - rigs.world_head(obj, ch.target_bone)))


def _drag(
    names: tuple[str, ...], on: bool, steps: int = 8, extra=None, at: int = 0, each=None
) -> tuple[list, list, list]:  # type: ignore[no-untyped-def]
    """Drag `names` for `steps` updates (`extra(obj)` changes the rig before update `at`, `each(obj, step)` in
    every update with the drag); per update: the evaluated pose, the statuses, and (guesses, solves) made in
    it."""
    live = _live()
    with _before(on):
        obj = _set_up_rig(True)
        poses, statuses, counts = [], [], []
        for step in range(steps):
            if extra is not None and step == at:
                extra(obj)
                rigs.update()
            guessed, solved = live.guess_count(obj), live.solve_count(obj)
            _drag_controls(obj, step, names)
            if each is not None:
                each(obj, step)
            rigs.update()
            counts.append((live.guess_count(obj) - guessed, live.solve_count(obj) - solved))
            poses.append(_evaluated_pose(obj))
            statuses.append([(ch.is_valid, ch.message.split(":")[0], ch.residual) for ch in obj.reach_ik.chains])
            tolerance = obj.reach_ik.tolerance
            for ch in obj.reach_ik.chains:
                shown = _shown_residual(obj, ch)
                # The status is what Blender shows: its residual, and 'reached' only within the tolerance.
                assert math.isclose(ch.residual, shown, rel_tol=1e-3, abs_tol=1e-5), (step, ch.name)
                if not ch.message:
                    assert shown <= tolerance * (1 + 1e-6), (step, ch.name, shown)
        return poses, statuses, counts


@pytest.mark.parametrize(
    "names", [_HANDS_FEET, _ALL, _CHEST_HEAD], ids=["hand-and-foot", "four-limbs", "chest-and-head"]
)
def test_control_drags_are_solved_once_before_the_evaluation_as_after_it(names: tuple[str, ...]) -> None:
    poses, statuses, counts = _drag(names, True)
    post_poses, post_statuses, post_counts = _drag(names, False)
    assert all(g == 0 for g, _s in post_counts)
    # After the first update (which checks the rig's compiled program), every drag is solved before the
    # evaluation, once: the evaluation confirmed it, so nothing was solved after it.
    assert [g for g, _s in counts[1:]] == [1] * (len(counts) - 1), counts
    assert [s for _g, s in counts[1:]] == [1] * (len(counts) - 1), counts
    for step, (a, b) in enumerate(zip(poses, post_poses, strict=True)):
        worst = float(np.abs(a - b).max())
        assert worst < 5 * TOL, f"step {step}: solved before the evaluation, the pose differs by {worst}"
    for a, b in zip(statuses, post_statuses, strict=True):
        assert [s[:2] for s in a] == [s[:2] for s in b]
        assert np.allclose([s[2] for s in a], [s[2] for s in b], atol=5 * TOL)


def _shoulder_follows_hand(obj: bpy.types.Object) -> None:
    """The left shoulder turns a little toward the left hand's control (a constraint Blender evaluates): the
    arm's root moves with the control, which a solve before the evaluation cannot know."""
    con = obj.pose.bones["mixamorig:LeftShoulder"].constraints.new("DAMPED_TRACK")
    con.target = obj
    con.subtarget = "IK-hand.L"
    con.influence = 0.5


def test_a_guess_the_evaluation_does_not_confirm_is_solved_again_after_it() -> None:
    poses, _statuses, counts = _drag(("IK-hand.L",), True, extra=_shoulder_follows_hand)
    post_poses, _post_statuses, _ = _drag(("IK-hand.L",), False, extra=_shoulder_follows_hand)
    # Guessed, the shoulder Blender evaluated is not the one the guess read: solved again after the evaluation.
    assert sum(g for g, _s in counts) >= 6, counts
    assert all(s == g + 1 for g, s in counts if g), counts
    for step, (a, b) in enumerate(zip(poses, post_poses, strict=True)):
        worst = float(np.abs(a - b).max())
        assert worst < 5 * TOL, f"step {step}: the pose differs from the post path's by {worst}"
    # The statuses matched what Blender shows at every step (`_drag` asserts it).


def _control_constrained(obj: bpy.types.Object) -> None:
    """The left hand's control held left of x = 0.1 (a constraint Blender evaluates on the control itself)."""
    con = obj.pose.bones["IK-hand.L"].constraints.new("LIMIT_LOCATION")
    con.use_max_x = True
    con.max_x = 0.1


def test_controls_whose_pose_their_channels_do_not_give_are_solved_after_the_evaluation() -> None:
    # A constraint on the control itself: where Blender puts it is not rest times channels.
    poses, _statuses, counts = _drag(("IK-hand.L",), True, steps=5, extra=_control_constrained)
    post_poses, _s, _c = _drag(("IK-hand.L",), False, steps=5, extra=_control_constrained)
    assert all(g == 0 for g, _s in counts), counts
    for a, b in zip(poses, post_poses, strict=True):
        assert float(np.abs(a - b).max()) < 5 * TOL


def _location_in_parent_space(obj: bpy.types.Object) -> None:
    """The control's location channels taken in the armature's space, not the bone's (Bone > Relations >
    Local Location off): the same channels put it elsewhere, and no check of the rig's structure notices."""
    obj.data.bones["IK-hand.L"].use_local_location = False


def test_a_control_blender_puts_elsewhere_than_guessed_is_solved_again() -> None:
    # Guessed for three updates, then the control's location is taken otherwise: the first guess after it lands
    # elsewhere than predicted, is solved again after the evaluation (the statuses match what Blender shows:
    # `_drag`), and the rig is guessed no more.
    poses, _statuses, counts = _drag(("IK-hand.L",), True, steps=7, extra=_location_in_parent_space, at=3)
    post_poses, _s, _c = _drag(("IK-hand.L",), False, steps=7, extra=_location_in_parent_space, at=3)
    assert [g for g, _s in counts[1:3]] == [1, 1], counts
    assert counts[3] == (1, 2), counts
    assert [g for g, _s in counts[4:]] == [0, 0, 0], counts
    # Up to the change, the same poses as after the evaluation; from it on, the search that solves the arm out
    # of reach starts from another pose (the guess's), so only the statuses are compared (in `_drag`).
    for a, b in zip(poses[:3], post_poses[:3], strict=True):
        assert float(np.abs(a - b).max()) < 5 * TOL


def test_a_bone_posed_by_hand_with_the_control_goes_after_the_evaluation() -> None:
    live = _live()
    with _before(True):
        obj = _set_up_rig(True)
        pb = obj.pose.bones["mixamorig:LeftShoulder"]
        for step in range(4):
            guessed = live.guess_count(obj)
            _drag_controls(obj, step, ("IK-hand.L",))
            pb.rotation_mode = "QUATERNION"
            pb.rotation_quaternion = (math.cos(0.05 * (step + 1)), 0.0, 0.0, math.sin(0.05 * (step + 1)))
            rigs.update()
            assert live.guess_count(obj) == guessed  # a bone posed by hand: the post handler's
            ch = next(c for c in obj.reach_ik.chains if c.name == "arm.L")
            assert math.isclose(ch.residual, _shown_residual(obj, ch), rel_tol=1e-3, abs_tol=1e-5)
        # The shoulder keeps what the user set (no chain poses it).
        assert np.allclose(pb.rotation_quaternion, (math.cos(0.2), 0.0, 0.0, math.sin(0.2)), atol=1e-6)


def _forearm_keyed(obj: bpy.types.Object) -> None:
    pb = obj.pose.bones["mixamorig:LeftForeArm"]
    pb.rotation_mode = "QUATERNION"
    pb.keyframe_insert("rotation_quaternion", frame=1)


def _forearm_key_edited(obj: bpy.types.Object, step: int) -> None:
    """At the fourth update, the forearm's key edited with the drag: Blender evaluates the animation again and
    writes the keyed rotation over the channel (where a solve before the evaluation wrote)."""
    if step == 3:
        from test_full_body import anim_fcurves  # the action's F-curves on every Blender (slotted from 4.4)

        fc = next(f for f in anim_fcurves(obj) if "LeftForeArm" in f.data_path and f.array_index == 1)
        fc.keyframe_points[0].co.y += 0.05
        fc.update()


def test_a_pose_the_evaluation_writes_over_is_solved_again_after_it() -> None:
    # Guessed, but the evaluation put the forearm's keyed rotation over the solve's: the post handler solves the
    # arm again on what Blender shows (the statuses match it: `_drag`).
    _poses, _statuses, counts = _drag(("IK-hand.L",), True, steps=5, extra=_forearm_keyed, each=_forearm_key_edited)
    assert [g for g, _s in counts[1:3]] == [1, 1], counts
    assert counts[3] == (1, 2), counts


def test_the_channels_are_read_back_after_the_evaluation_only_where_animation_sets_them() -> None:
    from demo import rigs as demo_rigs

    live_pre = bpy_session.submodule("rig.live_pre")
    obj = _set_up_rig(True)
    # Set Up Character's own drivers set the follow constraints' influence: no channel.
    assert len(obj.animation_data.drivers) == 4
    quiet = live_pre.quiet_drivers(obj)
    assert quiet == 4 and not live_pre.animated(obj, quiet)
    # A driver on a channel (a bone no chain poses): read back, from the next guess on and for one made before.
    fc = obj.pose.bones["mixamorig:RightShoulder"].driver_add("rotation_quaternion", 1)
    fc.driver.expression = "0.1"
    assert live_pre.animated(obj, quiet)
    assert live_pre.quiet_drivers(obj) == -1 and live_pre.animated(obj, -1)
    obj.animation_data.drivers.remove(fc)
    assert not live_pre.animated(obj, live_pre.quiet_drivers(obj))
    # An action (keys Blender may apply as it evaluates), or an NLA track.
    obj.animation_data.action = bpy.data.actions.new("Keys")
    assert live_pre.animated(obj, quiet)
    obj.animation_data.action = None
    obj.animation_data.nla_tracks.new()
    assert live_pre.animated(obj, quiet)
    # No animation data at all: nothing to read back.
    plain = demo_rigs.humanoid("mixamo", name="Plain", bent=True)
    assert plain.animation_data is None and not live_pre.animated(plain, live_pre.quiet_drivers(plain))


def _full_body_drag(on: bool) -> tuple[list, list, list]:  # type: ignore[no-untyped-def]
    """Full Body: the left hand dragged in and past its reach (the hips follow, the feet stay); per update the
    evaluated pose, the statuses and (guesses, solves)."""
    from test_full_body import _chain, _move_control, _past_reach, humanoid

    live = _live()
    with _before(on):
        obj, _hips = humanoid()
        left = _chain(obj, "arm.L")
        start, end = _past_reach(obj, "L", -0.1), _past_reach(obj, "L", 0.2)
        poses, statuses, counts = [], [], []
        for t in (0.1, 0.4, 0.8, 1.0, 0.7, 0.3):
            guessed, solved = live.guess_count(obj), live.solve_count(obj)
            _move_control(obj, left, start + (end - start) * t)
            counts.append((live.guess_count(obj) - guessed, live.solve_count(obj) - solved))
            poses.append(_evaluated_pose(obj))
            statuses.append([(ch.is_valid, ch.message.split(":")[0], ch.residual) for ch in obj.reach_ik.chains])
            for ch in obj.reach_ik.chains:
                assert math.isclose(ch.residual, _shown_residual(obj, ch), rel_tol=1e-3, abs_tol=1e-5), ch.name
        return poses, statuses, counts


def test_full_body_drags_are_solved_before_the_evaluation_too() -> None:
    poses, statuses, counts = _full_body_drag(True)
    post_poses, post_statuses, post_counts = _full_body_drag(False)
    assert all(g == 0 for g, _s in post_counts)
    # The body stage and the limbs, solved once per update before the evaluation (after the first update).
    assert [c for c in counts[1:]] == [(1, 1)] * (len(counts) - 1), counts
    for step, (a, b) in enumerate(zip(poses, post_poses, strict=True)):
        worst = float(np.abs(a - b).max())
        assert worst < 1e-3, f"step {step}: the pose differs from the post path's by {worst}"
    for a, b in zip(statuses, post_statuses, strict=True):
        assert [s[:2] for s in a] == [s[:2] for s in b]


def test_only_the_rig_an_update_listed_is_looked_at_before_the_next_evaluation() -> None:
    """Two characters: a drag of one's control is solved before the evaluation from its second update on;
    the other, untouched, is never solved; a drag that goes over to the other starts after the evaluation
    again (before it, only rigs the previous update listed are read)."""
    from demo import rigs as demo_rigs

    live = _live()
    with _before(True):
        bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
        for k, name in enumerate(("A", "B")):
            obj = demo_rigs.humanoid("mixamo", name=name, bent=True)
            obj.location.x = 2.0 * k
            bpy.context.view_layer.update()
            bpy.context.view_layer.objects.active = obj
            assert bpy.ops.reach.auto_setup() == {"FINISHED"}
            rigs.update()
        a, b = chars = [bpy.data.objects["A"], bpy.data.objects["B"]]
        rigs.update()
        seen = []
        for obj, steps in ((a, 3), (b, 3), (a, 2)):
            for step in range(steps):
                before = [(live.guess_count(c), live.solve_count(c)) for c in chars]
                _drag_controls(obj, step, ("IK-hand.L",))
                rigs.update()
                seen.append(
                    (
                        obj.name,
                        *[
                            (live.guess_count(c) - g, live.solve_count(c) - s)
                            for c, (g, s) in zip(chars, before, strict=True)
                        ],
                    )
                )
                for ch in obj.reach_ik.chains:
                    assert math.isclose(ch.residual, _shown_residual(obj, ch), rel_tol=1e-3, abs_tol=1e-5)
    guessed = [(name, (ga[0] if name == "A" else gb[0])) for name, ga, gb in seen]
    untouched = [(gb if name == "A" else ga) for name, ga, gb in seen]
    assert all(u == (0, 0) for u in untouched), seen
    # Each drag's first update after the evaluation, its next ones before it.
    assert [g for _n, g in guessed] == [0, 1, 1, 0, 1, 1, 0, 1], seen
