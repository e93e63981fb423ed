"""Trees (chains that share bones) solved as one FABRIK problem each (`solvers.tree`).

Each chain of a tree is a *branch*: its bones that no other chain of the tree solves (the part below the
last shared bone). What a single chain does, a tree does per chain, reusing the single-chain pieces:

* **Use Target Rotation**: the tip takes the target's orientation and leaves the problem; its parent's
  effector is where the tip's head must be (as `batch.solve_batch` aims the bones above a single tip).
* **Soft**: each chain reaches for its eased target (`solvers.soft.eased_distance`), on the line from its
  root to its target, and says "softened" when it trails the real one.
* **Stretch**: the branch's own bones lengthen (their Y scale) by just enough for the chain's tip to reach,
  up to the chain's Stretch; shared bones keep their length (they have no one factor to take).
* **Poles and the natural roll**: the branch bends toward the side the single-chain rules pick
  (`solvers.frames.bend_hints` on the branch as a chain), turned rigidly about its root-to-effector line,
  which leaves its tip where the solve put it: before the solve (the warm start), and after it for branches
  without joint limits (a limited branch keeps the limited solve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..solvers import tree
from ..solvers.frames import ChainBatch, chain_bend
from ..solvers.rotations import minimal_rotation, normalize, norms, perpendicular_part
from ..solvers.soft import eased_distance, soft_distance
from ..solvers.tree_frames import solve_tree_frames
from ..solvers.types import CONVERGED, SOFT, STALLED, STATUS_NAMES, ChainProblem, TreeProblem, TreeResult
from .batch import turn_about
from .checks import cached_limits
from .kinematics import Space, Work, chain_arrays
from .messages import chain_outcome
from .model import F64, ChainPlan, Group, Inputs, RigReport, Snapshot
from .stretch import chain_settings, divisors_of, factor_for, length_ratio, rescale

# A tolerance no solve reaches: with it the iterative solvers run exactly to their iteration cap (or a stall).
_EXHAUST = 1e-12
# A branch whose interior joints lie this close to its root-to-effector line (relative to its length) has no
# bend of its own to turn.
_STRAIGHT = 1e-9


def branch(chains: Sequence[ChainPlan], chain: ChainPlan) -> list[int]:
    """The bones of `chain` below the last bone another of `chains` (a tree) shares (root first)."""
    others = {b for c in chains if c.index != chain.index for b in c.bones}
    last = max((i for i, b in enumerate(chain.bones) if b in others), default=-1)
    return chain.bones[last + 1 :]


@dataclass
class _Branch:
    """One chain of a tree as the solve sees it: the bones that bend toward its hint, and where it reaches."""

    chain: ChainPlan
    rows: list[int]  # branch bones that turn toward the hint (without a Target Rotation tip)
    end: int  # the bone whose head ends the row (a Target Rotation tip), or -1: the last row bone's tail
    limited: bool  # a joint limit on a row bone: the solve's pose is kept (no turn after it)


def _aims(work: Work, chains: list[ChainPlan], goals: F64, space: Space, inputs: Inputs) -> tuple[F64, dict[int, F64]]:
    """(F, E, 3) what each effector reaches for, and the tip rotations of the Target Rotation chains."""
    aims = goals.copy()
    tip_rots: dict[int, F64] = {}
    for e, c in enumerate(chains):
        if not c.use_target_rotation:
            continue
        tip = c.bones[-1]
        rot = space.rotations(inputs.targets[c.index])  # (F, 3, 3)
        off = np.einsum("fji,fj->fi", work.rot[:, tip], work.tails([tip])[:, 0] - work.heads()[:, tip])
        aims[:, e] = goals[:, e] - np.einsum("fij,fj->fi", rot, off)
        tip_rots[e] = rot
    return aims, tip_rots


def _chain_reach(work: Work, c: ChainPlan) -> tuple[F64, F64]:
    """(F, 3) the chain's root head and (F,) its length to where its effector sits (the tip's head with
    Use Target Rotation), on the working pose."""
    rows, ends = (c.bones[:-1], [c.bones[-1]]) if c.use_target_rotation else (c.bones, None)
    positions, _frames, offsets, _ref, _base = chain_arrays(work, [rows], ends)
    return positions[:, 0], norms(offsets).sum(axis=1)


def _stretch_branch(
    work: Work, chains: Sequence[ChainPlan], c: ChainPlan, carriers: list[int], aim: F64, soft: F64, limit: F64
) -> F64:
    """Lengthen the bones of `c`'s branch (`branch`) in the working pose by just enough for the chain to reach
    `aim` (F, 3) along its soft curve, up to `limit` (F,) times their natural length (as `stretch.stretch_chains`
    does for a single chain's bones, with the shared bones at their length). Returns (F,) how many times the
    whole chain is longer than its natural length (the soft curve's `stretch`)."""
    own = branch(chains, c)
    rows = own[:-1] if c.use_target_rotation else own  # the bones `carriers` name, root first
    chain_rows, ends = (c.bones[:-1], [c.bones[-1]]) if c.use_target_rotation else (c.bones, None)
    positions, _frames, offsets, _ref, _base = chain_arrays(work, [chain_rows], ends)
    f = offsets.shape[0]
    k = len(chain_rows) - len(rows)  # the branch's first row
    off = offsets.copy()
    divisors = np.ones((f, len(rows))) if work.channel_y is None else divisors_of(work, rows, carriers)
    off[:, k:, 1] /= divisors  # the branch at its natural length (a previous stretch divided out)
    natural = norms(off).sum(axis=1)
    shared = norms(off[:, :k]).sum(axis=1)
    own_length = norms(off[:, k:]).sum(axis=1)
    distance = norms(aim - positions[:, 0])
    eased = np.minimum(soft_distance(distance, natural, soft), natural)
    need = distance / np.maximum(eased, 1e-300)
    want = (need * natural - shared) / np.maximum(own_length, 1e-300)  # how much longer the branch must get
    ratio = np.clip(want, 1.0, length_ratio(off[:, k:], limit))
    factors = factor_for(off[:, k:], ratio)
    before = {b: (work.rot[:, b].copy(), work.heads()[:, b].copy()) for b in own}
    rescale(work, [c], [rows], factors[:, None], divisors[:, None])
    # Each head below a lengthened bone moves along that bone's Y axis (rotations kept).
    change = factors[:, None] / divisors
    heads = [before[own[0]][1]]
    for j in range(1, len(own)):
        rot, head = before[own[j - 1]]
        step = np.einsum("fji,fj->fi", rot, before[own[j]][1] - head)
        if j - 1 < len(rows):
            step[:, 1] *= change[:, j - 1]
        heads.append(heads[-1] + np.einsum("fij,fj->fi", rot, step))
    work.set_bones(own, np.stack([before[b][0] for b in own], axis=1), np.stack(heads, axis=1))
    return np.asarray((shared + length_ratio(off[:, k:], factors) * own_length) / natural)


def _hints(snap: Snapshot, work: Work, b: _Branch, aims: F64, pole: F64 | None, angle: F64 | None) -> F64:
    """(F, 3) the side the branch should bend toward (the single-chain rules: its pole, else the natural
    roll), NaN rows for none. `angle`: the Pole Angle, turning the pole about the branch's root -> aim axis
    (as `batch.turn_poles` turns a single chain's about its root's)."""
    ends = [b.end] if b.end >= 0 else None
    positions, frames, offsets, ref_local, base = chain_arrays(work, [b.rows], ends)
    if pole is not None and angle is not None:
        pole = turn_about(pole, positions[:, 0], aims, angle)
    problem = ChainProblem.trusted(
        positions, frames, offsets, ref_local, base, aims, pole, None, 1.0, 1, snap.settings.roll_mode
    )
    return ChainBatch.from_problem(problem).hints


def _bend_toward(work: Work, b: _Branch, hints: F64) -> None:
    """Turn the branch rigidly about its root-to-effector line so that it bends toward `hints` (F, 3)."""
    ends = [b.end] if b.end >= 0 else None
    positions = chain_arrays(work, [b.rows], ends)[0]  # (F, n + 1, 3)
    root, end = positions[:, 0], positions[:, -1]
    axis = normalize(end - root, np.array([0.0, 0.0, 1.0]))
    bend = chain_bend(positions, root, axis)
    length = norms(positions[:, 1:] - positions[:, :-1]).sum(axis=1)
    want = perpendicular_part(np.nan_to_num(hints), axis)
    turn = ~np.isnan(hints[:, 0]) & (norms(bend) > _STRAIGHT * length) & (norms(want) > 0.5)
    if not turn.any():
        return
    rot = np.broadcast_to(np.eye(3), (len(turn), 3, 3)).copy()
    rot[turn] = minimal_rotation(normalize(bend[turn]), normalize(want[turn]), fallback_axis=axis[turn])
    heads = work.heads()[:, b.rows]
    new_heads = root[:, None] + np.einsum("fij,fnj->fni", rot, heads - root[:, None])
    work.set_bones(b.rows, rot[:, None] @ work.rot[:, b.rows], new_heads)


def solve_tree(
    snap: Snapshot,
    work: Work,
    group: Group,
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool = False,
) -> None:
    settings = snap.settings
    sk = work.sk
    chains = group.chains
    f_count = work.matrices.shape[0]
    goals = np.stack([space.points(inputs.targets[c.index]) for c in chains], axis=1)  # (F, E, 3)
    aims, tip_rots = _aims(work, chains, goals, space, inputs)
    # Stretch: the branches of the chains that own their Y scale lengthen first (the tree is solved on them).
    soft, limit = chain_settings(inputs, chains, f_count)
    rho: dict[int, F64] = {}
    for e, c in enumerate(chains):
        carriers = work.owned.get(c.index)
        if carriers is not None:
            rho[e] = _stretch_branch(work, chains, c, carriers, aims[:, e], soft[:, e], limit[:, e])
    # Soft: each chain reaches for its eased target (`solvers.soft.solve_soft` for single chains).
    eased = np.zeros((f_count, len(chains)), dtype=bool)
    for e, c in enumerate(chains):
        if not soft[:, e].any():
            continue
        root, length = _chain_reach(work, c)
        rel = aims[:, e] - root
        distance = norms(rel)
        reach = eased_distance(distance, length, soft[:, e], rho.get(e))
        scale = np.where(distance > 1e-12, reach / np.maximum(distance, 1e-300), 1.0)
        eased[:, e] = scale < 1.0
        aims[:, e] = root + rel * scale[:, None]
    # Poles and the natural roll, per branch.
    poles = [space.points(inputs.poles[c.index]) if c.pole is not None else None for c in chains]
    angles = [inputs.pole_angles.get(c.index) for c in chains]
    limits_all = snap.limits
    branches = []
    for e, c in enumerate(chains):
        own = branch(group.chains, c)
        end = -1
        if c.use_target_rotation:
            own, end = own[:-1], c.bones[-1]
        if len(own) < 2 or (poles[e] is None and settings.roll_mode != "NATURAL"):
            continue
        limited = bool(limits_all.use_cone[own].any() or limits_all.use_twist[own].any())
        branches.append((e, _Branch(c, own, end, limited)))
    for e, b in branches:
        _bend_toward(work, b, _hints(snap, work, b, aims[:, e], poles[e], angles[e]))
    solved = [b for b in group.bones if not any(c.use_target_rotation and b == c.bones[-1] for c in chains)]
    # A Target Rotation tip keeps its head's offset from its parent, in the parent's frame (as it is now).
    tip_offsets = {}
    for e in tip_rots:
        tip = chains[e].bones[-1]
        parent = int(sk.parent[tip])
        tip_offsets[e] = np.einsum("fji,fj->fi", work.rot[:, parent], work.heads()[:, tip] - work.heads()[:, parent])
    results = _solve_frames(snap, work, group, solved, aims, space, smooth)
    out_frames = np.stack([r.frames for r in results])
    out_heads = np.stack([r.heads for r in results])
    work.set_bones(solved, out_frames, out_heads)
    for e, rot in tip_rots.items():
        tip = chains[e].bones[-1]
        parent = int(sk.parent[tip])
        # The tip's head where its parent carries it (the parent's effector), its frame the target's.
        head = work.heads()[:, parent] + np.einsum("fij,fj->fi", work.rot[:, parent], tip_offsets[e])
        work.set_bones([tip], rot[:, None], head[:, None])
    for e, b in branches:
        if not b.limited:
            _bend_toward(work, b, _hints(snap, work, b, aims[:, e], poles[e], angles[e]))
    iterations = np.array([r.iterations for r in results], dtype=np.float64)
    tolerance = float(settings.tolerance)
    tips = [c.bones[-1] for c in chains]
    residuals = np.linalg.norm(work.tails(tips) - goals, axis=2) * space.scale[:, None]  # (F, E) world units
    codes = np.stack([r.status for r in results])  # (F, E)
    reached = residuals <= tolerance * (1.0 + 1e-6)
    codes = np.where(reached, CONVERGED, np.where(eased & (codes == CONVERGED), SOFT, codes))
    codes = np.where(~reached & (codes == CONVERGED), STALLED, codes)
    for e, c in enumerate(chains):
        statuses = [STATUS_NAMES[int(s)] for s in codes[:, e]]
        outcome = chain_outcome(residuals[:, e], iterations, statuses, tolerance, sk.names[tips[e]], rho.get(e))
        report.outcomes[c.index] = outcome


def _solve_frames(
    snap: Snapshot, work: Work, group: Group, bones: list[int], aims: F64, space: Space, smooth: bool
) -> list[TreeResult]:
    """One `solvers.tree` problem per frame on `bones` (Target Rotation tips left out: their parents'
    effector is the tip's head), solved; with `smooth` every frame for the same number of iterations."""
    settings = snap.settings
    sk = work.sk
    chains = group.chains
    pos = {b: i for i, b in enumerate(bones)}
    parents = np.array([pos.get(int(sk.parent[b]), -1) if i else -1 for i, b in enumerate(bones)], dtype=np.int64)
    effector_bones = [c.bones[-2] if c.use_target_rotation else c.bones[-1] for c in chains]
    effectors = np.array([pos[b] for b in effector_bones], dtype=np.int64)
    weights = np.array([c.weight for c in chains])
    limits = cached_limits(snap, [bones])
    ref_local = sk.rest_rel[bones]
    all_tails = work.tails(bones)
    for c, b in zip(chains, effector_bones, strict=True):
        if c.use_target_rotation:
            all_tails[:, pos[b]] = work.heads()[:, c.bones[-1]]  # the effector: the tip's head
    base_all = work.parent_rot([bones[0]])[:, 0]
    problems: list[TreeProblem] = []
    for fi in range(work.matrices.shape[0]):
        heads = work.heads()[fi, bones]
        frames = work.rot[fi, bones]
        head_offsets = np.zeros((len(bones), 3))
        has_parent = parents >= 0
        par = parents[has_parent]
        head_offsets[has_parent] = np.einsum("bji,bj->bi", frames[par], heads[has_parent] - heads[par])
        tail_offsets = np.einsum("bji,bj->bi", frames, all_tails[fi] - heads)
        problems.append(
            TreeProblem(
                parents=parents,
                heads=heads,
                frames=frames,
                head_offsets=head_offsets,
                tail_offsets=tail_offsets,
                ref_local=ref_local,
                base=base_all[fi],
                effectors=effectors,
                targets=aims[fi],
                weights=weights,
                limits=limits,
                tolerance=float(settings.tolerance) / float(space.scale[fi]),
                max_iterations=int(settings.max_iterations),
                roll_mode=settings.roll_mode,
            )
        )
    # Several frames (a bake) in one batch over the frames, as single chains are (`solvers.tree_frames`).
    results = solve_tree_frames(problems) if len(problems) > 1 else [tree.solve_tree(problems[0])]
    if smooth and len(results) > 1:
        # As for chains (`uniform_iterations`): every frame runs the same number of iterations.
        most = max(r.iterations for r in results)
        if any(r.iterations != most for r in results):
            results = solve_tree_frames([replace(p, tolerance=_EXHAUST, max_iterations=most) for p in problems])
    return results
