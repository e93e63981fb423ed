"""The full-body stage (`solvers.body`): a body whose hips and spine move so the hands reach, feet pinned."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.body import BodyProblem, solve_body
from solvers.limits import JointLimits

# Bone frames with +Y up the body (columns X, Y, Z): x right-to-left, z up, -y forward.
_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
ARM, LEG, NECK = 0.6, 0.9, 0.2


def body(
    hand_l: np.ndarray | None = None,
    hand_r: np.ndarray | None = None,
    pull: tuple[float, float, float] = (1.0, 1.0, 1.0),
    pins: bool = True,
    limits: JointLimits | None = None,
    mirror: bool = False,
) -> tuple[BodyProblem, np.ndarray]:
    """Hips at 1 m, three spine bones, shoulders, hips' joints and neck as anchors; feet planted under the
    straight legs. Returns the problem and the anchors' start positions (left hand, right hand, left foot,
    right foot, neck)."""
    heads = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.1], [0.0, 0.0, 1.25], [0.0, 0.0, 1.4]])
    frames = np.repeat(_UP[None], 4, axis=0)
    parents = np.array([-1, 0, 1, 2])
    bones = np.array([3, 3, 0, 0, 3])
    offsets = np.array([[0.2, 0.15, 0.0], [-0.2, 0.15, 0.0], [0.1, -0.05, 0.0], [-0.1, -0.05, 0.0], [0.0, 0.2, 0.0]])
    points = heads[bones] + np.einsum("aij,aj->ai", frames[bones], offsets)
    reach = np.array([ARM, ARM, LEG, LEG, NECK])
    feet = points[2:4] - np.array([0.0, 0.0, LEG])
    left = points[0] + np.array([0.3, -0.2, -0.3]) if hand_l is None else hand_l
    right = points[1] + np.array([-0.3, -0.2, -0.3]) if hand_r is None else hand_r
    targets = np.array([left, right, feet[0], feet[1], points[4] + np.array([0.0, 0.0, 0.1])])
    pinned = np.array([False, False, pins, pins, False])
    legs = 1.0 if pins else 0.0  # unpinned legs take no part (pull 0)
    weights = np.array([pull[0], pull[1], legs, legs, pull[2]])
    if mirror:
        flip = np.diag([-1.0, 1.0, 1.0])
        heads, targets, points = heads @ flip, targets @ flip, points @ flip
        # A mirrored frame keeps right-handed axes: X flips with the world's x.
        frames = np.repeat((flip @ _UP @ flip)[None], 4, axis=0)
        offsets = offsets @ flip
        order = [1, 0, 3, 2, 4]
        bones, offsets, reach, targets, pinned, weights = (
            a[order] for a in (bones, offsets, reach, targets, pinned, weights)
        )
        points = points[order]
    ref = np.repeat(np.eye(3)[None], 4, axis=0)
    problem = BodyProblem(parents, heads, frames, ref, bones, offsets, reach, targets, weights, pinned, limits)
    return problem, points


def anchors(problem: BodyProblem, heads: np.ndarray, frames: np.ndarray) -> np.ndarray:
    b = np.asarray(problem.anchor_bones)
    return heads[b] + np.einsum("aij,aj->ai", frames[b], problem.anchor_offsets)


def reach_of(problem: BodyProblem, heads: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """How far each anchor's target is from it, by forward kinematics on the result (not the solver's own)."""
    return np.linalg.norm(problem.targets - anchors(problem, heads, frames), axis=1)


def past_straight_arm(points: np.ndarray, beyond: float) -> np.ndarray:
    """A left-hand target `beyond` past the straight arm, forward and out from the shoulder."""
    direction = np.array([0.6, -0.8, 0.0])
    return points[0] + direction * (ARM + beyond)


def test_a_target_within_reach_moves_nothing() -> None:
    problem, _points = body()
    result = solve_body(problem)
    assert not result.moved and result.iterations == 0
    np.testing.assert_array_equal(result.heads, problem.heads)
    np.testing.assert_array_equal(result.frames, problem.frames)


def test_a_hand_pulled_past_the_straight_arm_is_reached_feet_held() -> None:
    _p, points = body()
    problem, _ = body(hand_l=past_straight_arm(points, 0.15))
    result = solve_body(problem)
    dist = reach_of(problem, result.heads, result.frames)
    assert dist[0] <= ARM + 1e-4, f"the left hand's target is {dist[0] - ARM:.4f} beyond the arm after the body moved"
    assert (dist[2:4] <= LEG + 1e-9).all(), f"a planted foot was pulled out of reach: {dist[2:4] - LEG}"
    assert result.moved and not result.blocked
    assert np.linalg.norm(result.heads[0] - problem.heads[0]) > 1e-3, "the hips did not move"


def test_pull_zero_leaves_the_body() -> None:
    _p, points = body()
    problem, _ = body(hand_l=past_straight_arm(points, 0.15), pull=(0.0, 1.0, 1.0))
    result = solve_body(problem)
    assert not result.moved
    assert result.excess[0] == pytest.approx(0.15, abs=1e-9)


def test_an_unreachable_pull_keeps_the_feet_and_says_blocked() -> None:
    _p, points = body()
    problem, _ = body(hand_l=past_straight_arm(points, 1.5))
    result = solve_body(problem)
    dist = reach_of(problem, result.heads, result.frames)
    assert np.isfinite(result.heads).all() and np.isfinite(result.frames).all()
    assert (dist[2:4] <= LEG + 1e-9).all(), f"a planted foot was pulled out of reach: {dist[2:4] - LEG}"
    assert result.blocked and result.excess[0] > 0.1


def test_without_pins_the_body_follows_further() -> None:
    _p, points = body()
    pinned, _ = body(hand_l=past_straight_arm(points, 1.2), pull=(1.0, 0.0, 0.0))
    free, _ = body(hand_l=past_straight_arm(points, 1.2), pull=(1.0, 0.0, 0.0), pins=False)
    held, loose = solve_body(pinned), solve_body(free)
    assert held.excess[0] > 0.01 and held.excess[0] > loose.excess[0]
    assert loose.excess[0] < 1e-4 and not loose.blocked


def test_left_and_right_are_mirror_symmetric() -> None:
    _p, points = body()
    left, _ = body(hand_l=past_straight_arm(points, 0.15))
    right, _ = body(hand_l=past_straight_arm(points, 0.15), mirror=True)
    a, b = solve_body(left), solve_body(right)
    flip = np.diag([-1.0, 1.0, 1.0])
    np.testing.assert_allclose(b.heads, a.heads @ flip, atol=1e-9)
    np.testing.assert_allclose(b.frames, flip @ a.frames @ flip, atol=1e-9)


def test_small_steps_move_the_hips_continuously() -> None:
    _p, points = body()
    hips = []
    steps = np.linspace(0.0, 0.2, 41)
    for beyond in steps:
        problem, _ = body(hand_l=past_straight_arm(points, float(beyond)))
        hips.append(solve_body(problem).heads[0])
    jumps = np.linalg.norm(np.diff(np.array(hips), axis=0), axis=1)
    step = float(steps[1] - steps[0])
    assert jumps.max() <= 2.0 * step, f"the hips jumped {jumps.max():.4f} for a {step:.4f} step of the target"
    assert np.linalg.norm(hips[-1] - hips[0]) > 1e-3


def test_conflicting_pulls_balance_by_weight() -> None:
    _p, points = body()
    far_l = points[0] + np.array([1.0, 0.0, 0.0]) * (ARM + 0.3)
    far_r = points[1] + np.array([-1.0, 0.0, 0.0]) * (ARM + 0.3)
    even, _ = body(hand_l=far_l, hand_r=far_r, pins=False)
    heavy, _ = body(hand_l=far_l, hand_r=far_r, pull=(4.0, 1.0, 1.0), pins=False)
    e, h = solve_body(even), solve_body(heavy)
    assert abs(e.excess[0] - e.excess[1]) < 1e-3, "equal pulls should share what is left over"
    assert h.excess[0] < h.excess[1], "the heavier pull should come nearer"


def test_spine_limits_hold() -> None:
    cone = np.full((1, 4, 4), np.radians(10.0))
    limits = JointLimits(cone, np.array([[False, True, True, True]]), np.zeros((1, 4, 2)), np.zeros((1, 4), bool))
    _p, points = body()
    problem, _ = body(hand_l=past_straight_arm(points, 0.4), limits=limits)
    result = solve_body(problem)
    local = np.swapaxes(result.frames[:-1], 1, 2) @ result.frames[1:]
    bend = np.degrees(np.arccos(np.clip(local[:, 1, 1], -1.0, 1.0)))
    assert (bend <= 10.0 + 1e-3).all(), f"a spine bone bent {bend.max():.2f} degrees past its 10 degree cone"
    assert (reach_of(problem, result.heads, result.frames)[2:4] <= LEG + 1e-9).all()


def test_bad_input_is_refused_with_a_message() -> None:
    problem, _ = body()
    with pytest.raises(ValueError, match="reach"):
        BodyProblem(
            problem.parents,
            problem.heads,
            problem.frames,
            problem.ref_local,
            problem.anchor_bones,
            problem.anchor_offsets,
            np.zeros(5),
            problem.targets,
            problem.pull,
            problem.pinned,
        )
    with pytest.raises(ValueError, match="NaN"):
        BodyProblem(
            problem.parents,
            problem.heads,
            problem.frames,
            problem.ref_local,
            problem.anchor_bones,
            problem.anchor_offsets,
            problem.reach,
            np.full((5, 3), np.nan),
            problem.pull,
            problem.pinned,
        )


def test_the_quick_inside_test_skips_only_frames_the_limits_give_back_unchanged() -> None:
    """`_clearly_inside` (plain floats) lets `solve_body` skip the limits: every frame it passes must come
    back from `_radial_cone` and `apply_joint_limits` bit for bit, and it must pass most frames well inside."""
    from solvers.body import _clearly_inside, _limit_rows, _radial_cone
    from solvers.limits import apply_joint_limits
    from solvers.rotations import rotvec_matrix

    rng = np.random.default_rng(7)
    n = 3
    cone = np.array([[0.0] * 4, *[[0.44, 0.3, 0.35, 0.5]] * n])[None]
    twist = np.array([[0.0, 0.0], *[[-0.26, 0.3]] * n])[None]
    limits = JointLimits(cone, np.array([[False] + [True] * n]), twist, np.array([[False] + [True] * n]))
    passed = 0
    for _ in range(400):
        ref = rotvec_matrix(rng.normal(size=(n, 3)) * 0.5)
        local = ref @ rotvec_matrix(rng.normal(size=(n, 3)) * rng.choice([0.05, 0.2, 0.5]))
        rows = _limit_rows(ref, limits)
        assert rows is not None
        if not _clearly_inside(rows, local):
            continue
        passed += 1
        c, uc, tw, ut = limits.cone[0, 1:], limits.use_cone[0, 1:], limits.twist[0, 1:], limits.use_twist[0, 1:]
        out = apply_joint_limits(ref, _radial_cone(ref, local, c, uc), c, uc, tw, ut)
        assert out.tobytes() == local.tobytes()
    assert passed > 100


def _random_problems(seed: int, count: int) -> list[BodyProblem]:
    """Seeded body problems of every kind `body` builds: hands pulled anywhere from inside reach to far past
    it, weights, pins, limits, a mirrored body, a root that only turns; and starts away from rest (each
    problem of a drag starts where the previous one left the body)."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    problems = []
    start: tuple[np.ndarray, np.ndarray] | None = None
    for k in range(count):
        _p, points = body()
        way = rng.normal(size=(2, 3))
        way /= np.linalg.norm(way, axis=1, keepdims=True)
        far = rng.uniform(0.2, 1.6, size=2)
        limits = None
        if rng.random() < 0.5:
            cone = np.zeros((1, 4, 4))
            cone[0, 1:] = rng.uniform(0.05, 0.6, size=(3, 4))
            if rng.random() < 0.3:  # hinges and half-cones: sides of zero width (the exact clamp's search)
                cone[0, 1:][rng.random((3, 4)) < 0.3] = 0.0
            twist = np.zeros((1, 4, 2))
            twist[0, 1:, 0], twist[0, 1:, 1] = -rng.uniform(0.0, 0.5, 3), rng.uniform(0.0, 0.5, 3)
            use_cone = np.array([[False, *(rng.random(3) < 0.8)]])
            use_twist = np.array([[False, *(rng.random(3) < 0.5)]])
            limits = JointLimits(cone, use_cone, twist, use_twist)
        pull = tuple(float(rng.choice([0.0, 0.5, 1.0, 3.0])) for _ in range(3))
        problem, _ = body(
            hand_l=points[0] + way[0] * far[0],
            hand_r=points[1] + way[1] * far[1],
            pull=pull,  # type: ignore[arg-type]
            pins=bool(rng.random() < 0.7),
            limits=limits,
            mirror=bool(rng.random() < 0.3),
        )
        if start is not None and k % 4:
            problem = replace(problem, heads=start[0], frames=start[1])
        if rng.random() < 0.2:
            problem = replace(problem, move_root=False)
        problems.append(problem)
        result = solve_body(problem, "arrays")
        start = (result.heads, result.frames) if not problem.move_root or rng.random() < 0.8 else None
    return problems


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plain_floats_agree_with_the_arrays(seed: int) -> None:
    """`solve_body`'s plain-float path (`solvers.body_floats`, taken for small bodies) gives the numpy path's
    result to float64 rounding: the same iterations and flags, and a pose within 1e-12 or, where the problem
    itself amplifies rounding (pins pulled against, many iterations: up to ~3e-11 here), within 20 times what
    the numpy path moves when every target is nudged by one ulp either way (up to 8 times, measured on 480
    such problems)."""
    from dataclasses import replace

    moved = 0
    for k, problem in enumerate(_random_problems(seed, 60)):
        a, b = solve_body(problem, "arrays"), solve_body(problem, "floats")
        where = f"problem {k} of seed {seed}"
        assert (a.iterations, a.moved, a.blocked) == (b.iterations, b.moved, b.blocked), where
        rounding = 0.0
        for way in (np.inf, -np.inf):
            nudged = solve_body(replace(problem, targets=np.nextafter(problem.targets, way)), "arrays")
            rounding = max(rounding, np.abs(nudged.heads - a.heads).max(), np.abs(nudged.frames - a.frames).max())
        tol = max(1e-12, 20.0 * rounding)
        np.testing.assert_allclose(b.heads, a.heads, rtol=0.0, atol=tol, err_msg=where)
        np.testing.assert_allclose(b.frames, a.frames, rtol=0.0, atol=tol, err_msg=where)
        np.testing.assert_allclose(b.excess, a.excess, rtol=0.0, atol=tol, err_msg=where)
        moved += a.moved
    assert moved > 20, f"only {moved} of 60 problems moved the body: the comparison would prove little"


def test_auto_takes_the_plain_floats_for_a_small_body() -> None:
    _p, points = body()
    problem, _ = body(hand_l=past_straight_arm(points, 0.15))
    auto, floats = solve_body(problem), solve_body(problem, "floats")
    assert auto.heads.tobytes() == floats.heads.tobytes() and auto.frames.tobytes() == floats.frames.tobytes()
    with pytest.raises(ValueError, match="method"):
        solve_body(problem, "scalar")
