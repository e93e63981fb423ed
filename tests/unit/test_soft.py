"""Soft IK in the solvers: the eased reach, no knee pop near full extension, statuses against the real target.

Knee angles, tips and residuals are measured by forward kinematics from the returned frames and the
problem's offsets (never from the solver's own positions or residuals).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_fixtures import check_result, limits_from, make_rig, same_result

from solvers import (
    CONVERGED,
    SOFT,
    UNREACHABLE,
    ChainProblem,
    SolveResult,
    soft_distance,
    solve_ccd,
    solve_fabrik,
    solve_two_bone,
)
from solvers.rotations import axis_angle_matrix

F64 = npt.NDArray[np.float64]
Solver = Callable[[ChainProblem], SolveResult]
SOLVERS: dict[str, Solver] = {"two_bone": solve_two_bone, "fabrik": solve_fabrik, "ccd": solve_ccd}
STEPS = 200
POP_LIMIT = 3.0  # the largest per-step knee change may be at most this many times the median one


def leg(k: int, lengths: tuple[float, float] = (0.55, 0.45), knee: float = 0.6) -> dict[str, F64]:
    """K copies of a leg along +Y from the origin, its knee bent by `knee` radians about Z (a bend plane)."""
    l1, l2 = lengths
    offsets = np.zeros((k, 2, 3))
    offsets[:, 0, 1], offsets[:, 1, 1] = l1, l2
    up = axis_angle_matrix(np.array([0.0, 0.0, 1.0]), np.array(0.5 * knee))
    down = axis_angle_matrix(np.array([0.0, 0.0, 1.0]), np.array(-0.5 * knee))
    frames = np.empty((k, 2, 3, 3))
    frames[:, 0], frames[:, 1] = up, down
    positions = np.zeros((k, 3, 3))
    positions[:, 1] = up @ np.array([0.0, l1, 0.0])
    positions[:, 2] = positions[:, 1] + down @ np.array([0.0, l2, 0.0])
    ref_local = np.broadcast_to(np.eye(3), (k, 2, 3, 3)).copy()
    return dict(
        positions=positions,
        frames=frames,
        offsets=offsets,
        ref_local=ref_local,
        base=np.broadcast_to(np.eye(3), (k, 3, 3)).copy(),
    )


def fk(problem: ChainProblem, result: SolveResult) -> F64:
    """Joint positions by forward kinematics from the result's frames and the problem's offsets."""
    steps = np.einsum("knij,knj->kni", result.frames, problem.offsets)
    return np.concatenate([problem.positions[:, :1], problem.positions[:, :1] + np.cumsum(steps, axis=1)], axis=1)


def knee_angles(problem: ChainProblem, result: SolveResult) -> F64:
    """The bend at the knee (0 = straight), from the FK joints."""
    p = fk(problem, result)
    a, b = p[:, 1] - p[:, 0], p[:, 2] - p[:, 1]
    cos = np.einsum("ki,ki->k", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.asarray(np.arccos(np.clip(cos, -1.0, 1.0)), dtype=np.float64)


def sweep_targets(length: float, direction: F64) -> F64:
    """The target moving from 0.9 L to 1.1 L in STEPS equal steps along a fixed line from the root."""
    d = np.linspace(0.9 * length, 1.1 * length, STEPS + 1)
    unit = direction / np.linalg.norm(direction)
    return np.asarray(d[:, None] * unit, dtype=np.float64)


def pop_ratio(angles: F64) -> float:
    """The largest per-step change of the knee angle over the median per-step change."""
    steps = np.abs(np.diff(angles))
    return float(steps.max() / np.median(steps))


# --------------------------------------------------------------------------------------------------------
# The curve
# --------------------------------------------------------------------------------------------------------


def test_soft_distance_is_the_soft_ik_curve() -> None:
    length, soft = 2.0, 0.1
    s = soft * length
    d = np.linspace(0.0, 3.0 * length, 3001)
    out = soft_distance(d, np.full_like(d, length), np.full_like(d, soft))
    below = d <= length - s
    assert np.array_equal(out[below], d[below]), "unchanged below (1 - soft) L"
    expected = length - s * np.exp(-(d[~below] - (length - s)) / s)
    assert np.allclose(out[~below], expected, rtol=0, atol=1e-15)
    assert (np.diff(out) > 0).all() and (out < length).all(), "increasing, never reaching L"
    assert out[-1] > length - 1e-6, "approaches L"
    # Continuous in value and slope where the curve starts (the slope of the exponential there is 1).
    x0 = length - s
    h = 1e-7
    left = soft_distance(np.array([x0 - h, x0]), np.full(2, length), np.full(2, soft))
    right = soft_distance(np.array([x0, x0 + h]), np.full(2, length), np.full(2, soft))
    assert abs((right[1] - right[0]) / h - (left[1] - left[0]) / h) < 1e-6
    assert np.array_equal(soft_distance(d, np.full_like(d, length), np.zeros_like(d)), d), "soft 0: identity"


# --------------------------------------------------------------------------------------------------------
# The knee pop
# --------------------------------------------------------------------------------------------------------


def test_soft_distance_of_a_batch_mixing_soft_and_hard_chains_is_finite_and_quiet() -> None:
    """A chain without Soft (s = 0) well short of its length, batched with a soft chain in its soft zone: the
    curve's exponent must not be evaluated for it (it overflowed: a RuntimeWarning, an error in these tests)."""
    out = soft_distance(np.array([0.5, 0.99]), np.array([1.0, 1.0]), np.array([0.0, 0.1]))
    assert out[0] == 0.5, "no Soft: the distance as it is"
    assert 0.9 < out[1] < 1.0, "Soft 0.1 at 0.99 L: eased, below L"


@pytest.mark.parametrize("name", list(SOLVERS))
def test_no_knee_pop_with_soft(name: str) -> None:
    """Target from 0.9 L to 1.1 L in 200 equal steps: with soft = 0.1 the largest per-step change of the
    knee angle is at most 3x the median one; with soft = 0 the pop is there, exactly as without soft."""
    solver = SOLVERS[name]
    targets = sweep_targets(1.0, np.array([0.3, 1.0, 0.2]))
    k = targets.shape[0]
    hard = ChainProblem(**leg(k), targets=targets, tolerance=1e-6)
    soft0 = ChainProblem(**leg(k), targets=targets, tolerance=1e-6, soft=np.zeros(k))
    soft = ChainProblem(**leg(k), targets=targets, tolerance=1e-6, soft=np.full(k, 0.1))
    r_hard, r_soft0, r_soft = solver(hard), solver(soft0), solver(soft)
    assert same_result(r_hard, r_soft0), "soft = 0 is the hard solver, bit for bit"
    ratio_hard, ratio_soft = pop_ratio(knee_angles(hard, r_hard)), pop_ratio(knee_angles(soft, r_soft))
    assert ratio_hard > 10.0, f"{name}: the hard solver pops (max/median {ratio_hard:.3g})"
    assert ratio_soft <= POP_LIMIT, f"{name}: soft 0.1 max/median per-step knee change {ratio_soft:.3g}"
    check_result(soft, r_soft)


@pytest.mark.parametrize("lengths", [(0.5, 0.5), (0.7, 0.3), (0.3, 0.7)])
@pytest.mark.parametrize("soft", [0.05, 0.1, 0.3, 0.5])
def test_two_bone_soft_is_exact_and_smooth(lengths: tuple[float, float], soft: float) -> None:
    """Two-bone puts the tip exactly at the eased distance on the root-to-target line."""
    targets = sweep_targets(1.0, np.array([-0.2, 1.0, 0.5]))
    k = targets.shape[0]
    problem = ChainProblem(**leg(k, lengths), targets=targets, tolerance=1e-9, soft=np.full(k, soft))
    result = solve_two_bone(problem)
    tip = fk(problem, result)[:, -1]
    d = np.linalg.norm(targets, axis=1)
    want = soft_distance(d, np.ones(k), np.full(k, soft))
    assert np.abs(np.linalg.norm(tip, axis=1) - want).max() < 1e-9, "tip at the eased distance"
    unit = targets / d[:, None]
    assert np.abs(tip - want[:, None] * unit).max() < 1e-9, "on the root-to-target line"
    assert pop_ratio(knee_angles(problem, result)) <= POP_LIMIT


# --------------------------------------------------------------------------------------------------------
# Status and residual against the real target
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SOLVERS))
def test_status_and_residual_measure_the_real_target(name: str) -> None:
    d = np.array([0.5, 0.85, 0.95, 0.99, 1.0, 1.3])
    targets = d[:, None] * np.array([0.0, 0.6, 0.8])
    k = d.size
    problem = ChainProblem(**leg(k), targets=targets, tolerance=1e-6, soft=np.full(k, 0.1))
    result = SOLVERS[name](problem)
    tips = fk(problem, result)[:, -1]
    residual = np.linalg.norm(tips - targets, axis=1)
    assert np.allclose(result.residual, residual, rtol=1e-9, atol=1e-12)
    assert np.array_equal(result.reached, residual <= 1e-6)
    assert result.status[0] == CONVERGED and result.status[1] == CONVERGED, "below (1 - soft) L: reached"
    assert (result.status[2:4] == SOFT).all(), "inside the soft zone: the eased target, not the real one"
    assert (result.status[4:] == UNREACHABLE).all(), "at and beyond the chain's length: out of reach"
    eased = soft_distance(d, np.ones(k), np.full(k, 0.1))
    assert np.abs(np.linalg.norm(tips, axis=1) - eased).max() < 1e-5, "each tip at its eased distance"


@pytest.mark.parametrize("name", list(SOLVERS))
def test_stretched_chain_reaches_with_the_natural_curve(name: str) -> None:
    """Offsets stretched by rho = d / curve(d) (what the rig core does): the eased target is the real one."""
    d = np.linspace(0.92, 1.4, 25)
    k = d.size
    natural = soft_distance(d, np.ones(k), np.full(k, 0.1))
    rho = d / natural
    base = leg(k)
    base["offsets"] = base["offsets"] * rho[:, None, None]
    base["positions"] = base["positions"] * rho[:, None, None]
    targets = d[:, None] * np.array([0.6, 0.8, 0.0])
    problem = ChainProblem(**base, targets=targets, tolerance=1e-7, soft=np.full(k, 0.1), stretch=rho)
    result = SOLVERS[name](problem)
    check_result(problem, result)
    assert result.reached.all(), f"{name}: worst {result.residual.max():.3g}"
    # The shape is the natural chain's at the eased distance: the knee of a chain reaching natural / 1.
    unstretched = ChainProblem(**leg(k), targets=natural[:, None] * np.array([0.6, 0.8, 0.0]), tolerance=1e-9)
    if name == "two_bone":
        assert np.allclose(knee_angles(problem, result), knee_angles(unstretched, solve_two_bone(unstretched)))


# --------------------------------------------------------------------------------------------------------
# With poles, limits and roll modes; random chains
# --------------------------------------------------------------------------------------------------------


@settings(derandomize=True, max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    mode=st.sampled_from(("KEEP", "REST", "NATURAL")),
    name=st.sampled_from(("fabrik", "ccd")),
    limited=st.booleans(),
)
def test_soft_chains_with_poles_limits_and_roll_modes(seed: int, mode: str, name: str, limited: bool) -> None:
    rng = np.random.default_rng(seed)
    k, n = 20, 4
    rig = make_rig(rng, k, n, connected=bool(seed % 2))
    root = rig.positions[:, 0]
    length = rig.lengths.sum(axis=1)
    direction = rng.normal(size=(k, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    d = length * rng.uniform(0.7, 1.3, size=k)
    targets = root + d[:, None] * direction
    poles = root + rng.normal(size=(k, 3))
    poles[::3] = np.nan
    limits = limits_from(np.radians([80.0, 80.0, 80.0, 80.0]), None, k, n) if limited else None
    kwargs = dict(poles=poles, limits=limits, roll_mode=mode, tolerance=1e-4, max_iterations=60)
    problem = rig.problem(targets, soft=np.full(k, 0.2), **kwargs)
    result = SOLVERS[name](problem)
    check_result(problem, result)
    tips = fk(problem, result)[:, -1]
    eased = soft_distance(d, length, np.full(k, 0.2))
    hit = result.status != UNREACHABLE
    # Where the chain reached (the real or the eased target), the tip sits at the eased point.
    done = (result.status == CONVERGED) | (result.status == SOFT)
    want = root + eased[:, None] * direction
    assert np.linalg.norm(tips - want, axis=1)[done].max(initial=0.0) <= 1e-4 + 1e-9
    assert (result.status[d >= length] == UNREACHABLE).all()
    assert hit.any()


def test_bad_soft_and_stretch_are_refused() -> None:
    base = leg(2)
    targets = np.array([[0.0, 0.9, 0.0], [0.0, 1.2, 0.0]])
    for soft in ([0.1, -0.1], [0.1, 1.0], [np.nan, 0.1]):
        with pytest.raises(ValueError, match="soft"):
            ChainProblem(**base, targets=targets, soft=np.array(soft))
    for stretch in ([1.0, 0.9], [np.inf, 1.0]):
        with pytest.raises(ValueError, match="stretch"):
            ChainProblem(**base, targets=targets, stretch=np.array(stretch))
