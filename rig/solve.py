"""Solve an armature's chains: read arrays, call the solvers, write rotations back (once).

The data flows one way: Blender data -> arrays (`armature`, `chains`) -> `solvers` -> arrays -> Blender.
A solve works on a stack of F frames at once (live solving: F = 1; baking: every baked frame), and chains
of one level that share a solver and a length are batched into one solver call over all frames. A chain
whose root hangs below another chain's bones is solved after it, on a pose derived by forward kinematics
from our own arrays, never by asking Blender to re-evaluate (unsafe inside handlers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

import bpy
import numpy as np
from numpy.typing import NDArray

from ..solvers import ccd, fabrik, tree, two_bone
from ..solvers.limits import JointLimits
from ..solvers.types import STATUS_NAMES, ChainProblem, SolveResult, TreeProblem
from . import armature, convert
from .chains import ChainPlan, Group, Plan, build_plan, rig_problem, usable
from .props import bone_limits, rig_settings

F64 = NDArray[np.float64]

SOLVERS: dict[str, Callable[[ChainProblem], SolveResult]] = {
    "FABRIK": fabrik.solve_fabrik,
    "CCD": ccd.solve_ccd,
    "TWO_BONE": two_bone.solve_two_bone,
}


@dataclass
class ChainOutcome:
    """One chain's result; with several frames, the worst frame's residual and the mean iterations."""

    valid: bool
    message: str
    iterations: float = 0.0
    residual: float = 0.0  # world units, worst frame
    reached: bool = False
    status: str = ""
    residuals: F64 | None = None  # (F,) world units, per frame
    iteration_counts: F64 | None = None  # (F,)


@dataclass
class RigReport:
    """What one solve did, per chain index of `obj.reach_ik.chains` (disabled chains are absent)."""

    outcomes: dict[int, ChainOutcome] = field(default_factory=dict)
    rig_error: str | None = None


@dataclass
class Inputs:
    """Everything a solve reads from Blender, for F frames (stacked along axis 0)."""

    pose: F64  # (F,B,4,4) evaluated pose matrices, armature space
    world: F64  # (F,4,4) the armature's world matrix
    targets: dict[int, F64]  # chain index -> (F,4,4) world matrices
    poles: dict[int, F64]  # chain index -> (F,4,4) world matrices (chains with a pole only)
    # Only for start_from='REST': (F,B,4,4) matrix_basis, (F,B,3) location and scale channels.
    basis: F64 | None = None
    location: F64 | None = None
    scale: F64 | None = None
    # (F,M,4,4) every target and pole matrix when read together (`targets`/`poles` are views of it), or None.
    objects: F64 | None = None
    # True when pose, world, basis, location and scale are the same in every frame (the bake's fast read:
    # the armature is not animated). Work on them is then done once and repeated.
    static: bool = False


def read_inputs(
    obj: bpy.types.Object, plan: Plan, pose_now: F64 | None = None, world_now: armature.WorldMatrices | None = None
) -> Inputs:
    """The current (evaluated) inputs of every planned chain, as one frame (`pose_now`, `world_now`: already read)."""
    pose = (armature.pose_matrices(obj) if pose_now is None else pose_now)[None]
    chains = [c for g in plan.groups for c in g.chains]
    with_pole = [c for c in chains if c.pole is not None]
    world_mats = armature.WorldMatrices() if world_now is None else world_now
    mats = world_mats.of([obj] + [c.target for c in chains] + [c.pole for c in with_pole])  # type: ignore[misc]
    objects = mats[None, 1:]
    targets = {c.index: objects[:, k] for k, c in enumerate(chains)}
    poles = {c.index: objects[:, len(chains) + k] for k, c in enumerate(with_pole)}
    inputs = Inputs(pose, mats[None, 0], targets, poles, objects=objects)
    if rig_settings(obj).start_from == "REST":
        basis, loc, scale = armature.basis_parts(obj)
        inputs.basis, inputs.location, inputs.scale = basis[None], loc[None], scale[None]
    return inputs


def stack_inputs(frames: Sequence[Inputs]) -> Inputs:
    def cat(name: str) -> F64 | None:
        parts = [getattr(f, name) for f in frames]
        return None if parts[0] is None else np.concatenate(parts)

    return Inputs(
        pose=np.concatenate([f.pose for f in frames]),
        world=np.concatenate([f.world for f in frames]),
        targets={k: np.concatenate([f.targets[k] for f in frames]) for k in frames[0].targets},
        poles={k: np.concatenate([f.poles[k] for f in frames]) for k in frames[0].poles},
        basis=cat("basis"),
        location=cat("location"),
        scale=cat("scale"),
    )


def rest_start_pose(sk: armature.Skeleton, plan: Plan, inputs: Inputs) -> F64:
    """The pose a REST-start solve begins from, independent of the chain bones' current rotations.

    Chain bones get their rest orientation (keeping their location and scale channels) and everything
    below them follows by forward kinematics from rest data and channels. Nothing here depends on how the
    chain bones are rotated now, so re-baking over earlier baked keys gives bit-identical results.
    """
    assert inputs.basis is not None and inputs.location is not None and inputs.scale is not None
    pose = inputs.pose.copy()
    chain_bones = {b for g in plan.groups for b in g.bones}
    affected = np.zeros(len(sk.names), dtype=bool)
    for b in np.argsort(sk.depth, kind="stable"):
        p = int(sk.parent[b])
        affected[b] = int(b) in chain_bones or (p >= 0 and affected[p])
    local = inputs.basis.copy()
    chain_idx = np.array(sorted(chain_bones), dtype=np.int64)
    # Chain bones: translation and scale from the channels, rotation dropped (rest orientation).
    ts = np.zeros((inputs.pose.shape[0], len(chain_idx), 4, 4))
    ts[:, :, 0, 0], ts[:, :, 1, 1], ts[:, :, 2, 2] = (inputs.scale[:, chain_idx, i] for i in range(3))
    ts[:, :, :3, 3] = inputs.location[:, chain_idx]
    ts[:, :, 3, 3] = 1.0
    local[:, chain_idx] = ts
    for d in range(int(sk.depth.max(initial=0)) + 1):
        idx = np.flatnonzero(affected & (sk.depth == d))
        if idx.size == 0:
            continue
        par = sk.parent[idx]
        rel = sk.rest_rel4[idx][None] @ local[:, idx]
        roots = par < 0
        if roots.any():
            pose[:, idx[roots]] = rel[:, roots]
        if (~roots).any():
            pose[:, idx[~roots]] = pose[:, par[~roots]] @ rel[:, ~roots]
    return pose


def _broken_rows(mats: F64) -> NDArray[np.bool_]:
    """(..., 4, 4) -> (...): rows that are not `usable` (NaN, inf, or Blender's clamped FLT_MAX)."""
    flat = mats.reshape(*mats.shape[:-2], -1)
    # |x| < 1e30 is False for NaN too, so one comparison covers all three.
    fine = (np.abs(flat) < 1e30).all(axis=-1)
    return np.asarray(~fine, dtype=np.bool_)  # an array also for one matrix (numpy 2 stubs: bool | array)


def check_inputs(obj: bpy.types.Object, plan: Plan, inputs: Inputs) -> str | None:
    """A message naming the first broken transform (NaN, inf), or None. Frame 0 is the first of the stack."""
    pose, world = inputs.pose, inputs.world
    # Whole-array tests first (one pass each); the per-matrix ones only run to name what is broken.
    if not usable(pose):
        f, b = (int(v) for v in np.argwhere(_broken_rows(pose))[0])
        name = obj.pose.bones[b].name
        return f"{_at(f, inputs)}bone '{name}' has a NaN or infinite pose: reset its transform (Alt G/R/S)"
    if not usable(world):
        return f"{_at(int(np.flatnonzero(_broken_rows(world))[0]), inputs)}'{obj.name}' has a NaN or infinite transform"
    stacked = inputs.objects
    if stacked is None and (inputs.targets or inputs.poles):
        stacked = np.concatenate([*inputs.targets.values(), *inputs.poles.values()])
    if stacked is not None and usable(stacked):
        return None
    by_index = {c.index: c for g in plan.groups for c in g.chains}
    for role, mats in (("target", inputs.targets), ("pole", inputs.poles)):
        for i, m in mats.items():
            bad = _broken_rows(m)
            if bad.any():
                f = int(np.flatnonzero(bad)[0])
                ob = by_index[i].target if role == "target" else by_index[i].pole
                name = ob.name if ob is not None else "?"
                return f"{_at(f, inputs)}the {role} '{name}' has a NaN or infinite transform"
    return None


def _at(f: int, inputs: Inputs) -> str:
    return "" if inputs.world.shape[0] == 1 else f"frame #{f}: "


def _limits_for(obj: bpy.types.Object, sk: armature.Skeleton, bone_rows: list[list[int]]) -> JointLimits | None:
    """Per-bone cone/twist limits for (K, N) bones, or None when no bone in the batch is limited."""
    pose_bones = obj.pose.bones
    k, n = len(bone_rows), len(bone_rows[0])
    cone = np.zeros((k, n, 4))
    use_cone = np.zeros((k, n), dtype=bool)
    twist = np.zeros((k, n, 2))
    use_twist = np.zeros((k, n), dtype=bool)
    any_limit = False
    for r, row in enumerate(bone_rows):
        for c, b in enumerate(row):
            lim = bone_limits(pose_bones[sk.names[b]])
            if lim.use_cone:
                use_cone[r, c] = True
                cone[r, c] = (lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right)
                any_limit = True
            if lim.use_twist:
                use_twist[r, c] = True
                twist[r, c] = sorted((float(lim.twist_min), float(lim.twist_max)))
                any_limit = True
    if not any_limit:
        return None
    return JointLimits(cone=cone, use_cone=use_cone, twist=twist, use_twist=use_twist)


def _cached_limits(
    obj: bpy.types.Object, sk: armature.Skeleton, plan: Plan, rows: list[list[int]]
) -> JointLimits | None:
    """Limits for these bone rows, read once per plan (a limit change bumps the settings version)."""
    key = tuple(tuple(r) for r in rows)
    if key not in plan.limits:
        plan.limits[key] = _limits_for(obj, sk, rows)
    return plan.limits[key]  # type: ignore[return-value]


def _tile_limits(limits: JointLimits | None, f: int) -> JointLimits | None:
    """The same limits for every frame: (K, N) -> (F*K, N), frame-major like the chain arrays."""
    if limits is None or f == 1:
        return limits
    return JointLimits(
        cone=np.tile(limits.cone, (f, 1, 1)),
        use_cone=np.tile(limits.use_cone, (f, 1)),
        twist=np.tile(limits.twist, (f, 1, 1)),
        use_twist=np.tile(limits.use_twist, (f, 1)),
    )


@dataclass
class _Work:
    """The working pose over F frames: armature-space matrices we update as chains are solved (float64)."""

    sk: armature.Skeleton
    original: F64  # (F,B,4,4) as read
    matrices: F64  # (F,B,4,4), updated by our solutions
    rot: F64  # (F,B,3,3) rotation parts
    rot0: F64  # (F,B,3,3) rotation parts of `original`
    scale: F64  # (F,B,3) column scales, kept as they are
    lengths: F64  # (B,) rest bone lengths
    solved: set[int] = field(default_factory=set)  # bones set by a solve (their rotations are in `rot`)

    def tails(self, bones: Sequence[int]) -> F64:
        """(F, len(bones), 3) tail positions."""
        b = np.asarray(bones, dtype=np.int64)
        # Index the column views, not `matrices[:, b, :3, 3]`: numpy would move the indexed axes first.
        y = self.matrices[..., :3, 1][:, b] * self.lengths[b][None, :, None]
        return self.heads()[:, b] + y

    def heads(self) -> F64:
        """(F, B, 3) view of the head positions."""
        return self.matrices[..., :3, 3]

    def parent_rot(self, bones: Sequence[int] | NDArray[np.int64]) -> F64:
        """(F, len(bones), 3, 3) parent rotations (identity for roots)."""
        par = self.sk.parent[np.asarray(bones, dtype=np.int64)]
        out: F64 = self.rot[:, par]  # a root's -1 picks the last bone: replaced just below
        roots = par < 0
        if roots.any():
            out[:, roots] = np.eye(3)
        return out

    def set_bones(self, bones: Sequence[int], frames: F64, heads: F64) -> None:
        """frames (F, n, 3, 3), heads (F, n, 3) for `bones`."""
        b = np.asarray(bones, dtype=np.int64)
        self.rot[:, b] = frames
        self.matrices[:, b, :3, :3] = frames * self.scale[:, b, None, :]
        self.heads()[:, b] = heads
        self.solved.update(bones)

    def propagate(self) -> None:
        """Carry unsolved bones below solved ones along with their parents (forward kinematics on our arrays).

        Only descendants of solved bones can have moved; everything else keeps the pose Blender evaluated.
        Each carried bone keeps its transform relative to its parent as Blender evaluated it, so a whole
        subtree below its nearest solved ancestor `a` moves rigidly with `a`: by D = new_a @ old_a^-1.
        Solved bones keep their scale, so D is a rotation plus a translation (no matrix inverse), and one
        product per carried bone does it, whatever the depth.
        """
        sk = self.sk
        solved = self.solved
        anchor = np.full(len(sk.names), -1, dtype=np.int64)  # nearest solved ancestor of a carried bone
        for b in np.argsort(sk.depth, kind="stable").tolist():
            p = int(sk.parent[b])
            if p >= 0 and b not in solved:
                anchor[b] = p if p in solved else anchor[p]
        every = np.flatnonzero(anchor >= 0)
        if every.size == 0:
            return
        anchors = anchor[every]
        used, which = np.unique(anchors, return_inverse=True)
        # D = [R'_a R_a^T | t'_a - R'_a R_a^T t_a] for each anchor, then new = D @ old for its subtree.
        d_rot = self.rot[:, used] @ np.swapaxes(self.rot0[:, used], -1, -2)  # (F, A, 3, 3)
        old_heads = self.original[..., :3, 3]  # a view; index it after (see `tails`)
        d_t = self.heads()[:, used] - np.einsum("faij,faj->fai", d_rot, old_heads[:, used])
        d_rot_b, d_t_b = d_rot[:, which], d_t[:, which]
        self.matrices[:, every, :3, :3] = d_rot_b @ self.original[:, every, :3, :3]
        self.heads()[:, every] = np.einsum("fbij,fbj->fbi", d_rot_b, old_heads[:, every]) + d_t_b
        self.rot[:, every] = d_rot_b @ self.rot0[:, every]


@dataclass
class _Space:
    """World <-> armature space for each frame (uniform scale, checked by `rig_problem`)."""

    inv_world: F64  # (F,4,4)
    scale: F64  # (F,)

    @classmethod
    def of(cls, world: F64) -> _Space:
        # World matrices here are rotation x uniform scale + translation (rig_problem refuses anything else),
        # so the inverse is closed-form: A^-1 = A^T / s^2. A general 4x4 inverse costs far more per update.
        a = world[:, :3, :3]
        scale = np.cbrt(np.abs(np.linalg.det(a)))
        inv = np.zeros_like(world)
        inv_a = np.swapaxes(a, 1, 2) / (scale * scale)[:, None, None]
        inv[:, :3, :3] = inv_a
        inv[:, :3, 3] = -np.einsum("fij,fj->fi", inv_a, world[:, :3, 3])
        inv[:, 3, 3] = 1.0
        return cls(inv, scale)

    def points(self, mats: F64) -> F64:
        """(F,4,4) world matrices -> (F,3) armature-space positions."""
        out: F64 = np.einsum("fij,fj->fi", self.inv_world, mats[:, :, 3])[:, :3]
        return out

    def points_of(self, mats: F64) -> F64:
        """(F,K,4,4) world matrices -> (F,K,3) armature-space positions (`points` for K objects at once)."""
        out: F64 = np.einsum("fij,fkj->fki", self.inv_world, mats[..., :, 3])[..., :3]
        return out

    def rotations(self, mats: F64) -> F64:
        rot, _ = convert.rotation_parts((self.inv_world @ mats)[:, :3, :3])
        return rot


def _chain_arrays(work: _Work, rows: list[list[int]]) -> tuple[F64, ...]:
    """positions, frames, offsets, ref_local, base for F x K chains of N bones (root first), frame-major.

    With Start From 'Rest' the working pose already holds the chain at rest under its parent
    (`rest_start_pose`, then `_Work.propagate` for chains below chains), so no case is needed here.
    """
    sk = work.sk
    idx = np.asarray(rows, dtype=np.int64)  # (K, N)
    f = work.matrices.shape[0]
    k, n = idx.shape
    mats = work.matrices[:, idx]  # (F, K, N, 4, 4): one gather for the heads and the tip's axis
    # Any shape: reshaped to (F * K, N + 1, 3) below (numpy >= 2.5's stubs track the 4-d shape of `empty`).
    positions: F64 = np.empty((f, k, n + 1, 3))
    positions[:, :, :n] = mats[..., :3, 3]
    # The tip's tail, as `_Work.tails`: head + Y axis * rest length.
    positions[:, :, n] = mats[:, :, -1, :3, 3] + mats[:, :, -1, :3, 1] * work.lengths[idx[:, -1]][None, :, None]
    positions = positions.reshape(f * k, n + 1, 3)
    frames = work.rot[:, idx].reshape(f * k, n, 3, 3)
    deltas = positions[:, 1:] - positions[:, :-1]
    offsets = np.einsum("knji,knj->kni", frames, deltas)  # F^T @ delta: the current offsets
    ref_local = sk.rest_rel[idx] if f == 1 else np.tile(sk.rest_rel[idx], (f, 1, 1, 1))
    base = work.parent_rot(idx[:, 0]).reshape(f * k, 3, 3)
    return positions, frames, offsets, ref_local, base


def _message(residual: float, status: str, reached: bool, frames: int, worst: int) -> str:
    if reached:
        return ""
    if status == "UNREACHABLE":
        message = f"target out of reach: the tip stops {residual:.4g} short (chain fully extended or limited)"
    else:
        message = (
            f"not reached: {residual:.4g} from the target ({status.lower()}); raise Max Iterations or check the limits"
        )
    return f"worst frame #{worst}: {message}" if frames > 1 else message


def _outcome(residuals: F64, iterations: F64, statuses: Sequence[str], tolerance: float) -> ChainOutcome:
    worst = int(np.argmax(residuals))
    residual = float(residuals[worst])
    reached = bool((residuals <= tolerance * (1.0 + 1e-6)).all())
    status = statuses[worst]
    message = _message(residual, status, reached, residuals.shape[0], worst)
    return ChainOutcome(True, message, float(iterations.mean()), residual, reached, status, residuals, iterations)


def _outcomes(residuals: F64, iterations: F64, codes: NDArray[np.int8], tolerance: float) -> list[ChainOutcome]:
    """`_outcome` for K chains at once: (F, K) residuals, iterations and status codes -> K outcomes."""
    f, k = residuals.shape
    if f == 1:
        # Live solving (one frame): the same answers from Python floats, without a dozen numpy calls per batch.
        limit = tolerance * (1.0 + 1e-6)
        res, its, names = residuals[0].tolist(), iterations[0].tolist(), [STATUS_NAMES[c] for c in codes[0].tolist()]
        return [
            ChainOutcome(
                True, _message(r, name, r <= limit, 1, 0), it, r, r <= limit, name, residuals[:, j], iterations[:, j]
            )
            for j, (r, it, name) in enumerate(zip(res, its, names, strict=True))
        ]
    cols = np.arange(k)
    worst = np.argmax(residuals, axis=0)
    worst_res = residuals[worst, cols].tolist()
    reached: list[bool] = np.asarray((residuals <= tolerance * (1.0 + 1e-6)).all(axis=0)).tolist()
    status = [STATUS_NAMES[c] for c in codes[worst, cols].tolist()]
    mean_its = iterations.mean(axis=0).tolist()
    worst_l = worst.tolist()
    return [
        ChainOutcome(
            True,
            _message(worst_res[j], status[j], reached[j], f, worst_l[j]),
            mean_its[j],
            worst_res[j],
            reached[j],
            status[j],
            residuals[:, j],
            iterations[:, j],
        )
        for j in range(k)
    ]


# A tolerance no solve reaches: with it the iterative solvers run exactly to their iteration cap (or a stall).
_EXHAUST = 1e-12


def _solve_batch(
    obj: bpy.types.Object,
    work: _Work,
    plan: Plan,
    solver: str,
    chains: list[ChainPlan],
    inputs: Inputs,
    space: _Space,
    report: RigReport,
    smooth: bool = False,
) -> None:
    settings = rig_settings(obj)
    f = work.matrices.shape[0]
    goals = space.points_of(np.stack([inputs.targets[c.index] for c in chains], axis=1))  # (F, K, 3)
    poles: F64 | None = None  # (F, K, 3), NaN for the chains without a pole
    if any(c.pole is not None for c in chains):
        nan = np.full((f, 4, 4), np.nan)
        poles = space.points_of(np.stack([inputs.poles[c.index] if c.pole is not None else nan for c in chains], 1))
    with_rot = chains[0].use_target_rotation  # batches never mix (see _solve_levels)
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
    if rows[0]:
        n = len(rows[0])
        positions, frames, offsets, ref_local, base = _chain_arrays(work, rows)
        problem = ChainProblem(
            positions=positions,
            frames=frames,
            offsets=offsets,
            ref_local=ref_local,
            base=base,
            targets=aims.reshape(f * k, 3),
            poles=poles.reshape(f * k, 3) if poles is not None else None,
            limits=_tile_limits(_cached_limits(obj, work.sk, plan, rows), f),
            tolerance=float(settings.tolerance) / float(space.scale.min()),
            max_iterations=int(settings.max_iterations),
            roll_mode=settings.roll_mode,
            # A bake: redundant chains stopping each frame as soon as it is within tolerance land on
            # different solutions (2 iterations here, 3 there) and the keys jitter; every frame running
            # until the slowest converges keeps the result a continuous function of its target.
            uniform_iterations=smooth and f > 1,
            # Every frame here comes from `convert.rotation_parts` (Gram-Schmidt in float64), a solver's
            # output, or products of those: rotations to float64 rounding, so the solver need not re-check.
            exact_rotations=True,
        )
        result = SOLVERS[solver](problem)
        flat = [b for row in rows for b in row]
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
    for c, outcome in zip(chains, _outcomes(residuals, its, codes, float(settings.tolerance)), strict=True):
        report.outcomes[c.index] = outcome


def _solve_tree(
    obj: bpy.types.Object,
    work: _Work,
    plan: Plan,
    group: Group,
    inputs: Inputs,
    space: _Space,
    report: RigReport,
    smooth: bool = False,
) -> None:
    settings = rig_settings(obj)
    sk = work.sk
    bones = group.bones
    pos = {b: i for i, b in enumerate(bones)}
    parents = np.array([pos.get(int(sk.parent[b]), -1) if i else -1 for i, b in enumerate(bones)], dtype=np.int64)
    effectors = np.array([pos[c.bones[-1]] for c in group.chains], dtype=np.int64)
    weights = np.array([c.weight for c in group.chains])
    limits = _cached_limits(obj, sk, plan, [bones])
    ref_local = sk.rest_rel[bones]
    f_count = work.matrices.shape[0]
    out_frames = np.empty((f_count, len(bones), 3, 3))
    out_heads = np.empty((f_count, len(bones), 3))
    residuals = np.empty((f_count, len(group.chains)))
    iterations = np.empty(f_count)
    statuses: list[list[str]] = []
    all_tails = work.tails(bones)
    goals_all = np.stack([space.points(inputs.targets[c.index]) for c in group.chains], axis=1)
    base_all = work.parent_rot([bones[0]])[:, 0]
    problems: list[TreeProblem] = []
    for fi in range(f_count):
        heads = work.heads()[fi, bones]
        frames = work.rot[fi, bones]
        head_offsets = np.zeros((len(bones), 3))
        has_parent = parents >= 0
        par = parents[has_parent]
        head_offsets[has_parent] = np.einsum("bji,bj->bi", frames[par], heads[has_parent] - heads[par])
        tail_offsets = np.einsum("bji,bj->bi", frames, all_tails[fi] - heads)
        base = base_all[fi]
        problem = TreeProblem(
            parents=parents,
            heads=heads,
            frames=frames,
            head_offsets=head_offsets,
            tail_offsets=tail_offsets,
            ref_local=ref_local,
            base=base,
            effectors=effectors,
            targets=goals_all[fi],
            weights=weights,
            limits=limits,
            tolerance=float(settings.tolerance) / float(space.scale[fi]),
            max_iterations=int(settings.max_iterations),
            roll_mode=settings.roll_mode,
        )
        problems.append(problem)
    results = [tree.solve_tree(p) for p in problems]
    if smooth and f_count > 1:
        # As for chains (`uniform_iterations`): every frame runs the same number of iterations.
        most = max(r.iterations for r in results)
        if any(r.iterations != most for r in results):
            results = [tree.solve_tree(replace(p, tolerance=_EXHAUST, max_iterations=most)) for p in problems]
    for fi, result in enumerate(results):
        out_frames[fi], out_heads[fi] = result.frames, result.heads
        residuals[fi] = result.residual * space.scale[fi]
        iterations[fi] = result.iterations
        statuses.append([STATUS_NAMES[int(s)] for s in result.status])
    work.set_bones(bones, out_frames, out_heads)
    for e, c in enumerate(group.chains):
        report.outcomes[c.index] = _outcome(
            residuals[:, e], iterations, [s[e] for s in statuses], float(settings.tolerance)
        )


def _guarded(report: RigReport, chains: list[ChainPlan], run: Callable[[], None]) -> None:
    """Run one solver call; a ValueError (bad numbers that slipped past validation) marks its chains invalid.

    The solver raises before anything is stored in the working pose, so nothing of these chains is written.
    """
    try:
        run()
    except ValueError as exc:
        for c in chains:
            report.outcomes[c.index] = ChainOutcome(False, f"cannot solve: {exc}")


def _solve_levels(
    obj: bpy.types.Object,
    work: _Work,
    plan: Plan,
    groups: list[Group],
    inputs: Inputs,
    space: _Space,
    report: RigReport,
    smooth: bool,
) -> None:
    levels = sorted({g.level for g in groups})
    for li, lv in enumerate(levels):
        if li > 0:
            work.propagate()
        batches: dict[tuple[str, int, bool], list[ChainPlan]] = {}
        for g in groups:
            if g.level != lv:
                continue
            if g.is_tree:
                _guarded(report, g.chains, partial(_solve_tree, obj, work, plan, g, inputs, space, report, smooth))
                continue
            c = g.chains[0]
            batches.setdefault((c.solver, len(c.bones), c.use_target_rotation), []).append(c)
        for (solver, _n, _rot), chains in batches.items():
            run = partial(_solve_batch, obj, work, plan, solver, chains, inputs, space, report, smooth)
            _guarded(report, chains, run)


@dataclass
class Solved:
    """Solved basis rotations for F frames, ready to become channels or keys."""

    bones: list[int]  # parents before children
    basis: F64  # (F, len(bones), 3, 3) local (basis) rotations


_plans: dict[int, tuple[tuple[object, ...], Plan]] = {}  # session_uid -> (structure key, plan), live only


class ChainRow(NamedTuple):
    """One chain's settings as a plan sees them (compared as a whole: any change rebuilds the plan)."""

    enabled: bool
    solver: str
    tip_bone: str
    chain_length: int
    # The object's identity and bone parenting, or None. Not `users_scene` (it scans every scene): unlinking
    # an object bumps the settings version instead (live.py).
    target: object
    pole: object
    weight: float
    use_target_rotation: bool
    name: str


ChainState = tuple[ChainRow, ...]


def chain_state(obj: bpy.types.Object) -> tuple[ChainState, list[bpy.types.Object]]:
    """Every chain setting a plan depends on (one tuple per chain), and the targets and poles themselves.

    The live handler reads this once per update, for its change detection and for the plan cache.
    """
    rows = []
    objects = []
    make = ChainRow._make  # a NamedTuple's own constructor costs several times more (every chain, every update)
    for ch in rig_settings(obj).chains:
        target, pole = ch.target, ch.pole
        if target is not None:
            objects.append(target)
        if pole is not None:
            objects.append(pole)
        rows.append(
            make(
                (
                    ch.enabled,
                    ch.solver,
                    ch.tip_bone,
                    ch.chain_length,
                    None if target is None else (target.session_uid, target.parent_bone, target.parent_type),
                    None if pole is None else (pole.session_uid, pole.parent_bone, pole.parent_type),
                    ch.weight,
                    ch.use_target_rotation,
                    ch.name,
                )
            )
        )
    return tuple(rows), objects


def _plan_key(obj: bpy.types.Object, sk: armature.Skeleton, state: ChainState) -> tuple[object, ...]:
    """What a plan depends on besides per-frame numbers: chain settings, the objects they point at, bones."""
    from . import live

    return (id(sk), live.settings_version(obj), obj.data.as_pointer(), state)


def forget_plans() -> None:
    _plans.clear()


@dataclass
class LiveReads:
    """What the live handler already read in this update, so the solve does not read it again."""

    sk: armature.Skeleton
    state: ChainState
    channels: armature.Channels  # every channel; the write-back updates the rotation arrays in place
    world: armature.WorldMatrices  # every object's world matrix
    pose: F64 | None = None  # (B,4,4) pose matrices, when the handler needed them


def prepare(
    obj: bpy.types.Object, only: set[int] | None = None, cached: bool = False, reads: LiveReads | None = None
) -> tuple[RigReport, armature.Skeleton | None, Plan | None]:
    """Validate `obj` and its chains (optionally only the chain indices in `only`).

    With `cached` (live solving) the plan is reused while nothing it depends on changed.
    """
    report = RigReport()
    problem = rig_problem(obj)
    chains = rig_settings(obj).chains if obj.type == "ARMATURE" else []
    if problem is not None:
        report.rig_error = problem
        for i, ch in enumerate(chains):
            if ch.enabled and (only is None or i in only):
                report.outcomes[i] = ChainOutcome(False, problem)
        return report, None, None
    sk = reads.sk if reads is not None else armature.skeleton(obj, trust_cache=cached)
    plan: Plan | None = None
    if cached and only is None:
        key = _plan_key(obj, sk, reads.state if reads is not None else chain_state(obj)[0])
        hit = _plans.get(obj.session_uid)
        if hit is not None and hit[0] == key:
            plan = hit[1]
        else:
            plan = build_plan(obj, sk)
            _plans[obj.session_uid] = (key, plan)
    else:
        plan = build_plan(obj, sk, only)
    for i, msg in plan.errors.items():
        report.outcomes[i] = ChainOutcome(False, msg)
    return report, sk, plan


def _flat_groups(sk: armature.Skeleton, plan: Plan, scale: F64, report: RigReport) -> list[Group]:
    """Groups whose bones all have a usable pose scale in every frame; the others are reported invalid."""
    smallest = scale.min(axis=(0, 2))  # (B,) each bone's smallest axis scale over every frame
    if not (smallest < 1e-6).any():
        return list(plan.groups)
    ok = []
    for g in plan.groups:
        flat = np.flatnonzero(smallest[g.bones] < 1e-6)
        if flat.size:
            name = sk.names[g.bones[int(flat[0])]]
            msg = f"bone '{name}' is scaled to zero in the pose: reset its scale (Alt S) so the chain has length"
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        else:
            ok.append(g)
    return ok


def _first(a: F64 | None) -> F64 | None:
    return None if a is None else a[:1]


def solve_inputs(
    obj: bpy.types.Object,
    sk: armature.Skeleton,
    plan: Plan,
    inputs: Inputs,
    report: RigReport,
    smooth: bool = False,
) -> Solved:
    """Solve every planned group over the stacked frames of `inputs`; fill `report`; return basis rotations.

    `smooth` (for baking) makes results vary continuously from frame to frame (`uniform_iterations`).
    """
    if plan.lengths is None:
        plan.lengths = armature.bone_lengths(obj, sk) if plan.groups else np.zeros(0)
    lengths = plan.lengths
    f = inputs.pose.shape[0]
    if inputs.static and f > 1:
        # The same start in every frame: work it out for one frame and repeat it.
        first = replace(
            inputs,
            pose=inputs.pose[:1],
            basis=_first(inputs.basis),
            location=_first(inputs.location),
            scale=_first(inputs.scale),
            static=False,
        )
        pose1 = rest_start_pose(sk, plan, first) if first.basis is not None else first.pose
        rot1, sc1 = convert.rotation_parts(pose1[:, :, :3, :3])
        pose, rot, sc = (np.repeat(a, f, axis=0) for a in (pose1, rot1, sc1))
    else:
        pose = rest_start_pose(sk, plan, inputs) if inputs.basis is not None else inputs.pose
        rot, sc = convert.rotation_parts(pose[:, :, :3, :3])
    work = _Work(sk=sk, original=pose, matrices=pose.copy(), rot=rot, rot0=rot.copy(), scale=sc, lengths=lengths)
    groups = _flat_groups(sk, plan, sc, report)
    _solve_levels(obj, work, plan, groups, inputs, _Space.of(inputs.world), report, smooth)
    for i, note in plan.notes.items():
        if i in report.outcomes and report.outcomes[i].valid and not report.outcomes[i].message:
            report.outcomes[i].message = note
    if not work.solved:
        return Solved([], np.zeros((inputs.pose.shape[0], 0, 3, 3)))
    solved = np.fromiter(work.solved, dtype=np.int64, count=len(work.solved))
    order = solved[np.lexsort((solved, sk.depth[solved]))]  # parents before children
    bones = order.tolist()
    # `work.rot` holds every solved rotation (set_bones writes both; propagate never moves solved bones).
    frames = work.rot[:, order]  # (F, n, 3, 3)
    parent_frames = work.parent_rot(bones)
    basis = armature.local_rotations(frames, parent_frames, sk.rest_rel[bones][None])
    return Solved(bones, basis)


def solve_rig(
    obj: bpy.types.Object,
    *,
    write: bool = True,
    only: set[int] | None = None,
    cached: bool = False,
    reads: LiveReads | None = None,
) -> RigReport:
    """Solve the enabled chains of armature `obj` on its current pose; write rotations if `write`.

    Invalid chains are reported in the outcome (and never written); valid ones are still solved, so one
    broken chain never stops the others. `reads` (live solving) is what the caller read this update; its
    channel arrays then hold exactly what was written.
    """
    report, sk, plan = prepare(obj, only, cached, reads)
    if sk is None or plan is None or not plan.groups:
        return report
    inputs = read_inputs(obj, plan, *((reads.pose, reads.world) if reads is not None else ()))
    broken = check_inputs(obj, plan, inputs)
    if broken:
        report.rig_error = broken
        for g in plan.groups:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, broken)
        return report
    solved = solve_inputs(obj, sk, plan, inputs, report)
    if write and solved.bones:
        channels = reads.channels if reads is not None else armature.read_channels(obj)
        changed = armature.rotations_to_channels(obj, solved.bones, solved.basis[0], channels)
        armature.write_channels(obj, channels, changed)
    return report


def store_status(obj: bpy.types.Object, report: RigReport) -> None:
    """Copy the outcome into each chain's read-only status, touching only what changed (no redraw storms)."""
    for i, ch in enumerate(rig_settings(obj).chains):
        out = report.outcomes.get(i)
        if out is None:
            valid, message, iters, residual = True, "", 0, 0.0
        else:
            valid, message, iters, residual = out.valid, out.message, round(out.iterations), out.residual
        if ch.is_valid != valid:
            ch.is_valid = valid
        if ch.message != message:
            ch.message = message
        if ch.iterations != iters:
            ch.iterations = iters
        if not math.isclose(ch.residual, residual, rel_tol=1e-3, abs_tol=1e-7):
            ch.residual = residual
