"""Single chains solved in batches: the chains of one level that share a solver and a length, over every
frame, in one solver call (scalar kernels for a few chains of one frame, numpy batches otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from ..solvers import ccd, fabrik, two_bone
from ..solvers.limits import JointLimits
from ..solvers.types import ChainProblem, SolveResult
from .checks import cached_limits
from .kinematics import Space, Work, chain_arrays
from .messages import outcomes_of
from .model import F64, ChainPlan, Group, Inputs, RigReport, Snapshot
from .stretch import chain_settings, rescale, stretch_chains

SOLVERS: dict[str, Callable[[ChainProblem], SolveResult]] = {
    "FABRIK": fabrik.solve_fabrik,
    "CCD": ccd.solve_ccd,
    "TWO_BONE": two_bone.solve_two_bone,
}


# The scalar kernels (mathutils) for a few chains of one frame, the live case; the numpy batches above their
# measured thresholds and always for several frames (a bake). Without mathutils (the unit tier, plain
# Python) only the batches exist.
SCALAR: dict[str, tuple[Callable[[ChainProblem], SolveResult], int]] = {}
try:
    from ..solvers import scalar as _scalar
except ImportError:  # pragma: no cover - depends on whether mathutils is importable
    pass
else:
    SCALAR.update(
        FABRIK=(_scalar.solve_fabrik_scalar, _scalar.SCALAR_MAX_CHAINS),
        CCD=(_scalar.solve_ccd_scalar, _scalar.SCALAR_MAX_CHAINS),
        TWO_BONE=(_scalar.solve_two_bone_scalar, _scalar.SCALAR_MAX_TWO_BONE_CHAINS),
    )


def solver_for(name: str, rows: int, frames: int = 1, cap: float = 0.0) -> Callable[[ChainProblem], SolveResult]:
    """The solver for `rows` chain rows of one kind over `frames` frames: scalar for a few rows of one frame,
    else the batch. `cap`: CCD's largest turn of a joint per iteration (radians; 0: none)."""
    scalar = SCALAR.get(name) if frames == 1 else None
    solver = scalar[0] if scalar is not None and rows <= scalar[1] else SOLVERS[name]
    if cap > 0.0 and name == "CCD":
        capped: Callable[..., SolveResult] = solver  # both CCD solvers take `max_angle`
        return partial(capped, max_angle=cap)
    return solver


def tile_limits(limits: JointLimits | None, f: int) -> JointLimits | None:
    """The same limits for every frame: (K, N) -> (F*K, N), frame-major like the chain arrays."""
    if limits is None or f == 1:
        return limits
    return JointLimits(
        cone=np.tile(limits.cone, (f, 1, 1)),
        use_cone=np.tile(limits.use_cone, (f, 1)),
        twist=np.tile(limits.twist, (f, 1, 1)),
        use_twist=np.tile(limits.use_twist, (f, 1)),
    )


def turn_poles(
    work: Work, chains: list[ChainPlan], turned: list[int], goals: F64, poles: F64, angles: dict[int, F64]
) -> F64:
    """Poles (F, K, 3) of the chains `turned` rotated by their pole angle about the root -> target axis.

    Turning the pole about that axis turns the bend plane by the same angle (the solvers bend toward the
    pole's side of the root -> target line), which is what a chain's Pole Angle means.
    """
    out = poles.copy()
    for k in turned:
        c = chains[k]
        out[:, k] = turn_about(poles[:, k], work.heads()[:, c.bones[0]], goals[:, k], angles[c.index])
    return out


def turn_about(points: F64, root: F64, goal: F64, theta: F64) -> F64:
    """(F, 3) `points` turned by `theta` (F,) about the `root` -> `goal` axis (F, 3 each)."""
    axis = goal - root
    norm = np.linalg.norm(axis, axis=1, keepdims=True)
    axis = np.where(norm > 1e-12, axis / np.maximum(norm, 1e-300), 0.0)
    v = points - root
    cos, sin = np.cos(theta)[:, None], np.sin(theta)[:, None]
    # Rodrigues: v cos + (a x v) sin + a (a . v)(1 - cos); a zero axis (target on the root) leaves v.
    along = np.einsum("fi,fi->f", axis, v)[:, None] * axis
    out: F64 = root + v * cos + np.cross(axis, v) * sin + along * (1.0 - cos)
    return out


def with_local_targets(work: Work, inputs: Inputs, groups: Sequence[Group]) -> Inputs:
    """`inputs` with the target and pole bones of the rig itself (of `groups`) taken from the working pose.

    A control bone that hangs below a chain solved at an earlier level moves with that chain's solution:
    the working pose after `propagate` holds where Blender will put it once the solved pose is written.
    """
    targets, poles = inputs.targets, inputs.poles
    world = inputs.world
    for g in groups:
        for c in g.chains:
            if c.target_local >= 0:
                if targets is inputs.targets:
                    targets = dict(targets)
                targets[c.index] = world @ work.matrices[:, c.target_local]
            if c.pole_local >= 0 and c.pole is not None:
                if poles is inputs.poles:
                    poles = dict(poles)
                poles[c.index] = world @ work.matrices[:, c.pole_local]
    if targets is inputs.targets and poles is inputs.poles:
        return inputs
    return replace(inputs, targets=targets, poles=poles, objects=None)


def solve_batch(
    snap: Snapshot,
    work: Work,
    solver: str,
    chains: list[ChainPlan],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool = False,
) -> None:
    settings = snap.settings
    f = work.matrices.shape[0]
    goals = space.points_of(np.stack([inputs.targets[c.index] for c in chains], axis=1))  # (F, K, 3)
    poles: F64 | None = None  # (F, K, 3), NaN for the chains without a pole
    if any(c.pole is not None for c in chains):
        nan = np.full((f, 4, 4), np.nan)
        poles = space.points_of(np.stack([inputs.poles[c.index] if c.pole is not None else nan for c in chains], 1))
        turned = [k for k, c in enumerate(chains) if c.index in inputs.pole_angles]
        if turned:
            poles = turn_poles(work, chains, turned, goals, poles, inputs.pole_angles)
    with_rot = chains[0].use_target_rotation  # batches never mix (see `core.solve._solve_levels`)
    rows = [c.bones[:-1] if with_rot else c.bones for c in chains]
    tips = [c.bones[-1] for c in chains]
    aims = goals
    if with_rot:
        # The tip takes the target's orientation; the bones above reach for where the tip's head must be.
        tip_rot = np.stack([space.rotations(inputs.targets[c.index]) for c in chains], axis=1)  # (F,K,3,3)
        tip_heads = work.heads()[:, tips]
        tip_off = np.einsum("fkji,fkj->fki", work.rot[:, tips], work.tails(tips) - tip_heads)
        aims = goals - np.einsum("fkij,fkj->fki", tip_rot, tip_off)
    k = len(chains)
    result: SolveResult | None = None
    factors: F64 | None = None  # (F, K) how much each chain's bones were lengthened (stretching chains only)
    if rows[0]:
        n = len(rows[0])
        positions, frames, offsets, ref_local, base = chain_arrays(work, rows, tips if with_rot else None)
        soft, limit = chain_settings(inputs, chains, f)
        rho: F64 | None = None
        divisors: F64 | None = None
        if work.owned and any(c.index in work.owned for c in chains):
            stretched = stretch_chains(work, chains, positions, frames, offsets, aims, soft, limit)
            positions, offsets, rho, factors, divisors = stretched
        limits = tile_limits(cached_limits(snap, rows), f)
        tolerance = float(settings.tolerance) / float(space.scale.min())
        if f == 1 and rho is None and not soft.any():
            # One live frame: every array was built here from checked inputs (`check_inputs`, the limit and
            # scale checks), and the full problem checks would cost as much as the scalar solve itself.
            problem = ChainProblem.trusted(
                positions,
                frames,
                offsets,
                ref_local,
                base,
                aims.reshape(k, 3),
                poles.reshape(k, 3) if poles is not None else None,
                limits,
                tolerance,
                int(settings.max_iterations),
                settings.roll_mode,
            )
        else:
            problem = ChainProblem(
                positions=positions,
                frames=frames,
                offsets=offsets,
                ref_local=ref_local,
                base=base,
                targets=aims.reshape(f * k, 3),
                poles=poles.reshape(f * k, 3) if poles is not None else None,
                limits=limits,
                tolerance=tolerance,
                max_iterations=int(settings.max_iterations),
                roll_mode=settings.roll_mode,
                # A bake: redundant chains stopping each frame as soon as it is within tolerance land on
                # different solutions (2 iterations here, 3 there) and the keys jitter; every frame running
                # until the slowest converges keeps the result a continuous function of its target.
                uniform_iterations=smooth and f > 1,
                soft=soft.reshape(f * k) if soft.any() else None,
                stretch=rho.reshape(f * k) if rho is not None else None,
                # Every frame here comes from `convert.rotation_parts` (Gram-Schmidt in float64), a solver's
                # output, or products of those: rotations to float64 rounding, so the solver need not re-check.
                exact_rotations=True,
            )
        result = solver_for(solver, k, f, chains[0].ccd_max_step)(problem)  # batches share a cap (`_solve_levels`)
        flat = [b for row in rows for b in row]
        if factors is not None and divisors is not None:
            rescale(work, chains, rows, factors, divisors)
        work.set_bones(flat, result.frames.reshape(f, k * n, 3, 3), result.positions[:, :-1].reshape(f, k * n, 3))
        if with_rot:
            tip_heads = result.positions[:, -1].reshape(f, k, 3)
    if with_rot:
        work.set_bones(tips, tip_rot, tip_heads)
    residuals = np.linalg.norm(work.tails(tips) - goals, axis=2) * space.scale[:, None]  # (F, K) world units
    if result is not None:
        its, codes = result.iterations.reshape(f, k).astype(np.float64), result.status.reshape(f, k)
    else:
        its, codes = np.zeros((f, k)), np.zeros((f, k), dtype=np.int8)  # code 0: CONVERGED
    tip_names = [work.sk.names[b] for b in tips]
    # A one-bone chain with Use Target Rotation has no bone left to solve (`result` is None): its own message.
    outcomes = outcomes_of(residuals, its, codes, float(settings.tolerance), tip_names, result is None, factors)
    for c, outcome in zip(chains, outcomes, strict=True):
        report.outcomes[c.index] = outcome
