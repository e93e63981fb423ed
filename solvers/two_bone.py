"""Analytic two-bone IK by the law of cosines (seed 002), batched over chains.

Exact for reachable targets. Too far: the chain lies straight toward the target with the root fixed
(unlike the seed's game code, which moves the shoulder). Too close: the chain folds toward the target.
The bend plane comes from the pole when given, else from the current bend (``'KEEP'``/``'REST'``) or the
natural roll (``'NATURAL'``); a straight chain with no pole bends toward the natural bend, so every
degenerate case has a defined answer. Segment lengths are ``|offset|``, so disconnected bones work.
Frames, roll and joint limits come from one :func:`~solvers.frames.forward_sweep`.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .frames import STRAIGHT, ChainBatch, fallback_bends, forward_sweep
from .rotations import normalize, norms, perpendicular_part
from .search import refine
from .soft import solve_soft
from .two_bone_floats import solve_limited_floats
from .two_bone_limits import ALONG_Y, solve_limited
from .types import CONVERGED, F64, UNREACHABLE, ZERO_LENGTH, Bools, ChainProblem, SolveResult

FLOATS_MAX_ROWS: Final = 8
"""Up to this many chains, `settle` runs the closed form on plain floats (`solvers.two_bone_floats`), above
it on numpy (`solvers.two_bone_limits.solve_limited`, the reference; both give the same result to float64
rounding). Measured per call (CPU time, one chain = one row, the limbs' cone tables cached as in live
posing): hinged limbs 0.06 vs 0.44 ms at 1 row, 0.35 vs 0.53 ms at 8, even at 16; mixed limits (swivel
searches, out-of-reach proofs) 0.41 vs 1.9 ms at 1, 3.0 vs 6.0 ms at 8, 5.8 vs 7.1 ms at 16."""


def solve_two_bone(problem: ChainProblem) -> SolveResult:
    """Solve K two-bone chains analytically.

    Parameters
    ----------
    problem
        Chains of exactly 2 bones. ``tolerance`` only decides ``reached``; ``max_iterations`` is unused.

    Returns
    -------
    SolveResult
        ``iterations`` is 0 (nothing iterates). ``status`` is ``CONVERGED`` when the target is reached,
        ``SOFT`` when a soft chain (``problem.soft``) reached its eased target exactly but not the real
        one, else ``UNREACHABLE`` (too far, too close, on the root, or blocked by a joint limit).

    Raises
    ------
    ValueError
        If the chains do not have 2 bones.
    """
    if problem.n_bones != 2:
        raise ValueError(f"two-bone IK needs chains of 2 bones; got {problem.n_bones} (use FABRIK or CCD)")
    return solve_soft(problem, lambda p: refine(p, *_solve_two_bone(p)))


def _solve_two_bone(problem: ChainProblem) -> tuple[SolveResult, Bools | None]:
    """:func:`solve_two_bone` toward the problem's own targets (soft IK is applied around it), and which
    chains the closed form under limits settled (`solvers.two_bone_limits`: the global stage skips them)."""
    batch = ChainBatch.from_problem(problem)
    k = batch.size
    root, targets = batch.root, batch.targets
    l1, l2 = batch.lengths[:, 0], batch.lengths[:, 1]
    total = l1 + l2
    distance = norms(targets - root)
    on_root = distance <= ZERO_LENGTH * np.maximum(total, 1.0)
    chord = normalize(targets - root, batch.keep_directions[:, 0])
    bend = bend_directions(batch, chord)

    # Law of cosines for the angle at the root between the chord and the first bone. Clipping covers
    # both unreachable cases: cos = 1 lays the chain straight (too far, or folded back when l1 > l2) and
    # cos = -1 folds it with the first bone pointing away (too close with l1 < l2).
    safe = np.where(on_root, 1.0, distance)
    cos_a = np.clip((l1 * l1 + safe * safe - l2 * l2) / (2.0 * l1 * safe), -1.0, 1.0)
    sin_a = np.sqrt(1.0 - cos_a * cos_a)
    aims = np.empty((k, 3, 3))
    aims[:, 0] = root
    aims[:, 1] = root + l1[:, None] * (cos_a[:, None] * chord + sin_a[:, None] * bend)
    # The sweep aims the second bone at the target from the placed elbow: exact when reachable, straight
    # out along the chord when too far, folded back along it when too close.
    aims[:, 2] = targets
    positions, frames = forward_sweep(batch, aims)

    positions[on_root] = problem.positions[on_root]
    frames[on_root] = problem.frames[on_root]
    residual = norms(positions[:, -1] - targets)
    reached = (residual <= problem.tolerance) & ~on_root & ~elbow_moved(positions[:, 1], aims[:, 1], problem.tolerance)
    status = np.where(reached, CONVERGED, UNREACHABLE).astype(np.int8)
    result = SolveResult(
        positions=positions,
        frames=frames,
        iterations=np.zeros(k, dtype=np.int64),
        residual=residual,
        reached=reached,
        status=status,
    )
    return settle(problem, result, batch)


def elbow_moved(elbows: F64, aimed: F64, tolerance: float) -> Bools:
    """``(K,)`` whether the limits moved an analytic pose's elbows ``elbows`` more than ``tolerance`` from where
    the law of cosines put them (``aimed``): such a pose does not count as reaching its target, even when its
    tip lands within the tolerance (the upper bone's cone moved the elbow along its circle about the
    root-to-target line: a coincidence, off the pole's plane), and the closed form under limits takes the
    chain (`settle`: the elbow swivelled no further from the pole's plane than the limits ask). Without limits
    the elbow stays where it was aimed, to rounding. The rule lets the live program's analytic pose stop at
    the upper bone's cone (`solvers.scalar._chain.sweep`'s ``slack``) where it must clamp far, sparing the
    nearest-point search whose answer could only say "moved"."""
    moved: Bools = norms(elbows - aimed) > tolerance
    return moved


def bend_directions(batch: ChainBatch, chord: F64) -> F64:
    """``(K, 3)`` unit bend directions perpendicular to ``chord``: the pole or natural roll (the hints),
    else the chains' current bend, else (straight chains) the natural bend, which depends on the rest pose."""
    root = batch.root
    side = perpendicular_part(batch.positions[:, 1] - root, chord)
    straight = norms(side) <= STRAIGHT * batch.total_length
    bend = normalize(side, chord)
    if straight.any():
        bend[straight] = fallback_bends(batch.take(straight), chord[straight])
    hinted = ~np.isnan(batch.hints[:, 0])
    bend[hinted] = batch.hints[hinted]
    return bend


def settle(
    problem: ChainProblem, result: SolveResult, batch: ChainBatch | None = None
) -> tuple[SolveResult, Bools | None]:
    """Chains of a two-bone ``result`` that missed under their limits, solved again in closed form
    (:func:`solvers.two_bone_limits.solve_limited`, on plain floats for up to ``FLOATS_MAX_ROWS`` chains), and
    which chains that settled (None: none tried).

    Shared by the batched and the scalar two-bone solvers, so both give the same limited pose.
    """
    if result.reached.all() or problem.limits is None:
        return result, None
    if batch is None:
        batch = ChainBatch.from_problem(problem)
    if batch.limits is None:
        return result, None
    total = batch.total_length
    distance = norms(batch.targets - batch.root)
    # The lower bone's limits hold its Y axis: the closed form takes chains whose lower segment runs along
    # it (a Blender tip bone's does: its tail); others go to the global stage as before.
    along_y = np.abs(batch.directions[:, 1] - (0.0, 1.0, 0.0)).max(axis=1) <= ALONG_Y
    rows = np.flatnonzero(~result.reached & along_y & (distance > ZERO_LENGTH * np.maximum(total, 1.0)))
    if rows.size == 0:
        return result, None
    sub = batch.take(rows)
    chord = normalize(sub.targets - sub.root, sub.keep_directions[:, 0])
    closed = solve_limited_floats if rows.size <= FLOATS_MAX_ROWS else solve_limited
    at, fr, ok, _clamped = closed(sub, chord, bend_directions(sub, chord), distance[rows])
    # A pose the limits left on its target is as good as the global stage could find (the stage minimises
    # the distance alone), whether or not the closed form can prove its clamps exact.
    ok |= norms(at[:, -1] - sub.targets) <= problem.tolerance
    use = rows[ok]
    positions, frames = result.positions.copy(), result.frames.copy()
    positions[use], frames[use] = at[ok], fr[ok]
    residual = result.residual.copy()
    residual[use] = norms(positions[use, -1] - batch.targets[use])
    reached = result.reached.copy()
    reached[use] = residual[use] <= problem.tolerance
    status = result.status.copy()
    status[use] = np.where(reached[use], CONVERGED, UNREACHABLE)
    settled = np.zeros(batch.size, dtype=np.bool_)
    settled[use] = True
    return SolveResult(positions, frames, result.iterations, residual, reached, status), settled
