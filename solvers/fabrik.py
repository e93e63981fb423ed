"""FABRIK (Forward And Backward Reaching IK) for batches of chains (seed 000).

One iteration: the backward pass puts the end effector on the target and walks to the root, keeping
every segment's length along the line to the joint's previous place; the forward pass puts the root back
and walks to the tip. Without limits both passes are pure position updates and frames are built once at
the end; with limits the forward pass is :func:`~solvers.frames.forward_sweep`, which applies them.
Everything else (reach check, tolerance, cap, stall, best pose, early exit, poles) is the shared loop's.
"""

from __future__ import annotations

import numpy as np

from .frames import ChainBatch, forward_sweep
from .loop import solve_chains
from .rotations import TINY, matvec, normalize, norms
from .types import F64, ChainProblem, SolveResult


def _reach(d: F64, length: F64, fallback: F64) -> F64:
    """``d`` scaled to ``length``; rows with no direction use the unit ``fallback`` (computed lazily)."""
    n = norms(d)
    ok = n > TINY
    if ok.all():
        return d * (length / n)[:, None]
    return normalize(d, fallback) * length[:, None]


def _fallback_backward(batch: ChainBatch, p: F64, i: int) -> F64:
    # A joint landing on its successor has lost its direction: head back toward the root, or failing
    # that along the bone's current direction reversed.
    keep = -matvec(batch.keep_frames[:, i], batch.directions[:, i])
    return normalize(batch.root - p[:, i + 1], keep)


def backward_pass(batch: ChainBatch) -> None:
    """End effector onto the target, then each joint pulled to its segment length from its successor."""
    p = batch.positions
    lengths = batch.lengths
    p[:, -1] = batch.targets
    for i in range(batch.n_bones - 1, -1, -1):
        d = p[:, i] - p[:, i + 1]
        n = norms(d)
        if (n > TINY).all():
            p[:, i] = p[:, i + 1] + d * (lengths[:, i] / n)[:, None]
        else:
            p[:, i] = p[:, i + 1] + _reach(d, lengths[:, i], _fallback_backward(batch, p, i))


def forward_pass(batch: ChainBatch) -> None:
    """Root back in place, then each joint pulled to its segment length from its predecessor."""
    p = batch.positions
    lengths = batch.lengths
    p[:, 0] = batch.root
    for i in range(batch.n_bones):
        d = p[:, i + 1] - p[:, i]
        n = norms(d)
        if (n > TINY).all():
            p[:, i + 1] = p[:, i] + d * (lengths[:, i] / n)[:, None]
        else:
            keep = matvec(batch.keep_frames[:, i], batch.directions[:, i])
            p[:, i + 1] = p[:, i] + _reach(d, lengths[:, i], normalize(batch.targets - p[:, i], keep))


def fabrik_step(batch: ChainBatch) -> None:
    """One FABRIK iteration on every chain of ``batch`` (positions only; unlimited chains)."""
    backward_pass(batch)
    forward_pass(batch)


def fabrik_step_limited(batch: ChainBatch) -> None:
    """One FABRIK iteration whose forward pass is the shared sweep, applying roll mode and joint limits."""
    backward_pass(batch)
    positions, frames = forward_sweep(batch, batch.positions)
    batch.positions[:] = positions
    assert batch.frames is not None, "the loop gives limited steps a batch with frames"
    batch.frames[:] = frames


def solve_fabrik(problem: ChainProblem) -> SolveResult:
    """Solve K chains with FABRIK.

    Parameters
    ----------
    problem
        The chains, warm-start pose, targets, optional poles and limits, tolerance, iteration cap and
        roll mode.

    Returns
    -------
    SolveResult
        Joint positions and frames, and per chain: iterations, residual, reached and status. Out-of-reach
        targets give a chain laid straight toward the target (status ``UNREACHABLE``); with limits a
        target within reach may still be missed (``reached`` False, as close as the limits allow).

    Examples
    --------
    >>> result = solve_fabrik(problem)  # doctest: +SKIP
    >>> result.positions[:, -1]  # end effectors, within problem.tolerance of the targets when reached
    """
    limited = problem.limits is not None and bool(
        np.any(problem.limits.use_cone) or np.any(problem.limits.use_twist)
    )
    step = fabrik_step_limited if limited else fabrik_step
    return solve_chains(problem, step, track_frames=limited)
