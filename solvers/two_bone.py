"""Analytic two-bone IK by the law of cosines (seed 002), batched over chains.

Exact for reachable targets. Too far: the chain lies straight toward the target with the root fixed
(unlike the seed's game code, which moves the shoulder). Too close: the chain folds toward the target.
The bend plane comes from the pole when given, else from the current bend (``'KEEP'``/``'REST'``) or the
natural roll (``'NATURAL'``); a straight chain with no pole bends toward the natural bend, so every
degenerate case has a defined answer. Segment lengths are ``|offset|``, so disconnected bones work.
Frames, roll and joint limits come from one :func:`~solvers.frames.forward_sweep`.
"""

from __future__ import annotations

import numpy as np

from .frames import STRAIGHT, ChainBatch, fallback_bends, forward_sweep
from .rotations import normalize, norms, perpendicular_part
from .search import refine
from .soft import solve_soft
from .types import CONVERGED, UNREACHABLE, ZERO_LENGTH, ChainProblem, SolveResult


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
    return solve_soft(problem, lambda p: refine(p, _solve_two_bone(p)))


def _solve_two_bone(problem: ChainProblem) -> SolveResult:
    """:func:`solve_two_bone` toward the problem's own targets (soft IK is applied around it)."""
    batch = ChainBatch.from_problem(problem)
    k = batch.size
    root, targets = batch.root, batch.targets
    l1, l2 = batch.lengths[:, 0], batch.lengths[:, 1]
    total = l1 + l2
    distance = norms(targets - root)
    on_root = distance <= ZERO_LENGTH * np.maximum(total, 1.0)
    chord = normalize(targets - root, batch.keep_directions[:, 0])

    # Bend direction, perpendicular to the chord: pole or natural roll (the hints), else the current
    # bend, else (straight chain) the natural bend, which depends on the rest pose only.
    side = perpendicular_part(batch.positions[:, 1] - root, chord)
    straight = norms(side) <= STRAIGHT * total
    bend = normalize(side, chord)
    if straight.any():
        bend[straight] = fallback_bends(batch.take(straight), chord[straight])
    hinted = ~np.isnan(batch.hints[:, 0])
    bend[hinted] = batch.hints[hinted]

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
    reached = (residual <= problem.tolerance) & ~on_root
    status = np.where(reached, CONVERGED, UNREACHABLE).astype(np.int8)
    return SolveResult(
        positions=positions,
        frames=frames,
        iterations=np.zeros(k, dtype=np.int64),
        residual=residual,
        reached=reached,
        status=status,
    )
