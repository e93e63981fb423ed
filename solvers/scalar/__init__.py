"""Scalar chain solvers: two-bone, FABRIK and CCD on ``mathutils``, one chain at a time.

Live posing solves a handful of small chains per update. There the batched numpy solvers pay numpy's
fixed cost (1-3 us per call, hundreds of calls per solve) many times over the arithmetic; these solve
each chain with ``mathutils`` (Blender's C vector module, float32 inside, ~0.05 us per operation) and
build the result arrays once at the end. They take the same :class:`~solvers.types.ChainProblem`, return
the same :class:`~solvers.types.SolveResult` with the same status codes, and follow the batched
solvers step for step (``docs/design/solvers.md``): roll modes, poles, the natural bend, joint limits
(the exact cone clamp and twist clamp, :mod:`solvers.cone_floats`), the polish, stall detection and
uniform iterations; under limits the chains that stop short go through the batched solvers' own global
stage (:func:`solvers.search.refine`, numpy), so both paths reach alike. Float32 sets their floor:
tolerances below about 1e-6 of the chain's size are not reached reliably.

This package imports ``mathutils``, which the ``bpy`` wheel provides only after ``import bpy`` (Blender
always has it). ``solvers`` itself never imports it: import ``solvers.scalar`` explicitly, where
``mathutils`` can be imported.

Above :data:`SCALAR_MAX_CHAINS` chains per call (:data:`SCALAR_MAX_TWO_BONE_CHAINS` for two-bone) the
batched solvers are faster (``bench/scalar.py``).

>>> from solvers.scalar import SCALAR_MAX_CHAINS, solve_fabrik_scalar  # doctest: +SKIP
>>> solver = solve_fabrik_scalar if problem.n_chains <= SCALAR_MAX_CHAINS else solve_fabrik  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from .. import cone_floats as _cone
from ..limits import JointLimits
from ..rotations import matvec, norms, quaternion_to_matrix
from ..search import refine
from ..soft import solve_soft
from ..two_bone import elbow_moved, settle
from ..types import CONVERGED, F64, STALLED, UNREACHABLE, ZERO_LENGTH, ChainProblem, SolveResult
from ._chain import (
    BoneLimit,
    Chain,
    Outcome,
    Step,
    aimed_elbow,
    fabrik_step,
    fabrik_step_limited,
    make_ccd_step,
    solve_chains,
    sweep,
)

SCALAR_MAX_CHAINS: Final = 24
"""Up to this many chains per call, the scalar FABRIK and CCD are faster than the batched ones.

Measured by ``bench/scalar.py`` (2 shared cores, the default tolerance and cap, random reachable targets):
without limits the batched solvers catch up at about 21-28 chains of 10 bones (FABRIK), 37 of 4 (FABRIK)
and 32-49 of 8 (CCD); with joint limits the scalar ones were faster at every size measured (up to 100).
"""

SCALAR_MAX_TWO_BONE_CHAINS: Final = 6
"""The same for two-bone, whose batched solver is a handful of numpy calls per batch: the crossover is at
about 7-8 chains without limits and about 20 with them."""


def _limited(problem: ChainProblem) -> bool:
    lim = problem.limits
    return lim is not None and bool(np.any(lim.use_cone) or np.any(lim.use_twist))


# Up to this many bones in all, the per-bone input and output arithmetic runs on Python floats (about a us
# per bone); above, in numpy (a few numpy calls, tens of us whatever the size).
_FEW_BONES: Final = 24


def _direction(frame: list[list[float]], offset: list[float]) -> list[float]:
    """``frame @ offset / |offset|`` on Python floats."""
    ox, oy, oz = offset
    inv = 1.0 / math.sqrt(ox * ox + oy * oy + oz * oz)
    return [(r[0] * ox + r[1] * oy + r[2] * oz) * inv for r in frame]


class _Rows:
    """The problem's ``ref_local``, ``base`` and root frames as nested lists, read on first use (most solves
    in 'KEEP' mode without limits never need them)."""

    def __init__(self, problem: ChainProblem) -> None:
        self._problem = problem
        self._rest: tuple[list[list[list[list[float]]]], list[list[list[float]]]] | None = None
        self._keep: list[list[list[float]]] | None = None

    def rest(self, k: int) -> tuple[list[list[list[float]]], list[list[float]]]:
        if self._rest is None:
            self._rest = (self._problem.ref_local.tolist(), self._problem.base.tolist())
        return self._rest[0][k], self._rest[1][k]

    def keep(self, k: int) -> list[list[float]]:
        if self._keep is None:
            self._keep = self._problem.frames[:, 0].tolist()
        return self._keep[k]


def chain_limits(lim: JointLimits) -> list[list[BoneLimit | None] | None]:
    """Each chain's per-bone limits as the kernels take them (cone tables and twist ranges), None for a
    chain with no limited bone."""
    cones, use_cone = lim.cone.tolist(), lim.use_cone.tolist()
    twists, use_twist = lim.twist.tolist(), lim.use_twist.tolist()
    out: list[list[BoneLimit | None] | None] = []
    for k in range(len(cones)):
        bones: list[BoneLimit | None] = []
        for i in range(len(cones[k])):
            table = _cone.cone_table(tuple(cones[k][i])) if use_cone[k][i] else None
            twist = (twists[k][i][0], twists[k][i][1]) if use_twist[k][i] else None
            bones.append(None if table is None and twist is None else (table, twist))
        out.append(bones if any(b is not None for b in bones) else None)
    return out


def _chains(problem: ChainProblem, limited: bool) -> list[Chain]:
    """One :class:`~solvers.scalar._chain.Chain` per row of ``problem`` (its arrays read once, as lists)."""
    roots = problem.positions[:, 0].tolist()
    frames = problem.frames.tolist()
    offsets = problem.offsets.tolist()
    # The problem's segment directions in float64 (float32 rounding of them is amplified in the minimal
    # rotation of a segment that turns nearly half a turn): by numpy for many bones, else on Python floats.
    if problem.n_chains * problem.n_bones > _FEW_BONES:
        keep_directions = matvec(problem.frames, problem.offsets / norms(problem.offsets)[..., None]).tolist()
    else:
        keep_directions = [
            [_direction(f, o) for f, o in zip(chain_frames, chain_offsets, strict=True)]
            for chain_frames, chain_offsets in zip(frames, offsets, strict=True)
        ]
    targets = problem.targets.tolist()
    poles: list[list[float] | None] = [None] * problem.n_chains
    if problem.poles is not None:
        has = ~np.isnan(problem.poles[:, 0])
        poles = [row if ok else None for row, ok in zip(problem.poles.tolist(), has.tolist(), strict=True)]
    limits: list[list[BoneLimit | None] | None] = [None] * problem.n_chains
    if limited and problem.limits is not None:
        limits = chain_limits(problem.limits)
    rows = _Rows(problem)
    mode = problem.roll_mode
    need_ref = limited or mode != "KEEP"
    return [
        Chain(
            rows,
            k,
            roots[k],
            targets[k],
            frames[k],
            keep_directions[k],
            offsets[k],
            poles[k],
            limits[k],
            mode,
            need_ref,
        )
        for k in range(problem.n_chains)
    ]


def _frames_positions(problem: ChainProblem, quaternions: list[tuple[float, ...]]) -> tuple[F64, F64]:
    """Frames ``(K, N, 3, 3)`` of unit quaternions (rows of ``(w, x, y, z)``, chain after chain) in float64,
    exact rotations, and positions from the roots by ``head + frame @ offset`` joint after joint."""
    k, n = problem.n_chains, problem.n_bones
    if k * n > _FEW_BONES:
        frames = quaternion_to_matrix(np.array(quaternions, dtype=np.float64).reshape(k, n, 4))
        steps = np.empty((k, n + 1, 3))
        steps[:, 0] = problem.positions[:, 0]
        steps[:, 1:] = matvec(frames, problem.offsets)
        return frames, np.add.accumulate(steps, axis=1)
    offsets = problem.offsets.tolist()
    roots = problem.positions[:, 0].tolist()
    frame_rows = []
    joints = []
    it = iter(quaternions)
    for c in range(k):
        hx, hy, hz = roots[c]
        joints.append((hx, hy, hz))
        for ox, oy, oz in offsets[c]:
            w, x, y, z = next(it)
            s = 2.0 / (w * w + x * x + y * y + z * z)
            wx, wy, wz = s * w * x, s * w * y, s * w * z
            xx, xy, xz = s * x * x, s * x * y, s * x * z
            yy, yz, zz = s * y * y, s * y * z, s * z * z
            r0 = (1.0 - (yy + zz), xy - wz, xz + wy)
            r1 = (xy + wz, 1.0 - (xx + zz), yz - wx)
            r2 = (xz - wy, yz + wx, 1.0 - (xx + yy))
            frame_rows.append((r0, r1, r2))
            hx += r0[0] * ox + r0[1] * oy + r0[2] * oz
            hy += r1[0] * ox + r1[1] * oy + r1[2] * oz
            hz += r2[0] * ox + r2[1] * oy + r2[2] * oz
            joints.append((hx, hy, hz))
    return np.array(frame_rows).reshape(k, n, 3, 3), np.array(joints).reshape(k, n + 1, 3)


def _result(problem: ChainProblem, outcomes: list[Outcome], analytic: bool) -> SolveResult:
    """The :class:`SolveResult` of the solved chains: frames from their quaternions in float64 (exact
    rotations), positions from the frames and offsets joint after joint, residuals and statuses."""
    n = problem.n_bones
    quaternions: list[tuple[float, ...]] = []
    identity = (1.0, 0.0, 0.0, 0.0)
    kept = []
    for row, (frames, _, _) in enumerate(outcomes):
        if frames is None:
            kept.append(row)
            quaternions.extend([identity] * n)
        else:
            quaternions.extend([q[:] for q in frames])
    out_frames, positions = _frames_positions(problem, quaternions)
    if kept:
        positions[kept] = problem.positions[kept]
        out_frames[kept] = problem.frames[kept]
    tips = positions[:, -1].tolist()
    residual = [math.dist(tip, target) for tip, target in zip(tips, problem.targets.tolist(), strict=True)]
    reached = [r <= problem.tolerance for r in residual]
    for row in kept:
        reached[row] = False  # a target on the root has no direction to reach toward
    status = []
    for hit, (_, _, code) in zip(reached, outcomes, strict=True):
        if analytic:
            status.append(CONVERGED if hit else UNREACHABLE)
        else:
            # A chain the loop called converged can miss by rounding after the final sweep: stalled there.
            status.append(CONVERGED if hit else (STALLED if code == CONVERGED else code))
    return SolveResult(
        positions,
        out_frames,
        np.array([o[1] for o in outcomes], dtype=np.int64),
        np.array(residual, dtype=np.float64),
        np.array(reached, dtype=np.bool_),
        np.array(status, dtype=np.int8),
    )


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
    # Under limits, the chains the analytic pose misses take the batched closed form (`two_bone.settle`), so
    # both solvers decide alike at the limits' boundaries (the live program uses the scalar closed form,
    # `_closed`, and agrees with this to float32 away from those boundaries).
    return solve_soft(problem, lambda p: refine(p, *settle(p, _solve_two_bone(p))))


def _solve_two_bone(problem: ChainProblem) -> SolveResult:
    chains = _chains(problem, _limited(problem))
    elbows = (problem.positions[:, 1] - problem.positions[:, 0]).tolist()
    outcomes: list[Outcome] = []
    aimed = np.full((len(chains), 3), np.nan)  # relative to the root; NaN (never "moved") for a target on it
    for row, (c, elbow) in enumerate(zip(chains, elbows, strict=True)):
        if c.distance <= ZERO_LENGTH * max(c.total, 1.0):
            outcomes.append((None, 0, UNREACHABLE))
        else:
            aim = aimed_elbow(c, elbow)
            outcomes.append((sweep(c, [c.root, aim, c.target])[1], 0, CONVERGED))
            aimed[row] = (aim.x, aim.y, aim.z)
    result = _result(problem, outcomes, analytic=True)
    # As the batched solver: a pose whose limits moved the elbow does not count as reaching.
    moved = result.reached & elbow_moved(result.positions[:, 1] - result.positions[:, 0], aimed, problem.tolerance)
    result.reached[moved] = False
    result.status[moved] = UNREACHABLE
    return result


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
    step = fabrik_step_limited if limited else fabrik_step
    return solve_soft(problem, lambda p: _solve(p, step, limited, polished=True))


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
    step = make_ccd_step(max_angle, limited)
    return solve_soft(problem, lambda p: _solve(p, step, limited, polished=max_angle is None))


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
    result = _result(problem, outcomes, analytic=False)
    # The global stage under limits is numpy's, shared with the batched solvers (so both reach alike).
    return refine(problem, result) if polished else result


__all__ = [
    "SCALAR_MAX_CHAINS",
    "SCALAR_MAX_TWO_BONE_CHAINS",
    "chain_limits",
    "solve_ccd_scalar",
    "solve_fabrik_scalar",
    "solve_two_bone_scalar",
]
