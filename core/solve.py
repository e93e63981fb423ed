"""Solve a rig snapshot: chains batched per solver, chains below chains level by level, outcomes with messages.

A solve works on a stack of F frames at once (live solving: F = 1; baking: every baked frame), and chains
of one level that share a solver and a length are batched into one solver call over all frames. A chain
whose root hangs below another chain's bones is solved after it, on a pose derived by forward kinematics
from our own arrays (inside Blender's handlers, asking Blender to re-evaluate is unsafe). Nothing here
imports bpy: `rig/` builds the `Snapshot` and `Inputs` and writes `Solved` back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
from numpy.typing import NDArray

from ..solvers import ccd, fabrik, tree, two_bone
from ..solvers.limits import TWIST_BOUND_SLACK, JointLimits
from ..solvers.soft import soft_distance
from ..solvers.types import STATUS_NAMES, ChainProblem, SolveResult, TreeProblem
from . import convert
from .model import (
    ALIGNED,
    AVERAGE,
    CHANNEL_NAMES,
    FIX_SHEAR,
    FULL,
    BoneLimits,
    ChainOutcome,
    ChainPlan,
    Group,
    Inputs,
    Plan,
    RigReport,
    Skeleton,
    Snapshot,
    Solved,
    usable,
)

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Channels = dict[str, NDArray[np.float32]]

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


def solver_for(name: str, rows: int) -> Callable[[ChainProblem], SolveResult]:
    """The solver for `rows` chain rows of one kind: scalar for a few rows of one frame, else the batch."""
    scalar = SCALAR.get(name)
    return scalar[0] if scalar is not None and rows <= scalar[1] else SOLVERS[name]


def local_rotations(frames: F64, parent_frames: F64, rest_rel: F64) -> F64:
    """Basis rotations that give armature-space `frames` under `parent_frames` (all (...,3,3)).

    Blender poses a bone as parent_pose @ rest_rel @ basis, so basis = (parent @ rest_rel)^T @ frame.
    """
    ref = parent_frames @ rest_rel
    out: F64 = np.swapaxes(ref, -1, -2) @ frames
    return out


def stack_inputs(frames: Sequence[Inputs]) -> Inputs:
    def cat(name: str) -> F64 | None:
        parts = [getattr(f, name) for f in frames]
        return None if parts[0] is None else np.concatenate(parts)

    return Inputs(
        pose=np.concatenate([f.pose for f in frames]),
        world=np.concatenate([f.world for f in frames]),
        targets={k: np.concatenate([f.targets[k] for f in frames]) for k in frames[0].targets},
        poles={k: np.concatenate([f.poles[k] for f in frames]) for k in frames[0].poles},
        pole_angles={k: np.concatenate([f.pole_angles[k] for f in frames]) for k in frames[0].pole_angles},
        basis=cat("basis"),
        location=cat("location"),
        scale=cat("scale"),
        soft={k: np.concatenate([f.soft[k] for f in frames]) for k in frames[0].soft},
        stretch={k: np.concatenate([f.stretch[k] for f in frames]) for k in frames[0].stretch},
        release=set().union(*(f.release for f in frames)),
        influence={k: np.concatenate([f.influence[k] for f in frames]) for k in frames[0].influence},
        fk={k: np.concatenate([f.fk[k] for f in frames]) for k in frames[0].fk},
        fk_scale={k: np.concatenate([f.fk_scale[k] for f in frames]) for k in frames[0].fk_scale},
    )


def child_pose(parent: F64, rel: F64, modes: I64) -> F64:
    """(F, n, 4, 4) poses of n bones from their parents' poses and their matrices relative to them (rest
    relative to the parent @ basis), inheriting scale as Blender does for each `inherit_scale` code in `modes`.

    The head always follows the whole parent matrix. 'Full' takes the parent's matrix as it is; 'None' and
    'None (Legacy)' only its rotation; 'Aligned' its rotation, and its per-axis scale on the child's own axes;
    'Average' its rotation and its volume scale. 'Fix Shear' is taken as 'Full' (the same for a parent without
    non-uniform scale). Checked against the bpy wheel for parents that are not sheared.
    """
    out: F64 = parent @ rel
    other = (modes != FULL) & (modes != FIX_SHEAR)
    if not other.any():
        return out
    p3 = parent[:, other, :3, :3]
    rot, scale = convert.rotation_parts(p3)
    m3 = rot @ rel[:, other, :3, :3]
    kind = modes[other]
    aligned, average = kind == ALIGNED, kind == AVERAGE
    if aligned.any():
        m3[:, aligned] *= scale[:, aligned, None, :]
    if average.any():
        m3[:, average] *= np.cbrt(np.abs(np.linalg.det(p3[:, average])))[..., None, None]
    out[:, other, :3, :3] = m3
    return out


def child_relative(parent: F64, child: F64, modes: I64) -> F64:
    """The inverse of `child_pose`: (F, n, 4, 4) matrices relative to the parents that give `child`."""
    rel: F64 = np.linalg.inv(parent) @ child
    other = (modes != FULL) & (modes != FIX_SHEAR)
    if not other.any():
        return rel
    p3 = parent[:, other, :3, :3]
    rot, scale = convert.rotation_parts(p3)
    r3 = np.swapaxes(rot, -1, -2) @ child[:, other, :3, :3]
    kind = modes[other]
    aligned, average = kind == ALIGNED, kind == AVERAGE
    if aligned.any():
        r3[:, aligned] /= scale[:, aligned, None, :]
    if average.any():
        r3[:, average] /= np.cbrt(np.abs(np.linalg.det(p3[:, average])))[..., None, None]
    rel[:, other, :3, :3] = r3
    return rel


def rest_start_pose(
    sk: Skeleton,
    plan: Plan,
    inputs: Inputs,
    groups: Sequence[Group] | None = None,
    unit_y: Sequence[int] = (),
) -> F64:
    """The pose a REST-start solve begins from, independent of the chain bones' current rotations.

    Chain bones (of `groups`, default every planned group) get their rest orientation (keeping their
    location and scale channels) and everything below them follows by forward kinematics from rest data and
    channels (each bone inheriting scale as its Inherit Scale says, `child_pose`). Nothing here depends on
    how the chain bones are rotated now, so re-baking over earlier baked keys gives bit-identical results.
    Bones of groups left out keep their channels (the pose Blender shows). `unit_y`: bones whose Y scale
    channel is taken as 1 (the bones of stretching chains: their stretch is the solve's to set).
    """
    assert inputs.basis is not None and inputs.location is not None and inputs.scale is not None
    pose = inputs.pose.copy()
    chain_bones = {b for g in (plan.groups if groups is None else groups) for b in g.bones}
    affected = np.zeros(len(sk.names), dtype=bool)
    for b in np.argsort(sk.depth, kind="stable"):
        p = int(sk.parent[b])
        affected[b] = int(b) in chain_bones or (p >= 0 and affected[p])
    local = inputs.basis.copy()
    location = inputs.location
    if sk.connected.any():
        # Blender ignores the location channel of a connected bone (its head sits on its parent's tail);
        # imported or keyed data often carries one anyway.
        local[:, sk.connected, :3, 3] = 0.0
        location = location.copy()
        location[:, sk.connected] = 0.0
    chain_idx = np.array(sorted(chain_bones), dtype=np.int64)
    scale = inputs.scale
    if len(unit_y):
        scale = scale.copy()
        scale[:, np.asarray(unit_y, dtype=np.int64), 1] = 1.0
    # Chain bones: translation and scale from the channels, rotation dropped (rest orientation).
    ts = np.zeros((inputs.pose.shape[0], len(chain_idx), 4, 4))
    ts[:, :, 0, 0], ts[:, :, 1, 1], ts[:, :, 2, 2] = (scale[:, chain_idx, i] for i in range(3))
    ts[:, :, :3, 3] = location[:, chain_idx]
    ts[:, :, 3, 3] = 1.0
    local[:, chain_idx] = ts
    modes = sk.scale_modes()
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
            pose[:, idx[~roots]] = child_pose(pose[:, par[~roots]], rel[:, ~roots], modes[idx[~roots]])
    return pose


def _broken_rows(mats: F64) -> NDArray[np.bool_]:
    """(..., 4, 4) -> (...): rows that are not `usable` (NaN, inf, or Blender's clamped FLT_MAX)."""
    flat = mats.reshape(*mats.shape[:-2], -1)
    # |x| < 1e30 is False for NaN too, so one comparison covers all three.
    fine = (np.abs(flat) < 1e30).all(axis=-1)
    return np.asarray(~fine, dtype=np.bool_)  # an array also for one matrix (numpy 2 stubs: bool | array)


def check_inputs(sk: Skeleton, plan: Plan, rig: str, inputs: Inputs) -> str | None:
    """A message naming the first broken transform (NaN, inf), or None. Frame 0 is the first of the stack."""
    whole, chains = broken_inputs(sk, plan, rig, inputs)
    return whole if whole is not None else next(iter(chains.values()), None)


def broken_inputs(sk: Skeleton, plan: Plan, rig: str, inputs: Inputs) -> tuple[str | None, dict[int, str]]:
    """What is broken (NaN, inf) in `inputs`: a message for the whole rig (a bone's pose, the armature's
    transform) or None, and a message for each chain whose own pole angle, target or pole is broken."""
    pose, world = inputs.pose, inputs.world
    # Whole-array tests first (one pass each); the per-matrix ones only run to name what is broken.
    if not usable(pose):
        f, b = (int(v) for v in np.argwhere(_broken_rows(pose))[0])
        name = sk.names[b]
        return f"{_at(f, inputs)}bone '{name}' has a NaN or infinite pose: reset its transform (Alt G/R/S)", {}
    if not usable(world):
        return f"{_at(int(np.flatnonzero(_broken_rows(world))[0]), inputs)}'{rig}' has a NaN or infinite transform", {}
    chains: dict[int, str] = {}
    for i, angles in inputs.pole_angles.items():
        bad_angle = ~np.isfinite(angles)
        if bad_angle.any():
            f = int(np.flatnonzero(bad_angle)[0])
            chains[i] = (
                f"{_at(f, inputs)}the Pole Angle of chain '{_chain_name(plan, i)}' is not a number: type an angle"
            )
    stacked = inputs.objects
    if stacked is None and (inputs.targets or inputs.poles):
        stacked = np.concatenate([*inputs.targets.values(), *inputs.poles.values()])
    if stacked is not None and usable(stacked):
        return None, chains
    by_index = {c.index: c for g in plan.groups for c in g.chains}
    for role, mats in (("target", inputs.targets), ("pole", inputs.poles)):
        for i, m in mats.items():
            bad = _broken_rows(m)
            if bad.any() and i not in chains:
                f = int(np.flatnonzero(bad)[0])
                chains[i] = f"{_at(f, inputs)}the {role} {by_index[i].label(role)} has a NaN or infinite transform"
    return None, chains


def _chain_name(plan: Plan, index: int) -> str:
    return next((c.name for g in plan.groups for c in g.chains if c.index == index), f"#{index}")


def _at(f: int, inputs: Inputs) -> str:
    return "" if inputs.world.shape[0] == 1 else f"frame #{f}: "


def twist_bound(value: float) -> float:
    """A twist property as the solver takes it: within float32 rounding of +-pi snaps to +-pi.

    The properties are float32 with the UI range [-180, 180] degrees: 180 degrees is stored as 3.1415927,
    8.7e-8 above pi. The slack is the solver's own (`JointLimits` snaps the same bounds).
    """
    v = float(value)
    if math.pi < abs(v) <= math.pi + TWIST_BOUND_SLACK:
        return math.copysign(math.pi, v)
    return v


def _limits_for(limits: BoneLimits, bone_rows: list[list[int]]) -> JointLimits | None:
    """Per-bone cone/twist limits for (K, N) bones, or None when no bone in the batch is limited."""
    idx = np.asarray(bone_rows, dtype=np.int64)  # (K, N)
    use_cone, use_twist = limits.use_cone[idx], limits.use_twist[idx]
    if not (use_cone.any() or use_twist.any()):
        return None
    cone = np.where(use_cone[..., None], limits.cone[idx], 0.0)
    # Bounds within float32 rounding of +-pi are snapped by JointLimits itself (TWIST_BOUND_SLACK).
    twist = np.where(use_twist[..., None], np.sort(limits.twist[idx], axis=-1), 0.0)
    return JointLimits(cone=cone, use_cone=use_cone, twist=twist, use_twist=use_twist)


def cached_limits(snap: Snapshot, rows: list[list[int]]) -> JointLimits | None:
    """Limits for these bone rows, read once per plan (a limit change bumps the settings version)."""
    key = tuple(tuple(r) for r in rows)
    if key not in snap.plan.limits:
        snap.plan.limits[key] = _limits_for(snap.limits, rows)
    return snap.plan.limits[key]  # type: ignore[return-value]


# UI names of the cone properties, in the solver's column order (up, down, left, right).
_CONE_SIDES = ("Up", "Down", "Left", "Right")
# `plan.limits` keys of the per-group limit checks start with this row (no bone row holds -1).
_CHECK_ROW = (-1,)


def _angle_text(value: float) -> str:
    """An angle in radians as the UI shows it (degrees), or what is wrong with it."""
    if math.isnan(value):
        return "not a number (NaN)"
    if math.isinf(value):
        return "infinite"
    return f"{math.degrees(value):.4g}°"


def _limit_problem(sk: Skeleton, limits: BoneLimits, bones: Sequence[int]) -> str | None:
    """Why the solver would refuse the joint limits of these bones, in the panel's terms; None if it takes them.

    The same ranges `JointLimits` checks, read as `_limits_for` reads them. The properties' own ranges keep
    typed values inside, but a script (or an expression typed into the field) can still store NaN.
    """
    for b in bones:
        name = sk.names[b]
        if limits.use_cone[b]:
            for column, side in enumerate(_CONE_SIDES):
                value = float(limits.cone[b, column])
                if not 0.0 <= value < math.pi:  # False for NaN too
                    return (
                        f"bone '{name}': its Cone {side} limit is {_angle_text(value)}; set it from 0° to 179.9° "
                        "(Reach IK tab > Joint Limits) or turn the cone off"
                    )
        if limits.use_twist[b]:
            for side, raw in (("Min", limits.twist[b, 0]), ("Max", limits.twist[b, 1])):
                value = twist_bound(raw)
                if not -math.pi <= value <= math.pi:
                    return (
                        f"bone '{name}': its Twist {side} limit is {_angle_text(value)}; set it from -180° to 180° "
                        "(Reach IK tab > Joint Limits) or turn the twist off"
                    )
    return None


def _limit_bones(group: Group) -> list[int]:
    """The bones of a group whose limits the solver applies (a tip that takes the target's rotation has none)."""
    if group.is_tree:
        return group.bones
    c = group.chains[0]
    return c.bones[:-1] if c.use_target_rotation else c.bones


def _limit_checked_groups(snap: Snapshot, report: RigReport) -> list[Group]:
    """The groups whose joint limits the solver takes; the chains of the others are reported invalid.

    Checked per group before chains are batched, so a bad limit on one chain's bone invalidates that chain
    (or the tree it belongs to: a tree is solved as one) and never the other chains of its batch. The
    answer is kept with the plan, like the limits themselves (a limit change rebuilds the plan).
    """
    plan = snap.plan
    ok = []
    for g in plan.groups:
        bones = _limit_bones(g)
        key = (_CHECK_ROW, tuple(bones))
        if key not in plan.limits:
            plan.limits[key] = _limit_problem(snap.sk, snap.limits, bones)
        problem = plan.limits[key]
        if problem is None:
            ok.append(g)
            continue
        for c in g.chains:
            report.outcomes[c.index] = ChainOutcome(False, str(problem))
    return ok


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

    sk: Skeleton
    original: F64  # (F,B,4,4) as read
    matrices: F64  # (F,B,4,4), updated by our solutions
    rot: F64  # (F,B,3,3) rotation parts
    rot0: F64  # (F,B,3,3) rotation parts of `original`
    scale: F64  # (F,B,3) column scales, kept as they are
    lengths: F64  # (B,) rest bone lengths
    solved: set[int] = field(default_factory=set)  # bones set by a solve (their rotations are in `rot`)
    # Stretching: chain index -> the carrier of each bone it solves (`ChainPlan.carriers`), for the chains
    # that own their bones' Y scale in this solve; (F, B) the Y scale channels as the working pose has them.
    owned: dict[int, list[int]] = field(default_factory=dict)
    channel_y: F64 | None = None
    held_y: F64 | None = None  # (F, B) the Y scale channels as read (a 'Rest' start takes them as 1 above)
    rescaled: set[int] = field(default_factory=set)  # solved bones whose scale the solve changed (stretch)
    scale_out: dict[int, F64] = field(default_factory=dict)  # carrier bone -> (F,) Y scale channel to write

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
        product per carried bone does it, whatever the depth. Below a bone a stretching chain rescaled, the
        subtree is rebuilt level by level instead (`_carry_rescaled`), each bone inheriting the new scale as
        its Inherit Scale says.
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
        if self.rescaled:
            below = np.isin(anchor[every], np.fromiter(self.rescaled, dtype=np.int64))
            if below.any():
                self._carry_rescaled(every[below])
                every = every[~below]
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

    def _carry_rescaled(self, bones: NDArray[np.int64]) -> None:
        """Carry `bones` (below rescaled solved bones) level by level: each keeps its matrix relative to its
        parent as Blender evaluated it (`child_relative`), under the parent's new pose (`child_pose`)."""
        sk = self.sk
        modes = sk.scale_modes()
        for d in np.unique(sk.depth[bones]).tolist():
            idx = bones[sk.depth[bones] == d]
            par = sk.parent[idx]
            rel = child_relative(self.original[:, par], self.original[:, idx], modes[idx])
            new = child_pose(self.matrices[:, par], rel, modes[idx])
            self.matrices[:, idx] = new
            rot, scale = convert.rotation_parts(new[..., :3, :3])
            self.rot[:, idx] = rot
            self.scale[:, idx] = scale


@dataclass
class Space:
    """World <-> armature space for each frame (uniform scale, checked by `rig_problem`)."""

    inv_world: F64  # (F,4,4)
    scale: F64  # (F,)

    @classmethod
    def of(cls, world: F64) -> Space:
        # World matrices here are rotation x uniform scale + translation (rig_problem refuses anything else),
        # so the inverse is closed-form: A^-1 = A^T / s^2. A general 4x4 inverse costs far more per update.
        if world.shape[0] == 1:
            return cls._of_one(world[0])
        a = world[:, :3, :3]
        scale = np.cbrt(np.abs(np.linalg.det(a)))
        inv = np.zeros_like(world)
        inv_a = np.swapaxes(a, 1, 2) / (scale * scale)[:, None, None]
        inv[:, :3, :3] = inv_a
        inv[:, :3, 3] = -np.einsum("fij,fj->fi", inv_a, world[:, :3, 3])
        inv[:, 3, 3] = 1.0
        return cls(inv, scale)

    @classmethod
    def _of_one(cls, world: F64) -> Space:
        """`of` for one frame (a live update) on Python floats: a dozen numpy calls on one small matrix cost
        ~90 us inside a live update."""
        (a00, a01, a02, t0), (a10, a11, a12, t1), (a20, a21, a22, t2) = world[:3].tolist()
        det = a00 * (a11 * a22 - a12 * a21) - a01 * (a10 * a22 - a12 * a20) + a02 * (a10 * a21 - a11 * a20)
        scale = abs(det) ** (1.0 / 3.0)
        k = 1.0 / (scale * scale)
        rows = ((a00 * k, a10 * k, a20 * k), (a01 * k, a11 * k, a21 * k), (a02 * k, a12 * k, a22 * k))
        inv = [[*r, -(r[0] * t0 + r[1] * t1 + r[2] * t2)] for r in rows]
        return cls(np.array([[*inv, [0.0, 0.0, 0.0, 1.0]]]), np.array([scale]))

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


def _chain_arrays(work: _Work, rows: list[list[int]], ends: list[int] | None = None) -> tuple[F64, ...]:
    """positions, frames, offsets, ref_local, base for F x K chains of N bones (root first), frame-major.

    The last joint of each row is its last bone's tail, or with `ends` (one bone per row) that bone's head:
    with Use Target Rotation the bones above the tip reach for where the tip's head must be, and a tip that
    is not connected has its head away from its parent's tail.
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
    if ends is None:
        # The tip's tail, as `_Work.tails`: head + Y axis * rest length.
        positions[:, :, n] = mats[:, :, -1, :3, 3] + mats[:, :, -1, :3, 1] * work.lengths[idx[:, -1]][None, :, None]
    else:
        positions[:, :, n] = work.heads()[:, np.asarray(ends, dtype=np.int64)]
    positions = positions.reshape(f * k, n + 1, 3)
    frames = work.rot[:, idx].reshape(f * k, n, 3, 3)
    deltas = positions[:, 1:] - positions[:, :-1]
    offsets = np.einsum("knji,knj->kni", frames, deltas)  # F^T @ delta: the current offsets
    ref_local = sk.rest_rel[idx] if f == 1 else np.tile(sk.rest_rel[idx], (f, 1, 1, 1))
    base = work.parent_rot(idx[:, 0]).reshape(f * k, 3, 3)
    return positions, frames, offsets, ref_local, base


def chain_message(
    residual: float,
    status: str,
    reached: bool,
    frames: int,
    worst: int,
    tip: str,
    fixed: bool = False,
    stretched: float = 1.0,
) -> str:
    """What a chain that missed its target shows: the tip bone, how far, why, and what can help.

    `status` is the solver's (`STATUS_NAMES`) at the worst frame, and picks the advice: only a solve that
    ran out of iterations (CAP) can be helped by more of them. `fixed`: a one-bone chain with Use Target
    Rotation, whose only bone takes the target's orientation, so nothing is left to solve. `stretched`: the
    factor the chain's bones were lengthened by at the worst frame.
    """
    if reached:
        return ""
    # Never "nan" or "inf": past single precision (an absurd armature scale) the miss cannot be measured.
    far = f"{residual:.4g}" if math.isfinite(residual) else "an unmeasurable distance"
    if fixed:
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target. With Use Target Rotation the tip bone takes "
            "the target's orientation, and in a one-bone chain nothing above it moves, so its tail reaches only a "
            "target placed where that orientation points it: lengthen the chain or turn off Use Target Rotation"
        )
    elif status == "UNREACHABLE" and stretched > 1.0:
        message = (
            f"target out of reach: the tip of '{tip}' stops {far} short with the chain stretched to "
            f"{stretched:.4g}x its length (its Stretch): move the target or raise Stretch"
        )
    elif status == "UNREACHABLE":
        message = (
            f"target out of reach: the tip of '{tip}' stops {far} short (the chain is fully extended, folded or "
            "held by a joint limit): move the target, lengthen the chain or loosen the Joint Limits"
        )
    elif status == "SOFT":
        message = (
            f"softened: the tip of '{tip}' trails the target by {far} near full extension (Soft eases the reach "
            "there instead of snapping the chain straight): set Soft to 0, or raise Stretch to reach it"
        )
    elif status == "CAP":
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target when Max Iterations ran out: "
            "raise Max Iterations"
        )
    elif status == "STALLED":
        # The solver stopped gaining (and its restarts did not help): more iterations would not either.
        message = (
            f"not reached: the tip of '{tip}' stops {far} from the target, where the solve stops gaining "
            "(joint limits or the chain's shape hold it): loosen the Joint Limits, add a pole or move the target"
        )
    else:
        # Converged by the solver's tolerance in armature units, which is set for the armature's smallest
        # scale over the frames: in a frame where the armature is scaled up the miss is larger in world units.
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target, over the Tolerance in world units "
            "(the armature's scale changes over the frames): lower the Tolerance"
        )
    return f"worst frame #{worst}: {message}" if frames > 1 else message


def _outcome(residuals: F64, iterations: F64, statuses: Sequence[str], tolerance: float, tip: str) -> ChainOutcome:
    worst = int(np.argmax(residuals))
    residual = float(residuals[worst])
    reached = bool((residuals <= tolerance * (1.0 + 1e-6)).all())
    status = statuses[worst]
    message = chain_message(residual, status, reached, residuals.shape[0], worst, tip)
    return ChainOutcome(True, message, float(iterations.mean()), residual, reached, status, residuals, iterations)


def outcomes_of(
    residuals: F64,
    iterations: F64,
    codes: NDArray[np.int8],
    tolerance: float,
    tips: Sequence[str],
    fixed: bool = False,
    stretch: F64 | None = None,
) -> list[ChainOutcome]:
    """`_outcome` for K chains at once: (F, K) residuals, iterations and status codes -> K outcomes.

    `tips`: the K tip bones' names; `fixed`: one-bone chains with Use Target Rotation (see `chain_message`);
    `stretch`: (F, K) factors the chains' bones were lengthened by (None: not stretched).
    """
    f, k = residuals.shape
    if f == 1:
        # Live solving (one frame): the same answers from Python floats, without a dozen numpy calls per batch.
        limit = tolerance * (1.0 + 1e-6)
        res, its, names = residuals[0].tolist(), iterations[0].tolist(), [STATUS_NAMES[c] for c in codes[0].tolist()]
        factors = [1.0] * k if stretch is None else stretch[0].tolist()
        return [
            ChainOutcome(
                True,
                chain_message(r, name, r <= limit, 1, 0, tip, fixed, fs),
                it,
                r,
                r <= limit,
                name,
                residuals[:, j],
                iterations[:, j],
                fs,
            )
            for j, (r, it, name, tip, fs) in enumerate(zip(res, its, names, tips, factors, strict=True))
        ]
    cols = np.arange(k)
    worst = np.argmax(residuals, axis=0)
    worst_res = residuals[worst, cols].tolist()
    reached: list[bool] = np.asarray((residuals <= tolerance * (1.0 + 1e-6)).all(axis=0)).tolist()
    status = [STATUS_NAMES[c] for c in codes[worst, cols].tolist()]
    mean_its = iterations.mean(axis=0).tolist()
    worst_l = worst.tolist()
    at_worst = [1.0] * k if stretch is None else stretch[worst, cols].tolist()
    most = [1.0] * k if stretch is None else stretch.max(axis=0).tolist()
    return [
        ChainOutcome(
            True,
            chain_message(worst_res[j], status[j], reached[j], f, worst_l[j], tips[j], fixed, at_worst[j]),
            mean_its[j],
            worst_res[j],
            reached[j],
            status[j],
            residuals[:, j],
            iterations[:, j],
            most[j],
        )
        for j in range(k)
    ]


# A tolerance no solve reaches: with it the iterative solvers run exactly to their iteration cap (or a stall).
_EXHAUST = 1e-12


def _turn_poles(
    work: _Work, chains: list[ChainPlan], turned: list[int], goals: F64, poles: F64, angles: dict[int, F64]
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


def _with_local_targets(work: _Work, inputs: Inputs, groups: Sequence[Group]) -> Inputs:
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


def _solve_batch(
    snap: Snapshot,
    work: _Work,
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
            poles = _turn_poles(work, chains, turned, goals, poles, inputs.pole_angles)
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
    factors: F64 | None = None  # (F, K) how much each chain's bones were lengthened (stretching chains only)
    if rows[0]:
        n = len(rows[0])
        positions, frames, offsets, ref_local, base = _chain_arrays(work, rows, tips if with_rot else None)
        soft, limit = _chain_settings(inputs, chains, f)
        rho: F64 | None = None
        divisors: F64 | None = None
        if work.owned and any(c.index in work.owned for c in chains):
            stretched = _stretch(work, chains, positions, frames, offsets, aims, soft, limit)
            positions, offsets, rho, factors, divisors = stretched
        limits = _tile_limits(cached_limits(snap, rows), f)
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
        result = (solver_for(solver, k) if f == 1 else SOLVERS[solver])(problem)
        flat = [b for row in rows for b in row]
        if factors is not None and divisors is not None:
            _rescale(work, chains, rows, factors, divisors)
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


def _chain_settings(inputs: Inputs, chains: Sequence[ChainPlan], f: int) -> tuple[F64, F64]:
    """(F, K) Soft and Stretch of each chain in each frame: as read per frame, else as planned."""
    if not inputs.soft and not inputs.stretch:
        # As planned (live solving: the plan is rebuilt when a value changes): the same in every frame.
        soft = np.array([[c.soft for c in chains]]).repeat(f, axis=0)
        stretch = np.array([[c.stretch for c in chains]]).repeat(f, axis=0)
    else:
        soft = np.empty((f, len(chains)))
        stretch = np.empty((f, len(chains)))
        for j, c in enumerate(chains):
            soft[:, j] = inputs.soft.get(c.index, c.soft)
            stretch[:, j] = inputs.stretch.get(c.index, c.stretch)
    # The property's own range, for values set from a script: soft below 0 is off, at or above 1 meaningless.
    return np.clip(np.nan_to_num(soft), 0.0, 0.5), np.maximum(np.nan_to_num(stretch, nan=1.0, posinf=1.0), 1.0)


def _length_ratio(offsets: F64, factor: F64) -> F64:
    """(...,) how many times longer chains of `offsets` (..., N, 3) get when every bone's Y is scaled by
    `factor` (...,): exactly `factor` for connected bones (offsets along Y), less for sideways offsets."""
    a = offsets[..., 0] ** 2 + offsets[..., 2] ** 2
    b = offsets[..., 1] ** 2
    natural = np.sqrt(a + b).sum(axis=-1)
    ratio: F64 = np.sqrt(a + factor[..., None] ** 2 * b).sum(axis=-1) / natural
    return ratio


def _factor_for(offsets: F64, ratio: F64) -> F64:
    """(...,) the Y scale that makes chains of `offsets` `ratio` times longer (`_length_ratio`'s inverse):
    Newton's method on the convex, increasing length from `ratio` itself (exact for connected bones)."""
    a = offsets[..., 0] ** 2 + offsets[..., 2] ** 2
    b = offsets[..., 1] ** 2
    goal = ratio * np.sqrt(a + b).sum(axis=-1)
    x = ratio.copy()
    moving = ratio > 1.0
    if not moving.any():
        return x
    for _ in range(8):
        r = np.sqrt(a + x[..., None] ** 2 * b)
        slope = (x[..., None] * b / np.maximum(r, 1e-300)).sum(axis=-1)
        step = (r.sum(axis=-1) - goal) / np.maximum(slope, 1e-300)
        x = np.where(moving & (slope > 0.0), x - step, x)
    return np.maximum(x, 1.0)


def _stretch(
    work: _Work,
    chains: Sequence[ChainPlan],
    positions: F64,
    frames: F64,
    offsets: F64,
    aims: F64,
    soft: F64,
    limit: F64,
) -> tuple[F64, F64, F64, F64, F64]:
    """Lengthen the bones of the stretching chains of a batch by just enough for their tips to reach.

    Each owned chain's bones are first brought back to their natural length (the Y scale a previous solve
    gave them divided out: `work.channel_y` of their carriers). The chain then stretches by the factor that
    takes its natural soft reach to the target, `d / soft(d)` (`solvers.soft`; with Soft 0, `d / L` beyond
    full extension), up to its Stretch: the shape follows the soft curve and the tip reaches; past the limit
    the tip trails (and beyond Stretch x L the chain is straight at full stretch). The solver gets the
    stretched offsets, the warm start rebuilt on them, and the factor (`ChainProblem.stretch`) that keeps the
    soft curve the natural chain's.

    Returns positions and offsets (F*K rows, as given, stretched where owned), the solver's stretch `rho`
    (F*K,), and (F, K) Y scale factors and (F, K, N) divisors (the bones' previous stretch).
    """
    f = work.matrices.shape[0]
    k, n = len(chains), offsets.shape[1]
    off = offsets.reshape(f, k, n, 3).copy()
    divisors = np.ones((f, k, n))
    owned = np.zeros(k, dtype=bool)
    for j, c in enumerate(chains):
        carriers = work.owned.get(c.index)
        if carriers is not None:
            owned[j] = True
            if work.channel_y is not None:
                divisors[:, j] = work.channel_y[:, carriers]
    off[..., 1] /= divisors
    root = positions.reshape(f, k, n + 1, 3)[:, :, 0]
    distance = np.linalg.norm(aims - root, axis=-1)
    natural = np.linalg.norm(off, axis=-1).sum(axis=-1)  # (F, K)
    eased = np.minimum(soft_distance(distance, natural, soft), natural)
    need = distance / np.maximum(eased, 1e-300)
    rho = np.where(owned[None], np.clip(need, 1.0, _length_ratio(off, limit)), 1.0)
    factors = _factor_for(off, rho)
    factors[:, ~owned] = 1.0
    off[..., 1] *= factors[..., None]
    # The warm start on the new lengths: joints from the current frames and the stretched offsets.
    pos = positions.reshape(f, k, n + 1, 3).copy()
    steps = np.einsum("fknij,fknj->fkni", frames.reshape(f, k, n, 3, 3)[:, owned], off[:, owned])
    pos[:, owned, 1:] = root[:, owned, None] + np.cumsum(steps, axis=2)
    stretched = offsets.reshape(f, k, n, 3).copy()
    stretched[:, owned] = off[:, owned]
    return pos.reshape(f * k, n + 1, 3), stretched.reshape(f * k, n, 3), rho.reshape(f * k), factors, divisors


def _rescale(work: _Work, chains: Sequence[ChainPlan], rows: list[list[int]], factors: F64, divisors: F64) -> None:
    """Give the bones of stretching chains their new Y scale in the working pose and note what to write:
    the carriers' Y scale channel, for chains that stretch in some frame or held a stretch to undo."""
    for j, c in enumerate(chains):
        carriers = work.owned.get(c.index)
        if carriers is None:
            continue
        bones = np.asarray(rows[j], dtype=np.int64)
        ratio = factors[:, j, None] / divisors[:, j]  # (F, N): new over previous stretch
        if (ratio != 1.0).any():
            work.scale[:, bones, 1] *= ratio
            work.rescaled.update(rows[j])
        held = divisors[:, j] if work.held_y is None else work.held_y[:, carriers]
        if (factors[:, j] != 1.0).any() or (held != 1.0).any():
            for b in dict.fromkeys(carriers):
                work.scale_out[b] = factors[:, j].copy()


def _solve_tree(
    snap: Snapshot,
    work: _Work,
    group: Group,
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool = False,
) -> None:
    settings = snap.settings
    sk = work.sk
    bones = group.bones
    pos = {b: i for i, b in enumerate(bones)}
    parents = np.array([pos.get(int(sk.parent[b]), -1) if i else -1 for i, b in enumerate(bones)], dtype=np.int64)
    effectors = np.array([pos[c.bones[-1]] for c in group.chains], dtype=np.int64)
    weights = np.array([c.weight for c in group.chains])
    limits = cached_limits(snap, [bones])
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
            residuals[:, e], iterations, [s[e] for s in statuses], float(settings.tolerance), sk.names[c.bones[-1]]
        )


def _refused(sk: Skeleton, chain: ChainPlan, exc: ValueError, tree: bool) -> str:
    """The message of a chain the solver refused although the rig's checks passed it.

    The rig checks what it can name in the panel's terms first (limits, transforms, scales, settings), so
    this is for what they did not foresee: the message names the chain's bones and what to try, and ends
    with the solver's own words (its field and index names), which is what a bug report needs.
    """
    root, tip = sk.names[chain.bones[0]], sk.names[chain.bones[-1]]
    bones = f"bone '{tip}'" if root == tip else f"bones '{root}' to '{tip}'"
    whole = " (solved as one tree with the chains it shares bones with)" if tree else ""
    return (
        f"cannot solve: the solver refused the numbers of {bones}{whole}: reset their pose (Alt G/R/S) and check "
        f"their Joint Limits; if that does not help, please report it with this detail: {exc}"
    )


def _guarded(
    report: RigReport,
    sk: Skeleton,
    chains: list[ChainPlan],
    run: Callable[[list[ChainPlan]], None],
    split: bool = True,
) -> list[ChainPlan]:
    """Run one solver call on `chains`; return those it could not solve (reported invalid).

    A ValueError (bad numbers that slipped past validation) marks the call's chains invalid. The solver
    raises before anything is stored in the working pose, so nothing of these chains is written. With
    `split` (a batch of independent chains) a failed call is run again chain by chain, so one chain's bad
    numbers never take the other chains of its batch down; a tree (`split=False`) fails as one.
    """
    try:
        run(chains)
    except ValueError as exc:
        if split and len(chains) > 1:
            return [bad for c in chains for bad in _guarded(report, sk, [c], run)]
        for c in chains:
            report.outcomes[c.index] = ChainOutcome(False, _refused(sk, c, exc, tree=not split))
        return chains
    return []


def _whole(run: Callable[[], None]) -> Callable[[list[ChainPlan]], None]:
    """A solve of a whole group (a tree) as `_guarded` calls it: it takes the group's chains and ignores them."""

    def call(_chains: list[ChainPlan]) -> None:
        run()

    return call


def _solve_levels(
    snap: Snapshot,
    work: _Work,
    groups: list[Group],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool,
    dropped: Sequence[Group] = (),
) -> None:
    """Solve `groups` level by level (chains below chains after them); `dropped`: groups already refused.

    A chain below a chain that is not solved: nothing of the upper chain is written, so Blender keeps
    showing its bones as they are, and the chain below is solved on exactly that pose and says "reached"
    only if it reaches there. With Start From 'Current' the working pose is the pose Blender evaluated;
    with 'Rest', chains refused for their limits are left out of the start pose (`solve`), so their
    bones keep Blender's pose too. Only a chain refused after the 'Rest' start pose was built (`dropped`:
    a bone scaled to zero; or a solver error here) has its bones at rest in the working pose, a pose
    Blender does not show: a chain below it is refused as well rather than solved for a pose nobody sees.
    """
    sk = work.sk
    # The one rig setting the solver checks that its UI range does not guard (a script can store NaN).
    tolerance = float(snap.settings.tolerance)
    if not (math.isfinite(tolerance) and tolerance > 0.0):
        msg = (
            f"'{snap.settings.rig}' has a Tolerance of {tolerance:.4g}: set a distance above 0 "
            "(world units; default 0.001) in the Reach IK panel"
        )
        for g in groups:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        return
    rest_start = inputs.basis is not None
    off_pose = {b for g in dropped for b in g.bones} if rest_start else set()  # at rest here, not in Blender
    levels = sorted({g.level for g in groups})
    for li, lv in enumerate(levels):
        if li > 0:
            work.propagate()
        batches: dict[tuple[str, int, bool], list[ChainPlan]] = {}
        inputs = _with_local_targets(work, inputs, [g for g in groups if g.level == lv])
        held = _fk_start(work, [g for g in groups if g.level == lv], inputs) if inputs.influence else {}
        for g in groups:
            if g.level != lv:
                continue
            above = [a for a in sk.ancestors(g.bones[0]) if a in off_pose] if off_pose else []
            if above:
                msg = (
                    f"not solved: it hangs below bone '{sk.names[above[0]]}' of a chain that cannot be solved, "
                    "and Start From 'Rest' would solve it on a pose Blender does not show: fix that chain first"
                )
                for c in g.chains:
                    report.outcomes[c.index] = ChainOutcome(False, msg)
                continue
            if g.is_tree:
                tree_run = _whole(partial(_solve_tree, snap, work, g, inputs, space, report, smooth))
                if _guarded(report, sk, g.chains, tree_run, split=False) and rest_start:
                    off_pose.update(g.bones)
                continue
            c = g.chains[0]
            batches.setdefault((c.solver, len(c.bones), c.use_target_rotation), []).append(c)
        for (solver, _n, _rot), chains in batches.items():
            # `run(chains)` solves any subset of the batch (`_guarded` retries chain by chain).
            run = partial(_solve_batch, snap, work, solver, inputs=inputs, space=space, report=report, smooth=smooth)
            failed = _guarded(report, sk, chains, run)
            if rest_start:
                off_pose.update(b for c in failed for b in c.bones)
        if inputs.influence:
            _blend_level(snap, work, [g for g in groups if g.level == lv], inputs, space, report, held)


def _bone_influence(group: Group, influence: dict[int, F64], f: int) -> dict[int, F64]:
    """(F,) Influence of each bone of `group` that some chain blends: in a tree, the largest of the chains
    through the bone (a shared bone follows IK as long as any of its chains does). Absent: 1."""
    out: dict[int, F64] = {}
    for c in group.chains:
        w = influence.get(c.index)
        for b in c.bones:
            here = np.broadcast_to(w, (f,)) if w is not None else np.ones(f)
            out[b] = np.maximum(out[b], here) if b in out else here
    return {b: w for b, w in out.items() if (w < 1.0).any()}


def _apply_preset(work: _Work, preset: dict[int, F64]) -> None:
    """Give bones the basis rotations `preset` (bone -> (F,3,3)) in the working pose, parents first, each
    keeping its head's offset from its parent; the bones below follow (`_Work.propagate`)."""
    sk = work.sk
    f = work.matrices.shape[0]
    bones = sorted(preset, key=lambda b: (int(sk.depth[b]), b))
    before = {b: (work.rot[:, b].copy(), work.heads()[:, b].copy()) for b in bones}
    for k, b in enumerate(bones):
        if k and sk.depth[b] != sk.depth[bones[k - 1]]:
            work.propagate()  # bones between two preset ones follow the upper one first
        p = int(sk.parent[b])
        p_rot = work.rot[:, p] if p >= 0 else np.broadcast_to(np.eye(3), (f, 3, 3))
        rot = p_rot @ sk.rest_rel[b][None] @ preset[b]
        head = before[b][1]
        if p >= 0:
            old_p = before[p] if p in before else (work.rot0[:, p], work.original[:, p, :3, 3])
            offset = np.einsum("fji,fj->fi", old_p[0], before[b][1] - old_p[1])
            head = work.heads()[:, p] + np.einsum("fij,fj->fi", p_rot, offset)
        work.set_bones([b], rot[:, None], head[:, None])
    work.propagate()


def _fk_start(work: _Work, groups: Sequence[Group], inputs: Inputs) -> dict[int, tuple[F64, F64, F64]]:
    """Put the bones of blended groups in their FK pose before they are solved; returns their pose before.

    A blended chain's IK solution starts from its FK pose (Start From 'Current'; 'Rest' starts from rest
    as always), so what it shows is a function of the FK pose and the targets, as with Blender's own
    constraint: the same whether reached by playback, scrubbing or a bake, and no drift from re-solving a
    blend. At Influence 1 the warm start from the current pose is kept.
    """
    f = work.matrices.shape[0]
    held: dict[int, tuple[F64, F64, F64]] = {}
    if inputs.basis is not None:
        return held
    for g in groups:
        if not _bone_influence(g, inputs.influence, f):
            continue
        old_rot = {b: work.rot[:, b].copy() for b in g.bones}
        old_head = {b: work.heads()[:, b].copy() for b in g.bones}
        rots, heads = _rebuild(work, g.bones, old_rot, old_head, lambda b, _p_old: inputs.fk.get(b))
        for b in g.bones:
            held[b] = (work.matrices[:, b].copy(), work.rot[:, b].copy(), np.asarray(b in work.solved))
        work.set_bones(g.bones, rots, heads)
    return held


def _rebuild(
    work: _Work,
    bones: Sequence[int],
    old_rot: dict[int, F64],
    old_head: dict[int, F64],
    basis_of: Callable[[int, F64], F64 | None],
    stretch: dict[int, F64] | None = None,
) -> tuple[F64, F64]:
    """Forward kinematics of `bones` (parents first) on new basis rotations, from their pose `old_rot`,
    `old_head`: a bone turns to its parent's new rotation @ rest_rel @ `basis_of(bone, the parent's old
    rotation)` (None: it keeps its old rotation). A bone whose parent is among `bones` keeps its head's
    offset from that parent in the parent's frame (along the parent's Y axis scaled by `stretch[parent]`);
    the others keep their heads. Returns (F, n, 3, 3) rotations and (F, n, 3) heads, in `bones` order."""
    sk = work.sk
    f = work.matrices.shape[0]
    rots: dict[int, F64] = {}
    heads: dict[int, F64] = {}
    for b in bones:
        p = int(sk.parent[b])
        inside = p in rots
        p_old = old_rot[p] if inside else (work.rot[:, p] if p >= 0 else np.broadcast_to(np.eye(3), (f, 3, 3)))
        p_new = rots[p] if inside else p_old
        basis = basis_of(b, p_old)
        rots[b] = old_rot[b] if basis is None else p_new @ sk.rest_rel[b][None] @ basis
        if inside:
            offset = np.einsum("fji,fj->fi", p_old, old_head[b] - old_head[p])  # in the parent's frame
            if stretch and p in stretch:
                offset[:, 1] *= stretch[p]  # the parent's length as blended (its Y axis)
            heads[b] = heads[p] + np.einsum("fij,fj->fi", p_new, offset)
        else:
            heads[b] = old_head[b]
    return np.stack([rots[b] for b in bones], axis=1), np.stack([heads[b] for b in bones], axis=1)


def _blend_level(
    snap: Snapshot,
    work: _Work,
    groups: Sequence[Group],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    held: dict[int, tuple[F64, F64, F64]],
) -> None:
    """Blend the solved bones of `groups` from their FK pose toward the IK solution by their chains' Influence.

    Per bone, in its parent's frame: basis = slerp(FK basis, IK basis, w) (as quaternions, the shorter way),
    then the chain is rebuilt root to tip on the blended rotations, each bone's head keeping its offset from
    its parent's head as the solve left it. Influence 1 leaves the solve as it is; 0 gives the FK rotations
    (the rig layer then writes the FK channel values themselves, byte for byte). The outcomes of blended
    chains are measured again on the blended pose: a chain that does not reach there does not say it does.
    Runs per level, before the chains below are solved, so they reach from their parent's blended pose.
    """
    sk = work.sk
    f = work.matrices.shape[0]
    for g in groups:
        if not all(c.index in report.outcomes and report.outcomes[c.index].valid for c in g.chains):
            # Not solved: its bones go back to the pose Blender shows (`_fk_start` moved them), unwritten.
            for b in g.bones:
                if b in held:
                    work.matrices[:, b], work.rot[:, b] = held[b][0], held[b][1]
                    if not bool(held[b][2]):
                        work.solved.discard(b)
            continue
        weights = _bone_influence(g, inputs.influence, f)
        if not weights:
            continue
        bones = [b for b in g.bones if b in work.solved]
        ik_rot = {b: work.rot[:, b].copy() for b in bones}
        ik_head = {b: work.heads()[:, b].copy() for b in bones}
        stretch = _blend_stretch(work, g, inputs) if work.scale_out else {}

        def blended(b: int, p_ik: F64, ik_rot: dict[int, F64] = ik_rot, weights: dict[int, F64] = weights) -> F64:
            basis_ik = local_rotations(ik_rot[b], p_ik, sk.rest_rel[b][None])
            w, fk = weights.get(b), inputs.fk.get(b)
            if w is None or fk is None:
                return basis_ik
            basis = convert.slerp_rotations(fk, basis_ik, w)
            return np.where((w >= 1.0)[:, None, None], basis_ik, np.where((w <= 0.0)[:, None, None], fk, basis))

        work.set_bones(bones, *_rebuild(work, bones, ik_rot, ik_head, blended, stretch))
        for c in g.chains:
            w = inputs.influence.get(c.index)
            if w is None or not (w < 1.0).any():
                continue
            _reoutcome(work, c, inputs, space, report, float(snap.settings.tolerance), w)


def _blend_stretch(work: _Work, g: Group, inputs: Inputs) -> dict[int, F64]:
    """Blend a stretching chain's stretch as its rotations: the carriers' Y scale from the FK value toward
    the IK one by Influence, linearly. Rescales the working pose's bones to it and returns bone -> (F,)
    ratio of the blended length to the IK length (for the heads below it)."""
    out: dict[int, F64] = {}
    if g.is_tree:
        return out
    c = g.chains[0]
    carriers = work.owned.get(c.index)
    w = inputs.influence.get(c.index)
    if carriers is None or w is None or carriers[0] not in work.scale_out:
        return out
    ik = work.scale_out[carriers[0]]
    fk = inputs.fk_scale.get(carriers[0])
    fk = np.ones_like(ik) if fk is None else np.broadcast_to(fk, ik.shape)
    blended = np.where(w >= 1.0, ik, np.where(w <= 0.0, fk, fk + w * (ik - fk)))
    ratio = blended / ik
    for b in dict.fromkeys(carriers):
        work.scale_out[b] = blended.copy()
    for b in c.bones[: len(carriers)]:
        work.scale[:, b, 1] *= ratio
        out[b] = ratio
    return out


def _reoutcome(
    work: _Work, c: ChainPlan, inputs: Inputs, space: Space, report: RigReport, tolerance: float, w: F64
) -> None:
    """A blended chain's outcome, measured on the blended pose (its IK outcome's iterations kept)."""
    ik = report.outcomes[c.index]
    tip = c.bones[-1]
    goals = space.points(inputs.targets[c.index])
    residuals = np.linalg.norm(work.tails([tip])[:, 0] - goals, axis=1) * space.scale  # (F,) world units
    worst = int(np.argmax(residuals))
    residual = float(residuals[worst])
    reached = bool((residuals <= tolerance * (1.0 + 1e-6)).all())
    message = ik.message
    if not reached:
        name = work.sk.names[tip]
        share = float(w[worst])
        if share <= 0.0:
            message = (
                f"FK: Influence is 0, so the chain shows its FK pose, and the tip of '{name}' is {residual:.4g} "
                "from the target: raise Influence to reach it"
            )
        else:
            message = (
                f"blended: Influence {share:.3g} shows the pose {share:.0%} of the way from FK to IK, so the tip of "
                f"'{name}' is {residual:.4g} from the target"
            )
            if not ik.reached:
                message += f" (IK alone: {ik.message})"
        if len(residuals) > 1:
            message = f"worst frame #{worst}: {message}"
    report.outcomes[c.index] = replace(ik, message=message, residual=residual, reached=reached, residuals=residuals)


def _usable_groups(
    snap: Snapshot,
    groups: list[Group],
    inputs: Inputs,
    scale: F64,
    report: RigReport,
    channels: Channels | None,
) -> list[Group]:
    """Groups that can be solved on these inputs; the chains of the others are reported invalid.

    Checked per chain, on numbers that change while animating (so not in the cached plan): bones scaled to
    zero, a rotation channel Blender clamped to FLT_MAX (an infinite value typed in: the pose stays finite,
    but no rotation we write could be compared with or continue from it), and a target scaled to zero on a
    chain that takes the target's rotation (it has no orientation to take).
    """
    smallest = scale.min(axis=(0, 2))  # (B,) each bone's smallest axis scale over every frame
    sk = snap.sk
    broken_channel: dict[int, str] = {}
    if channels is not None and snap.channel_kind is not None:
        # Any channel of any bone out of range is rare: one whole-array test each, then name the bones.
        for kind, attr in enumerate(CHANNEL_NAMES):
            if (np.abs(channels[attr]) < 1e30).all():  # False for NaN too
                continue
            bones = np.unique(np.fromiter((b for g in groups for b in g.bones), dtype=np.int64))
            rows = bones[snap.channel_kind[bones] == kind]
            fine = (np.abs(channels[attr][rows]) < 1e30).all(axis=1)
            broken_channel.update((int(b), attr) for b in rows[~fine].tolist())
    flat_bones = set(np.flatnonzero(smallest < 1e-6).tolist())  # usually empty: one test for every group
    ok = []
    for g in groups:
        msg = ""
        flat = [b for b in g.bones if b in flat_bones] if flat_bones else []
        bad = [b for b in g.bones if b in broken_channel] if broken_channel else []
        if flat:
            name = sk.names[flat[0]]
            msg = f"bone '{name}' is scaled to zero in the pose: reset its scale (Alt S) so the chain has length"
        elif bad:
            name = sk.names[bad[0]]
            msg = (
                f"bone '{name}' has an infinite value in its {broken_channel[bad[0]].replace('_', ' ')} "
                "channel: reset its rotation (Alt R) or type a finite value"
            )
        for c in g.chains:
            if msg or not c.use_target_rotation:
                continue
            axes = np.linalg.norm(inputs.targets[c.index][:, :3, :3], axis=1)  # (F, 3) column lengths
            if (axes < 1e-6).any():
                msg = (
                    f"the target {c.label('target')} is scaled to zero, so it has no rotation for Use Target "
                    "Rotation: give it a scale or turn Use Target Rotation off"
                )
        if msg:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        else:
            ok.append(g)
    return ok


def _first(a: F64 | None) -> F64 | None:
    return None if a is None else a[:1]


def solve(
    snap: Snapshot,
    inputs: Inputs,
    report: RigReport,
    smooth: bool = False,
    channels: Channels | None = None,
    final_pose: bool = False,
) -> Solved:
    """Solve every planned group over the stacked frames of `inputs`; fill `report`; return basis rotations.

    `smooth` (for baking) makes results vary continuously from frame to frame (`uniform_iterations`).
    `channels` (the current rotation channels, when the result is written to them) are checked too.
    `final_pose` also returns the whole armature's pose after the solve (`Solved.pose`).
    """
    sk, plan, lengths = snap.sk, snap.plan, snap.lengths
    f = inputs.pose.shape[0]
    # Chains whose limits the solver would refuse are dropped before the start pose is built: their bones
    # keep Blender's pose there, and chains below them are solved on it (see `_solve_levels`).
    limited = _soft_checked_groups(_limit_checked_groups(snap, report), inputs, report)
    owned = _owned_stretch(limited, inputs)
    unit_y = list(dict.fromkeys(b for carriers in owned.values() for b in carriers))
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
        pose1 = rest_start_pose(sk, plan, first, limited, unit_y) if first.basis is not None else first.pose
        rot1, sc1 = convert.rotation_parts(pose1[:, :, :3, :3])
        pose, rot, sc = (np.repeat(a, f, axis=0) for a in (pose1, rot1, sc1))
    else:
        pose = rest_start_pose(sk, plan, inputs, limited, unit_y) if inputs.basis is not None else inputs.pose
        rot, sc = convert.rotation_parts(pose[:, :, :3, :3])
    work = _Work(sk=sk, original=pose, matrices=pose.copy(), rot=rot, rot0=rot.copy(), scale=sc, lengths=lengths)
    if owned:
        work.owned = owned
        if inputs.scale is not None:
            # The stretch a previous solve left in the carriers' Y scale (a 'Rest' start takes it as 1).
            channel_y = np.broadcast_to(inputs.scale[..., 1], (f, len(sk.names))).copy()
            work.held_y = channel_y.copy()
            if inputs.basis is not None:
                channel_y[:, unit_y] = 1.0
            work.channel_y = channel_y
    if inputs.preset:
        _apply_preset(work, inputs.preset)
    groups = _usable_groups(snap, limited, inputs, sc, report, channels)
    kept = {id(g) for g in groups}
    dropped = [g for g in limited if id(g) not in kept]
    _solve_levels(snap, work, groups, inputs, Space.of(inputs.world), report, smooth, dropped)
    for i, note in plan.notes.items():
        if i in report.outcomes and report.outcomes[i].valid and not report.outcomes[i].message:
            report.outcomes[i].message = note
    if not work.solved:
        return Solved([], np.zeros((inputs.pose.shape[0], 0, 3, 3)), inputs.pose if final_pose else None)
    if final_pose:
        work.propagate()
    solved = np.fromiter(work.solved, dtype=np.int64, count=len(work.solved))
    order = solved[np.lexsort((solved, sk.depth[solved]))]  # parents before children
    bones = order.tolist()
    # `work.rot` holds every solved rotation (set_bones writes both; propagate never moves solved bones).
    frames = work.rot[:, order]  # (F, n, 3, 3)
    parent_frames = work.parent_rot(bones)
    basis = local_rotations(frames, parent_frames, sk.rest_rel[bones][None])
    out = Solved(bones, basis, work.matrices if final_pose else None)
    if work.scale_out:
        out.scale_bones = list(work.scale_out)
        out.scale_y = np.stack(list(work.scale_out.values()), axis=1)
    return out


def _most(values: dict[int, F64], c: ChainPlan, planned: float) -> float:
    """A chain's largest Soft or Stretch over the frames: as read per frame when it was, else as planned."""
    read = values.get(c.index)
    return planned if read is None else float(np.max(read))


def _soft_checked_groups(groups: list[Group], inputs: Inputs, report: RigReport) -> list[Group]:
    """The groups soft and stretch can be solved for; the chains of the others are reported invalid.

    Trees (chains that share bones) take neither: their shared bones have no one root-to-target line to
    ease along, nor one factor to stretch by. A chain whose bones cannot stretch (`ChainPlan.stretch_problem`)
    is refused in the frames it would. Checked on the per-frame values, so an animated Soft or Stretch is
    caught in a bake as well as live (where the plan checks the current values first).
    """
    ok = []
    for g in groups:
        msg = ""
        if g.is_tree:
            uses = [
                c for c in g.chains if _most(inputs.soft, c, c.soft) > 0.0 or _most(inputs.stretch, c, c.stretch) > 1.0
            ]
            if uses:
                names = ", ".join(f"'{c.name}'" for c in uses)
                msg = (
                    "Soft and Stretch work on single chains, and this chain shares bones with others (a tree, "
                    f"solved as one): set Soft to 0 and Stretch to 1 on {names}"
                )
        else:
            c = g.chains[0]
            if c.carriers is None and _most(inputs.stretch, c, c.stretch) > 1.0:
                msg = c.stretch_problem or "this chain cannot stretch: set Stretch to 1"
        if msg:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        else:
            ok.append(g)
    return ok


def _owned_stretch(groups: list[Group], inputs: Inputs) -> dict[int, list[int]]:
    """Chain index -> carriers, for the chains that own their bones' Y scale in this solve: those whose
    Stretch is above 1 in some frame, and those with a stretch of ours to undo (`Inputs.release`)."""
    owned = {}
    for g in groups:
        if g.is_tree:
            continue
        c = g.chains[0]
        if c.carriers is not None and (_most(inputs.stretch, c, c.stretch) > 1.0 or c.index in inputs.release):
            owned[c.index] = c.carriers
    return owned
