"""The one iteration loop shared by the iterative chain solvers (FABRIK and CCD).

A solver supplies only its iteration (a :data:`Step` that updates a :class:`~solvers.frames.ChainBatch`
in place); everything around it lives here once: the reach check, the warm start (bend plane from the
pole or the natural roll, straight chains pre-bent), the loop with tolerance, iteration cap, stall
detection and the best pose seen, the final bend-plane alignment and the final frames from
:func:`~solvers.frames.forward_sweep`, and the diagnostics.

Per-chain early exit: the loop works on a compacted batch of the chains still running. When chains
converge or stall they are written out and dropped from the batch, so a step costs in proportion to the
chains still running, and a batch costs about the sum of what each chain needs, not K times the slowest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from .frames import (
    STRAIGHT,
    ChainBatch,
    chain_bend,
    fallback_bends,
    forward_sweep,
    prebend,
    rotate_bend,
    straight_toward,
)
from .rotations import any_perpendicular, matvec, normalize, norms, perpendicular_part
from .types import (
    CAP,
    CONVERGED,
    F64,
    I8,
    I64,
    STALLED,
    UNREACHABLE,
    ZERO_LENGTH,
    ChainProblem,
    SolveResult,
)

Step = Callable[[ChainBatch], None]
"""One iteration of a solver: updates ``batch.positions`` (and ``batch.frames`` when it tracks them)."""

STALL_RELATIVE: Final = 1e-3
"""An iteration that improves a chain's best residual by less than this fraction makes no progress."""
STALL_PATIENCE: Final = 3
"""A chain stalls after this many iterations in a row without progress (one bad step may be a fluke)."""


@dataclass(frozen=True)
class LoopOutcome:
    """Best pose seen per chain and how the loop ended for it."""

    positions: F64
    frames: F64 | None  # None when the step does not track frames
    iterations: I64
    status: I8


def residuals(batch: ChainBatch) -> F64:
    """Distance from each chain's end effector to its target."""
    return norms(batch.positions[:, -1] - batch.targets)


def iterate(batch: ChainBatch, step: Step, tolerance: float, max_iterations: int, track_frames: bool) -> LoopOutcome:
    """Run ``step`` until each chain converges, stalls or hits the cap; keep each chain's best pose.

    Parameters
    ----------
    batch
        Chains to solve; ``batch.positions`` (and ``frames``) are the warm start.
    step
        The solver's iteration.
    tolerance, max_iterations
        Convergence distance and iteration cap.
    track_frames
        Whether ``step`` keeps ``batch.frames`` up to date (so the best frames must be kept too).

    Returns
    -------
    LoopOutcome
        Best positions/frames (rows as in ``batch``), iterations per chain, and status ``CONVERGED``,
        ``STALLED`` or ``CAP``.
    """
    best_positions = batch.positions.copy()
    best_frames = batch.frames.copy() if track_frames and batch.frames is not None else None
    residual = residuals(batch)
    iterations = np.zeros(batch.size, dtype=np.int64)
    status = np.full(batch.size, CAP, dtype=np.int8)
    converged = residual <= tolerance
    status[converged] = CONVERGED
    rows = np.flatnonzero(~converged)
    work = batch if rows.size == batch.size else batch.take(rows)
    best = residual[rows]
    stalls = np.zeros(rows.size, dtype=np.int64)
    for it in range(1, max_iterations + 1):
        if rows.size == 0:
            break
        step(work)
        r = residuals(work)
        better = r < best
        if better.any():
            sel = rows[better]
            best_positions[sel] = work.positions[better]
            if best_frames is not None and work.frames is not None:
                best_frames[sel] = work.frames[better]
        progress = r < best * (1.0 - STALL_RELATIVE)
        best = np.minimum(best, r)
        stalls = np.where(progress, 0, stalls + 1)
        iterations[rows] = it
        done = r <= tolerance
        stalled = ~done & (stalls >= STALL_PATIENCE)
        finished = done | stalled
        if finished.any():
            status[rows[done]] = CONVERGED
            status[rows[stalled]] = STALLED
            keep = ~finished
            rows = rows[keep]
            work = work.take(keep)
            best = best[keep]
            stalls = stalls[keep]
    return LoopOutcome(best_positions, best_frames, iterations, status)


def warm_start(batch: ChainBatch) -> None:
    """Prepare the warm start in place: bend toward the hint (pole / natural roll), pre-bend straight chains.

    A hinted chain is turned rigidly about the root-to-target line so that its bend lies in the hint's
    half-plane. A straight chain (no bend of its own) gets a small arc toward its hint, or toward the
    natural bend when it has none, because FABRIK and CCD cannot leave a straight line by themselves.
    """
    p = batch.positions
    fallback = matvec(batch.keep_frames[:, 0], batch.directions[:, 0])
    chord = normalize(batch.targets - batch.root, fallback)
    hinted = ~np.isnan(batch.hints[:, 0])
    rotate_bend(p, batch.root, chord, batch.hints, hinted)
    if batch.n_bones < 2:
        return
    along = normalize(p[:, -1] - batch.root, chord)
    total = batch.lengths.sum(axis=1)
    straight = norms(chain_bend(p, batch.root, along)) <= STRAIGHT * total
    if not straight.any():
        return
    side = np.where(hinted[:, None], batch.hints, 0.0)
    unhinted = straight & ~hinted
    if unhinted.any():
        side[unhinted] = fallback_bends(batch.take(unhinted), chord[unhinted])
    side = normalize(perpendicular_part(side, along), any_perpendicular(along))
    prebend(p, batch.lengths, side, straight)


def solve_chains(problem: ChainProblem, step: Step, track_frames: bool) -> SolveResult:
    """Solve every chain of ``problem`` with the iteration ``step`` (the whole solver around the step).

    Chains whose target is out of reach are laid straight toward it (root fixed) without iterating;
    a target on the root returns the current pose; the others iterate from the warm start. Every result
    gets its frames from one final :func:`~solvers.frames.forward_sweep` (roll mode and limits), so the
    residual is measured on the pose the frames produce.
    """
    batch = ChainBatch.from_problem(problem)
    k = batch.size
    tol = problem.tolerance
    total = batch.lengths.sum(axis=1)
    distance = norms(batch.targets - batch.root)
    on_root = distance <= ZERO_LENGTH * np.maximum(total, 1.0)
    too_far = ~on_root & (distance >= total)
    solve = ~on_root & ~too_far
    min_reach = np.maximum(0.0, 2.0 * batch.lengths.max(axis=1) - total)

    positions = problem.positions.copy()
    frames = problem.frames.copy()
    iterations = np.zeros(k, dtype=np.int64)
    status = np.full(k, UNREACHABLE, dtype=np.int8)

    if too_far.any():
        sub = batch.take(too_far)
        aims = straight_toward(sub.root, sub.targets, sub.lengths, matvec(sub.keep_frames[:, 0], sub.directions[:, 0]))
        positions[too_far], frames[too_far] = forward_sweep(sub, aims)

    if solve.any():
        sub = batch.take(solve)
        warm_start(sub)
        if track_frames:
            # Steps that track frames need a consistent, limited pose to start from.
            swept, swept_frames = forward_sweep(sub, sub.positions)
            sub.positions[:] = swept
            sub = replace(sub, frames=swept_frames)
        outcome = iterate(sub, step, tol, problem.max_iterations, track_frames)
        best = outcome.positions
        # The loop may drift the bend plane (FABRIK keeps it only for planar chains); turn it back about
        # the root-to-tip line, which leaves the end effector where it is.
        hinted = ~np.isnan(sub.hints[:, 0])
        along = normalize(best[:, -1] - sub.root, normalize(sub.targets - sub.root))
        rotate_bend(best, sub.root, along, sub.hints, hinted)
        positions[solve], frames[solve] = forward_sweep(sub, best)
        iterations[solve] = outcome.iterations
        too_close = distance[solve] < min_reach[solve] - tol
        status[solve] = np.where(too_close, UNREACHABLE, outcome.status)

    residual = norms(positions[:, -1] - batch.targets)
    reached = (residual <= tol) & ~on_root
    status[reached] = CONVERGED
    # A target on the root has no direction to reach toward: report the current pose as unreachable.
    status[on_root] = UNREACHABLE
    # A chain the loop called converged can miss by rounding after the final sweep; it is stalled there.
    status[~reached & (status == CONVERGED)] = STALLED
    return SolveResult(
        positions=positions,
        frames=frames,
        iterations=iterations,
        residual=residual,
        reached=reached,
        status=status,
    )
