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
from .rotations import TINY, normalize, norms
from .search import refine
from .soft import solve_soft
from .types import F64, ChainProblem, SolveResult


def _reach(d: F64, length: F64, fallback: F64) -> F64:
    """``d`` scaled to ``length``; rows with no direction use the unit ``fallback`` (computed lazily)."""
    n = norms(d)
    ok = n > TINY
    if ok.all():
        return d * (length / n)[:, None]
    return normalize(d, fallback) * length[:, None]


def _careful_backward(batch: ChainBatch, p: F64) -> None:
    # A joint landing on its successor has lost its direction: head back toward the root, or failing
    # that along the bone's current direction reversed.
    lengths = batch.lengths
    for i in range(batch.n_bones - 1, -1, -1):
        d = p[:, i] - p[:, i + 1]
        fallback = normalize(batch.root - p[:, i + 1], -batch.keep_directions[:, i])
        p[:, i] = p[:, i + 1] + _reach(d, lengths[:, i], fallback)


def _careful_forward(batch: ChainBatch, p: F64) -> None:
    # A joint landing on its predecessor: head toward the target, or along the bone's current direction.
    lengths = batch.lengths
    for i in range(batch.n_bones):
        d = p[:, i + 1] - p[:, i]
        fallback = normalize(batch.targets - p[:, i], batch.keep_directions[:, i])
        p[:, i + 1] = p[:, i] + _reach(d, lengths[:, i], fallback)


def _backward(c: F64, lengths: F64, targets: F64) -> bool:
    """The backward pass on coordinate-major joints ``c`` ``(3, N+1, A)``, lengths ``(N, A)``.

    Returns False when some joint landed on its successor (no direction to pull it along).
    """
    distances = np.empty(lengths.shape)
    c[:, -1] = targets.T
    for i in range(lengths.shape[0] - 1, -1, -1):
        d = c[:, i] - c[:, i + 1]
        n = np.hypot(np.hypot(d[0], d[1]), d[2], out=distances[i])
        d *= lengths[i] / np.maximum(n, TINY)
        np.add(c[:, i + 1], d, out=c[:, i])
    return distances.size == 0 or float(distances.min()) > TINY


def _forward(c: F64, lengths: F64, root: F64) -> bool:
    """The forward pass on coordinate-major joints (see :func:`_backward`)."""
    distances = np.empty(lengths.shape)
    c[:, 0] = root.T
    for i in range(lengths.shape[0]):
        d = c[:, i + 1] - c[:, i]
        n = np.hypot(np.hypot(d[0], d[1]), d[2], out=distances[i])
        d *= lengths[i] / np.maximum(n, TINY)
        np.add(c[:, i], d, out=c[:, i + 1])
    return distances.size == 0 or float(distances.min()) > TINY


def backward_pass(batch: ChainBatch) -> None:
    """End effector onto the target, then each joint pulled to its segment length from its successor.

    The pass is inherently sequential, so its loop body is kept to a few numpy calls per bone, on
    coordinate-major copies of the joints (``(3, N+1, A)``: every call then reads and writes contiguous
    rows, which is 2-3x faster for large batches than the strided ``(A, N+1, 3)`` slices). A joint on its
    successor has no direction to be pulled along; that shows in the distances the pass records, and the
    pass is then redone with explicit fallbacks (rare, and deterministic).
    """
    p = batch.positions
    c = np.ascontiguousarray(p.transpose(2, 1, 0))
    if _backward(c, batch.lengths_t, batch.targets):
        p[:] = c.transpose(2, 1, 0)
    else:
        p[:, -1] = batch.targets
        _careful_backward(batch, p)


def forward_pass(batch: ChainBatch) -> None:
    """Root back in place, then each joint pulled to its segment length from its predecessor."""
    p = batch.positions
    c = np.ascontiguousarray(p.transpose(2, 1, 0))
    if _forward(c, batch.lengths_t, batch.root):
        p[:] = c.transpose(2, 1, 0)
    else:
        p[:, 0] = batch.root
        _careful_forward(batch, p)


def fabrik_step(batch: ChainBatch) -> None:
    """One FABRIK iteration on every chain of ``batch`` (positions only; unlimited chains)."""
    p = batch.positions
    c = np.ascontiguousarray(p.transpose(2, 1, 0))
    if _backward(c, batch.lengths_t, batch.targets) and _forward(c, batch.lengths_t, batch.root):
        p[:] = c.transpose(2, 1, 0)
    else:
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
        target within reach may still be missed (``reached`` False, as close as the limits allow). Soft
        chains (``problem.soft``) solve toward their eased target (:mod:`solvers.soft`).

    Examples
    --------
    >>> result = solve_fabrik(problem)  # doctest: +SKIP
    >>> result.positions[:, -1]  # end effectors, within problem.tolerance of the targets when reached
    """
    return solve_soft(problem, _solve_fabrik)


def _solve_fabrik(problem: ChainProblem) -> SolveResult:
    limited = problem.limits is not None and bool(np.any(problem.limits.use_cone) or np.any(problem.limits.use_twist))
    step = fabrik_step_limited if limited else fabrik_step
    return refine(problem, solve_chains(problem, step, track_frames=limited))
