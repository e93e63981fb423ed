"""The one iteration loop shared by the iterative chain solvers (FABRIK and CCD).

A solver supplies only its iteration (a :data:`Step` that updates a :class:`~solvers.frames.ChainBatch`
in place); everything around it lives here once: the reach check, the warm start (bend plane from the
pole or the natural roll, straight chains pre-bent), the loop with tolerance, iteration cap, stall
detection and the best pose seen, the polish that finishes a solve once the solver's own steps slow down
(a damped least-squares step on the joint rotations, :func:`polish_turns`, weighted continuously by
:func:`polish_weights`), the final bend-plane alignment and the final frames from
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
    fallback_bends,
    forward_sweep,
    frame_positions,
    off_line,
    prebend,
    rotate_bend,
    straight_toward,
)
from .rotations import any_perpendicular, cross, normalize, norms, perpendicular_part, skew
from .types import (
    CAP,
    CONVERGED,
    F64,
    I8,
    I64,
    STALLED,
    UNREACHABLE,
    ZERO_LENGTH,
    Bools,
    ChainProblem,
    SolveResult,
)

Step = Callable[[ChainBatch], None]
"""One iteration of a solver: updates ``batch.positions`` (and ``batch.frames`` when it tracks them)."""

STALL_RELATIVE: Final = 1e-3
"""An iteration that improves a chain's best residual by less than this fraction makes no progress."""
STALL_PATIENCE: Final = 3
"""A chain stalls after this many iterations in a row without progress (one bad step may be a fluke)."""
POLISH_FROM: Final = 0.25
"""A solver step that leaves less than this fraction of the residual before it is fast: no polish."""
POLISH_FULL: Final = 0.5
"""A solver step that leaves more than this fraction is slow: the full polish step (if it pays, see
``POLISH_GAIN``). In between, a linearly growing part of it."""
POLISH_GAIN: Final = 0.5
"""A polish step that leaves at most this fraction of the solver step's residual is taken in full; one that
leaves all of it (or more) not at all; linearly in between."""
POLISH_NEAR: Final = 0.05
"""A residual below this fraction of the chain's length is near enough for the full polish step ..."""
POLISH_FAR: Final = 0.2
"""... and one above this fraction too far for any (linearly in between)."""
POLISH_RETRY: Final = 0.9
"""A chain whose recent polish steps left more than this fraction of the solver step's residual (its
record, see ``_polish_in_place``) gets less of the next one, and none from 1 until the record fades ..."""
POLISH_FADE: Final = 0.7
"""... by this factor per iteration."""
POLISH_DAMPING: Final = 0.05
"""Levenberg-Marquardt damping of :func:`polish_turns`, relative to ``|error| x chain length``."""
_EYE: Final = np.eye(3)
_TINY: Final = 1e-300


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


def polish_turns(batch: ChainBatch, damping: float = POLISH_DAMPING) -> F64:
    """The damped least-squares step on the joint rotations of every chain, as turns ``(A, N, 3)``.

    Each joint ``j`` turns by a small rotation vector ``w_j`` about its head, which moves the end effector
    by ``w_j x r_j`` (``r_j`` the lever from the head to the end effector). The step is the least-norm
    ``w`` with ``sum_j w_j x r_j = e`` (``e`` the error to the target), damped (Levenberg-Marquardt):
    ``w_j = r_j x y`` with ``(sum_j (|r_j|^2 I - r_j r_j^T) + lambda^2 I) y = e`` -- one 3x3 system per
    chain, whatever the number of bones. ``lambda^2 = damping |e| L`` (L the chain's length) vanishes
    with the error, so the steps converge quadratically near a solution while staying short next to a
    straight (singular) chain. Segment ``i`` turns by ``W_i``, the sum of ``w_j`` for ``j <= i`` (the
    joints above carry it along); those sums are returned.
    """
    p = batch.positions
    levers = p[:, -1:] - p[:, :-1]
    error = batch.targets - p[:, -1]
    gram = np.matmul(levers.transpose(0, 2, 1), levers)
    diagonal = np.einsum("anj,anj->a", levers, levers) + damping * norms(error) * batch.total_length
    system = diagonal[:, None, None] * _EYE - gram
    y = np.linalg.solve(system, error[..., None])[..., 0]
    # w_j = r_j x y, as row vectors r_j @ [y]x; then W_i = w_0 + ... + w_i.
    return np.asarray(np.cumsum(np.matmul(levers, skew(y)), axis=1), dtype=np.float64)


def turned(batch: ChainBatch, turns: F64) -> F64:
    """Joint positions after turning segment ``i`` of every chain by ``turns[:, i]``.

    ``s + W x s`` rescaled to the segment's length: the rotation to first order, so a polish step keeps its
    quadratic convergence, while the lengths are exact and the root stays fixed. Roll and joint limits are
    the forward sweep's business, as always.
    """
    p = batch.positions
    segments = p[:, 1:] - p[:, :-1]
    segments += cross(turns, segments)
    segments *= (batch.lengths / norms(segments))[..., None]
    out = np.empty_like(p)
    out[:, 0] = batch.root
    out[:, 1:] = segments
    return np.asarray(np.add.accumulate(out, axis=1, out=out), dtype=np.float64)


def polish(batch: ChainBatch, damping: float = POLISH_DAMPING) -> F64:
    """One full damped least-squares step (:func:`polish_turns`, :func:`turned`): new joint positions."""
    return turned(batch, polish_turns(batch, damping))


def ramp(x: F64, low: float, high: float) -> F64:
    """0 below ``low``, 1 above ``high``, linear between: a continuous switch."""
    return np.asarray(np.minimum(np.maximum((x - low) * (1.0 / (high - low)), 0.0), 1.0), dtype=np.float64)


def polish_weights(pace: F64, gain: F64, size: F64) -> F64:
    """How much of a polish step to take, from the pace of the solver's step (its residual over the one
    before it), the gain of the full polish step (its residual over the solver step's) and the size of
    the residual (relative to the chain's length). None while the solver is fast, when the polish does
    not beat it, or while the residual is large (the polish finishes a solve: the solver's own steps
    choose where it goes, the polish only refines near a solution, where its linear model holds); all of
    it when the solver is slow, the residual small and the polish at least halves it; continuously in
    between, so the result is a continuous function of the input (bakes need that: no switch flips from
    one frame to the next)."""
    weight: F64 = ramp(pace, POLISH_FROM, POLISH_FULL)
    weight *= 1.0 - ramp(gain, POLISH_GAIN, 1.0)
    weight *= 1.0 - ramp(size, POLISH_NEAR, POLISH_FAR)
    return weight


def _polish_in_place(work: ChainBatch, r: F64, previous: F64, record: F64, track_frames: bool) -> F64:
    """After the solver's step (residuals ``r``, ``previous`` before it), add each chain's weighted
    polish step (:func:`polish_weights`) in place; return the new residuals.

    ``record`` (updated in place) remembers how the chain's recent polish steps paid: a step that did not
    beat the solver's own is not computed again until that record fades (``POLISH_FADE`` per iteration),
    which matters with joint limits, where every polish step costs a limited forward sweep and limits
    that bind can make every one of them futile. The record enters the weights continuously too.
    The common cases skip the weights' arithmetic: every chain fast or far (no polish), or every chain
    slow and near with a good record and a polish that pays (the full step), how a solve usually ends.
    """
    # A chain can sit exactly on its target (uniform iterations keep converged chains running): 0 / 0.
    pace = r / np.maximum(previous, _TINY)
    size = r / work.total_length
    if float(pace.max()) <= POLISH_FROM or float(size.min()) >= POLISH_FAR or float(record.min()) >= 1.0:
        record *= POLISH_FADE
        return r
    slow = None
    if float(pace.min()) < POLISH_FULL or float(size.max()) > POLISH_NEAR or float(record.max()) > POLISH_RETRY:
        slow = ramp(pace, POLISH_FROM, POLISH_FULL)
        slow *= 1.0 - ramp(size, POLISH_NEAR, POLISH_FAR)
        slow *= 1.0 - ramp(record, POLISH_RETRY, 1.0)
        active = slow > 0.0
        record *= POLISH_FADE * (1.0 - slow)  # the part of the record that stays (the rest: this gain)
        if not active.all():
            if not active.any():
                return r
            out, gain = _polish_rows(work, r, active, slow[active], track_frames)
            record[active] += slow[active] * gain
            return out
        out, gain = _polish_rows(work, r, None, slow, track_frames)
        record += slow * gain
        return out
    out, gain = _polish_rows(work, r, None, None, track_frames)
    record[:] = gain
    return out


def _polish_rows(
    work: ChainBatch, r: F64, active: Bools | None, slow: F64 | None, track_frames: bool
) -> tuple[F64, F64]:
    """Polish the ``active`` rows of ``work`` (None: all) whose pace, size and record weights are ``slow``
    (None: all 1); return the new residuals of every row and the full steps' gains of the active rows."""
    sub = work if active is None else work.take(active)
    r_sub = r if active is None else r[active]
    turns = polish_turns(sub)
    candidate = turned(sub, turns)
    candidate_frames = None
    if track_frames:
        candidate, candidate_frames = forward_sweep(sub, candidate)
    reached = norms(candidate[:, -1] - sub.targets)
    gain = reached / np.maximum(r_sub, _TINY)
    full_gain = gain.copy()
    if slow is None and float(gain.max()) <= POLISH_GAIN:
        weight = None  # the full step for every row
    else:
        weight = 1.0 - ramp(gain, POLISH_GAIN, 1.0)
        if slow is not None:
            weight *= slow
        partial = (weight > 0.0) & (weight < 1.0)
        if partial.any():
            # Part of the step: the same turns, scaled.
            part = sub.take(partial)
            scaled = turned(part, turns[partial] * weight[partial][:, None, None])
            if track_frames and candidate_frames is not None:
                scaled, candidate_frames[partial] = forward_sweep(part, scaled)
            candidate[partial] = scaled
            reached[partial] = norms(scaled[:, -1] - part.targets)
        if (weight > 0.0).all():
            weight = None
    if weight is None and active is None:
        work.positions[:] = candidate
        if candidate_frames is not None and work.frames is not None:
            work.frames[:] = candidate_frames
        return reached, full_gain
    use = np.ones(reached.shape, dtype=np.bool_) if weight is None else weight > 0.0
    rows = np.flatnonzero(use) if active is None else np.flatnonzero(active)[use]
    work.positions[rows] = candidate[use]
    if candidate_frames is not None and work.frames is not None:
        work.frames[rows] = candidate_frames[use]
    out = r.copy()
    out[rows] = reached[use]
    return out, full_gain


class _Tracker:
    """Per-chain state of :func:`iterate` for the chains still running (rows aligned with the batch)."""

    def __init__(self, rows: I64, residual: F64, positions: F64, frames: F64 | None) -> None:
        self.rows = rows
        self.best = residual
        self.current = residual
        self.best_positions = positions.copy()
        self.best_frames = None if frames is None else frames.copy()
        self.stalls = np.zeros(rows.size, dtype=np.int64)
        self.record = np.zeros(rows.size)  # how the recent polish steps paid (see _polish_in_place)

    def keep(self, rows: Bools) -> None:
        for name in ("rows", "best", "current", "best_positions", "stalls", "record"):
            setattr(self, name, getattr(self, name)[rows])
        if self.best_frames is not None:
            self.best_frames = self.best_frames[rows]


def iterate(
    batch: ChainBatch,
    step: Step,
    tolerance: float,
    max_iterations: int,
    track_frames: bool,
    polished: bool = True,
    uniform: bool = False,
) -> LoopOutcome:
    """Run ``step`` until each chain converges, stalls or hits the cap; keep each chain's best pose.

    Every iteration is the solver's own step, followed by a damped least-squares polish step
    (:func:`polish_turns`, the same for every solver) weighted by :func:`polish_weights`: nothing while
    the solver's steps are fast (FABRIK away from full extension), all of it once they are slow (FABRIK
    next to full extension or on long chains, CCD almost always after a few iterations) and the polish
    at least halves what the solver's step left, continuously in between. The weights are continuous,
    so the solve stays a continuous function of its input: no chain switches method from one frame of a
    bake to the next. With joint limits the polished pose goes through the forward sweep like any step's,
    so the limits hold and the residual is measured on the limited pose.

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
    polished
        Whether to add the polish steps (False: the solver's own steps only).
    uniform
        Whether converged chains keep iterating until all have converged (stalled or capped), so every
        chain runs the same number of iterations (see ``ChainProblem.uniform_iterations``).

    Returns
    -------
    LoopOutcome
        Best positions/frames (rows as in ``batch``), iterations per chain, and status ``CONVERGED``,
        ``STALLED`` or ``CAP``.
    """
    best_positions = batch.positions.copy()
    tracked = track_frames and batch.frames is not None
    best_frames = batch.frames.copy() if tracked and batch.frames is not None else None
    residual = residuals(batch)
    iterations = np.zeros(batch.size, dtype=np.int64)
    status = np.full(batch.size, CAP, dtype=np.int8)
    converged = residual <= tolerance
    if converged.all():
        status[:] = CONVERGED
        return LoopOutcome(best_positions, best_frames, iterations, status)
    if uniform:
        converged[:] = False  # the chains already within tolerance iterate with the others
    status[converged] = CONVERGED
    rows = np.flatnonzero(~converged)
    work = batch if rows.size == batch.size else batch.take(rows)
    state = _Tracker(rows, residual[rows], work.positions, work.frames if tracked else None)
    it = 0
    for it in range(1, max_iterations + 1):
        step(work)
        r = residuals(work)
        if polished:
            r = _polish_in_place(work, r, state.current, state.record, track_frames)
        state.current = r
        better = (r < state.best)[:, None, None]
        np.copyto(state.best_positions, work.positions, where=better)
        if state.best_frames is not None and work.frames is not None:
            np.copyto(state.best_frames, work.frames, where=better[..., None])
        if float(r.max()) <= tolerance:
            # Every chain still running converged (the usual way a loop ends).
            status[state.rows] = CONVERGED
            iterations[state.rows] = it
            best_positions[state.rows] = state.best_positions
            if best_frames is not None and state.best_frames is not None:
                best_frames[state.rows] = state.best_frames
            return LoopOutcome(best_positions, best_frames, iterations, status)
        progress = r < state.best * (1.0 - STALL_RELATIVE)
        state.best = np.minimum(state.best, r)
        state.stalls = np.where(progress, 0, state.stalls + 1)
        done = r <= tolerance
        stalled = state.stalls >= STALL_PATIENCE
        finished = stalled if uniform else done | stalled
        if finished.any():
            out = state.rows[finished]
            status[out] = np.where(done[finished], CONVERGED, STALLED)
            iterations[out] = it
            best_positions[out] = state.best_positions[finished]
            if best_frames is not None and state.best_frames is not None:
                best_frames[out] = state.best_frames[finished]
            if finished.all():
                return LoopOutcome(best_positions, best_frames, iterations, status)
            keep = ~finished
            state.keep(keep)
            work = work.take(keep)
    # The cap: the chains still running.
    iterations[state.rows] = it
    best_positions[state.rows] = state.best_positions
    if best_frames is not None and state.best_frames is not None:
        best_frames[state.rows] = state.best_frames
    return LoopOutcome(best_positions, best_frames, iterations, status)


def warm_start(batch: ChainBatch, chord: F64) -> None:
    """Prepare the warm start in place: bend toward the hint (pole / natural roll), pre-bend straight chains.

    A hinted chain is turned rigidly about the root-to-target line (unit ``chord``) so that its bend lies
    in the hint's half-plane. A straight chain (no bend of its own) gets a small arc toward its hint, or
    toward the natural bend when it has none, because FABRIK and CCD cannot leave a straight line by
    themselves.
    """
    p = batch.positions
    if batch.hinted is not None:
        rotate_bend(p, batch.root, chord, batch.hints, batch.hinted)
    if batch.n_bones < 2:
        return
    along = normalize(p[:, -1] - batch.root, chord)
    straight = off_line(p, batch.root, along) <= STRAIGHT * batch.total_length
    if not straight.any():
        return
    hinted = np.zeros(batch.size, dtype=np.bool_) if batch.hinted is None else batch.hinted
    side = np.where(hinted[:, None], batch.hints, 0.0)
    unhinted = straight & ~hinted
    if unhinted.any():
        side[unhinted] = fallback_bends(batch.take(unhinted), chord[unhinted])
    side = normalize(perpendicular_part(side, along), any_perpendicular(along))
    prebend(p, batch.lengths, side, straight)


def solve_chains(problem: ChainProblem, step: Step, track_frames: bool, polished: bool = True) -> SolveResult:
    """Solve every chain of ``problem`` with the iteration ``step`` (the whole solver around the step).

    Chains whose target is out of reach are laid straight toward it (root fixed) without iterating;
    a target on the root returns the current pose; the others iterate from the warm start. Every result
    gets its frames from one final :func:`~solvers.frames.forward_sweep` (roll mode and limits), so the
    residual is measured on the pose the frames produce.
    """
    batch = ChainBatch.from_problem(problem)
    k = batch.size
    tol = problem.tolerance
    total = batch.total_length
    offset = batch.targets - batch.root
    distance = norms(offset)
    on_root = distance <= ZERO_LENGTH * np.maximum(total, 1.0)
    too_far = ~on_root & (distance >= total)
    solve = ~(on_root | too_far)
    every = bool(solve.all())

    if every:
        positions = frames = None
    else:
        positions = problem.positions.copy()
        frames = problem.frames.copy()
    iterations = np.zeros(k, dtype=np.int64)
    status = np.full(k, UNREACHABLE, dtype=np.int8)

    if too_far.any():
        assert positions is not None and frames is not None
        sub = batch.take(too_far)
        aims = straight_toward(sub.root, sub.targets, sub.lengths, sub.keep_directions[:, 0])
        positions[too_far], frames[too_far] = forward_sweep(sub, aims)

    if every or solve.any():
        sub = batch if every else batch.take(solve)
        # Solved chains have their target off the root, so the chord always has a direction.
        chord = (offset / distance[:, None]) if every else (offset[solve] / distance[solve][:, None])
        warm_start(sub, chord)
        if track_frames:
            # Steps that track frames need a consistent, limited pose to start from.
            swept, swept_frames = forward_sweep(sub, sub.positions)
            sub.positions[:] = swept
            sub = replace(sub, frames=swept_frames)
        its, uniform = problem.max_iterations, problem.uniform_iterations
        outcome = iterate(sub, step, tol, its, track_frames, polished, uniform)
        best = outcome.positions
        # The loop may drift the bend plane (FABRIK keeps it only for planar chains); turn it back about
        # the root-to-tip line, which leaves the end effector where it is.
        if sub.hinted is not None:
            along = normalize(best[:, -1] - sub.root, chord)
            rotate_bend(best, sub.root, along, sub.hints, sub.hinted)
        solved_positions, solved_frames = forward_sweep(sub, best)
        if outcome.frames is not None:
            # A step that tracks frames (CCD with limits) turns bones in ways the roll mode would not:
            # sweeping its positions again re-rolls each bone, which turns its child's cone and can move
            # the tip off the target. Its own frames are kept unless the sweep (which also restores the
            # pole's bend plane) does at least as well or reaches the target.
            kept_positions = frame_positions(sub, outcome.frames)
            kept = norms(kept_positions[:, -1] - sub.targets)
            swept = norms(solved_positions[:, -1] - sub.targets)
            worse = swept > np.maximum(kept, tol)
            solved_positions[worse] = kept_positions[worse]
            solved_frames[worse] = outcome.frames[worse]
        # A target nearer than the chain can fold (one bone longer than all the others) is unreachable.
        min_reach = 2.0 * sub.lengths.max(axis=1) - sub.total_length
        too_close = (distance if every else distance[solve]) < min_reach - tol
        solved_status = np.where(too_close, UNREACHABLE, outcome.status)
        if every:
            positions, frames = solved_positions, solved_frames
            iterations = outcome.iterations
            status = solved_status.astype(np.int8)
        else:
            assert positions is not None and frames is not None
            positions[solve], frames[solve] = solved_positions, solved_frames
            iterations[solve] = outcome.iterations
            status[solve] = solved_status
    assert positions is not None and frames is not None

    residual = norms(positions[:, -1] - batch.targets)
    reached = residual <= tol
    if not every:
        # A target on the root has no direction to reach toward: report the current pose as unreachable.
        reached &= ~on_root
        status[on_root] = UNREACHABLE
    status[reached] = CONVERGED
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
