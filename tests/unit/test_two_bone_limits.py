"""Two-bone chains with a hinge on the lower bone solve in closed form (`solvers.two_bone_limits`).

Random limbs: a random base and rest frames, a lower bone modelled straight or bent (the rest bend the
Knee/Elbow preset straightens to), a hinge on it (150 degrees toward the bend, back to straight, 2 degrees
across, as the preset writes), an upper bone free or twist-limited. Targets come from forward kinematics of
random poses inside the limits, the pole on the side the elbow bends to in that pose, so the pose the solver
must find is known: the elbow where the pose put it. The global stage (`solvers.search.search`) must not
run for any of them, and where the stage reaches (the solver without its closed form), both put the elbow
at the same place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from solver_fixtures import coincidence_limb, forward_kinematics, random_rotations

import solvers.search as search_module
import solvers.two_bone as two_bone_module
from solvers import solve_two_bone
from solvers.limits import JointLimits
from solvers.rotations import axis_angle_matrix
from solvers.types import ChainProblem

DEG = np.pi / 180.0


def _rx(angle: np.ndarray) -> np.ndarray:
    axis = np.zeros((*angle.shape, 3))
    axis[..., 0] = 1.0
    return axis_angle_matrix(axis, angle)


def limb_problems(
    seed: int, k: int, bent: bool, upper_twist: bool = False, where: str = "pose"
) -> tuple[ChainProblem, np.ndarray]:
    """``k`` random hinged limbs and the elbow positions of the poses their targets come from.

    ``where``: 'pose' (targets of poses inside the limits), 'near' (targets nearer the root than the hinge
    folds: inside the fold limit), 'far' (beyond the reach).
    """
    rng = np.random.default_rng(seed)
    lengths = rng.uniform(0.3, 1.0, size=(k, 2))
    offsets = np.zeros((k, 2, 3))
    offsets[..., 1] = lengths
    base = random_rotations(rng, (k,))
    rest_bend = rng.uniform(5.0, 25.0, size=k) * DEG if bent else np.zeros(k)
    ref_local = np.stack((random_rotations(rng, (k,)), _rx(rest_bend)), axis=1)
    cone = np.zeros((k, 2, 4))
    cone[:, 1] = np.stack(
        (np.full(k, 150.0 * DEG), np.maximum(rest_bend, 1.0 * DEG), np.full(k, 2.0 * DEG), np.full(k, 2.0 * DEG)),
        axis=1,
    )
    use_cone = np.zeros((k, 2), dtype=bool)
    use_cone[:, 1] = True
    twist = np.zeros((k, 2, 2))
    twist[:, 1] = (-5.0 * DEG, 5.0 * DEG)
    use_twist = np.zeros((k, 2), dtype=bool)
    use_twist[:, 1] = True
    if upper_twist:
        twist[:, 0] = (-60.0 * DEG, 60.0 * DEG)
        use_twist[:, 0] = True
    limits = JointLimits(cone, use_cone, twist, use_twist)
    # The pose: the upper bone anywhere (twist within +-50 degrees when limited), the lower folded 10-140
    # degrees beyond its rest bend about its hinge.
    upper = random_rotations(rng, (k,))
    if upper_twist:
        axis = rng.normal(size=(k, 3))
        axis[:, 1] = 0.0
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        swing = axis_angle_matrix(axis, rng.uniform(0.0, 2.5, size=k))
        upper = swing @ axis_angle_matrix(np.tile([0.0, 1.0, 0.0], (k, 1)), rng.uniform(-50, 50, size=k) * DEG)
    fold = rng.uniform(10.0, 140.0, size=k) * DEG
    local = np.stack((upper, _rx(fold)), axis=1)
    root = rng.normal(size=(k, 3))
    positions, _frames = forward_kinematics(root, base, ref_local, local, offsets)
    targets = positions[:, 2].copy()
    chord = targets - root
    side = positions[:, 1] - root
    side -= chord * (np.einsum("ki,ki->k", side, chord) / np.einsum("ki,ki->k", chord, chord))[:, None]
    poles = positions[:, 1] + side
    if where != "pose":
        unit = chord / np.linalg.norm(chord, axis=1, keepdims=True)
        l1, l2 = lengths[:, 0], lengths[:, 1]
        folded = np.sqrt(l1 * l1 + l2 * l2 + 2 * l1 * l2 * np.cos(np.minimum(rest_bend + 150.0 * DEG, np.pi)))
        distance = (
            folded * rng.uniform(0.05, 0.9, size=k) if where == "near" else (l1 + l2) * rng.uniform(1.05, 1.6, size=k)
        )
        targets = root + unit * distance[:, None]
    # The warm start: the rest pose (every local rotation the identity).
    start_pos, start_frames = forward_kinematics(root, base, ref_local, np.tile(np.eye(3), (k, 2, 1, 1)), offsets)
    problem = ChainProblem(start_pos, start_frames, offsets, ref_local, base, targets, poles, limits, tolerance=1e-6)
    return problem, positions[:, 1]


@pytest.fixture
def stage_calls() -> Iterator[list[int]]:
    """How many chains the global stage was asked to search (the search function wrapped)."""
    calls: list[int] = []
    original = search_module.search

    def counting(batch: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(batch.size)
        return original(batch, *args, **kwargs)

    search_module.search = counting
    try:
        yield calls
    finally:
        search_module.search = original


@pytest.mark.parametrize("bent", [False, True])
def test_hinged_limbs_reach_in_closed_form_with_the_elbow_of_the_pose(bent: bool, stage_calls: list[int]) -> None:
    problem, elbows = limb_problems(3 + bent, 300, bent)
    result = solve_two_bone(problem)
    assert not stage_calls, f"the global stage searched {sum(stage_calls)} chains"
    assert result.reached.all(), f"{(~result.reached).sum()} of 300 missed: worst {result.residual.max():.2e}"
    assert np.abs(result.positions[:, 1] - elbows).max() < 1e-6, "the elbow is not where the pose put it"
    # The limits hold on the returned frames: clamping them again changes nothing.
    lim = problem.limits
    assert lim is not None
    from solvers.limits import apply_joint_limits

    ref1 = result.frames[:, 0] @ problem.ref_local[:, 1]
    again = apply_joint_limits(
        ref1, result.frames[:, 1], lim.cone[:, 1], lim.use_cone[:, 1], lim.twist[:, 1], lim.use_twist[:, 1]
    )
    assert np.abs(again - result.frames[:, 1]).max() < 1e-7


def test_same_elbow_as_the_global_stage_where_both_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    problem, elbows = limb_problems(11, 200, True, upper_twist=True)
    ours = solve_two_bone(problem)
    assert ours.reached.all()
    assert np.abs(ours.positions[:, 1] - elbows).max() < 1e-6, "the elbow is not where the pose put it"

    def nothing_settled(batch: Any, *args: Any) -> tuple[Any, ...]:
        k = batch.size
        return np.zeros((k, 3, 3)), np.zeros((k, 2, 3, 3)), np.zeros(k, dtype=bool), np.zeros(k, dtype=bool)

    monkeypatch.setattr(two_bone_module, "solve_limited", nothing_settled)
    stage = solve_two_bone(problem)
    both = ours.reached & stage.reached
    assert both.mean() > 0.8, f"both reached only {both.mean():.0%}"
    assert ours.reached.sum() >= stage.reached.sum()
    gap = np.linalg.norm(ours.positions[both, 1] - stage.positions[both, 1], axis=1)
    # The stage turns its pose toward the pole only where the upper bone's limits let it (measured: 1 chain
    # in 200 keeps its elbow off the pole's plane); everywhere else both give the same elbow.
    assert (gap > 1e-4).mean() <= 0.01, f"the elbows differ in {(gap > 1e-4).sum()} chains"


@pytest.mark.parametrize("where", ["near", "far"])
def test_out_of_the_fold_range_gives_the_nearest_point_without_a_search(where: str, stage_calls: list[int]) -> None:
    problem, _ = limb_problems(21, 200, True, where=where)
    result = solve_two_bone(problem)
    assert not stage_calls, "the global stage searched a target the closed form settles"
    assert not result.reached.any()
    root = problem.positions[:, 0]
    chord = problem.targets - root
    chord /= np.linalg.norm(chord, axis=1, keepdims=True)
    tip = result.positions[:, 2] - root
    # The nearest reachable point lies on the root-to-target line.
    off = tip - chord * np.einsum("ki,ki->k", tip, chord)[:, None]
    assert np.linalg.norm(off, axis=1).max() < 1e-9
    # And it is at the reach the hinge's fold limit gives (fully folded near, straight far).
    lengths = np.linalg.norm(problem.offsets, axis=2)
    l1, l2 = lengths[:, 0], lengths[:, 1]
    lim = problem.limits
    assert lim is not None
    fold = 150.0 * np.pi / 180.0 + np.arctan2(
        np.hypot(problem.ref_local[:, 1, 2, 1], problem.ref_local[:, 1, 0, 1]), problem.ref_local[:, 1, 1, 1]
    )
    fold = np.minimum(fold, np.pi)
    want = np.sqrt(l1 * l1 + l2 * l2 + 2 * l1 * l2 * np.cos(fold)) if where == "near" else l1 + l2
    assert np.abs(np.linalg.norm(tip, axis=1) - want).max() < 1e-9


def test_out_of_reach_under_the_upper_cone_swivels_toward_its_axis(stage_calls: list[int]) -> None:
    """A narrow cone on the upper bone that no swivel of the elbow reaches (its whole circle proven outside,
    `solvers.fold.circle_outside`): settled without the global stage, the elbow turned toward the cone's
    axis (for a circular cone the least violating swivel), the upper bone on the cone, and the batched and
    plain-float forms alike."""
    from solvers.fold import circle_outside
    from solvers.frames import ChainBatch
    from solvers.limits import INSIDE_TOLERANCE
    from solvers.two_bone_floats import solve_limited_floats
    from solvers.two_bone_limits import OUT_OF_REACH_SLACK, solve_limited

    problem, _ = limb_problems(33, 200, True)
    assert problem.limits is not None
    half = 20.0 * DEG
    cone, use_cone = problem.limits.cone.copy(), problem.limits.use_cone.copy()
    cone[:, 0], use_cone[:, 0] = half, True
    lim = JointLimits(cone, use_cone, problem.limits.twist, problem.limits.use_twist)
    problem = replace(problem, limits=lim)
    result = solve_two_bone(problem)
    root = problem.positions[:, 0]
    chord = problem.targets - root
    chord /= np.linalg.norm(chord, axis=1, keepdims=True)
    ref0 = problem.base @ problem.ref_local[:, 0]
    axis = ref0[:, :, 1]
    l1, l2 = np.linalg.norm(problem.offsets, axis=2).T
    distance = np.linalg.norm(problem.targets - root, axis=1)
    cos_f = np.clip((distance**2 - l1**2 - l2**2) / (2 * l1 * l2), -1.0, 1.0)
    reach = np.sqrt(l1**2 + l2**2 + 2 * l1 * l2 * cos_f)
    cos_a = np.clip((l1**2 + reach**2 - l2**2) / (2 * l1 * reach), -1.0, 1.0)
    proven = []
    for k in range(len(root)):
        e1 = np.cross(chord[k], [0.3, 0.5, 0.8])
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(chord[k], e1)
        c, b1, b2 = (tuple((ref0[k].T @ v).tolist()) for v in (chord[k], e1, e2))
        sin_a = float(np.sqrt(1.0 - cos_a[k] ** 2))
        if circle_outside(c, b1, b2, float(cos_a[k]), sin_a, (half,) * 4, INSIDE_TOLERANCE, OUT_OF_REACH_SLACK):
            proven.append(k)
    assert len(proven) >= 40, f"only {len(proven)} of 200 limbs proven out of reach"
    rows = np.asarray(proven)
    assert not result.reached[rows].any()
    # The stage ran for none of them (it may run for limbs the proof leaves: count only ours).
    alone = ChainProblem(
        problem.positions[rows],
        problem.frames[rows],
        problem.offsets[rows],
        problem.ref_local[rows],
        problem.base[rows],
        problem.targets[rows],
        problem.poles[rows] if problem.poles is not None else None,
        JointLimits(lim.cone[rows], lim.use_cone[rows], lim.twist[rows], lim.use_twist[rows]),
        tolerance=problem.tolerance,
    )
    stage_calls.clear()
    again = solve_two_bone(alone)
    assert not stage_calls, "the global stage searched limbs proven out of reach"
    upper = again.frames[:, 0, :, 1]
    assert np.degrees(np.arccos(np.clip(np.einsum("ki,ki->k", upper, axis[rows]), -1, 1))).max() <= 20.0 + 1e-4
    # In the plane of the cone's axis and the chord: the swivel toward the axis.
    normal = np.cross(axis[rows], chord[rows])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    assert np.abs(np.einsum("ki,ki->k", upper, normal)).max() < 1e-6
    # The batched form and the plain-float one give the same pose and verdict.
    batch = ChainBatch.from_problem(alone)
    ch = (alone.targets - alone.positions[:, 0]) / distance[rows, None]
    bend = np.cross(ch, np.cross(np.tile([0.3, 0.5, 0.8], (rows.size, 1)), ch))
    bend /= np.linalg.norm(bend, axis=1, keepdims=True)
    a = solve_limited(batch, ch, bend, distance[rows])
    b = solve_limited_floats(batch, ch, bend, distance[rows])
    assert a[2].all() and b[2].all()
    assert np.abs(a[0] - b[0]).max() < 1e-9 and np.abs(a[1] - b[1]).max() < 1e-9


def test_an_analytic_pose_whose_limits_moved_its_elbow_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """`two_bone.elbow_moved`: the analytic pose of the coincidence limb (`solver_fixtures.coincidence_limb`)
    lands on its target, but its upper bone's cone moved the elbow off the pole's plane: it does not count as
    reaching, and the closed form gives the pose (the elbow swivelled to the cone's edge: where the clamp put
    it, to the swivel search's resolution). The scalar solver's side: tests/blender/test_scalar_kernels.py."""
    problem, axis, moved, half = coincidence_limb()
    with monkeypatch.context() as m:
        m.setattr(two_bone_module, "settle", lambda _problem, result, _batch=None: (result, None))
        analytic = two_bone_module._solve_two_bone(problem)[0]  # the analytic pose alone
    assert analytic.residual[0] <= problem.tolerance, "the analytic pose should land on the target"
    assert np.linalg.norm(analytic.positions[0, 1] - moved) < 1e-6, "the clamp should move the elbow there"
    assert not analytic.reached[0], "an analytic pose whose limits moved its elbow counted as reaching"
    result = solve_two_bone(problem)
    assert result.reached[0]
    elbow = result.positions[0, 1]
    assert np.arccos(min(1.0, elbow @ axis)) <= half + 1e-6, "the elbow left the upper bone's cone"
    assert np.linalg.norm(elbow - moved) < 0.01
