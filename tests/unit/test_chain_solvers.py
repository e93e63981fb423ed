"""Properties every chain solver (FABRIK, CCD, two-bone) must have, checked independently.

Each test builds random rigs from a hypothesis-drawn seed (derandomized, so runs are repeatable), solves,
and checks the result by forward kinematics from the returned frames and offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_fixtures import (
    Rig,
    check_result,
    comfortable,
    limits_from,
    make_rig,
    quaternion_pose,
    random_rotations,
    reachable_targets,
    same_result,
    wave_pose,
    zigzag_rig,
)

from solvers import (
    CONVERGED,
    STATUS_NAMES,
    UNREACHABLE,
    ChainProblem,
    SolveResult,
    solve_ccd,
    solve_fabrik,
    solve_two_bone,
)
from solvers.ccd import make_ccd_step
from solvers.fabrik import fabrik_step
from solvers.frames import ChainBatch
from solvers.limits import limit_violation
from solvers.loop import polish, solve_chains

Solver = Callable[[ChainProblem], SolveResult]
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
ITERATIVE: dict[str, Solver] = {"fabrik": solve_fabrik, "ccd": solve_ccd}
ALL: dict[str, Solver] = {**ITERATIVE, "two_bone": solve_two_bone}
MODES = ("KEEP", "REST", "NATURAL")


def bones_for(name: str, rng: np.random.Generator) -> int:
    return 2 if name == "two_bone" else int(rng.integers(1, 9))


@pytest.mark.parametrize("name", sorted(ALL))
@settings(derandomize=True, max_examples=25, deadline=None)
@given(seed=SEEDS, connected=st.booleans(), mode=st.sampled_from(MODES))
def test_reachable_targets_are_reached(name: str, seed: int, connected: bool, mode: str) -> None:
    rng = np.random.default_rng(seed)
    solver = ALL[name]
    rig = make_rig(rng, 12, bones_for(name, rng), connected=connected)
    targets = reachable_targets(rng, rig)
    tol = 1e-9 if name == "two_bone" else 1e-5
    problem = rig.problem(targets, tolerance=tol, max_iterations=1000, roll_mode=mode)
    result = solver(problem)
    check_result(problem, result)
    # FABRIK and CCD converge arbitrarily slowly next to full extension or full fold; within a cap they
    # are only held to targets with a margin. Two-bone is exact everywhere.
    must = comfortable(rig, targets) if name != "two_bone" else np.ones(len(targets), dtype=bool)
    missed = ~result.reached & must
    names = [STATUS_NAMES[s] for s in result.status[missed]]
    assert not missed.any(), f"{name}: reachable targets missed by {result.residual[missed]} ({names})"
    assert (result.status[result.reached] == CONVERGED).all(), "reached chains report CONVERGED"


@pytest.mark.parametrize("name", sorted(ALL))
@settings(derandomize=True, max_examples=20, deadline=None)
@given(seed=SEEDS, connected=st.booleans())
def test_unreachable_targets_give_a_straight_chain(name: str, seed: int, connected: bool) -> None:
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, 8, bones_for(name, rng), connected=connected)
    direction = rng.normal(size=(8, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    reach = rig.lengths.sum(axis=1)
    targets = rig.root + direction * (reach * rng.uniform(1.01, 3.0, 8))[:, None]
    problem = rig.problem(targets)
    result = ALL[name](problem)
    check_result(problem, result)
    assert not result.reached.any(), "out-of-reach targets cannot be reached"
    assert (result.status == UNREACHABLE).all(), "out-of-reach targets are UNREACHABLE"
    cumulative = np.concatenate([np.zeros((8, 1)), np.cumsum(rig.lengths, axis=1)], axis=1)
    expected = rig.root[:, None] + cumulative[..., None] * direction[:, None]
    err = np.abs(result.positions - expected).max()
    assert err < 1e-9, f"the chain must lie straight from the root toward the target (error {err:.3g})"


@pytest.mark.parametrize("name", sorted(ALL))
@settings(derandomize=True, max_examples=10, deadline=None)
@given(seed=SEEDS, mode=st.sampled_from(MODES))
def test_same_input_gives_bit_identical_output(name: str, seed: int, mode: str) -> None:
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, 10, bones_for(name, rng))
    targets = reachable_targets(rng, rig)
    targets[:3] = rig.root[:3] + 10.0  # some unreachable
    poles = np.where(rng.uniform(size=(10, 1)) < 0.5, rng.normal(size=(10, 3)), np.nan)
    problem = rig.problem(targets, poles=poles, roll_mode=mode)
    first, second = ALL[name](problem), ALL[name](problem)
    assert same_result(first, second), "solving the same problem twice must give bit-identical results"


@pytest.mark.parametrize("name", sorted(ALL))
def test_target_on_root_returns_current_pose(name: str) -> None:
    rng = np.random.default_rng(3)
    rig = make_rig(rng, 4, 2)
    problem = rig.problem(rig.root.copy())
    result = ALL[name](problem)
    assert np.array_equal(result.positions, problem.positions), "the current pose must be returned"
    assert np.array_equal(result.frames, problem.frames), "the current frames must be returned"
    assert not result.reached.any(), "a target on the root is reported as not reached"
    assert (result.status == UNREACHABLE).all(), "a target on the root is UNREACHABLE"


@pytest.mark.parametrize("name", sorted(ITERATIVE))
def test_batch_equals_chains_solved_alone(name: str) -> None:
    # Per-chain early exit: a chain in a batch gets the same iterations and pose as on its own.
    rng = np.random.default_rng(11)
    rig = make_rig(rng, 16, 6)
    targets = reachable_targets(rng, rig)
    problem = rig.problem(targets, tolerance=1e-6, max_iterations=500)
    batched = ITERATIVE[name](problem)
    for k in range(16):
        alone = ITERATIVE[name](rig_subset(rig, k).problem(targets[k : k + 1], tolerance=1e-6, max_iterations=500))
        assert alone.iterations[0] == batched.iterations[k], f"chain {k}: iterations differ in a batch"
        assert np.allclose(alone.positions[0], batched.positions[k], atol=1e-12), f"chain {k}: pose differs"
    assert len(set(batched.iterations.tolist())) > 1, "chains should need different iteration counts"


def rig_subset(rig: Rig, k: int) -> Rig:
    s = slice(k, k + 1)
    return Rig(rig.root[s], rig.base[s], rig.ref_local[s], rig.offsets[s], rig.positions[s], rig.frames[s])


@pytest.mark.parametrize("name", sorted(ITERATIVE))
def test_warm_start_at_the_solution_does_not_iterate(name: str) -> None:
    rng = np.random.default_rng(5)
    rig = make_rig(rng, 6, 5)
    problem = rig.problem(rig.positions[:, -1].copy(), tolerance=1e-6)
    result = ITERATIVE[name](problem)
    assert (result.iterations == 0).all(), "no iteration is needed when the tip is on the target"
    assert np.allclose(result.positions, rig.positions, atol=1e-12), "the pose must not change"
    assert np.allclose(result.frames, rig.frames, atol=1e-12), "KEEP keeps the frames of an unchanged pose"


@pytest.mark.parametrize("name", sorted(ITERATIVE))
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_uniform_iterations_with_a_chain_already_on_its_target(name: str) -> None:
    # With uniform iterations a chain whose tip is exactly on its target iterates with the others; its
    # residual is 0 from the start (no 0 / 0 in the loop's ratios) and it must stay there.
    rng = np.random.default_rng(8)
    rig = make_rig(rng, 6, 5)
    targets = reachable_targets(rng, rig)
    targets[0] = rig.positions[0, -1]
    problem = rig.problem(targets, tolerance=1e-6, uniform_iterations=True)
    result = ITERATIVE[name](problem)
    check_result(problem, result)
    assert result.reached.all()
    # It iterates with the others until it makes no more progress (then it stalls out, converged).
    assert result.iterations[0] >= 3, "the chain on its target iterates with the others"
    assert result.residual[0] <= 1e-9, "a chain on its target stays there"


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("mode", MODES)
def test_straight_chain_toward_a_nearer_target_bends(name: str, mode: str) -> None:
    # A straight chain on the line to a nearer target: FABRIK and CCD cannot leave the line by
    # themselves, two-bone has no current bend plane. All must still reach it, without NaN.
    k, n = 3, 2 if name == "two_bone" else 4
    offsets = np.zeros((k, n, 3))
    offsets[..., 1] = 1.0
    eye = np.broadcast_to(np.eye(3), (k, n, 3, 3)).copy()
    positions = np.zeros((k, n + 1, 3))
    positions[..., 1] = np.arange(n + 1)
    targets = np.array([[0.0, n * 0.5, 0.0], [0.0, n * 0.99, 0.0], [0.0, -n * 0.5, 0.0]])
    problem = ChainProblem(
        positions,
        eye,
        offsets,
        eye,
        np.broadcast_to(np.eye(3), (k, 3, 3)).copy(),
        targets,
        tolerance=1e-6,
        max_iterations=500,
        roll_mode=mode,
    )
    result = ALL[name](problem)
    check_result(problem, result)
    assert result.reached.all(), f"straight chains must reach nearer targets; residual {result.residual}"


@pytest.mark.parametrize("name", sorted(ALL))
@settings(derandomize=True, max_examples=15, deadline=None)
@given(seed=SEEDS)
def test_pole_sets_the_bend_side(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, 10, 2)
    targets = reachable_targets(rng, rig, max_angle=2.0)
    poles = rig.root + rng.normal(size=(10, 3)) * 2.0
    problem = rig.problem(targets, poles=poles, tolerance=1e-7, max_iterations=500)
    result = ALL[name](problem)
    check_result(problem, result)
    ok = result.reached
    if name != "two_bone":
        assert ok[comfortable(rig, targets)].all(), f"{name}: targets with a margin must be reached"
    chord = targets - rig.root
    chord /= np.linalg.norm(chord, axis=1, keepdims=True)

    def side(v: np.ndarray) -> np.ndarray:
        return np.asarray(v - np.einsum("ki,ki->k", v, chord)[:, None] * chord)

    elbow = side(result.positions[:, 1] - rig.root)
    pole = side(poles - rig.root)
    # The elbow lies in the plane of root, target and pole, on the pole's side.
    normal = np.cross(chord, pole / np.linalg.norm(pole, axis=1, keepdims=True))
    off_plane = np.abs(np.einsum("ki,ki->k", elbow, normal))[ok]
    assert (off_plane < 1e-5).all(), f"{name}: elbow out of the pole plane by {off_plane.max():.3g}"
    bent = np.linalg.norm(elbow, axis=1) > 1e-6
    toward = np.einsum("ki,ki->k", elbow, pole)[ok & bent]
    assert (toward > 0).all(), f"{name}: the chain must bend toward the pole"


@pytest.mark.parametrize("name", sorted(ALL))
@settings(derandomize=True, max_examples=10, deadline=None)
@given(seed=SEEDS)
def test_limits_are_respected(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2 if name == "two_bone" else 4
    rig = make_rig(rng, 8, n, bend=0.2, rest_bend=0.2)
    cone = np.array([0.5, 0.3, 0.4, 0.6])
    limits = limits_from(cone, np.array([-0.3, 0.3]), 8, n)
    # Start inside the limits: the warm start itself is the rest pose.
    positions, frames = rig.pose(np.broadcast_to(np.eye(3), (8, n, 3, 3)))
    rig.positions, rig.frames = positions, frames
    targets = reachable_targets(rng, rig, max_angle=2.5)
    problem = rig.problem(targets, limits=limits, tolerance=1e-5, max_iterations=300, roll_mode="REST")
    result = ALL[name](problem)
    check_result(problem, result)
    parents = np.concatenate([problem.base[:, None], result.frames[:, :-1]], axis=1)
    ref = np.einsum("knij,knjl->knil", parents, problem.ref_local)
    cone_v, twist_v = limit_violation(
        ref.reshape(-1, 3, 3),
        result.frames.reshape(-1, 3, 3),
        limits.cone.reshape(-1, 4),
        limits.use_cone.reshape(-1),
        limits.twist.reshape(-1, 2),
        limits.use_twist.reshape(-1),
    )
    assert cone_v.max() < 1e-9, f"{name}: cone limits violated by {cone_v.max():.3g} rad"
    assert twist_v.max() < 1e-9, f"{name}: twist limits violated by {twist_v.max():.3g} rad"
    assert np.array_equal(result.reached, result.residual <= problem.tolerance)


@pytest.mark.parametrize("name", sorted(ALL))
def test_limit_that_blocks_the_target_reports_not_reached(name: str) -> None:
    rng = np.random.default_rng(2)
    n = 2 if name == "two_bone" else 3
    rig = make_rig(rng, 4, n, bend=0.0)
    rig.positions, rig.frames = rig.pose(np.broadcast_to(np.eye(3), (4, n, 3, 3)))
    # No swing at all: the chain is frozen in its rest shape, so a target off it is unreachable.
    limits = limits_from(np.zeros(4), None, 4, n)
    targets = reachable_targets(rng, rig, max_angle=1.5)
    problem = rig.problem(targets, limits=limits, tolerance=1e-6, roll_mode="REST")
    result = ALL[name](problem)
    check_result(problem, result)
    assert not result.reached.any(), "a limit that blocks the target must give reached=False"
    assert (result.status != CONVERGED).all(), "status must say the target was not reached"
    # No bone swings off its rest direction; the global stage may only twist them (the twist is free).
    parents = np.concatenate([problem.base[:, None], result.frames[:, :-1]], axis=1)
    local = np.einsum("knji,knjl->knil", parents @ problem.ref_local, result.frames)
    assert np.allclose(local[..., :, 1], [0.0, 1.0, 0.0], atol=1e-9), "frozen chains keep their rest swing"


def test_two_bone_and_fabrik_agree() -> None:
    rng = np.random.default_rng(7)
    rig = make_rig(rng, 40, 2, connected=False)
    targets = reachable_targets(rng, rig, max_angle=2.5)
    poles = rig.root + rng.normal(size=(40, 3)) * 2
    analytic = solve_two_bone(rig.problem(targets, poles=poles, tolerance=1e-9))
    iterative = solve_fabrik(rig.problem(targets, poles=poles, tolerance=1e-9, max_iterations=5000))
    both = analytic.reached & iterative.reached
    assert both.mean() > 0.8, "most targets should be reached by both"
    tip = np.abs(analytic.positions[both, -1] - iterative.positions[both, -1]).max()
    assert tip < 2e-9, f"tips must agree ({tip:.3g})"
    elbow = np.abs(analytic.positions[both, 1] - iterative.positions[both, 1]).max()
    assert elbow < 1e-4, f"with a pole the elbows (bend planes) must agree ({elbow:.3g})"


def test_ccd_max_angle_limits_each_step() -> None:
    rng = np.random.default_rng(1)
    rig = make_rig(rng, 10, 5)
    targets = reachable_targets(rng, rig)
    problem = rig.problem(targets, max_iterations=1)
    free = solve_ccd(problem)
    damped = solve_ccd(problem, max_angle=0.05)
    rel = np.einsum("knji,knjl->knil", rig.frames, damped.frames)
    # One iteration turns bone i by at most (i+1) steps of max_angle (its own and its ancestors').
    angle = np.arccos(np.clip((np.trace(rel, axis1=2, axis2=3) - 1) / 2, -1, 1))
    assert (angle <= 0.05 * np.arange(1, 6) + 1e-6).all(), "max_angle must cap each joint's step"
    assert not same_result(free, damped)
    with pytest.raises(ValueError, match="max_angle"):
        solve_ccd(problem, max_angle=-1.0)


def test_fabrik_and_ccd_reuse_problem_with_new_targets() -> None:
    rng = np.random.default_rng(9)
    rig = make_rig(rng, 5, 3)
    problem = rig.problem(reachable_targets(rng, rig))
    again = replace(problem, targets=reachable_targets(rng, rig))
    assert solve_fabrik(again).reached.all()
    assert not problem.positions.flags.writeable, "problem arrays are read-only"


def test_empty_batch() -> None:
    rng = np.random.default_rng(0)
    rig = make_rig(rng, 1, 2)
    empty = ChainProblem(
        rig.positions[:0], rig.frames[:0], rig.offsets[:0], rig.ref_local[:0], rig.base[:0], np.zeros((0, 3))
    )
    for solver in ALL.values():
        assert solver(empty).positions.shape == (0, 3, 3)


def test_random_rotations_fixture_is_a_rotation() -> None:
    r = random_rotations(np.random.default_rng(0), (5,))
    assert np.allclose(np.einsum("kji,kjl->kil", r, r), np.eye(3))


# ---------------------------------------------------------------------------------------------------------
# Convergence regressions (the Blender tier's rigs, rebuilt here) and the shared polish
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ITERATIVE))
def test_blender_chain_rig_reaches_random_poses_within_the_default_cap(name: str) -> None:
    # tests/blender/rigs.py chain_rig(3) (bones ~1.01 long, zig-zagging in X) under random poses of
    # up to 0.6 rad per bone: many targets lie next to full extension, where plain FABRIK and CCD crawl.
    # The Blender test scales the rig 2.5x with a 1e-3 world tolerance: 4e-4 in armature units.
    rig = zigzag_rig(3)
    misses = []
    iterations = []
    for seed in range(60):
        goal, _ = rig.pose(quaternion_pose(np.random.default_rng(seed), (1, 3), 0.6))
        problem = rig.problem(goal[:, -1].copy(), tolerance=4e-4)
        assert problem.max_iterations == 30, "the default cap"
        result = ITERATIVE[name](problem)
        check_result(problem, result)
        iterations.append(int(result.iterations[0]))
        if not result.reached[0]:
            misses.append((seed, float(result.residual[0]), STATUS_NAMES[result.status[0]]))
    assert not misses, f"{name}: reachable targets missed within 30 iterations (seed, residual, status): {misses}"
    assert np.mean(iterations) < 8, f"{name}: {np.mean(iterations):.1f} iterations on average (expected a few)"


@pytest.mark.parametrize(
    ("name", "n", "length", "amplitude", "tol"),
    [
        ("fabrik", 50, 0.1, 0.06, 1e-4),  # bench/live.py's long chain
        ("fabrik", 3, 0.2, 0.15, 1e-3),  # the character's spine
        ("ccd", 6, 0.13, 0.15, 1e-3),  # the character's tail
    ],
)
def test_warm_started_tracking_converges_within_the_default_cap(
    name: str, n: int, length: float, amplitude: float, tol: float
) -> None:
    # Live solving: each call starts from the previous result while the target follows a smoothly moving
    # pose (reachable by construction). Every call must reach the target within the default cap of 30.
    rig = zigzag_rig(n, length, 0.08 if n == 50 else 0.2)
    positions, frames = rig.positions, rig.frames
    worst = 0
    for r in range(12):
        goal, _ = rig.pose(wave_pose(n, 0.35 * r, amplitude))
        problem = ChainProblem(
            positions, frames, rig.offsets, rig.ref_local, rig.base, goal[:, -1].copy(), tolerance=tol
        )
        result = ITERATIVE[name](problem)
        check_result(problem, result)
        assert result.reached[0], (
            f"{name}, {n} bones, call {r}: residual {result.residual[0]:.3g} after {result.iterations[0]} "
            f"iterations ({STATUS_NAMES[result.status[0]]})"
        )
        worst = max(worst, int(result.iterations[0]))
        positions, frames = result.positions, result.frames
    assert worst <= 10, f"{name}, {n} bones: a warm-started call took {worst} iterations"


def test_polish_keeps_lengths_and_root_and_converges_quadratically() -> None:
    rng = np.random.default_rng(3)
    rig = make_rig(rng, 20, 7)
    # Targets near the current tips: the polish should cut a small error to about its square.
    direction = rng.normal(size=(20, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    targets = rig.positions[:, -1] + 1e-3 * direction
    batch = ChainBatch.from_problem(rig.problem(targets))
    polished = polish(batch)
    assert np.array_equal(polished[:, 0], rig.positions[:, 0]), "the root must not move"
    seg = np.linalg.norm(np.diff(polished, axis=1), axis=-1)
    assert np.abs(seg / rig.lengths - 1).max() < 1e-12, "segment lengths must be kept"
    before = np.linalg.norm(rig.positions[:, -1] - targets, axis=1)
    after = np.linalg.norm(polished[:, -1] - targets, axis=1)
    assert (after < 0.05 * before).all(), f"one polish step should cut a 1e-3 error far down; got {after.max():.3g}"


def test_s_shaped_chain_is_not_prebent() -> None:
    # A zig-zag's interior joints lie on both sides of the root-to-tip line: it is bent, not straight, so
    # the warm start must not get the straight chain's pre-bend (the pose is returned as is with no
    # iteration allowed).
    rig = zigzag_rig(4, 1.0, 0.15)
    targets = rig.positions[:, -1] + np.array([[0.5, 0.2, -1.0]])
    for solver in ITERATIVE.values():
        result = solver(rig.problem(targets, max_iterations=0))
        assert np.allclose(result.positions, rig.positions, atol=1e-12), "the warm start must be untouched"


def test_ccd_and_fabrik_iterations_to_1e4() -> None:
    # Regression bound for the benchmark's FABRIK vs CCD comparison: random comfortable targets, 10 bones.
    rng = np.random.default_rng(7)
    rig = make_rig(rng, 100, 10)
    targets = reachable_targets(rng, rig)
    ok = comfortable(rig, targets)
    problem = rig.problem(targets[ok], tolerance=1e-4, max_iterations=200)
    problem = replace(
        problem, **{f: getattr(problem, f)[ok] for f in ("positions", "frames", "offsets", "ref_local", "base")}
    )
    for name, solver in ITERATIVE.items():
        result = solver(problem)
        assert result.reached.all(), f"{name}: every comfortable target must be reached"
        assert result.iterations.mean() < 8, f"{name}: {result.iterations.mean():.1f} iterations on average"


@pytest.mark.parametrize("name", sorted(ITERATIVE))
def test_solve_is_continuous_in_the_target(name: str) -> None:
    # A bake solves every frame of a smooth motion and, so that redundant chains do not jitter, runs all
    # frames for the same number of iterations (`uniform_iterations`, what rig/solve.py's _solve_smooth
    # asks for). The result must then move smoothly with the target: the polish is weighted
    # continuously, never switched on and off.
    n, frames = 6, 120
    rig = zigzag_rig(n, 0.2, 0.15)
    goals = np.concatenate([rig.pose(wave_pose(n, 0.02 * f, 0.25))[0][:, -1] for f in range(frames)])

    def tile(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, frames, axis=0)

    problem = ChainProblem(
        tile(rig.positions),
        tile(rig.frames),
        tile(rig.offsets),
        tile(rig.ref_local),
        tile(rig.base),
        goals,
        tolerance=1e-6,
    )
    early = ITERATIVE[name](problem)
    assert len(set(early.iterations.tolist())) > 1, "frames should need different iteration counts on their own"
    uniform = replace(problem, uniform_iterations=True)
    result = ITERATIVE[name](uniform)
    check_result(uniform, result)
    assert (result.iterations == early.iterations.max()).all(), "every frame runs as long as the slowest"
    # The same as running every frame for that many iterations with a tolerance none reaches.
    exhaust = ITERATIVE[name](replace(problem, tolerance=1e-12, max_iterations=int(early.iterations.max())))
    assert np.allclose(result.positions, exhaust.positions, atol=1e-9), "uniform = the same iterations everywhere"
    joints = result.positions[:, 1:-1]
    step = np.linalg.norm(np.diff(joints, axis=0), axis=-1).max(axis=1)
    bend = np.linalg.norm(np.diff(joints, 2, axis=0), axis=-1).max(axis=1)
    worst = int(np.argmax(bend))
    assert bend.max() < 0.3 * np.median(step), (
        f"{name}: the pose jumps between frames {worst} and {worst + 2} ({bend.max():.3g} against a typical "
        f"step of {np.median(step):.3g})"
    )


def test_polish_keeps_each_solvers_own_solution() -> None:
    # The polish finishes a solve; it must not change which solution a redundant chain settles on. On
    # random targets the polished FABRIK and CCD poses stay close to the poses each solver reaches on its
    # own (run without the polish, to a tight tolerance), far closer than FABRIK's and CCD's poses are to
    # each other.
    rng = np.random.default_rng(7)
    rig = make_rig(rng, 120, 6)
    targets = reachable_targets(rng, rig)
    problem = rig.problem(targets, tolerance=1e-6, max_iterations=5000)
    steps = {"fabrik": (fabrik_step, 0.01), "ccd": (make_ccd_step(None), 0.1)}
    plain = {}
    for name, (step, bound) in steps.items():
        plain[name] = solve_chains(problem, step, track_frames=False, polished=False)
        polished = ITERATIVE[name](problem)
        rows = plain[name].reached & polished.reached
        assert rows.mean() > 0.9, f"{name}: most targets must be reached both ways"
        deviation = np.linalg.norm(polished.positions[rows] - plain[name].positions[rows], axis=-1).max(axis=1)
        deviation /= rig.lengths[rows].sum(axis=1)
        assert np.percentile(deviation, 90) < bound, (
            f"{name}: the polished poses moved {np.percentile(deviation, 90):.3g} of the chain length (90th "
            f"percentile) from the solver's own"
        )
    rows = plain["fabrik"].reached & plain["ccd"].reached
    apart = np.linalg.norm(plain["fabrik"].positions[rows] - plain["ccd"].positions[rows], axis=-1).max(axis=1)
    assert np.median(apart / rig.lengths[rows].sum(axis=1)) > 0.1, "FABRIK and CCD settle on different poses"


@pytest.mark.parametrize("name", sorted(ITERATIVE))
def test_target_on_a_joint_takes_the_careful_path(name: str) -> None:
    # The target sits exactly on the last bone's head: FABRIK's backward pass lands that joint on its
    # successor (no direction), which the fast pass detects and redoes with explicit fallbacks.
    heads = np.array([[[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [2, 1, 0]]])
    rig = Rig(
        heads[:, 0],
        np.eye(3)[None],
        np.eye(3)[None, None].repeat(3, axis=1),
        np.array([[[0.0, 1, 0]] * 3]),
        heads,
        np.zeros((1, 3, 3, 3)),
    )
    z = np.array([0.0, 0.0, 1.0])
    for i in range(3):
        y = heads[0, i + 1] - heads[0, i]
        rig.frames[0, i] = np.stack([np.cross(y, z), y, z], axis=1)
    rig.ref_local = np.einsum(
        "knji,knjl->knil", np.concatenate([rig.base[:, None], rig.frames[:, :-1]], axis=1), rig.frames
    )
    problem = rig.problem(heads[:, 2].copy(), tolerance=1e-6, max_iterations=100)
    result = ITERATIVE[name](problem)
    check_result(problem, result)
    assert result.reached.all(), f"{name}: residual {result.residual}"


def test_ccd_vector_turn_equals_the_rotation_matrix() -> None:
    # The unlimited CCD step turns the joints with two reflections applied to the vectors; it must be the
    # same turn as rotation_between's matrix, including the rows that take the careful path.
    from solvers.ccd import _turn_joints_below
    from solvers.rotations import rotation_between

    rng = np.random.default_rng(4)
    p = rng.normal(size=(40, 6, 3))
    targets = rng.normal(size=(40, 3))
    targets[0] = p[0, 2] - 3.0 * (p[0, -1] - p[0, 2])  # opposite to the lever of joint 2
    targets[1] = p[1, 2]  # on the head of joint 2: no direction
    expected = p.copy()
    rot = rotation_between(p[:, -1] - p[:, 2], targets - p[:, 2])
    expected[:, 3:] = p[:, 2:3] + np.matmul(p[:, 3:] - p[:, 2:3], rot.transpose(0, 2, 1))
    _turn_joints_below(p, 2, targets)
    assert np.allclose(p, expected, atol=1e-12)
    tips = p[2:, -1] - p[2:, 2]
    aims = targets[2:] - p[2:, 2]
    cos = np.einsum("ki,ki->k", tips, aims) / np.linalg.norm(tips, axis=1) / np.linalg.norm(aims, axis=1)
    assert (cos > 1.0 - 1e-12).all(), "the end effector points at the target"


@pytest.mark.parametrize("careful_at", [None, 4, 0])
def test_ccd_coordinate_major_sweep_equals_joint_steps(careful_at: int | None) -> None:
    # The unlimited sweep turns the joints on a coordinate-major copy; joint after joint it must give what
    # the row-major step gives, also when a row needs the careful path part-way (the sweep then goes on
    # row-major from that joint).
    from solvers.ccd import _free_sweep, _turn_joints_below

    rng = np.random.default_rng(7)
    p = rng.normal(size=(30, 7, 3))
    targets = rng.normal(size=(30, 3))
    if careful_at is not None:
        targets[3] = p[3, careful_at]  # on the head of that joint, which the joints below do not move
    start = p.copy()
    expected = p.copy()
    for j in range(5, -1, -1):
        _turn_joints_below(expected, j, targets)
    _free_sweep(p, targets)
    assert np.allclose(p, expected, rtol=0.0, atol=1e-12)
    assert np.abs(p - start).max() > 0.1, "the sweep wrote its result in place"
    empty = np.zeros((0, 7, 3))
    _free_sweep(empty, np.zeros((0, 3)))  # no chains: nothing to do, and no error
