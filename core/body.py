"""Full Body: a rig's chains solved as one body (`Object.reach_ik.full_body`; `solvers.body` does the math).

The order of a full-body solve (`solve_levels`):

1. The body root (the hips: `BodySettings.root`, else the lowest common ancestor of the chains) goes to its
   *home*: where it stands when nothing pulls (its pose as animated or posed by hand; `rig/body.py` keeps it
   while the channels hold what a solve wrote), so a solve never starts from the last solve's hips: no
   drift, and a bake of a frame equals live playback of it.
2. Chains that do not hang below the body root are solved first, as usual.
3. The *body chains* (chains whose bones carry other chains: the spine) are solved toward their own targets
   from the home pose, as usual.
4. The body stage (`solvers.body.solve_body`) moves and turns the root and turns the body chains' bones so
   that each pulling chain's target comes within its reach, each pinned chain's target staying within its
   reach. Chains whose target hangs below the body root move with the body and take no part.
5. The other chains (the limbs) are solved by their own solvers from where the body put them: a pinned foot
   lands exactly on its control, a pulled hand reaches when the body could bring it within reach.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from ..solvers.body import BodyProblem, BodyResult, solve_body
from ..solvers.rotations import norms
from . import body_live
from .batch import with_local_targets
from .body_memo import DIGITS, memo_levels
from .checks import cached_limits
from .kinematics import Space, Work, child_pose, child_relative
from .messages import bent_by_body, mark_body_blocked
from .model import F64, ChainOutcome, ChainPlan, Group, Inputs, RigReport, Skeleton, Snapshot

Levels = Callable[[Snapshot, Work, list[Group], Inputs, Space, RigReport, bool, Sequence[Group]], None]


def body_root(sk: Skeleton, groups: Sequence[Group], requested: int) -> int:
    """The body root: `requested` when it is a bone, else the lowest common ancestor of the chains' roots
    that no chain solves (-1: the chains share no ancestor)."""
    if requested >= 0:
        return requested
    roots = [c.bones[0] for g in groups for c in g.chains]
    if not roots:
        return -1
    common: list[int] | None = None
    for r in roots:
        line = [r, *sk.ancestors(r)][::-1]  # top first
        if common is None:
            common = line
        else:
            k = 0
            while k < min(len(common), len(line)) and common[k] == line[k]:
                k += 1
            common = common[:k]
    solved = {b for g in groups for b in g.bones}
    while common and common[-1] in solved:
        common.pop()
    return common[-1] if common else -1


def _subtree(sk: Skeleton, root: int) -> set[int]:
    below = {root}
    for b in np.argsort(sk.depth, kind="stable").tolist():
        if int(sk.parent[b]) in below:
            below.add(b)
    return below


def _place_home(work: Work, root: int, location: F64 | None, rotation: F64 | None) -> None:
    """Put the root at its home (its location channel and basis rotation; None: each as the pose has it) and
    mark it solved (its channels are written and keyed like the chain bones')."""
    sk = work.sk
    if location is not None or rotation is not None:
        parent = int(sk.parent[root])
        modes = sk.scale_modes()[[root]]
        m = work.matrices[:, [root]]
        rel = m if parent < 0 else child_relative(work.matrices[:, [parent]], m, modes)
        basis = _rigid_inverse(sk.rest_rel4[root])[None, None] @ rel  # (F, 1, 4, 4): T @ R @ S
        scale = np.linalg.norm(basis[..., :3, :3], axis=-2, keepdims=True)
        if rotation is not None:
            basis[..., :3, :3] = rotation * scale
        if location is not None:
            basis[..., :3, 3] = location
        rel = sk.rest_rel4[root][None, None] @ basis
        mats = rel if parent < 0 else child_pose(work.matrices[:, [parent]], rel, modes)
        rot = mats[..., :3, :3] / np.maximum(np.linalg.norm(mats[..., :3, :3], axis=-2, keepdims=True), 1e-300)
        # Bones below the root that something set already (a preset, the FK pose given back, a bake's seed):
        # `Work.propagate` carries only the others, so these move with the root here, rigidly.
        placed = [b for b in work.solved if b != root and root in sk.ancestors(b)]
        turn = rot[:, 0] @ np.swapaxes(work.rot[:, root], -1, -2)  # (F, 3, 3)
        shift = mats[:, 0, :3, 3] - np.einsum("fij,fj->fi", turn, work.heads()[:, root])
        work.set_bones([root], rot, mats[..., :3, 3])
        if placed:
            heads = np.einsum("fij,fbj->fbi", turn, work.heads()[:, placed]) + shift[:, None]
            work.set_bones(placed, turn[:, None] @ work.rot[:, placed], heads)
        return
    work.set_bones([root], work.rot[:, [root]].copy(), work.heads()[:, [root]].copy())


def _rigid_inverse(m: F64) -> F64:
    """The inverse of a rigid (rotation and translation) 4x4 matrix, in closed form (np.linalg.inv on one
    small matrix costs more than the whole write)."""
    inv = np.eye(4)
    inv[:3, :3] = m[:3, :3].T
    inv[:3, 3] = -m[:3, :3].T @ m[:3, 3]
    return inv


def root_location(work: Work, root: int) -> F64:
    """(F, 1, 3) the location channel that puts the root where the working pose has it."""
    sk = work.sk
    m = work.matrices[:, [root]]
    parent = int(sk.parent[root])
    rel = m if parent < 0 else child_relative(work.matrices[:, [parent]], m, sk.scale_modes()[[root]])
    basis = _rigid_inverse(sk.rest_rel4[root])[None, None] @ rel
    out: F64 = basis[..., :3, 3]
    return out


def _aims(work: Work, space: Space, inputs: Inputs, chains: list[ChainPlan]) -> tuple[F64, F64, F64]:
    """(F, A, 3) where each chain's effector must go, (F, A, 3) its root's head and (F, A) its reach, armature
    space, for every chain at once (a few numpy calls whatever their number: this runs on every update)."""
    goals = space.points_of(np.stack([inputs.targets[c.index] for c in chains], axis=1))
    starts = work.heads()[:, [c.bones[0] for c in chains]]
    # Each chain's joints: its rows' heads, then its last row's tail (or, with Use Target Rotation, the tip's
    # head: the rows reach for where the tip's head must be). Rows of `both` index heads, then tails.
    b_count = work.matrices.shape[1]
    joints: list[int] = []
    firsts: list[int] = []
    for c in chains:
        rows = c.bones[:-1] if c.use_target_rotation else c.bones
        firsts.append(len(joints))
        joints += rows
        joints.append(c.bones[-1] if c.use_target_rotation else b_count + rows[-1] if rows else c.bones[0])
    # Only the joints' heads and tails (the same numbers as every bone's, for a fraction of the work).
    picks = np.asarray(joints, dtype=np.int64)
    is_tail = picks >= b_count
    both = np.empty((work.matrices.shape[0], len(joints), 3))
    both[:, ~is_tail] = work.heads()[:, picks[~is_tail]]
    if is_tail.any():
        both[:, is_tail] = work.tails((picks[is_tail] - b_count).tolist())
    seg = np.linalg.norm(np.diff(both, axis=1), axis=2)  # (F, joints - 1); one per chain crosses to the next
    walked = np.concatenate([np.zeros((seg.shape[0], 1)), np.cumsum(seg, axis=1)], axis=1)
    lasts = np.array([*firsts[1:], len(joints)]) - 1
    reach = walked[:, lasts] - walked[:, firsts]
    stretch = np.array([c.stretch if c.carriers is not None else 1.0 for c in chains])
    reach = reach * stretch
    for k, c in enumerate(chains):
        if c.use_target_rotation:
            tip = c.bones[-1]
            rot = space.rotations(inputs.targets[c.index])
            off = np.einsum("fji,fj->fi", work.rot[:, tip], work.tails([tip])[:, 0] - work.heads()[:, tip])
            goals[:, k] = goals[:, k] - np.einsum("fij,fj->fi", rot, off)
            if len(c.bones) == 1:
                reach[:, k] = 0.0  # nothing left to reach with
    return goals, starts, reach


def solve_levels(
    snap: Snapshot,
    work: Work,
    groups: list[Group],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool,
    dropped: Sequence[Group],
    levels: Levels,
) -> int:
    """Solve `groups` as one body (see the module's order); returns the body root (-1: solved per chain)."""
    settings = snap.body
    assert settings is not None
    sk = work.sk
    body_live.forget(snap.plan)
    root = body_root(sk, groups, settings.root)
    if root < 0 or any(root in g.bones for g in groups):
        levels(snap, work, groups, inputs, space, report, smooth, dropped)
        if root >= 0:
            owner = next(c.name for g in groups for c in g.chains if root in c.bones)
            note = f"Full Body: the Body Root '{sk.names[root]}' is a bone of chain '{owner}'; chains solved one by one"
        else:
            note = "Full Body: the chains share no bone above them to move the body with; chains solved one by one"
        for g in groups:
            for c in g.chains:
                out = report.outcomes.get(c.index)
                if out is not None and out.valid and not out.message:
                    out.message = note
        return -1
    below = _subtree(sk, root)
    inside = [g for g in groups if g.bones[0] in below]
    outside = [g for g in groups if g.bones[0] not in below]
    if outside:
        levels(snap, work, outside, inputs, space, report, smooth, dropped)
        work.propagate()
    memo = partial(memo_levels, levels)
    _place_home(work, root, settings.home_location, settings.home_rotation)
    work.propagate()
    # The root at its home, for the memo of the spine's solve (`_spine_start`): a function of the home alone.
    # Its rotation and head: its matrix carries the scale as read, float32 noise (~1e-8) on each update.
    home = (
        np.round(np.concatenate([work.rot[:, root], work.heads()[:, root, :, None]], axis=2), DIGITS) + 0.0
    ).tobytes()
    carriers = {a for g in inside for c in g.chains for a in sk.ancestors(c.bones[0])}
    body_groups = [g for g in inside if any(b in carriers for b in g.bones)]
    limbs = [g for g in inside if not any(b in carriers for b in g.bones)]
    if body_groups:
        memo(
            snap,
            work,
            body_groups,
            inputs,
            space,
            report,
            smooth,
            dropped,
            partial(_spine_start, work, root, home, inputs),
        )
        work.propagate()
    spine = [
        b for g in body_groups if all(report.outcomes.get(c.index, _VALID).valid for c in g.chains) for b in g.bones
    ]
    bones = [root, *sorted(set(spine), key=lambda b: (int(sk.depth[b]), b))]
    index = {b: i for i, b in enumerate(bones)}
    anchors = [c for g in limbs for c in g.chains if c.target_local not in below]
    moved = False
    blocked = np.zeros(work.matrices.shape[0], dtype=bool)
    if anchors and len(limbs):
        # Control bones of this rig where the working pose has them (a control below a chain solved above).
        here = with_local_targets(work, inputs, limbs)
        # What a live update that moves only the limbs' controls needs of this solve (core/body_live.py).
        live = (
            work.matrices.shape[0] == 1
            and not outside
            and not dropped
            and int(sk.parent[root]) < 0
            and settings.home_location is not None
            and settings.home_rotation is not None
            and not settings.missing
            and inputs.basis is None
            and not inputs.influence
            and not work.owned
            and not work.rescaled
            and len(anchors) == sum(len(g.chains) for g in limbs)
            and len(spine) == sum(len(g.bones) for g in body_groups)
            and all(int(sk.parent[b]) in index for b in bones[1:])
        )
        spine_live = _spine_live(work, space, inputs, report, body_groups, index) if live else None
        moved, blocked = _move_body(snap, work, bones, index, anchors, here, space, root, spine_live)
    if moved:
        work.propagate()
        _body_chain_outcomes(work, body_groups, inputs, space, report, float(snap.settings.tolerance))
    if limbs:
        memo(snap, work, limbs, inputs, space, report, smooth, dropped)
    if blocked.any():
        mark_body_blocked(report.outcomes, anchors, {c.index for c in anchors if settings.pins.get(c.index, False)})
    for g in limbs:
        for c in g.chains:
            out = report.outcomes.get(c.index)
            if c.target_local in below and out is not None and out.valid and not out.message:
                out.message = "its target moves with the body root: it takes no part in moving the body"
    if settings.missing:
        for g in groups:
            for c in g.chains:
                out = report.outcomes.get(c.index)
                if out is not None and out.valid and not out.message:
                    out.message = f"Body Root '{settings.missing}' is not a bone of this rig: using '{sk.names[root]}'"
    return root


_VALID = ChainOutcome(True, "")


def _spine_start(work: Work, root: int, home: bytes, inputs: Inputs, group: Group) -> bytes | None:
    """What a body chain's start pose is a function of (for `memo_levels`), when it hangs from the body root
    through bones that all start from their FK pose (`inputs.preset`: `rig/body.fk_start`): the root's home
    and those presets. Its start pose itself comes out a little different on each update (the heads' offsets
    come from the pose read, in float32), the same to ~1e-7: the same solve, to that."""
    sk = work.sk
    line = [group.bones[0], *sk.ancestors(group.bones[0])]
    if root not in line:
        return None
    line = line[: line.index(root)]
    if not all(b in inputs.preset for b in [*line, *group.bones]) or any(b in inputs.preset_scale for b in line):
        return None
    parts = [home, *(inputs.preset[b].tobytes() for b in sorted({*line, *group.bones}))]
    return b"|".join(parts)


def _move_body(
    snap: Snapshot,
    work: Work,
    bones: list[int],
    index: dict[int, int],
    anchors: list[ChainPlan],
    inputs: Inputs,
    space: Space,
    root: int,
    spine_live: list[tuple[ChainPlan, int, F64, F64, ChainOutcome]] | None = None,
) -> tuple[bool, F64]:
    """Run the body stage on every frame and put the body where it says; (moved, (F,) blocked). With
    `spine_live` (the body chains, as `body_live.Captured.spine`), what a live update needs of it is captured."""
    settings = snap.body
    assert settings is not None
    sk = work.sk
    f_count = work.matrices.shape[0]
    parents = np.array([-1, *(index[_body_parent(sk, b, index)] for b in bones[1:])], dtype=np.int64)
    anchor_bones = np.array([index[_body_parent(sk, c.bones[0], index)] for c in anchors], dtype=np.int64)
    pinned = np.array([settings.pins.get(c.index, False) for c in anchors])
    pull = np.array([max(0.0, settings.pulls.get(c.index, 1.0)) * max(c.weight, 0.0) for c in anchors])
    # A chain blended toward its FK pose (Influence below 1) pulls the body only as much as it is IK.
    influence = np.ones((f_count, len(anchors)))
    for k, c in enumerate(anchors):
        if c.index in inputs.influence:
            influence[:, k] = np.clip(inputs.influence[c.index], 0.0, 1.0)
    goals, starts, reach = _aims(work, space, inputs, anchors)  # (F, A, 3), (F, A, 3), (F, A)
    # Frames where no pull lies beyond its limb's reach leave the body as it is (the common case while a
    # drag stays within reach): no problem is built for them.
    tolerance = float(snap.settings.tolerance) / space.scale
    beyond = np.linalg.norm(goals - starts, axis=2) - reach > tolerance[:, None]
    active = (beyond & (pull * influence > 0.0) & ~pinned).any(axis=1)
    if not active.any() and spine_live is None:
        return False, np.zeros(f_count, dtype=bool)
    limits = cached_limits(snap, [bones])
    move_root = not bool(sk.connected[root]) if sk.connected.shape[0] else True
    usable = reach > 0.0

    def problem(fi: int) -> BodyProblem:
        heads, frames = work.heads()[fi, bones], work.rot[fi, bones]
        par = parents[1:]
        # Each bone's rest frame relative to its body parent (intermediate bones are carried rigidly).
        actual = sk.parent[bones[1:]]
        ref_local = np.repeat(np.eye(3)[None], len(bones), axis=0)
        if len(bones) > 1:
            ref_local[1:] = np.swapaxes(frames[par], 1, 2) @ work.rot[fi, actual] @ sk.rest_rel[bones[1:]]
        offsets = np.einsum("aji,aj->ai", frames[anchor_bones], starts[fi] - heads[anchor_bones])
        keep = usable[fi]
        return BodyProblem(
            parents=parents,
            heads=heads,
            frames=frames,
            ref_local=ref_local,
            anchor_bones=anchor_bones[keep],
            anchor_offsets=offsets[keep],
            reach=reach[fi, keep],
            targets=goals[fi, keep],
            pull=(pull * influence[fi])[keep],
            pinned=pinned[keep],
            limits=limits,
            move_root=move_root,
            tolerance=float(snap.settings.tolerance) / float(space.scale[fi]),
        )

    if spine_live is not None and usable[0].any():
        _capture(
            snap,
            work,
            bones,
            root,
            anchors,
            problem(0),
            usable[0],
            goals[0],
            starts[0],
            reach[0],
            pinned,
            pull * influence[0],
            inputs,
            space,
            spine_live,
        )
    if not active.any():
        return False, np.zeros(f_count, dtype=bool)
    out_heads = work.heads()[:, bones].copy()
    out_frames = work.rot[:, bones].copy()
    blocked = np.zeros(f_count, dtype=bool)
    moved = False
    for fi in range(f_count):
        if not usable[fi].any() or not active[fi]:
            continue
        result: BodyResult = solve_body(problem(fi))
        if result.moved:
            moved = True
            out_heads[fi], out_frames[fi] = result.heads, result.frames
        blocked[fi] = result.blocked
    if moved:
        work.set_bones(bones, out_frames, out_heads)
    return moved, blocked


def _body_parent(sk: Skeleton, b: int, index: dict[int, int]) -> int:
    """The nearest ancestor of `b` that is a body bone."""
    p = int(sk.parent[b])
    while p not in index:
        p = int(sk.parent[p])
    return p


def _body_chain_outcomes(
    work: Work, groups: list[Group], inputs: Inputs, space: Space, report: RigReport, tolerance: float
) -> None:
    """The body chains' outcomes measured again after the body moved them off their own targets."""
    for g in groups:
        for c in g.chains:
            out = report.outcomes.get(c.index)
            if out is None or not out.valid:
                continue
            tip = c.bones[-1]
            goal = space.points(inputs.targets[c.index])
            residuals = norms(work.tails([tip])[:, 0] - goal) * space.scale
            worst = float(residuals.max())
            if worst <= tolerance * (1.0 + 1e-6):
                continue
            out.residual, out.residuals, out.reached = worst, residuals, False
            out.message = bent_by_body(worst)


def _spine_live(
    work: Work, space: Space, inputs: Inputs, report: RigReport, groups: list[Group], index: dict[int, int]
) -> list[tuple[ChainPlan, int, F64, F64, ChainOutcome]] | None:
    """The body chains as `body_live.Captured.spine` holds them (their outcomes before the body moves them);
    None when one of them was not solved."""
    out: list[tuple[ChainPlan, int, F64, F64, ChainOutcome]] = []
    for g in groups:
        for c in g.chains:
            found = report.outcomes.get(c.index)
            if found is None or not found.valid:
                return None
            tip = c.bones[-1]
            off = body_live.tip_offset(work.rot[0, tip], work.heads()[0, tip], work.tails([tip])[0, 0])
            goal = space.points(inputs.targets[c.index])[0]
            out.append((c, index[tip], off, goal, replace(found)))
    return out


def _capture(
    snap: Snapshot,
    work: Work,
    bones: list[int],
    root: int,
    anchors: list[ChainPlan],
    problem: BodyProblem,
    keep: F64,
    goals: F64,
    starts: F64,
    reach: F64,
    pinned: F64,
    weight: F64,
    inputs: Inputs,
    space: Space,
    spine: list[tuple[ChainPlan, int, F64, F64, ChainOutcome]],
) -> None:
    """Keep what a live update of the limbs needs of this (one-frame) solve (`core/body_live.py`)."""
    sk = work.sk
    row = {b: i for i, b in enumerate(bones)}
    offsets: list[F64 | None] = []
    for c in anchors:
        tip = c.bones[-1]
        if c.use_target_rotation:
            offsets.append(body_live.tip_offset(work.rot[0, tip], work.heads()[0, tip], work.tails([tip])[0, 0]))
        else:
            offsets.append(None)
    body_live.capture(
        body_live.Captured(
            plan=snap.plan,
            root=root,
            bones=list(bones),
            heads=work.heads()[0, bones].copy(),
            frames=work.rot[0, bones].copy(),
            problem=problem,
            anchors=list(anchors),
            keep=np.asarray(keep, dtype=bool).copy(),
            starts=starts.copy(),
            reach=reach.copy(),
            tip_offsets=offsets,
            active_weight=np.where(pinned, 0.0, weight),
            pins=[c for c, p in zip(anchors, pinned.tolist(), strict=True) if p],
            tolerance=float(snap.settings.tolerance),
            parents=[-1, *(row[int(sk.parent[b])] for b in bones[1:])],
            rest_rel=sk.rest_rel[bones].copy(),
            root_rest_inv=_rigid_inverse(sk.rest_rel4[root]),
            spine=spine,
        )
    )
