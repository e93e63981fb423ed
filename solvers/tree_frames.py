"""Multi-effector FABRIK (:mod:`solvers.tree`) on many frames of one tree at once, for bakes.

A bake solves the same tree at every frame: the same bones, effectors, weights and limits, other poses and
targets. :func:`solve_tree_frames` runs :func:`solvers.tree.solve_tree`'s passes on all frames together,
each numpy call over an ``(F, ...)`` stack instead of one frame, with the same decisions per frame: a frame
stops (its pose frozen) where the one-frame solver would stop (converged, stalled or at the cap), the
polish step is taken, scaled or refused per frame, and each frame returns the best pose it saw. The results
equal the one-frame solver's up to rounding (``tests/unit/test_tree_frames.py``). Frames whose attachment
geometry differs (an animated location or scale that turns an aim bone into a fork) are solved one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .frames import LimitTable, aim_frames, limit_frames
from .loop import POLISH_DAMPING, POLISH_FAR, POLISH_FROM, STALL_RELATIVE, polish_weights
from .rotations import TINY, cross, nearest_rotation, normalize, norms, rotvec_matrix
from .tree import (
    HEAD_WEIGHT,
    PRIOR_WEIGHT,
    SAME_DIRECTION,
    TREE_STALL_PATIENCE,
    _reach,
    _topology,
    effector_paths,
    solve_tree,
)
from .types import CAP, CONVERGED, F64, STALLED, UNREACHABLE, Bools, TreeProblem, TreeResult

State = tuple[F64, F64, dict[int, F64], F64]


@dataclass(frozen=True)
class _Bone:
    """Attachment data of one active bone over F frames (`solvers.tree._Bone`, stacked)."""

    children: tuple[int, ...]
    effector: int
    local: F64  # (F, P, 3)
    weights: F64  # (P,)
    fork: bool
    pivot: bool
    aim_dir: F64  # (F, 3)
    aim_length: F64  # (F,)
    total_weight: float


def _stacked(problems: Sequence[TreeProblem]) -> list[_Bone | None] | None:
    """Each bone's attachment data over the frames, or None when the frames do not share one topology.

    `solvers.tree._topology` once, on the first frame; the other frames' attachment offsets are gathered
    and checked (the same levers, the same aim or fork) in a few array operations, not bone by bone per
    frame (which cost more than the whole batched solve on a bake of a few hundred frames).
    """
    first = problems[0]
    if any(
        not (np.array_equal(p.parents, first.parents) and np.array_equal(p.effectors, first.effectors))
        or not np.array_equal(p.effector_weights, first.effector_weights)
        for p in problems[1:]
    ):
        return None
    heads = np.stack([p.head_offsets for p in problems])  # (F, B, 3)
    tails = np.stack([p.tail_offsets for p in problems])
    out: list[_Bone | None] = []
    for i, bone in enumerate(_topology(first)[0]):
        if bone is None:
            out.append(None)
            continue
        parts = [heads[:, c] for c in bone.children] + ([tails[:, i]] if bone.effector >= 0 else [])
        local = np.stack(parts, axis=1)  # (F, P, 3)
        lengths = norms(local)
        lever = norms(bone.local) > 0.0
        if not np.array_equal(lengths > 0.0, np.broadcast_to(lever, lengths.shape)):
            return None
        if not bone.pivot:
            units = local[:, lever] / lengths[:, lever][..., None]
            fork = (np.einsum("fpi,fi->fp", units, units[:, 0]) < 1.0 - SAME_DIRECTION).any(axis=1)
            if not (fork == bone.fork).all():
                return None
        mean = (bone.weights[None, :, None] * local).sum(axis=1) / bone.weights.sum()
        mean_length = norms(mean)
        aim_dir = np.where(
            (mean_length > 0.0)[:, None], mean / np.where(mean_length > 0.0, mean_length, 1.0)[:, None], [0.0, 1.0, 0.0]
        )
        out.append(
            _Bone(
                children=bone.children,
                effector=bone.effector,
                local=local,
                weights=bone.weights,
                fork=bone.fork,
                pivot=bone.pivot,
                aim_dir=aim_dir,
                aim_length=mean_length,
                total_weight=bone.total_weight,
            )
        )
    return out


def _fit(local: F64, world: F64, weights: F64, prior: F64, prior_weight: F64) -> F64:
    """`solvers.rotations.fit_rotation` with a prior weight per frame: (F, P, 3) points, (P,) weights."""
    m = np.einsum("p,fpi,fpj->fij", weights, world, local) + prior_weight[:, None, None] * prior
    return nearest_rotation(m)


def _place(frame: F64, local: F64, head: F64) -> F64:
    """(F, P, 3) attachments at `head` (F, 3) of a bone turned to `frame` (F, 3, 3)."""
    return np.asarray(head[:, None] + np.einsum("fij,fpj->fpi", frame, local))


class _FramesSolver:
    """`solvers.tree._TreeSolver` over F frames of one tree."""

    def __init__(self, problems: Sequence[TreeProblem], bones: list[_Bone | None]) -> None:
        first = problems[0]
        self.first = first
        self.bones = bones
        self.order = [i for i in range(first.n_bones) if bones[i] is not None]
        f = len(problems)
        table = LimitTable.from_limits(first.limits)
        self.limits = None if table is None else table.take(np.zeros(f, dtype=np.int64))
        self.start_heads = np.stack([p.heads for p in problems])
        self.start_frames = np.stack([p.frames for p in problems])
        self.head_offsets = np.stack([p.head_offsets for p in problems])
        self.tail_offsets = np.stack([p.tail_offsets for p in problems])
        self.base = np.stack([p.base for p in problems])
        self.targets = np.stack([p.targets for p in problems])
        self.tolerance = np.array([p.tolerance for p in problems])
        self.heads = self.start_heads.copy()
        self.frames = self.start_frames.copy()
        self.scale = norms(self.tail_offsets).max(axis=1)
        self.proposals: dict[int, F64] = {}
        self.placed: dict[int, F64] = {}
        self.tails = np.zeros((f, first.n_effectors, 3))
        self.below, self.above, self.sqrt_w = effector_paths(first, self.order)
        self.reach_e = np.stack([_reach(p) for p in problems])  # (F, E)
        self.reach = self.reach_e.max(axis=1)

    def _bone(self, i: int) -> _Bone:
        bone = self.bones[i]
        assert bone is not None
        return bone

    def placed_now(self) -> dict[int, F64]:
        return {i: _place(self.frames[:, i], self._bone(i).local, self.heads[:, i]) for i in self.order}

    def warm_tails(self) -> F64:
        e = self.first.effectors
        return np.asarray(self.heads[:, e] + np.einsum("feij,fej->fei", self.frames[:, e], self.tail_offsets[:, e]))

    def _mean(self, bone: _Bone, pts: F64) -> F64:
        return np.asarray((bone.weights[None, :, None] * pts).sum(axis=1) / bone.total_weight)

    def backward(self) -> None:
        back_heads = self.heads.copy()
        for i in reversed(self.order):
            bone = self._bone(i)
            pts = [back_heads[:, c] for c in bone.children]
            if bone.effector >= 0:
                pts.append(self.targets[:, bone.effector])
            props = np.stack(pts, axis=1)  # (F, P, 3)
            self.proposals[i] = props
            if i == 0:
                continue
            if bone.pivot:
                back_heads[:, i] = self._mean(bone, props)
            elif not bone.fork:
                centroid = self._mean(bone, props)
                d = self.heads[:, i] - centroid
                n = norms(d)
                small = n <= TINY
                if small.any():
                    d[small] = -np.einsum("fij,fj->fi", self.frames[small, i], bone.aim_dir[small])
                    n = np.where(small, 1.0, n)
                back_heads[:, i] = centroid + d * (bone.aim_length / n)[:, None]
            else:
                w = np.append(bone.weights, HEAD_WEIGHT * bone.total_weight)
                f = props.shape[0]
                loc = np.concatenate([bone.local, np.zeros((f, 1, 3))], axis=1)
                world = np.concatenate([props, self.heads[:, i][:, None]], axis=1)
                ca = (w[None, :, None] * loc).sum(axis=1) / w.sum()
                cw = (w[None, :, None] * world).sum(axis=1) / w.sum()
                prior = PRIOR_WEIGHT * bone.total_weight * self.scale**2
                rot = _fit(loc - ca[:, None], world - cw[:, None], w, self.frames[:, i], prior)
                ca = self._mean(bone, bone.local)
                cw = self._mean(bone, props)
                back_heads[:, i] = cw - np.einsum("fij,fj->fi", rot, ca)

    def forward(self, with_frames: bool) -> None:
        first = self.first
        self.heads[:, 0] = self.start_heads[:, 0]
        for i in self.order:
            bone = self._bone(i)
            head = self.heads[:, i]
            pts = self.proposals[i]
            ref = None
            if with_frames:
                parent = self.base if i == 0 else self.frames[:, first.parents[i]]
                ref = parent @ first.ref_local[i]
            if bone.pivot:
                frame = self.frames[:, i]
                if ref is not None:
                    frame = limit_frames(ref, frame, self.limits, i)
                self.frames[:, i] = frame
                placed = _place(frame, bone.local, head)
            elif bone.fork:
                prior = PRIOR_WEIGHT * bone.total_weight * self.scale**2
                frame = _fit(bone.local, pts - head[:, None], bone.weights, self.frames[:, i], prior)
                if ref is not None:
                    frame = limit_frames(ref, frame, self.limits, i)
                self.frames[:, i] = frame
                placed = _place(frame, bone.local, head)
            else:
                centroid = self._mean(bone, pts)
                fallback = np.einsum("fij,fj->fi", self.frames[:, i], bone.aim_dir)
                direction = normalize(centroid - head, fallback)
                if ref is None:
                    placed = head[:, None] + direction[:, None] * norms(bone.local)[..., None]
                else:
                    frame = aim_frames(direction, bone.aim_dir, self.start_frames[:, i], ref, first.roll_mode)
                    frame = limit_frames(ref, frame, self.limits, i)
                    self.frames[:, i] = frame
                    placed = _place(frame, bone.local, head)
            self.placed[i] = placed
            for j, c in enumerate(bone.children):
                self.heads[:, c] = placed[:, j]
            if bone.effector >= 0:
                self.tails[:, bone.effector] = placed[:, -1]

    def polish_turns(self, rows: Bools) -> F64:
        """`solvers.tree._TreeSolver.polish_turns` per frame: ``(F, n_active, 3)`` turns, for the frames
        `rows` (a mask; the others get a well-posed system whose turns the caller discards)."""
        e_count = self.first.n_effectors
        f = self.heads.shape[0]
        heads = self.heads[:, self.order]
        levers = (self.tails[:, None] - heads[:, :, None]) * self.below[None, ..., None]  # (F, A, E, 3)
        error = (self.targets - self.tails) * self.sqrt_w[None, :, None]
        dots = np.einsum("zbei,zbgi->zeg", levers, levers)
        outer = np.einsum("zbgi,zbej->zeigj", levers, levers)
        eye = np.eye(3)[None, None, :, None, :]
        system = (dots[:, :, None, :, None] * eye - outer).reshape(f, 3 * e_count, 3 * e_count)
        damping = np.where(rows, POLISH_DAMPING * norms(error.reshape(f, -1)) * self.reach, 1.0 + self.reach**2)
        diag = np.arange(3 * e_count)
        system[:, diag, diag] += damping[:, None]
        y = np.linalg.solve(system, error.reshape(f, -1, 1))[..., 0].reshape(f, e_count, 3)
        moved = cross(levers, np.broadcast_to(y[:, None], levers.shape)).sum(axis=2)  # (F, A, 3)
        return np.asarray(np.einsum("ab,fbi->fai", self.above, moved))

    def turn(self, turns: F64) -> None:
        rotations = rotvec_matrix(turns)  # (F, A, 3, 3)
        heads = self.heads[:, self.order].copy()
        for j, i in enumerate(self.order):
            bone = self._bone(i)
            head = self.heads[:, i]
            self.frames[:, i] = rotations[:, j] @ self.frames[:, i]
            placed = head[:, None] + np.einsum("fij,fpj->fpi", rotations[:, j], self.placed[i] - heads[:, j][:, None])
            self.placed[i] = placed
            for k, c in enumerate(bone.children):
                self.heads[:, c] = placed[:, k]
            if bone.effector >= 0:
                self.tails[:, bone.effector] = placed[:, -1]

    def snapshot(self) -> State:
        return self.heads.copy(), self.frames.copy(), {i: v.copy() for i, v in self.placed.items()}, self.tails.copy()

    def restore(self, state: State, rows: Bools) -> None:
        """Put the frames `rows` (a mask) back to `state`."""
        if not rows.any():
            return
        self.heads[rows], self.frames[rows], self.tails[rows] = state[0][rows], state[1][rows], state[3][rows]
        for i, v in state[2].items():
            self.placed[i] = self.placed[i].copy()
            self.placed[i][rows] = v[rows]

    def cost(self) -> tuple[F64, F64]:
        residual = norms(self.tails - self.targets)
        return residual, (self.first.effector_weights * residual * residual).sum(axis=1)

    def turned_cost(self, turns: F64, limited: bool) -> F64:
        self.turn(turns)
        if limited:
            self.proposals = dict(self.placed)
            self.forward(with_frames=True)
        return self.cost()[1]

    def finish(self) -> tuple[F64, F64, F64]:
        first = self.first
        old = self.start_frames
        for i in range(1, first.n_bones):
            if self.bones[i] is not None:
                continue
            par = first.parents[i]
            self.frames[:, i] = self.frames[:, par] @ (np.swapaxes(old[:, par], -1, -2) @ old[:, i])
            self.heads[:, i] = self.heads[:, par] + np.einsum(
                "fij,fj->fi", self.frames[:, par], self.head_offsets[:, i]
            )
        tails = self.heads + np.einsum("fbij,fbj->fbi", self.frames, self.tail_offsets)
        return self.heads.copy(), self.frames.copy(), tails


def solve_tree_frames(problems: Sequence[TreeProblem]) -> list[TreeResult]:
    """Solve F frames of one tree (the same bones, effectors, weights, limits, cap and roll mode).

    Parameters
    ----------
    problems
        One :class:`TreeProblem` per frame; they may differ in pose, targets, base and tolerance.

    Returns
    -------
    list of TreeResult
        What :func:`solvers.tree.solve_tree` returns for each problem, up to rounding.
    """
    if len(problems) < 2:
        return [solve_tree(p) for p in problems]
    bones = _stacked(problems)
    if bones is None:
        return [solve_tree(p) for p in problems]
    solver = _FramesSolver(problems, bones)
    first = problems[0]
    w = first.effector_weights
    tol = solver.tolerance
    limited = solver.limits is not None
    f = len(problems)
    best = solver.placed_now()
    residual = norms(solver.warm_tails() - solver.targets)
    best_cost = (w * residual * residual).sum(axis=1)
    progress_cost = best_cost.copy()
    current_cost = best_cost.copy()
    stalls = np.zeros(f, dtype=np.int64)
    iterations = np.zeros(f, dtype=np.int64)
    status = np.where((residual <= tol[:, None]).all(axis=1), CONVERGED, CAP).astype(np.int8)
    active = status != CONVERGED
    for it in range(1, first.max_iterations + 1):
        if not active.any():
            break
        frozen = solver.snapshot() if not active.all() else None
        iterations[active] = it
        solver.backward()
        solver.forward(with_frames=limited)
        residual, cost = solver.cost()
        pace = np.where(current_cost > 0.0, np.sqrt(cost / np.where(current_cost > 0.0, current_cost, 1.0)), 0.0)
        size = np.sqrt(cost / w.sum()) / solver.reach
        polish = active & (pace > POLISH_FROM) & (size < POLISH_FAR) & (cost > 0.0)
        if polish.any():
            saved = solver.snapshot()
            turns = solver.polish_turns(polish)
            candidate = solver.turned_cost(turns, limited)
            gain = np.sqrt(candidate / np.where(cost > 0.0, cost, 1.0))
            weight = np.where(polish, polish_weights(pace, gain, size), 0.0)
            back = weight < 1.0
            solver.restore(saved, back)
            part = back & (weight > 0.0)
            if part.any():
                before = solver.snapshot()
                solver.turned_cost(turns * np.where(part, weight, 0.0)[:, None, None], limited)
                solver.restore(before, ~part)
            residual, cost = solver.cost()
        if frozen is not None:
            solver.restore(frozen, ~active)
            residual, cost = solver.cost()
        current_cost = np.where(active, cost, current_cost)
        better = active & (cost < best_cost)
        if better.any():
            best_cost = np.where(better, cost, best_cost)
            for i, v in solver.placed.items():
                best[i] = best[i].copy()
                best[i][better] = v[better]
        done = active & (residual <= tol[:, None]).all(axis=1)
        status[done] = CONVERGED
        gaining = active & ~done & (cost < progress_cost * (1.0 - STALL_RELATIVE) ** 2)
        progress_cost = np.where(gaining, cost, progress_cost)
        stalls = np.where(gaining, 0, np.where(active & ~done, stalls + 1, stalls))
        stalled = active & ~done & (stalls >= TREE_STALL_PATIENCE)
        status[stalled] = STALLED
        active = active & ~done & ~stalled
    solver.proposals = best
    solver.forward(with_frames=True)
    heads, frames, tails = solver.finish()
    out = []
    for fi in range(f):
        res = norms(tails[fi, first.effectors] - solver.targets[fi])
        reached = res <= tol[fi]
        st = np.full(first.n_effectors, status[fi], dtype=np.int8)
        st[~reached & (st == CONVERGED)] = STALLED
        st[~reached & (norms(solver.targets[fi] - solver.start_heads[fi, 0]) > solver.reach_e[fi])] = UNREACHABLE
        st[reached] = CONVERGED
        out.append(
            TreeResult(
                heads=heads[fi],
                tails=tails[fi],
                frames=frames[fi],
                iterations=int(iterations[fi]),
                residual=res,
                reached=reached,
                status=st,
            )
        )
    return out
