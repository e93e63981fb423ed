"""Multi-effector FABRIK trees: a Y, and a hand with nested forks and a fork with offset children."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from solver_fixtures import TreeRig, limits_from, make_tree, random_rotations

from solvers import CONVERGED, UNREACHABLE, TreeProblem, TreeResult, solve_tree
from solvers.limits import limit_violation

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)

# 0 -> 1 -> (2 -> 3) and (4 -> 5): two branches from one sub-base (the tail of bone 1).
Y = dict(parents=[-1, 0, 1, 2, 1, 4], effectors=[3, 5])
# Forearm 0, hand 1 whose five children start at different points (a rigid fork, like Rigify's chest
# with neck and shoulders), fingers of 2-3 bones; the ring finger forks again (a fork above a fork).
HAND_OFFSETS = [np.array(v) for v in ([-0.1, 0.5, 0], [0, 0.55, 0.02], [0.1, 0.5, 0], [0.2, 0.45, 0], [-0.2, 0.3, 0.1])]
HAND = dict(
    parents=[-1, 0, 1, 2, 3, 1, 5, 6, 1, 8, 9, 1, 11, 12, 12, 1, 15],
    effectors=[4, 7, 10, 13, 14, 16],
    offset_children={1: HAND_OFFSETS},
)
TREES = {"Y": Y, "hand": HAND}


def posed_targets(rng: np.random.Generator, rig: TreeRig, max_angle: float = 1.0) -> np.ndarray:
    """Effector tails of a random pose: reachable by construction."""
    _, _, tails = rig.pose(random_rotations(rng, (rig.parents.shape[0],), max_angle))
    return tails[rig.effectors].copy()


def check_tree(problem: TreeProblem, result: TreeResult) -> None:
    b = problem.n_bones
    assert np.isfinite(result.heads).all() and np.isfinite(result.frames).all(), "finite output"
    gram = np.einsum("bji,bjk->bik", result.frames, result.frames)
    assert np.abs(gram - np.eye(3)).max() < 1e-9, "frames must be orthonormal"
    assert np.allclose(np.linalg.det(result.frames), 1.0), "frames must be right-handed"
    assert np.array_equal(result.heads[0], problem.heads[0]), "the root must not move"
    # Every head follows from its parent's frame and its offset: forks stay rigid, lengths are kept.
    for i in range(1, b):
        p = problem.parents[i]
        expected = result.heads[p] + result.frames[p] @ problem.head_offsets[i]
        assert np.allclose(result.heads[i], expected, atol=1e-9), f"bone {i}: head detached from its parent"
    tails = result.heads + np.einsum("bij,bj->bi", result.frames, problem.tail_offsets)
    assert np.allclose(tails, result.tails, atol=1e-12), "tails = heads + frames @ tail_offsets"
    residual = np.linalg.norm(tails[problem.effectors] - problem.targets, axis=1)
    assert np.allclose(residual, result.residual, atol=1e-12), "residual = |tail - target|"
    assert np.array_equal(result.reached, result.residual <= problem.tolerance)


@pytest.mark.parametrize("name", sorted(TREES))
@settings(derandomize=True, max_examples=12, deadline=None)
@given(seed=SEEDS, mode=st.sampled_from(("KEEP", "REST")))
def test_reachable_targets_are_reached(name: str, seed: int, mode: str) -> None:
    rng = np.random.default_rng(seed)
    rig = make_tree(rng, **TREES[name])  # type: ignore[arg-type]
    targets = posed_targets(rng, rig)
    problem = rig.problem(targets, tolerance=1e-3, max_iterations=1500, roll_mode=mode)
    result = solve_tree(problem)
    check_tree(problem, result)
    assert result.reached.all(), f"{name}: residuals {result.residual} after {result.iterations} iterations"
    assert (result.status == CONVERGED).all()


def test_offset_fork_stays_rigid_and_weights_pull() -> None:
    rng = np.random.default_rng(8)
    rig = make_tree(rng, **HAND)  # type: ignore[arg-type]
    targets = posed_targets(rng, rig)
    problem = rig.problem(targets, tolerance=1e-4, max_iterations=2000)
    result = solve_tree(problem)
    check_tree(problem, result)
    assert result.reached.all()
    # Conflicting targets: the heavier effector ends up closer.
    far = targets.copy()
    far[0] += np.array([3.0, 0.0, 0.0])
    light = solve_tree(replace(problem, targets=far, weights=np.array([1.0, 1, 1, 1, 1, 1])))
    heavy = solve_tree(replace(problem, targets=far, weights=np.array([20.0, 1, 1, 1, 1, 1])))
    assert heavy.residual[0] < light.residual[0], "a heavier effector must pull harder"


def test_unreachable_effector_and_determinism() -> None:
    rng = np.random.default_rng(2)
    rig = make_tree(rng, **Y)  # type: ignore[arg-type]
    targets = posed_targets(rng, rig)
    targets[1] = rig.root + np.array([50.0, 0, 0])
    problem = rig.problem(targets)
    a, b = solve_tree(problem), solve_tree(problem)
    check_tree(problem, a)
    assert a.status[1] == UNREACHABLE and not a.reached[1]
    for f in ("heads", "tails", "frames", "residual", "reached", "status"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f"{f} must be bit-identical across runs"
    assert a.iterations == b.iterations


def test_bones_without_effectors_follow_rigidly() -> None:
    rng = np.random.default_rng(3)
    rig = make_tree(rng, parents=[-1, 0, 1, 1, 3], effectors=[2])
    problem = rig.problem(posed_targets(rng, rig), tolerance=1e-6, max_iterations=300)
    result = solve_tree(problem)
    check_tree(problem, result)
    for i in (3, 4):  # the branch with no target keeps its pose relative to its parent
        p = rig.parents[i]
        before = rig.frames[p].T @ rig.frames[i]
        after = result.frames[p].T @ result.frames[i]
        assert np.allclose(before, after, atol=1e-9), f"bone {i} must follow its parent rigidly"


def test_tree_honours_limits() -> None:
    rng = np.random.default_rng(6)
    rig = make_tree(rng, **HAND, bend=0.0)  # type: ignore[arg-type]
    b = rig.parents.shape[0]
    rig.heads, rig.frames, _ = rig.pose(np.broadcast_to(np.eye(3), (b, 3, 3)))
    limits = limits_from(np.array([0.4, 0.2, 0.3, 0.3]), np.array([-0.2, 0.2]), 1, b)
    problem = rig.problem(posed_targets(rng, rig, 1.2), limits=limits, roll_mode="REST", max_iterations=100)
    result = solve_tree(problem)
    check_tree(problem, result)
    parent_frames = np.array([problem.base if p < 0 else result.frames[p] for p in problem.parents])
    ref = np.einsum("bij,bjk->bik", parent_frames, problem.ref_local)
    cone_v, twist_v = limit_violation(
        ref, result.frames, limits.cone[0], limits.use_cone[0], limits.twist[0], limits.use_twist[0]
    )
    active = [i for i in range(b)]  # every bone here has an effector below it
    assert cone_v[active].max() < 1e-9, f"cone limits violated by {cone_v.max():.3g}"
    assert twist_v[active].max() < 1e-9, f"twist limits violated by {twist_v.max():.3g}"


@pytest.mark.parametrize("name", sorted(TREES))
def test_trees_converge_within_the_default_cap(name: str) -> None:
    # Multi-effector FABRIK finishes with the damped least-squares polish once it slows down: random
    # reachable poses of the hand (forks above forks, an offset fork) reach 1e-3 within the default 30.
    rng = np.random.default_rng(5)
    rig = make_tree(rng, **TREES[name])  # type: ignore[arg-type]
    iterations = []
    for _ in range(15):
        problem = rig.problem(posed_targets(rng, rig), tolerance=1e-3)
        assert problem.max_iterations == 30, "the default cap"
        result = solve_tree(problem)
        check_tree(problem, result)
        assert result.reached.all(), f"{name}: residuals {result.residual} after {result.iterations} iterations"
        iterations.append(result.iterations)
    assert np.median(iterations) <= 12, f"{name}: median {np.median(iterations)} iterations"


# Children whose heads sit exactly on their parent's head (zero head offsets, like Rigify's 'face' on
# 'spine.006'): bone 4 beside a child with a lever; bone 2 as its parent's only child (a pivot bone).
ZERO_HEAD = {
    "beside": dict(
        parents=[-1, 0, 1, 2, 1, 4], effectors=[3, 5], offset_children={1: [np.array([0.05, 0.6, 0.0]), np.zeros(3)]}
    ),
    "pivot": dict(parents=[-1, 0, 1, 2], effectors=[3], offset_children={1: [np.zeros(3)]}),
}


@pytest.mark.parametrize("name", sorted(ZERO_HEAD))
@pytest.mark.parametrize("mode", ["KEEP", "REST"])
def test_zero_head_offsets(name: str, mode: str) -> None:
    for seed in range(8):
        rng = np.random.default_rng(seed)
        rig = make_tree(rng, **ZERO_HEAD[name])  # type: ignore[arg-type]
        targets = posed_targets(rng, rig)
        problem = rig.problem(targets, tolerance=1e-3, max_iterations=1500, roll_mode=mode)
        result = solve_tree(problem)
        check_tree(problem, result)
        zero = [i for i in range(1, problem.n_bones) if not problem.head_offsets[i].any()]
        for i in zero:
            parent = problem.parents[i]
            assert np.array_equal(result.heads[i], result.heads[parent]), f"bone {i} must stay on its parent's head"
        assert result.reached.all(), f"{name}, seed {seed}: residuals {result.residual}"
