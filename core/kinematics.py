"""The working pose of a solve and forward kinematics on it (no bpy).

Blender poses a bone as parent_pose @ rest_rel @ basis; these functions build, carry and invert that on our
own arrays over a stack of F frames, since asking Blender to re-evaluate inside its handlers is unsafe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from . import convert
from .model import ALIGNED, AVERAGE, F64, FIX_SHEAR, FULL, I64, Group, Inputs, Plan, Skeleton


def local_rotations(frames: F64, parent_frames: F64, rest_rel: F64) -> F64:
    """Basis rotations that give armature-space `frames` under `parent_frames` (all (...,3,3)).

    Blender poses a bone as parent_pose @ rest_rel @ basis, so basis = (parent @ rest_rel)^T @ frame.
    """
    ref = parent_frames @ rest_rel
    out: F64 = np.swapaxes(ref, -1, -2) @ frames
    return out


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


@dataclass
class Work:
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
    # Bones of owned chains that hold a stretch of ours without carrying their chain's stretch now (a chain
    # lengthened as its Stretch went back to 1): divided out with their carrier's, and put back to 1.
    loose: set[int] = field(default_factory=set)

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


def chain_arrays(work: Work, rows: list[list[int]], ends: list[int] | None = None) -> tuple[F64, ...]:
    """positions, frames, offsets, ref_local, base for F x K chains of N bones (root first), frame-major.

    The last joint of each row is its last bone's tail, or with `ends` (one bone per row) that bone's head:
    with Use Target Rotation the bones above the tip reach for where the tip's head must be, and a tip that
    is not connected has its head away from its parent's tail.
    With Start From 'Rest' the working pose already holds the chain at rest under its parent
    (`rest_start_pose`, then `Work.propagate` for chains below chains), so no case is needed here.
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
        # The tip's tail, as `Work.tails`: head + Y axis * rest length.
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


def apply_preset(work: Work, preset: dict[int, F64], scale_y: dict[int, F64] | None = None) -> None:
    """Give bones the basis rotations `preset` (bone -> (F,3,3)) in the working pose, parents first, each
    keeping its head's offset from its parent; the bones below follow (`Work.propagate`). `scale_y`: bone ->
    (F,) factor its Y scale changed by (a stretch given back): the bones below follow that too."""
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
        if scale_y and b in scale_y:
            work.scale[:, b, 1] *= scale_y[b]
            work.rescaled.add(b)
        work.set_bones([b], rot[:, None], head[:, None])
    work.propagate()
