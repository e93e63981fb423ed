"""Trees (chains that share bones) solved as one FABRIK problem each (`solvers.tree`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..solvers import tree
from ..solvers.types import STATUS_NAMES, TreeProblem
from .checks import cached_limits
from .kinematics import Space, Work
from .messages import chain_outcome
from .model import Group, Inputs, RigReport, Snapshot

# A tolerance no solve reaches: with it the iterative solvers run exactly to their iteration cap (or a stall).
_EXHAUST = 1e-12


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
        report.outcomes[c.index] = chain_outcome(
            residuals[:, e], iterations, [s[e] for s in statuses], float(settings.tolerance), sk.names[c.bones[-1]]
        )
