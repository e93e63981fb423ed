"""`solve_tree_frames` (many frames of one tree at once, for bakes) gives what `solve_tree` gives frame by
frame: the same poses, iterations and statuses, with and without limits, early stops and uniform runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from solver_fixtures import limits_from, make_tree, random_rotations
from test_tree import HAND, TREES, posed_targets

from solvers import solve_tree
from solvers.tree_frames import solve_tree_frames


def _frames(name: str, seed: int, f: int, limited: bool, mode: str) -> list:
    rng = np.random.default_rng(seed)
    rig = make_tree(rng, **TREES[name])  # type: ignore[arg-type]
    b = rig.parents.shape[0]
    limits = limits_from(np.array([0.9, 0.6, 0.8, 0.7]), np.array([-0.5, 0.5]), 1, b) if limited else None
    problems = []
    for fi in range(f):
        # Each frame its own warm start, targets and tolerance (an armature scaled over the frames).
        heads, frames, _ = rig.pose(random_rotations(rng, (b,), 0.3))
        posed = replace(rig, heads=heads, frames=frames)
        targets = posed_targets(rng, rig, 1.0) if fi % 3 else posed_targets(rng, rig, 0.2) * 3.0
        problems.append(
            posed.problem(targets, tolerance=1e-3 * (1.0 + 0.1 * fi), max_iterations=40, roll_mode=mode, limits=limits)
        )
    return problems


def _same(one: list, many: list) -> None:
    for fi, (a, b) in enumerate(zip(one, many, strict=True)):
        assert a.iterations == b.iterations, f"frame {fi}: {a.iterations} vs {b.iterations} iterations"
        assert np.array_equal(a.status, b.status), f"frame {fi}: status {a.status} vs {b.status}"
        assert np.allclose(a.heads, b.heads, atol=1e-9), (
            f"frame {fi}: heads differ by {np.abs(a.heads - b.heads).max()}"
        )
        assert np.allclose(a.frames, b.frames, atol=1e-9), f"frame {fi}: frames differ"
        assert np.allclose(a.residual, b.residual, atol=1e-9)


@pytest.mark.parametrize("name", sorted(TREES))
@pytest.mark.parametrize("limited", [False, True])
@pytest.mark.parametrize("mode", ["KEEP", "REST"])
def test_frames_at_once_equal_frame_by_frame(name: str, limited: bool, mode: str) -> None:
    problems = _frames(name, 11, 7, limited, mode)
    _same([solve_tree(p) for p in problems], solve_tree_frames(problems))


def test_uniform_runs_equal_frame_by_frame() -> None:
    # A bake's second pass: every frame for the same number of iterations (a tolerance nobody reaches).
    problems = [replace(p, tolerance=1e-12, max_iterations=12) for p in _frames("hand", 5, 6, True, "REST")]
    one = [solve_tree(p) for p in problems]
    assert len({r.iterations for r in one}) >= 1
    _same(one, solve_tree_frames(problems))


def test_differing_topology_falls_back_frame_by_frame() -> None:
    problems = _frames("Y", 3, 3, False, "KEEP")
    # Frame 1's hand-like offset turns bone 1 into a fork: solved on its own, same answers.
    offsets = problems[1].head_offsets.copy()
    offsets[4] = offsets[4] + np.array([0.2, 0.0, 0.0])
    problems[1] = replace(problems[1], head_offsets=offsets)
    _same([solve_tree(p) for p in problems], solve_tree_frames(problems))


def test_one_frame_is_solve_tree() -> None:
    problems = _frames("hand", 2, 1, False, "KEEP")
    _same([solve_tree(problems[0])], solve_tree_frames(problems))
    assert HAND  # the fixture the other tests share
