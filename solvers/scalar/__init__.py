"""Scalar chain solvers: two-bone, FABRIK and CCD on ``mathutils``, one chain at a time.

Live posing solves a handful of small chains per update. There the batched numpy solvers pay numpy's
fixed cost (1-3 us per call, hundreds of calls per solve) many times over the arithmetic; these solve
each chain with ``mathutils`` (Blender's C vector module, float32 inside, ~0.05 us per operation) and
build the result arrays once at the end. They take the same :class:`~solvers.types.ChainProblem`, return
the same :class:`~solvers.types.SolveResult` with the same status codes, and follow the batched
solvers step for step (``docs/solver-design.md``): roll modes, poles, the natural bend, joint limits
(the exact cone clamp and twist clamp, :mod:`solvers.scalar._cone`), the polish, stall detection,
restarts under limits and uniform iterations. Float32 sets their floor: tolerances below about 1e-6 of
the chain's size are not reached reliably.

This package imports ``mathutils``, which the ``bpy`` wheel provides only after ``import bpy`` (Blender
always has it). ``solvers`` itself never imports it: import ``solvers.scalar`` explicitly, where
``mathutils`` can be imported.

Above :data:`SCALAR_MAX_CHAINS` chains per call the batched solvers are faster (``bench/scalar.py``).

>>> from solvers.scalar import SCALAR_MAX_CHAINS, solve_fabrik_scalar  # doctest: +SKIP
>>> solver = solve_fabrik_scalar if problem.n_chains <= SCALAR_MAX_CHAINS else solve_fabrik  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ..rotations import matvec, norms, quaternion_to_matrix
from ..types import CONVERGED, STALLED, UNREACHABLE, ZERO_LENGTH, ChainProblem, SolveResult
from . import _cone
from ._chain import (
    BoneLimit,
    Chain,
    Outcome,
    Step,
    fabrik_step,
    fabrik_step_limited,
    make_ccd_step,
    solve_chains,
    two_bone,
)

SCALAR_MAX_CHAINS: Final = 30
"""Up to this many chains per call the scalar solvers are faster than the batched ones (measured by
``bench/scalar.py`` on chains of up to 10 bones; see the README)."""


def _limited(problem: ChainProblem) -> bool:
    lim = problem.limits
    return lim is not None and bool(np.any(lim.use_cone) or np.any(lim.use_twist))


def _chains(problem: ChainProblem, limited: bool) -> list[Chain]:
    """One :class:`~solvers.scalar._chain.Chain` per row of ``problem`` (its arrays read once, as lists)."""
    roots = problem.positions[:, 0].tolist()
    frames = problem.frames.tolist()
    offsets = problem.offsets.tolist()
    # The problem's segment directions in float64 (float32 rounding of them is amplified in the minimal
    # rotation of a segment that turns nearly half a turn).
    keep_directions = matvec(problem.frames, problem.offsets / norms(problem.offsets)[..., None]).tolist()
    ref_local = problem.ref_local.tolist()
    base = problem.base.tolist()
    targets = problem.targets.tolist()
    poles: list[list[float] | None] = [None] * problem.n_chains
    if problem.poles is not None:
        has = ~np.isnan(problem.poles[:, 0])
        poles = [row if ok else None for row, ok in zip(problem.poles.tolist(), has.tolist(), strict=True)]
    limits: list[list[BoneLimit | None] | None] = [None] * problem.n_chains
    if limited and problem.limits is not None:
        lim = problem.limits
        cones, use_cone = lim.cone.tolist(), lim.use_cone.tolist()
        twists, use_twist = lim.twist.tolist(), lim.use_twist.tolist()
        for k in range(problem.n_chains):
            bones: list[BoneLimit | None] = []
            for i in range(problem.n_bones):
                table = _cone.cone_table(tuple(cones[k][i])) if use_cone[k][i] else None
                twist = (twists[k][i][0], twists[k][i][1]) if use_twist[k][i] else None
                bones.append(None if table is None and twist is None else (table, twist))
            if any(b is not None for b in bones):
                limits[k] = bones
    return [
        Chain(
            roots[k],
            targets[k],
            frames[k],
            keep_directions[k],
            offsets[k],
            ref_local[k],
            base[k],
            poles[k],
            limits[k],
            problem.roll_mode,
        )
        for k in range(problem.n_chains)
    ]


def _result(problem: ChainProblem, outcomes: list[Outcome], analytic: bool) -> SolveResult:
    """The :class:`SolveResult` of the solved chains: frames from their quaternions in float64 (exact
    rotations), positions from the frames and offsets joint after joint, residuals and statuses."""
    k, n = problem.n_chains, problem.n_bones
    flat: list[float] = []
    identity = (1.0, 0.0, 0.0, 0.0)
    kept = []
    for row, (frames, _, _) in enumerate(outcomes):
        if frames is None:
            kept.append(row)
            flat.extend(identity * n)
        else:
            for q in frames:
                flat.extend(q[:])
    out_frames = quaternion_to_matrix(np.array(flat, dtype=np.float64).reshape(k, n, 4))
    steps = np.empty((k, n + 1, 3))
    steps[:, 0] = problem.positions[:, 0]
    steps[:, 1:] = matvec(out_frames, problem.offsets)
    positions = np.add.accumulate(steps, axis=1)
    if kept:
        positions[kept] = problem.positions[kept]
        out_frames[kept] = problem.frames[kept]
    residual = norms(positions[:, -1] - problem.targets)
    reached = residual <= problem.tolerance
    if kept:
        reached[kept] = False  # a target on the root has no direction to reach toward
    iterations = np.array([o[1] for o in outcomes], dtype=np.int64)
    if analytic:
        status = np.where(reached, CONVERGED, UNREACHABLE).astype(np.int8)
    else:
        status = np.array([o[2] for o in outcomes], dtype=np.int8)
        status[reached] = CONVERGED
        # A chain the loop called converged can miss by rounding after the final sweep; it is stalled there.
        status[~reached & (status == CONVERGED)] = STALLED
    return SolveResult(positions, out_frames, iterations, residual, reached, status)


def _empty(problem: ChainProblem) -> SolveResult:
    n = problem.n_bones
    return SolveResult(
        np.zeros((0, n + 1, 3)),
        np.zeros((0, n, 3, 3)),
        np.zeros(0, dtype=np.int64),
        np.zeros(0),
        np.zeros(0, dtype=np.bool_),
        np.zeros(0, dtype=np.int8),
    )


def solve_two_bone_scalar(problem: ChainProblem) -> SolveResult:
    """:func:`solvers.two_bone.solve_two_bone`, one chain at a time on ``mathutils``.

    Parameters
    ----------
    problem
        Chains of exactly 2 bones.

    Returns
    -------
    SolveResult
        As the batched solver's: ``iterations`` 0, status ``CONVERGED`` or ``UNREACHABLE``.

    Raises
    ------
    ValueError
        If the chains do not have 2 bones.
    """
    if problem.n_bones != 2:
        raise ValueError(f"two-bone IK needs chains of 2 bones; got {problem.n_bones} (use FABRIK or CCD)")
    if problem.n_chains == 0:
        return _empty(problem)
    chains = _chains(problem, _limited(problem))
    elbows = (problem.positions[:, 1] - problem.positions[:, 0]).tolist()
    outcomes: list[Outcome] = []
    for c, elbow in zip(chains, elbows, strict=True):
        if c.distance <= ZERO_LENGTH * max(c.total, 1.0):
            outcomes.append((None, 0, UNREACHABLE))
        else:
            outcomes.append((two_bone(c, elbow), 0, CONVERGED))
    return _result(problem, outcomes, analytic=True)


def solve_fabrik_scalar(problem: ChainProblem) -> SolveResult:
    """:func:`solvers.fabrik.solve_fabrik`, one chain at a time on ``mathutils``.

    Parameters
    ----------
    problem
        The chains, warm-start pose, targets, optional poles and limits, tolerance, iteration cap and roll
        mode.

    Returns
    -------
    SolveResult
        As the batched solver's.
    """
    if problem.n_chains == 0:
        return _empty(problem)
    limited = _limited(problem)
    return _solve(problem, fabrik_step_limited if limited else fabrik_step, limited, polished=True)


def solve_ccd_scalar(problem: ChainProblem, max_angle: float | None = None) -> SolveResult:
    """:func:`solvers.ccd.solve_ccd`, one chain at a time on ``mathutils``.

    Parameters
    ----------
    problem
        As for :func:`solve_fabrik_scalar`.
    max_angle
        Largest rotation of one joint in one step, in radians; None (default) for no cap (then the polish
        steps are taken, as in the batched solver).

    Returns
    -------
    SolveResult
        As the batched solver's.
    """
    if max_angle is not None and not (np.isfinite(max_angle) and max_angle > 0.0):
        raise ValueError(f"max_angle must be a finite angle > 0 in radians, or None; got {max_angle!r}")
    if problem.n_chains == 0:
        return _empty(problem)
    limited = _limited(problem)
    return _solve(problem, make_ccd_step(max_angle, limited), limited, polished=max_angle is None)


def _solve(problem: ChainProblem, step: Step, limited: bool, polished: bool) -> SolveResult:
    outcomes = solve_chains(
        _chains(problem, limited),
        (problem.positions - problem.positions[:, :1]).tolist(),
        step,
        track=limited,
        polished=polished,
        limited=limited,
        tolerance=problem.tolerance,
        max_iterations=problem.max_iterations,
        uniform=problem.uniform_iterations,
    )
    return _result(problem, outcomes, analytic=False)


__all__ = ["SCALAR_MAX_CHAINS", "solve_ccd_scalar", "solve_fabrik_scalar", "solve_two_bone_scalar"]
