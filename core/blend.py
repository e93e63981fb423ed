"""Influence: the solved bones of a level blended from their FK pose toward the IK solution."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from . import convert
from .kinematics import Space, Work, local_rotations
from .model import F64, ChainPlan, Group, Inputs, RigReport, Snapshot
from .trees import branch


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


def fk_start(work: Work, groups: Sequence[Group], inputs: Inputs) -> dict[int, tuple[F64, F64, F64]]:
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
    work: Work,
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


def blend_level(
    snap: Snapshot,
    work: Work,
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
            # Not solved: its bones go back to the pose Blender shows (`fk_start` moved them), unwritten.
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


def _blend_stretch(work: Work, g: Group, inputs: Inputs) -> dict[int, F64]:
    """Blend each stretching chain's stretch as its rotations: the carriers' Y scale from the FK value toward
    the IK one by Influence, linearly (in a tree, the carriers of the chain's branch). Rescales the working
    pose's bones to it and returns bone -> (F,) ratio of the blended length to the IK length (for the heads
    below it)."""
    out: dict[int, F64] = {}
    for c in g.chains:
        carriers = work.owned.get(c.index)
        w = inputs.influence.get(c.index)
        if carriers is None or w is None or carriers[0] not in work.scale_out:
            continue
        ik = work.scale_out[carriers[0]]
        fk = inputs.fk_scale.get(carriers[0])
        fk = np.ones_like(ik) if fk is None else np.broadcast_to(fk, ik.shape)
        blended = np.where(w >= 1.0, ik, np.where(w <= 0.0, fk, fk + w * (ik - fk)))
        ratio = blended / ik
        for b in dict.fromkeys(carriers):
            work.scale_out[b] = blended.copy()
        rows = branch(g.chains, c) if g.is_tree else c.bones
        for b in rows[: len(carriers)]:
            work.scale[:, b, 1] *= ratio
            out[b] = ratio
    return out


def _reoutcome(
    work: Work, c: ChainPlan, inputs: Inputs, space: Space, report: RigReport, tolerance: float, w: F64
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
