"""The full-body stage: move a body's root and spine so the limbs can reach, with pinned limbs held.

A *body* is a small tree of bones: its root (the hips), which may move and turn freely, and the bones of
the chains that carry other chains (the spine), which turn about their heads. Every other chain hangs from
the body at an **anchor** (its root bone's head, carried rigidly by the body bone above it) and can reach
anything within its **reach** (its length) of the anchor. What the body does is decided from the anchors
alone, before the limbs are solved by their own solvers from where the body puts them (``core/body.py``):

* a **pulling** anchor (weight ``pull`` > 0) whose target lies beyond its reach wants the body to bring it
  within reach: its residual is the radial excess ``|target - anchor| - reach`` (one row: only the distance
  matters, the limb turns to face the target by itself);
* a **pinned** anchor must stay within its limb's reach of its target (planted feet): a hard bound, never
  given up to a pull. Its bound is the limb's reach, or the distance it has now when that is already more
  (a pin the body cannot make worse);
* a pulling anchor within its reach at the start (a *follower*: the other hand, the head) is a bound of
  lower priority: the body keeps it within reach where that leaves the pulls beyond reach (the *leaders*)
  free, and where it cannot, the leaders win. Leaders that conflict meet where their weights balance; a
  leader's weight ramps from ``FOLLOW`` to its pull over the first ``LEAD_RAMP`` (times the body's size)
  of excess.

One iteration is a damped minimum-norm Gauss-Newton step on the active rows (the pulls beyond reach and
every bound the step would cross; followers only in what the pins and leaders leave free), in a metric
that says how readily each degree of freedom moves (root translation, root rotation, each spine bone:
``ROOT_MOVE``, ``ROOT_TURN``, ``SPINE_TURN``), followed by the spine's joint limits
(``limits.apply_joint_limits`` on each bone's local rotation), a few corrections that put pins the step's
second order carried past their bound back on it, and a line search (the whole step, then the pins' and
leaders' part alone, halved) until the weighted excess goes down with no pin worse off. Where nothing
pulls beyond reach no row is active and nothing moves: the body keeps its pose, and a target dragged a
little past reach moves it a little.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

from .arrays import F64, I64, Bools
from .body_floats import solve_body_floats
from .body_problem import (
    _CORRECTIONS,
    _DAMPING,
    _FOLLOW_DAMPING,
    _HALVINGS,
    _SLACK,
    _STALL,
    FOLLOW,
    LEAD_RAMP,
    MAX_TURN,
    PIN_WEIGHT,
    REACH_MARGIN,
    ROOT_MOVE,
    ROOT_TURN,
    SPINE_TURN,
    BodyProblem,
    BodyResult,
    _clearly_inside,
    _limit_rows,
    _radial_cone,
)
from .limits import apply_joint_limits
from .rotations import cross, rotvec_matrix

# The problem and result live in `body_problem` (shared with `body_floats`); callers take them from here.
__all__ = ["FLOATS_UP_TO", "BodyProblem", "BodyResult", "solve_body"]


@dataclass(frozen=True)
class _State:
    root_head: F64
    root_frame: F64
    heads: F64
    frames: F64
    d: F64  # (A, 3) anchor -> target
    dist: F64  # (A,)
    over: F64  # (A,) distance past each anchor's bound (-inf: takes no part)


def _skew_rows(r: F64) -> F64:
    """(A, 3, 3) matrices J with J @ w = w x r (a turn w about the origin moves point r by w x r)."""
    out = np.zeros((r.shape[0], 3, 3))
    out[:, 0, 1], out[:, 0, 2] = r[:, 2], -r[:, 1]
    out[:, 1, 0], out[:, 1, 2] = -r[:, 2], r[:, 0]
    out[:, 2, 0], out[:, 2, 1] = r[:, 1], -r[:, 0]
    return out


class _Body:
    """The body's pose as local rotations under the root, and forward kinematics on it."""

    def __init__(self, p: BodyProblem) -> None:
        self.parents = np.asarray(p.parents, dtype=np.int64)
        heads, frames = np.asarray(p.heads, dtype=np.float64), np.asarray(p.frames, dtype=np.float64)
        self.n = len(self.parents)
        par = self.parents[1:]
        # Constant: each bone's head offset in its parent's frame; variable: its local rotation.
        self.offsets = np.einsum("bji,bj->bi", frames[par], heads[1:] - heads[par])
        self.local = np.swapaxes(frames[par], 1, 2) @ frames[1:]
        self.root_head = heads[0].copy()
        self.root_frame = frames[0].copy()
        # Each bone's chain of ancestors, and for each bone which bones turn it (itself and its ancestors).
        self.turns = np.zeros((self.n, self.n), dtype=bool)
        for b in range(self.n):
            k = b
            while k >= 0:
                self.turns[b, k] = True
                k = int(self.parents[k])

    def pose(self, root_head: F64, root_frame: F64, local: F64) -> tuple[F64, F64]:
        heads = np.empty((self.n, 3))
        frames = np.empty((self.n, 3, 3))
        heads[0], frames[0] = root_head, root_frame
        for b in range(1, self.n):
            p = int(self.parents[b])
            frames[b] = frames[p] @ local[b - 1]
            heads[b] = heads[p] + frames[p] @ self.offsets[b - 1]
        return heads, frames


def _anchor_points(heads: F64, frames: F64, bones: I64, offsets: F64) -> F64:
    out: F64 = heads[bones] + np.einsum("aij,aj->ai", frames[bones], offsets)
    return out


def _solve_small(a: F64, b: F64) -> F64:
    """(n, m) solution of a small symmetric positive definite system (damped, so no pivoting): Gauss-Jordan
    by rows, a few numpy calls per row where `np.linalg.solve` costs ~50 us a call."""
    n = a.shape[0]
    m = np.concatenate([a, b.reshape(n, -1)], axis=1)
    for k in range(n):
        m[k] /= m[k, k]
        col = m[:, k].copy()
        col[k] = 0.0
        m -= col[:, None] * m[k][None, :]
    out: F64 = m[:, n:]
    return out


def _capped(delta: F64, size: float, move_root: bool) -> F64:
    """`delta` scaled down to at most `MAX_TURN` of turn (radians) and of move (times the body's size)."""
    shift = float(np.abs(delta[:3]).max()) / size if move_root else 0.0
    turn = float(np.abs(delta[3:]).max(initial=0.0))
    out: F64 = delta * min(1.0, MAX_TURN / max(shift, turn, 1e-300))
    return out


def _step(jac: F64, over: F64, first: Bools, second: Bools, weight: F64, inv_metric: F64, size: float) -> F64:
    """The minimum-norm step (in the metric) that puts each row's distance on its bound: the `first` rows
    (pins, leaders) exactly as far as they can go, the `second` (followers) only within what is left."""
    root = np.sqrt(inv_metric)
    g = jac * root  # scaled coordinates z = M^(1/2) delta: the metric becomes the identity
    step = np.zeros(jac.shape[1])
    null = None
    if first.any():
        gp = g[first]
        system = gp @ gp.T
        system.flat[:: system.shape[0] + 1] += (_DAMPING * size * size + 1e-12) / weight[first]
        solved = _solve_small(system, np.column_stack([-over[first], gp]))
        step = gp.T @ solved[:, 0]
        null = np.eye(jac.shape[1]) - gp.T @ solved[:, 1:]
    if second.any():
        gs = g[second]
        a = gs if null is None else gs @ null
        system = a @ a.T
        system.flat[:: system.shape[0] + 1] += _FOLLOW_DAMPING * size * size
        step = step + a.T @ _solve_small(system, -over[second] - gs @ step)[:, 0]
    out: F64 = step * root
    return out


FLOATS_UP_TO: Final = 800
"""`solve_body` computes in plain Python floats (`solvers.body_floats`) when its Jacobian has at most this many
entries (anchors times degrees of freedom: the set-up humanoid's is 5 x 15), on numpy arrays above: on a few
bones numpy's cost per call (1-3 us) outweighs its speed per element. Measured (random pinned bodies, numpy
1.26): floats 2.4-2.6x faster at 75-126 entries, 1.9-2.1x at 168-324, 1.1-1.3x at 468-816."""


def solve_body(problem: BodyProblem, method: str = "auto") -> BodyResult:
    """Move and turn the body's root and turn its spine so every pull is within reach, pins held.

    Parameters
    ----------
    problem : BodyProblem
    method : {"auto", "arrays", "floats"}
        Compute on numpy arrays (below: the reference) or in plain Python floats (`solvers.body_floats`:
        the same steps, equal to float64 rounding, several times faster on a few bones); "auto" takes
        floats for a Jacobian of at most `FLOATS_UP_TO` entries.

    Returns
    -------
    BodyResult
        The new pose; ``excess`` per anchor, ``blocked`` when a pin stopped a pull short.
    """
    if method not in ("auto", "arrays", "floats"):
        raise ValueError(f"solve_body's method must be 'auto', 'arrays' or 'floats', got {method!r}")
    n_dof = 3 + 3 * len(problem.parents)
    if method == "floats" or (method == "auto" and n_dof * len(problem.anchor_bones) <= FLOATS_UP_TO):
        return solve_body_floats(problem)
    p = problem
    body = _Body(p)
    n_b = body.n
    bones = np.asarray(p.anchor_bones, dtype=np.int64)
    offsets = np.asarray(p.anchor_offsets, dtype=np.float64)
    targets = np.asarray(p.targets, dtype=np.float64)
    reach = np.asarray(p.reach, dtype=np.float64)
    pinned = np.asarray(p.pinned, dtype=bool)
    pull = np.where(pinned, 0.0, np.asarray(p.pull, dtype=np.float64))
    heads0, frames0 = np.asarray(p.heads, dtype=np.float64), np.asarray(p.frames, dtype=np.float64)

    def distances(heads: F64, frames: F64) -> tuple[F64, F64]:
        d = targets - _anchor_points(heads, frames, bones, offsets)
        return d, np.sqrt(np.einsum("ai,ai->a", d, d))

    d, dist = distances(heads0, frames0)
    # The bound each anchor's distance must keep: a pin's limb reach (or what it has now, if more); a
    # pull's reach, which it crosses only by its own pull.
    bound = np.where(pinned, np.maximum(reach, dist), reach * (1.0 - REACH_MARGIN))
    part = pinned | (pull > 0.0)
    over = np.where(part, dist - bound, -np.inf)
    # A pull within a tenth of the tolerance counts as in reach (the limb then reaches well within it).
    enough = 0.1 * p.tolerance
    if not bool(((over > p.tolerance) & (pull > 0.0)).any()):
        return BodyResult(heads0, frames0, 0, np.maximum(dist - reach, 0.0), False, False)

    size = max(
        float(np.mean(np.linalg.norm(_anchor_points(heads0, frames0, bones, offsets) - heads0[0], axis=1))), 1e-9
    )
    # The metric: how readily each degree of freedom moves (root move, root turn, spine turns).
    n_dof = 6 + 3 * (n_b - 1)
    metric = np.empty(n_dof)
    metric[:3] = ROOT_MOVE / (size * size) if p.move_root else np.inf
    metric[3:6] = ROOT_TURN
    metric[6:] = SPINE_TURN
    inv_metric = np.where(np.isfinite(metric), 1.0 / metric, 0.0)
    # Leaders (beyond reach now) pull with their weight; followers hold on weakly (see the module's notes).
    lead = np.clip(over / (LEAD_RAMP * size), FOLLOW, 1.0)
    weight = np.where(pinned, PIN_WEIGHT, np.where(pull > 0.0, pull * lead, 0.0))
    leaders = (pull > 0.0) & (over > p.tolerance)
    turns = body.turns[bones]  # (A, B): which body bones move each anchor
    limits = p.limits
    limited = limits is not None and n_b > 1 and bool(limits.use_cone[0, 1:].any() or limits.use_twist[0, 1:].any())
    fast = _limit_rows(np.asarray(p.ref_local[1:], dtype=np.float64), limits) if limited and limits else None

    def jacobian(state: _State) -> F64:
        """d(distance)/d(dof) of every anchor: moving an anchor by v changes its distance by -unit . v.
        Columns: root move (3), root turn (3), each spine bone's turn (3 each)."""
        points = _anchor_points(state.heads, state.frames, bones, offsets)
        unit = state.d / np.maximum(state.dist, 1e-300)[:, None]
        jac = np.empty((len(bones), n_dof))
        jac[:, :3] = -unit
        # -unit . (w x r) = -(r x unit) . w, r from each bone's head; zero for bones that do not move it.
        r = points[:, None, :] - state.heads[None, :, :]
        jac[:, 3:] = (cross(unit[:, None, :], r) * turns[:, :, None]).reshape(len(bones), -1)
        return jac

    def move(head: F64, frame: F64, frames_now: F64, delta: F64) -> _State:
        """The body after a step `delta`: each bone's frame turns by the sum of its own and its ancestors'
        turns (to first order what the Jacobian says); the heads follow by forward kinematics."""
        new_head = head + delta[:3] if p.move_root else head
        turn_each = delta[3:].reshape(n_b, 3)
        total = np.empty((n_b, 3))
        total[0] = turn_each[0]
        for b in range(1, n_b):
            total[b] = total[int(body.parents[b])] + turn_each[b]
        world = rotvec_matrix(total) @ frames_now
        par = body.parents[1:]
        local = np.swapaxes(world[par], 1, 2) @ world[1:]
        if limited and limits is not None and (fast is None or not _clearly_inside(fast, local)):
            local = _radial_cone(p.ref_local[1:], local, limits.cone[0, 1:], limits.use_cone[0, 1:])
            local = apply_joint_limits(
                p.ref_local[1:],
                local,
                limits.cone[0, 1:],
                limits.use_cone[0, 1:],
                limits.twist[0, 1:],
                limits.use_twist[0, 1:],
            )
        heads_new, frames_new = body.pose(new_head, world[0], local)
        d_new, dist_new = distances(heads_new, frames_new)
        return _State(
            new_head, world[0], heads_new, frames_new, d_new, dist_new, np.where(part, dist_new - bound, -np.inf)
        )

    root_head, root_frame = body.root_head.copy(), body.root_frame.copy()
    heads, frames = heads0, frames0

    def cost(over_now: F64) -> float:
        return float(np.sum(np.where(pinned, 0.0, weight) * np.maximum(over_now, 0.0) ** 2))

    iterations = 0
    while iterations < p.max_iterations:
        iterations += 1
        jac = jacobian(_State(root_head, root_frame, heads, frames, d, dist, over))
        first = (pinned & (over > 0.0)) | (leaders & (over > 0.0))
        second = ~pinned & ~leaders & part & (over > 0.0)
        delta = _step(jac, over, first, second, weight, inv_metric, size)
        # Bounds the step would cross join as rows (the active set), then the step is taken again.
        for _ in range(2):
            predicted = over + jac @ delta
            crossing = part & ~first & ~second & (predicted > 0.0)
            if not crossing.any():
                break
            first |= crossing & (pinned | leaders)
            second |= crossing & ~(pinned | leaders)
            delta = _step(jac, over, first, second, weight, inv_metric, size)
        # The followers' part of a step may ask for more than the linear model holds: when the whole step
        # does not pay, the pins' and leaders' part alone is tried (then halved).
        full = _capped(delta, size, p.move_root)

        def trials(
            full: F64 = full, first: Bools = first, second: Bools = second, jac: F64 = jac, over: F64 = over
        ) -> Iterator[F64]:
            """The whole step, then the pins' and leaders' part alone (worked out only if needed), halved."""
            yield full
            lead = _step(jac, over, first, np.zeros_like(second), weight, inv_metric, size) if second.any() else full
            lead = _capped(lead, size, p.move_root)
            for k in range(_HALVINGS):
                yield lead * 0.5**k

        new_cost = before = cost(over)
        pins_before = np.where(pinned, np.maximum(over, 0.0), 0.0)
        accepted = False
        for trial in trials():
            state = move(root_head, root_frame, frames, trial)
            # The rows are first-order: a pin on its bound drifts past it by the step's second order. A few
            # corrections on the pins alone (the same minimum-norm step) bring it back.
            for _fix in range(_CORRECTIONS):
                late = pinned & (state.over > pins_before + _SLACK * size)
                if not late.any():
                    break
                # The step's Jacobian stands for the moved body's (a correction is second-order small).
                g = jac[late]
                gm = g * inv_metric
                system = gm @ g.T
                system.flat[:: system.shape[0] + 1] += _DAMPING * size * size
                correction = gm.T @ _solve_small(system, -(state.over[late] - pins_before[late]))[:, 0]
                state = move(state.root_head, state.root_frame, state.frames, correction)
            pins_ok = bool((np.where(pinned, np.maximum(state.over, 0.0), 0.0) <= pins_before + _SLACK * size).all())
            new_cost = cost(state.over)
            if pins_ok and new_cost < before:
                accepted = True
                root_head, root_frame = state.root_head, state.root_frame
                heads, frames, d, dist, over = state.heads, state.frames, state.d, state.dist, state.over
                break
        # Done: the leaders are within reach, nothing paid, or a step brought them less than `_STALL` (times
        # the body's size) nearer (pins or limits hold the body: this is the closest pose, to that much).
        stalled = accepted and np.sqrt(before) - np.sqrt(new_cost) < _STALL * size
        if not accepted or stalled or not bool((leaders & (over > enough)).any()):
            break
    excess = np.maximum(dist - reach, 0.0)
    short = bool((leaders & (over > enough)).any())
    at_pin = bool((pinned & (over > -1e-6 * size)).any())
    moved = bool(np.abs(heads - heads0).max() > 0.0 or np.abs(frames - frames0).max() > 0.0)
    return BodyResult(heads, frames, iterations, excess, short and at_pin, moved)
