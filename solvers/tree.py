"""Multi-effector FABRIK on a tree of bones (seeds 000 and 003), one tree per call.

Chains that share bones form a tree. Each bone that has an effector below it (an *active* bone) has
*attachment points*: the heads of its active children and, when it is an effector, its own tail, each a
fixed offset in its frame with a weight (the sum of the effector weights behind it).

* A bone whose attachment offsets all point the same way (one attachment, or several children sharing
  one head as in the seed's sub-bases) is an **aim** bone: it behaves like a chain bone aimed at the
  weighted centroid of what its attachments propose.
* A bone with attachment offsets in different directions (Rigify's chest with neck and shoulders) is a
  **rigid fork**: it is fitted as a rigid body to its attachments' proposals by weighted Kabsch, so the
  offsets between its children are kept exactly.

Backward pass, tips to root: effectors propose their targets, each bone proposes its head from its
attachments' proposals (aim: FABRIK's rule toward the bone's previous head; fork: the rigid fit, with a
little weight on the previous head to settle the spin the attachments leave free). Forward pass, root to
tips: each bone is aimed (aim) or fitted with its head as the pivot (fork), rolled by the roll mode and
clamped by the joint limits through the same helpers the chain solvers use, and its attachments placed.
Bones with no effector below follow their parent rigidly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from .frames import LimitTable, aim_frames, limit_frames
from .loop import POLISH_DAMPING, POLISH_FAR, POLISH_FROM, STALL_RELATIVE, polish_weights
from .rotations import TINY, cross, fit_rotation, normalize, norms, rotvec_matrix
from .types import CAP, CONVERGED, F64, STALLED, UNREACHABLE, TreeProblem, TreeResult

# Weight of a fork bone's previous head in its backward fit, relative to its attachments. As in FABRIK's
# chain rule (the head moves along the line toward where it was), the fork must turn about its old head
# as much as it follows its attachments: with a small weight the fork swings freely in the backward
# pass and the hand-like test trees settle on spurious fixed points (8 of 30 failed at 1e-2, 0 at 1).
HEAD_WEIGHT: Final = 1.0
# Tie-breaking pull toward the previous frame in the rigid fits (relative to weight x length^2), for
# forks whose attachments all lie on one line through the head.
PRIOR_WEIGHT: Final = 1e-9
# Offsets whose directions agree to this (1 - cosine) count as pointing the same way (an aim bone).
SAME_DIRECTION: Final = 1e-9
# Iterations without progress before a tree counts as stalled. Larger than for chains: with several
# effectors pulling on shared bones the residual can rise for a few iterations before falling again.
TREE_STALL_PATIENCE: Final = 30


@dataclass(frozen=True)
class _Bone:
    """Attachment data of one active bone."""

    children: tuple[int, ...]  # active children whose heads are attachment points
    effector: int  # effector index whose target is this bone's tail, or -1
    local: F64  # (P, 3) attachment offsets in the bone's frame: children first, then the tail
    weights: F64  # (P,) weight of each attachment
    fork: bool  # rigid fit (offsets in different directions) or aim
    pivot: bool  # every attachment sits on the head (zero offsets): no lever, the bone only carries them
    aim_offset: F64  # (3,) weighted mean offset (aim bones)
    aim_dir: F64  # (3,) its unit direction
    aim_length: float  # its length
    total_weight: float


def _topology(problem: TreeProblem) -> tuple[list[_Bone | None], list[list[int]], F64]:
    """Per bone: attachment data (None for inactive bones); children lists; subtree effector weights."""
    b = problem.n_bones
    parents = problem.parents.tolist()
    children: list[list[int]] = [[] for _ in range(b)]
    for i in range(1, b):
        children[parents[i]].append(i)
    effector_of = [-1] * b
    for e, bone in enumerate(problem.effectors.tolist()):
        effector_of[bone] = e
    weight = np.zeros(b)
    for i in range(b - 1, -1, -1):
        if effector_of[i] >= 0:
            weight[i] += problem.effector_weights[effector_of[i]]
        if i > 0:
            weight[parents[i]] += weight[i]
    bones: list[_Bone | None] = [None] * b
    for i in range(b):
        if weight[i] <= 0.0:
            continue
        act = tuple(c for c in children[i] if weight[c] > 0.0)
        local = [problem.head_offsets[c] for c in act]
        w = [weight[c] for c in act]
        if effector_of[i] >= 0:
            local.append(problem.tail_offsets[i])
            w.append(float(problem.effector_weights[effector_of[i]]))
        loc = np.array(local, dtype=np.float64)
        wts = np.array(w, dtype=np.float64)
        # A child whose head sits on this bone's head (a zero head offset, like Rigify's face on
        # spine.006) has no direction and no lever: it takes no part in choosing the aim or the fork.
        lever = norms(loc) > 0.0
        units = loc[lever] / norms(loc[lever])[:, None]
        pivot = not bool(lever.any())
        fork = not pivot and bool((units @ units[0] < 1.0 - SAME_DIRECTION).any())
        mean = (wts[:, None] * loc).sum(axis=0) / wts.sum()
        mean_length = float(np.linalg.norm(mean))
        bones[i] = _Bone(
            children=act,
            effector=effector_of[i],
            local=loc,
            weights=wts,
            fork=fork,
            pivot=pivot,
            aim_offset=mean,
            aim_dir=mean / mean_length if mean_length > 0.0 else np.array([0.0, 1.0, 0.0]),
            aim_length=mean_length,
            total_weight=float(wts.sum()),
        )
    return bones, children, weight


def effector_paths(problem: TreeProblem, order: list[int]) -> tuple[F64, F64, F64]:
    """For the polish step, over the active bones ``order``: which effectors lie below each active bone
    (``(A, E)``, weighted by ``sqrt(weight)``), each active bone's active ancestors, itself included
    (``(A, A)``), and the effectors' ``sqrt(weight)`` (``(E,)``)."""
    index = {bone: j for j, bone in enumerate(order)}
    sqrt_w = np.sqrt(problem.effector_weights)
    below = np.zeros((len(order), problem.n_effectors))
    above = np.zeros((len(order), len(order)))
    for j, bone in enumerate(order):
        i = bone
        while i >= 0:
            above[j, index[i]] = 1.0
            i = int(problem.parents[i])
    for e, bone in enumerate(problem.effectors.tolist()):
        i = bone
        while i >= 0:
            below[index[i], e] = sqrt_w[e]
            i = int(problem.parents[i])
    return below, above, sqrt_w


class _TreeSolver:
    """State of one tree solve: topology, current pose, and the passes."""

    def __init__(self, problem: TreeProblem) -> None:
        self.problem = problem
        self.bones, self.children, _ = _topology(problem)
        self.order = [i for i in range(problem.n_bones) if self.bones[i] is not None]
        self.limits = LimitTable.from_limits(problem.limits)
        self.heads = problem.heads.copy()
        self.frames = problem.frames.copy()
        self.scale = float(norms(problem.tail_offsets).max())
        # Backward-pass proposals per active bone: its attachment positions.
        self.proposals: dict[int, F64] = {}
        # Forward-pass positions of each active bone's attachments, and the effector tails among them.
        self.placed: dict[int, F64] = {}
        self.tails = np.zeros((problem.n_effectors, 3))
        # For the polish (`effector_paths`), and the damping's length scale.
        self.below, self.above, self.sqrt_w = effector_paths(problem, self.order)
        self.reach = float(_reach(problem).max())

    def placed_now(self) -> dict[int, F64]:
        """Attachment positions of the current pose (from heads and frames)."""
        out: dict[int, F64] = {}
        for i in self.order:
            bone = self.bones[i]
            assert bone is not None
            out[i] = self.heads[i] + bone.local @ self.frames[i].T
        return out

    def warm_tails(self) -> F64:
        """Effector tails of the warm-start pose."""
        p = self.problem
        bones = p.effectors
        return np.asarray(self.heads[bones] + np.einsum("eij,ej->ei", self.frames[bones], p.tail_offsets[bones]))

    # -- passes -------------------------------------------------------------------------------------

    def _attachment_proposals(self, i: int, bone: _Bone, back_heads: F64) -> F64:
        pts = [back_heads[c] for c in bone.children]
        if bone.effector >= 0:
            pts.append(self.problem.targets[bone.effector])
        return np.array(pts, dtype=np.float64)

    def backward(self) -> None:
        """Tips to root: every active bone proposes its attachment positions and its head."""
        back_heads = self.heads.copy()
        for i in reversed(self.order):
            bone = self.bones[i]
            assert bone is not None
            pts = self._attachment_proposals(i, bone, back_heads)
            self.proposals[i] = pts
            if i == 0:
                continue
            if bone.pivot:
                # Its attachments are its head: the head goes where they are proposed.
                back_heads[i] = (bone.weights[:, None] * pts).sum(axis=0) / bone.total_weight
            elif not bone.fork:
                centroid = (bone.weights[:, None] * pts).sum(axis=0) / bone.total_weight
                d = self.heads[i] - centroid
                n = float(np.linalg.norm(d))
                if n <= TINY:
                    d = -(self.frames[i] @ bone.aim_dir)
                    n = 1.0
                back_heads[i] = centroid + d * (bone.aim_length / n)
            else:
                w = np.append(bone.weights, HEAD_WEIGHT * bone.total_weight)
                loc = np.vstack([bone.local, np.zeros(3)])
                world = np.vstack([pts, self.heads[i]])
                ca = (w[:, None] * loc).sum(axis=0) / w.sum()
                cw = (w[:, None] * world).sum(axis=0) / w.sum()
                prior = PRIOR_WEIGHT * bone.total_weight * self.scale**2
                rot = fit_rotation(loc - ca, world - cw, w, self.frames[i], prior)
                # The head follows the attachments only: the previous head just settled the spin.
                wa = bone.weights
                ca = (wa[:, None] * bone.local).sum(axis=0) / bone.total_weight
                cw = (wa[:, None] * pts).sum(axis=0) / bone.total_weight
                back_heads[i] = cw - rot @ ca

    def forward(self, with_frames: bool) -> None:
        """Root to tips: aim or fit each active bone from its placed head; place its attachments.

        With ``with_frames`` every active bone gets its frame from the roll mode and the joint limits
        (needed with limits, and once at the end); otherwise aim bones move by position only.
        """
        p = self.problem
        self.heads[0] = p.heads[0]
        for i in self.order:
            bone = self.bones[i]
            assert bone is not None
            head = self.heads[i]
            pts = self.proposals[i]
            ref = None
            if with_frames:
                parent = p.base if i == 0 else self.frames[p.parents[i]]
                ref = parent @ p.ref_local[i]
            if bone.pivot:
                # Nothing to aim: the bone keeps its frame (limited), its attachments stay on its head.
                frame = self.frames[i][None]
                if ref is not None:
                    frame = limit_frames(ref[None], frame, self.limits, i)
                self.frames[i] = frame[0]
                placed = head + bone.local @ frame[0].T
            elif bone.fork:
                prior = PRIOR_WEIGHT * bone.total_weight * self.scale**2
                frame = fit_rotation(
                    bone.local[None], (pts - head)[None], bone.weights[None], self.frames[i][None], prior
                )
                if ref is not None:
                    frame = limit_frames(ref[None], frame, self.limits, i)
                self.frames[i] = frame[0]
                placed = head + bone.local @ frame[0].T
            else:
                centroid = (bone.weights[:, None] * pts).sum(axis=0) / bone.total_weight
                fallback = (self.frames[i] @ bone.aim_dir)[None]
                direction = normalize((centroid - head)[None], fallback)
                if ref is None:
                    placed = head + direction[0] * norms(bone.local)[:, None]
                else:
                    frame = aim_frames(direction, bone.aim_dir[None], p.frames[i][None], ref[None], p.roll_mode)
                    frame = limit_frames(ref[None], frame, self.limits, i)
                    self.frames[i] = frame[0]
                    placed = head + bone.local @ frame[0].T
            self.placed[i] = placed
            for j, c in enumerate(bone.children):
                self.heads[c] = placed[j]
            if bone.effector >= 0:
                self.tails[bone.effector] = placed[-1]

    def polish_turns(self) -> F64:
        """The damped least-squares step on the rotations of the active bones: ``(n_active, 3)`` turns.

        The multi-effector form of :func:`solvers.loop.polish_turns`: bone ``b`` turns by a small
        rotation vector ``w_b`` about its head, which moves every effector tail ``e`` below it by
        ``w_b x r_be``. With the errors and levers weighted by ``sqrt(weight)``, the least-norm damped
        step is ``w_b = sum_e r_be x y_e`` where ``(J J^T + lambda^2 I) y = error`` is one ``3E x 3E``
        system. Every active bone turns by the sum of the ``w`` of its active ancestors and itself.
        """
        p = self.problem
        e_count = p.n_effectors
        heads = self.heads[self.order]
        levers = (self.tails[None] - heads[:, None]) * self.below[..., None]
        error = (p.targets - self.tails) * self.sqrt_w[:, None]
        dots = np.einsum("bei,bfi->ef", levers, levers)
        outer = np.einsum("bfi,bej->eifj", levers, levers)
        system = (dots[:, None, :, None] * np.eye(3)[None, :, None, :] - outer).reshape(3 * e_count, 3 * e_count)
        damping = POLISH_DAMPING * float(np.linalg.norm(error)) * self.reach
        system[np.diag_indices(3 * e_count)] += damping
        y = np.linalg.solve(system, error.reshape(-1)).reshape(e_count, 3)
        return np.asarray(self.above @ cross(levers, np.broadcast_to(y[None], levers.shape)).sum(axis=1))

    def turn(self, turns: F64) -> None:
        """Turn every active bone rigidly by ``turns`` (its frame, and its attachments about its head), in
        place; heads follow their parents' attachments, so forks stay rigid and lengths are exact."""
        rotations = rotvec_matrix(turns)
        heads = self.heads[self.order]
        for j, i in enumerate(self.order):
            bone = self.bones[i]
            assert bone is not None
            head = self.heads[i]  # already moved with its parent's attachments
            self.frames[i] = rotations[j] @ self.frames[i]
            placed = head + (self.placed[i] - heads[j]) @ rotations[j].T
            self.placed[i] = placed
            for k, c in enumerate(bone.children):
                self.heads[c] = placed[k]
            if bone.effector >= 0:
                self.tails[bone.effector] = placed[-1]

    def snapshot(self) -> tuple[F64, F64, dict[int, F64], F64]:
        """The pose state (to restore a rejected polish step)."""
        return self.heads.copy(), self.frames.copy(), dict(self.placed), self.tails.copy()

    def restore(self, state: tuple[F64, F64, dict[int, F64], F64]) -> None:
        self.heads, self.frames, self.placed, self.tails = state[0], state[1], state[2], state[3]

    def finish(self) -> tuple[F64, F64, F64]:
        """Frames and heads for every bone (inactive bones follow their parents rigidly), and tails."""
        p = self.problem
        old = p.frames
        for i in range(1, p.n_bones):
            if self.bones[i] is not None:
                continue
            par = p.parents[i]
            self.frames[i] = self.frames[par] @ (old[par].T @ old[i])
            self.heads[i] = self.heads[par] + self.frames[par] @ p.head_offsets[i]
        if self.bones[0] is None:  # no effector at all cannot happen (E >= 1), kept for safety
            self.frames[0] = old[0]
        tails = self.heads + np.einsum("bij,bj->bi", self.frames, p.tail_offsets)
        return self.heads.copy(), self.frames.copy(), tails


def _turned_cost(solver: _TreeSolver, turns: F64, limited: bool) -> float:
    """Turn the tree's active bones by ``turns`` (through the limits when there are any); return the
    weighted squared residual."""
    solver.turn(turns)
    if limited:
        # The polished pose goes through the limits like any pose.
        solver.proposals = dict(solver.placed)
        solver.forward(with_frames=True)
    residual = norms(solver.tails - solver.problem.targets)
    return float((solver.problem.effector_weights * residual * residual).sum())


def _reach(problem: TreeProblem) -> F64:
    """Longest distance each effector's tail can be from the root (sum of offsets along its path)."""
    parents = problem.parents.tolist()
    reach = np.zeros(problem.n_effectors)
    for e, bone in enumerate(problem.effectors.tolist()):
        total = float(np.linalg.norm(problem.tail_offsets[bone]))
        i = bone
        while i > 0:
            total += float(np.linalg.norm(problem.head_offsets[i]))
            i = parents[i]
        reach[e] = total
    return reach


def solve_tree(problem: TreeProblem) -> TreeResult:
    """Solve one tree with multi-effector FABRIK.

    Parameters
    ----------
    problem
        The tree, its warm-start pose, effectors with targets and weights, optional limits, tolerance,
        iteration cap and roll mode (``'NATURAL'`` rolls as ``'REST'``: trees have no single bend plane).

    Returns
    -------
    TreeResult
        Heads, tails and frames of every bone; per effector residual, reached and status (``CONVERGED``
        when reached, ``UNREACHABLE`` when farther from the root than its path is long, else the tree's
        ``STALLED`` or ``CAP``). The best pose seen (least weighted squared residual) is returned.
    """
    solver = _TreeSolver(problem)
    w = problem.effector_weights
    limited = solver.limits is not None
    # The warm start is a candidate too: a tree already on its targets is not moved.
    best = solver.placed_now()
    residual = norms(solver.warm_tails() - problem.targets)
    best_cost = float((w * residual * residual).sum())
    progress_cost = best_cost
    current_cost = best_cost
    stalls = 0
    iterations = 0
    # As for chains (solvers.loop.iterate): each FABRIK iteration is followed by a damped least-squares
    # polish step, weighted continuously by how slow the FABRIK step was and how much the polish gains.
    tree_status = CONVERGED if (residual <= problem.tolerance).all() else CAP
    for it in range(1, problem.max_iterations + 1):
        if tree_status == CONVERGED:
            break
        iterations = it
        solver.backward()
        solver.forward(with_frames=limited)
        residual = norms(solver.tails - problem.targets)
        cost = float((w * residual * residual).sum())
        pace = np.sqrt(cost / current_cost) if current_cost > 0.0 else 0.0
        size = np.sqrt(cost / w.sum()) / solver.reach  # root-mean-square residual, relative
        if pace > POLISH_FROM and size < POLISH_FAR and cost > 0.0:
            saved = solver.snapshot()
            turns = solver.polish_turns()
            candidate_cost = _turned_cost(solver, turns, limited)
            gain = np.sqrt(candidate_cost / cost)
            weight = float(polish_weights(np.array([pace]), np.array([gain]), np.array([size]))[0])
            if weight < 1.0:
                solver.restore(saved)
                if weight > 0.0:
                    _turned_cost(solver, turns * weight, limited)
            residual = norms(solver.tails - problem.targets)
            cost = float((w * residual * residual).sum())
        current_cost = cost
        if cost < best_cost:
            best_cost = cost
            best = {i: v.copy() for i, v in solver.placed.items()}
        if (residual <= problem.tolerance).all():
            tree_status = CONVERGED
            break
        # Costs are squared distances, so the relative threshold is squared too.
        if cost < progress_cost * (1.0 - STALL_RELATIVE) ** 2:
            progress_cost = cost
            stalls = 0
        else:
            stalls += 1
            if stalls >= TREE_STALL_PATIENCE:
                tree_status = STALLED
                break
    # One last forward pass aimed at the best pose builds every frame (roll mode, limits).
    solver.proposals = best
    solver.forward(with_frames=True)
    heads, frames, tails = solver.finish()
    residual = norms(tails[problem.effectors] - problem.targets)
    reached = residual <= problem.tolerance
    status = np.full(problem.n_effectors, tree_status, dtype=np.int8)
    status[~reached & (status == CONVERGED)] = STALLED
    status[~reached & (norms(problem.targets - problem.heads[0]) > _reach(problem))] = UNREACHABLE
    status[reached] = CONVERGED
    return TreeResult(
        heads=heads,
        tails=tails,
        frames=frames,
        iterations=iterations,
        residual=residual,
        reached=reached,
        status=status,
    )
