"""Analytic two-bone IK: exact answers, and defined, continuous answers in every degenerate case."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_fixtures import check_result, make_rig, reachable_targets

from solvers import CONVERGED, UNREACHABLE, ChainProblem, solve_two_bone

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def straight_arm(l1: float, l2: float, k: int = 1) -> dict[str, np.ndarray]:
    """A straight arm along +Y from the origin: no bend of its own."""
    offsets = np.zeros((k, 2, 3))
    offsets[:, 0, 1], offsets[:, 1, 1] = l1, l2
    eye = np.broadcast_to(np.eye(3), (k, 2, 3, 3)).copy()
    positions = np.zeros((k, 3, 3))
    positions[:, 1, 1], positions[:, 2, 1] = l1, l1 + l2
    return dict(
        positions=positions,
        frames=eye,
        offsets=offsets,
        ref_local=eye.copy(),
        base=np.broadcast_to(np.eye(3), (k, 3, 3)).copy(),
    )


@settings(derandomize=True, max_examples=30, deadline=None)
@given(seed=SEEDS, connected=st.booleans(), mode=st.sampled_from(("KEEP", "REST", "NATURAL")))
def test_exact_for_reachable_targets(seed: int, connected: bool, mode: str) -> None:
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, 50, 2, connected=connected)
    targets = reachable_targets(rng, rig)
    problem = rig.problem(targets, tolerance=1e-9, roll_mode=mode)
    result = solve_two_bone(problem)
    check_result(problem, result)
    assert result.reached.all(), f"two-bone must be exact; worst residual {result.residual.max():.3g}"
    assert (result.iterations == 0).all()


def test_too_close_folds_toward_the_target() -> None:
    for l1, l2 in ((1.0, 0.4), (0.4, 1.0)):
        problem = ChainProblem(**straight_arm(l1, l2), targets=np.array([[0.3, 0.1, 0.0]]))
        result = solve_two_bone(problem)
        check_result(problem, result)
        direction = np.array([0.3, 0.1, 0.0]) / np.linalg.norm([0.3, 0.1, 0.0])
        tip = result.positions[0, -1]
        assert np.allclose(tip, direction * abs(l1 - l2)), f"folded tip at |l1-l2| toward the target, got {tip}"
        assert result.status[0] == UNREACHABLE and not result.reached[0]


def test_too_far_stays_rooted() -> None:
    problem = ChainProblem(**straight_arm(1.0, 1.0), targets=np.array([[5.0, 0.0, 0.0]]))
    result = solve_two_bone(problem)
    assert np.array_equal(result.positions[0, 0], np.zeros(3)), "the root must not move (unlike the seed)"
    assert np.allclose(result.positions[0], [[0, 0, 0], [1, 0, 0], [2, 0, 0]])
    assert result.status[0] == UNREACHABLE


@pytest.mark.parametrize("mode", ["KEEP", "REST", "NATURAL"])
def test_degenerate_cases_are_defined_and_continuous(mode: str) -> None:
    # Straight chain with no pole, targets sweeping through the reference axis (+Y, the rest chord)
    # and straight behind it: never NaN, and the elbow moves continuously with the target.
    angles = np.linspace(-0.02, 0.02, 41)
    for axis_sign in (1.0, -1.0):
        targets = np.stack([np.sin(angles), axis_sign * 1.2 * np.cos(angles), 0.3 * np.ones_like(angles)], 1)
        targets[:, :2] *= 1.2 / np.linalg.norm(targets[:, :2], axis=1, keepdims=True)
        k = len(targets)
        problem = ChainProblem(**straight_arm(1.0, 0.8, k), targets=targets, roll_mode=mode, tolerance=1e-9)
        result = solve_two_bone(problem)
        assert np.isfinite(result.positions).all() and np.isfinite(result.frames).all(), "never NaN"
        assert result.reached.all(), "targets on/near the reference axis are reachable"
        jumps = np.linalg.norm(np.diff(result.positions[:, 1], axis=0), axis=1)
        assert jumps.max() < 0.05, f"{mode}: elbow jumps by {jumps.max():.3g} for a tiny target motion"


def test_target_exactly_on_the_rest_chord() -> None:
    targets = np.array([[0.0, 1.5, 0.0], [0.0, -1.5, 0.0], [0.0, 0.0, 0.0]])
    problem = ChainProblem(**straight_arm(1.0, 1.0, 3), targets=targets, roll_mode="NATURAL")
    result = solve_two_bone(problem)
    assert np.isfinite(result.positions).all()
    assert result.reached[:2].all() and not result.reached[2]
    assert result.status[2] == UNREACHABLE, "target on the root"


def test_pole_on_the_axis_falls_back() -> None:
    poles = np.array([[0.0, 3.0, 0.0]])  # on the root-target line: names no side
    problem = ChainProblem(**straight_arm(1.0, 1.0), targets=np.array([[0.0, 1.5, 0.0]]), poles=poles)
    result = solve_two_bone(problem)
    assert result.reached[0] and np.isfinite(result.positions).all()


def test_natural_roll_at_rest_keeps_the_rest_bend() -> None:
    rng = np.random.default_rng(4)
    rig = make_rig(rng, 20, 2, rest_bend=0.6)
    rest, _ = rig.pose(np.broadcast_to(np.eye(3), (20, 2, 3, 3)))
    result = solve_two_bone(rig.problem(rest[:, -1].copy(), roll_mode="NATURAL", tolerance=1e-9))
    assert np.allclose(result.positions, rest, atol=1e-9), "targeting the rest tip gives the rest pose"
    assert (result.status == CONVERGED).all()


def test_needs_two_bones() -> None:
    rng = np.random.default_rng(0)
    rig = make_rig(rng, 2, 3)
    with pytest.raises(ValueError, match="2 bones"):
        solve_two_bone(rig.problem(rig.positions[:, -1].copy()))
