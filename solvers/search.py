"""The global stage under joint limits: a projected damped least-squares search in joint space, multistarted.

FABRIK and CCD are local methods, and hinges, half-cones and narrow cones leave many local minima: a
chain stalls against a limit although another pose inside the limits puts its tip on the target. The
chains that are still short after the solver come here. (This stage replaced two restarts of the local
solver, from the rest pose and from a straight line: those reached 88-90 % of the harsh suite of
tests/unit/test_solver_limits.py at up to three times the iterations; this stage reaches 99.5-100 % there
and costs less.)

The search works on each bone's **local rotation** ``L_i = ref_i^T F_i`` (its frame relative to its
reference frame, where the limits live), so the limit set is a product of one set per joint and the
projection onto it is exact and cheap: :func:`solvers.limits.apply_joint_limits` per joint. One
iteration is a Levenberg-Marquardt step on the tip position (the same 3x3 system as the loop's polish,
``loop.polish_turns``), restricted to the axes each joint can turn about (a hinge turns about its hinge
axis only, a locked twist takes no turn about the bone's own axis), followed by the projection of every
joint onto its limits and forward kinematics. A step that does not lower the residual is refused and the
damping raised (the classic LM schedule), so a chain never gets worse. Twist is a free coordinate within
each bone's twist range (a bone without a twist limit may roll): this is what lets a hinge turn its
bending plane toward the target, as Blender's IK does by rolling the bone above the hinge.

Every chain solver (FABRIK, CCD, two-bone; batched and scalar alike) hands its result to :func:`refine`,
which sends the chains that missed a target their lengths can reach here, so the live (scalar) and the
batched paths share this stage exactly.

The search starts from the best pose the solver found; the chains that do not reach from there start again
from a fixed set of pseudo-random poses inside the limits (a fixed seed: the same problem gives the same
answer), batched together; a chain stops at its first start that reaches, and the nearest pose found is
kept. Trying the solver's own pose alone first keeps what the stage finds near it, so a chain moves on
continuously from frame to frame wherever that suffices. A chain with a pole (or the natural
bend) then has its pose turned into the hint's half-plane where the root bone's limits allow it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Final

import numpy as np

from .frames import STRAIGHT, ChainBatch, LimitTable, chain_bend, frame_positions
from .limits import apply_joint_limits
from .rotations import (
    cross,
    matmul,
    minimal_rotation,
    normalize,
    norms,
    orthonormalize,
    perpendicular_part,
    rotvec_matrix,
)
from .types import CONVERGED, F64, I64, ZERO_LENGTH, Bools, ChainProblem, SolveResult

SEARCH_ITERATIONS: Final = 40
"""Levenberg-Marquardt iterations per start."""
SEARCH_STARTS: Final = 12
"""Pseudo-random starts inside the limits, besides the solver's own best pose."""
SEARCH_SEED: Final = 28
"""Seed of the starts (fixed: a solve is a function of its input)."""
_MU_START: Final = 1e-3
_MU_UP: Final = 4.0
_MU_DOWN: Final = 1.0 / 3.0
_MU_MAX: Final = 1e6
_MU_MIN: Final = 1e-9
"""Damping floor: a one-bone chain cannot move its tip by turning about its own axis, so its system is
singular without damping, and a start that keeps gaining (as a chain's own pose can for 40 steps) would
otherwise divide the damping down to nothing (numpy then refuses the singular solve)."""
_FREE_SWING: Final = 1.0
"""Largest swing (rad) of a random start for a bone without a cone."""
_EPS: Final = 1e-9
_EYE: Final = np.eye(3)

LIVE_BUDGET: Final = 0.002
"""Seconds of the global stage per live update of a rig (`budget`): what a drag may spend on it."""
_STARTS_PER_ROUND: Final = 3
"""Pseudo-random starts tried per chain in one budgeted update, at most."""
_MEMO_SIZE: Final = 256
MAX_ROUNDS: Final = 60
"""Budgeted updates a target gets at most (about 120 ms of search in all); then it counts as out of reach."""
_deadline: float | None = None
_seconds = LIVE_BUDGET
_cut = False
_rounds: OrderedDict[bytes, int] = OrderedDict()
_tried: OrderedDict[bytes, int] = OrderedDict()
_progress: OrderedDict[bytes, tuple[F64, int]] = OrderedDict()
_best: OrderedDict[bytes, F64] = OrderedDict()
_own_done: OrderedDict[bytes, int] = OrderedDict()
_iterations_done = 0
"""Budgeted live updates: how many pseudo-random starts a chain's target (with its chain) has had, all in
vain. The next update toward the same target goes on from there; a target that had them all is out of reach
under the limits and is not searched from scratch again (its own pose still descends, within the budget)."""


class Budget:
    """What a budgeted solve left: ``cut`` when the deadline stopped a search that had more to try (the
    caller solves again in a next update to go on)."""

    cut = False


class budget:  # lower case: used as a function (`with search.budget(seconds) as spent`)
    """Bound the global stage to ``seconds`` (from now) for the solves inside: the descents stop at the
    deadline, the pseudo-random starts go ``_STARTS_PER_ROUND`` at a time while time remains and go on in
    the next update toward the same target. For live updates only: a bounded solve depends on the clock,
    so bakes and renders, which must be functions of their input, solve unbounded.

    A class rather than a generator context manager: every live update enters one (a generator's costs
    ~1.5 us more, a tenth of what the handler spends around a one-chain solve)."""

    __slots__ = ("out", "previous", "seconds")

    def __init__(self, seconds: float | None = LIVE_BUDGET) -> None:
        self.seconds = seconds

    def __enter__(self) -> Budget:
        global _deadline, _cut, _seconds
        self.previous = (_deadline, _cut, _seconds)
        # The clock starts when the stage does (`_start_clock`): the solvers before it take what they take.
        # None: unbounded inside (a frame change), whatever encloses it.
        seconds = self.seconds
        _deadline, _cut, _seconds = (None if seconds is None else math.inf), False, seconds or 0.0
        self.out = Budget()
        return self.out

    def __exit__(self, *_exc: object) -> None:
        global _deadline, _cut, _seconds
        self.out.cut = _cut
        _deadline, _cut, _seconds = self.previous


_defer = False


class deferring:  # lower case: used as a function, as `budget`
    """Inside a budget, let a solver leave its global stage to a later update (`defer_stage`): for live
    updates that move targets, whose next update solves again anyway; not for those that carry a cut
    search on (they must search)."""

    __slots__ = ("on", "previous")

    def __init__(self, on: bool = True) -> None:
        self.on = on

    def __enter__(self) -> None:
        global _defer
        self.previous, _defer = _defer, self.on

    def __exit__(self, *_exc: object) -> None:
        global _defer
        _defer = self.previous


def defer_stage() -> bool:
    """Whether the global stage may wait for a later update (a budgeted live update inside `deferring`):
    then the caller keeps its closed-form pose for now and the budget counts as cut, so the rig is solved
    again, stage and all, once the update is over (the target standing still). Never for bakes, renders or
    frame changes (unbounded: their poses are functions of their inputs)."""
    global _cut
    if _deadline is None or not _defer:
        return False
    _cut = True
    return True


def forget() -> None:
    """Drop what budgeted updates remember of their targets (the add-on unregistered, a file loaded)."""
    _rounds.clear()
    _tried.clear()
    _progress.clear()
    _best.clear()
    _own_done.clear()


def _start_clock() -> None:
    """The first search inside a `budget` starts its clock."""
    global _deadline
    if _deadline == math.inf:
        _deadline = time.perf_counter() + _seconds


def _remember(memo: OrderedDict[bytes, int], key: bytes, value: int) -> None:
    memo[key] = value
    memo.move_to_end(key)
    while len(memo) > _MEMO_SIZE:
        memo.popitem(last=False)


def _out_of_time() -> bool:
    return _deadline is not None and time.perf_counter() > _deadline


def _key(batch: ChainBatch, row: int) -> bytes:
    """What identifies a chain's search problem across updates: its target, geometry and limits."""
    # Rounded: the live reads come through float32, and a target that stands still must keep its key.
    scale = 1e-5 * max(float(batch.total_length[row]), 1e-12)
    parts = [np.round(batch.targets[row] / scale), np.round(batch.offsets[row] / scale)]
    lim = batch.limits
    if lim is not None:
        parts += [np.round(lim.cone[row], 5), np.round(lim.twist[row], 5), lim.use_cone[row], lim.use_twist[row]]
    # (+ 0.0 turns -0.0 into 0.0: the same number, other bytes.)
    return b"".join(np.ascontiguousarray(np.asarray(p, dtype=np.float64) + 0.0).tobytes() for p in parts)


def local_rotations(batch: ChainBatch, frames: F64) -> F64:
    """``(A, N, 3, 3)`` local rotations ``ref_i^T F_i`` of ``frames``, with ``ref_i = F_{i-1} @ ref_local_i``."""
    parents = np.concatenate([batch.base[:, None], frames[:, :-1]], axis=1)
    refs = matmul(parents, batch.ref_local)
    return matmul(refs.swapaxes(-1, -2), frames)


def chain_frames(batch: ChainBatch, local: F64) -> tuple[F64, F64]:
    """World frames ``(A, N, 3, 3)`` and reference frames of the local rotations ``local`` (root to tip)."""
    n = batch.n_bones
    frames = np.empty_like(local)
    refs = np.empty_like(local)
    parent = batch.base
    for i in range(n):
        refs[:, i] = matmul(parent, batch.ref_local[:, i])
        parent = frames[:, i] = matmul(refs[:, i], local[:, i])
    return frames, refs


def project(local: F64, limits: LimitTable | None) -> F64:
    """Every joint's local rotation projected onto its limits (exactly: ``apply_joint_limits``)."""
    if limits is None:
        return local
    a, n = local.shape[:2]
    eye = np.broadcast_to(_EYE, (a * n, 3, 3))
    flat = apply_joint_limits(
        eye,
        local.reshape(-1, 3, 3),
        limits.cone.reshape(-1, 4),
        limits.use_cone.reshape(-1),
        limits.twist.reshape(-1, 2),
        limits.use_twist.reshape(-1),
    )
    return np.asarray(flat, dtype=np.float64).reshape(local.shape)


def _orthonormal(local: F64) -> F64:
    """``local`` ``(A, N, 3, 3)`` re-orthonormalized (``rotations.orthonormalize``)."""
    return orthonormalize(local.reshape(-1, 3, 3)).reshape(local.shape)


def _mobility(limits: LimitTable | None, a: int, n: int) -> F64:
    """``(A, N, 3)`` 1/0: whether each joint can turn about its reference X (swing up/down), its
    reference Z (swing left/right) and its own Y (twist)."""
    out = np.ones((a, n, 3))
    if limits is None:
        return out
    cone, twist = limits.cone, limits.twist
    out[..., 0] = np.where(limits.use_cone & (cone[..., 0] + cone[..., 1] <= 0.0), 0.0, 1.0)
    out[..., 1] = np.where(limits.use_cone & (cone[..., 2] + cone[..., 3] <= 0.0), 0.0, 1.0)
    out[..., 2] = np.where(limits.use_twist & (twist[..., 1] <= twist[..., 0]), 0.0, 1.0)
    return out


def _projectors(refs: F64, frames: F64, mobility: F64) -> F64:
    """``(A, N, 3, 3)`` orthogonal projectors onto the world axes each joint can turn about
    (Gram-Schmidt over its mobile axes: reference X, reference Z, the bone's own Y)."""
    axes = (refs[..., 0] * mobility[..., 0:1], refs[..., 2] * mobility[..., 1:2], frames[..., 1] * mobility[..., 2:3])
    basis: list[F64] = []
    out = np.zeros(frames.shape)
    for v in axes:
        u = v.copy()
        for b in basis:
            u -= np.einsum("ani,ani->an", u, b)[..., None] * b
        size = norms(u)
        u = np.where(size[..., None] > 1e-6, u / np.maximum(size, 1e-300)[..., None], 0.0)
        basis.append(u)
        out += u[..., :, None] * u[..., None, :]
    return out


def _step(
    batch: ChainBatch, local: F64, frames: F64, refs: F64, positions: F64, mu: F64, mobility: F64
) -> tuple[F64, F64, F64, F64]:
    """One Levenberg-Marquardt step from the pose ``local`` (with its ``frames``, reference frames
    ``refs`` and joint ``positions``): the projected new local rotations, their frames, reference frames
    and positions."""
    levers = positions[:, -1:] - positions[:, :-1]
    error = batch.targets - positions[:, -1]
    proj = _projectors(refs, frames, mobility)
    # Tip motion of a turn w_j of joint j (and everything below): w_j x r_j = -[r_j]x w_j; restricted to
    # the mobile axes (projector M_j) the system is (sum_j [r_j]x M_j [r_j]x^T + mu I) y = e, and
    # w_j = M_j (r_j x y).
    rx = np.zeros((*levers.shape, 3))
    rx[..., 0, 1], rx[..., 0, 2] = -levers[..., 2], levers[..., 1]
    rx[..., 1, 0], rx[..., 1, 2] = levers[..., 2], -levers[..., 0]
    rx[..., 2, 0], rx[..., 2, 1] = -levers[..., 1], levers[..., 0]
    system = np.einsum("anij,anjk,anlk->ail", rx, proj, rx)
    scale = np.trace(system, axis1=1, axis2=2) / 3.0 + _EPS
    system += (mu * scale)[:, None, None] * _EYE
    y = np.linalg.solve(system, error[..., None])[..., 0]
    w = np.einsum("anij,anj->ani", proj, cross(levers, np.broadcast_to(y[:, None], levers.shape)))
    # In local terms a world turn w_i of joint i alone is L_i <- R(ref_i^T w_i) L_i.
    turn = rotvec_matrix(np.einsum("anji,anj->ani", refs, w).reshape(-1, 3)).reshape(local.shape)
    # Re-orthonormalized: products of many steps would drift off the rotations.
    new = project(_orthonormal(matmul(turn, local)), batch.limits)
    new_frames, new_refs = chain_frames(batch, new)
    return new, new_frames, new_refs, frame_positions(batch, new_frames)


def descend(batch: ChainBatch, local: F64, groups: I64, tolerance: float, iterations: int) -> tuple[F64, F64, F64, F64]:
    """Projected Levenberg-Marquardt from the (limited) local rotations ``local``, one row per start.

    ``groups`` names the chain each row solves: a chain's rows all stop once one of them reaches
    ``tolerance``; a row also stops when its damping grows past use. Returns the best local rotations,
    their frames and positions, and residuals, per row.
    """
    a, n = local.shape[:2]
    local = local.copy()
    frames, refs = chain_frames(batch, local)
    positions = frame_positions(batch, frames)
    best = norms(positions[:, -1] - batch.targets)
    mu = np.full(a, _MU_START)
    mobility = _mobility(batch.limits, a, n)
    done = np.zeros(int(groups.max()) + 1, dtype=np.bool_)
    rows = np.arange(a)
    global _cut, _iterations_done
    _iterations_done = 0
    for _ in range(iterations):
        if _deadline is not None and _out_of_time():
            _cut = True
            break
        _iterations_done += 1
        done[groups[best <= tolerance]] = True
        rows = rows[~done[groups[rows]] & (mu[rows] < _MU_MAX)]
        if rows.size == 0:
            break
        sub = batch.take(rows)
        new, new_frames, new_refs, new_positions = _step(
            sub, local[rows], frames[rows], refs[rows], positions[rows], mu[rows], mobility[rows]
        )
        r = norms(new_positions[:, -1] - sub.targets)
        better = r < best[rows]
        good = rows[better]
        local[good], frames[good], refs[good], positions[good] = (
            new[better],
            new_frames[better],
            new_refs[better],
            new_positions[better],
        )
        best[good] = r[better]
        mu[rows] = np.where(better, np.maximum(mu[rows] * _MU_DOWN, _MU_MIN), mu[rows] * _MU_UP)
    return local, frames, positions, best


def random_locals(rng: np.random.Generator, limits: LimitTable | None, a: int, n: int) -> F64:
    """``(A, N, 3, 3)`` pseudo-random local rotations inside the limits: the swing uniform in the cone's
    ellipse quadrants (a moderate random swing where there is no cone), the twist uniform in its range
    (none where it is free: the roll modes' own choice)."""
    phi = rng.uniform(0.0, 2.0 * np.pi, size=(a, n))
    r = 0.95 * np.sqrt(rng.random((a, n)))
    twist01 = rng.random((a, n))
    c, s = np.cos(phi), np.sin(phi)
    if limits is None:
        half_x = half_z = np.full((a, n), _FREE_SWING)
        tau = np.zeros((a, n))
    else:
        cone = limits.cone
        half_x = np.where(limits.use_cone, np.where(c >= 0, cone[..., 3], cone[..., 2]), _FREE_SWING)
        half_z = np.where(limits.use_cone, np.where(s >= 0, cone[..., 0], cone[..., 1]), _FREE_SWING)
        lo, hi = limits.twist[..., 0], limits.twist[..., 1]
        tau = np.where(limits.use_twist, lo + (hi - lo) * twist01, 0.0)
    tx, tz = r * half_x * c, r * half_z * s
    # The swing turns +Y toward (tx, 0, tz): about Y x (tx, 0, tz) = (tz, 0, -tx), by its length.
    swing = rotvec_matrix(np.stack((tz, np.zeros_like(tz), -tx), axis=-1).reshape(-1, 3)).reshape(a, n, 3, 3)
    twist = rotvec_matrix(np.stack((np.zeros_like(tau), tau, np.zeros_like(tau)), axis=-1).reshape(-1, 3))
    return matmul(swing, twist.reshape(a, n, 3, 3))


def search(
    batch: ChainBatch,
    frames: F64,
    tolerance: float,
    starts: int = SEARCH_STARTS,
    iterations: int = SEARCH_ITERATIONS,
) -> tuple[F64, F64, Bools]:
    """The global stage for the chains of ``batch`` whose best pose so far has frames ``frames``.

    Every chain descends from that pose (projected onto the limits); those still short then descend from
    ``starts`` pseudo-random poses inside the limits, in one batch (small batches cost numpy's per-call
    overhead, whatever their size); a chain stops as soon as one of its starts reaches the target.

    Parameters
    ----------
    batch
        The chains (with limits).
    frames
        ``(A, N, 3, 3)`` the frames of each chain's best pose so far.
    tolerance
        Distance to the target at which a chain stops.
    starts, iterations
        Pseudo-random starts per chain (besides its own pose) and Levenberg-Marquardt iterations per start.

    Returns
    -------
    frames, positions, improved
        The frames ``(A, N, 3, 3)`` of the nearest pose found per chain (never farther from the target
        than ``frames``: those chains keep ``frames``), their joint positions ``(A, N+1, 3)``, and which
        chains improved ``(A,)``.
    """
    if _deadline is not None:
        return _budgeted_search(batch, frames, tolerance, starts, iterations)
    return _search(batch, frames, tolerance, starts, iterations)


def _budgeted_search(
    batch: ChainBatch, frames: F64, tolerance: float, starts: int, iterations: int
) -> tuple[F64, F64, Bools]:
    """:func:`search` within the live budget: each target's search goes on where it stopped, a target out of
    reach (every start tried, or ``MAX_ROUNDS`` updates) is not searched again and gets the best pose its
    search found (`_best`), so it is posed alike whenever it comes back; a target reached is forgotten."""
    _start_clock()
    a = frames.shape[0]
    keys = [_key(batch, row) for row in range(a)]
    rounds = np.array([_rounds.get(key, 0) for key in keys])
    live = (rounds < MAX_ROUNDS) & np.array([_tried.get(key, 0) < starts for key in keys], dtype=np.bool_)
    found, positions = frames.copy(), frame_positions(batch, frames)
    before = norms(positions[:, -1] - batch.targets)
    rows = np.flatnonzero(live)
    if rows.size:
        # The own pose descends in a target's first update only: after it, the pose written is where that
        # descent ended, and the budget goes to the pseudo-random starts.
        f, p, _imp = _search(batch.take(rows), frames[rows], tolerance, starts, iterations, [keys[r] for r in rows])
        found[rows], positions[rows] = f, p
    for row, key in enumerate(keys):
        sub = batch.take(np.array([row]))
        kept = _best.get(key)
        if kept is not None:
            k_frames, _refs = chain_frames(sub, kept[None])
            k_positions = frame_positions(sub, k_frames)
            if norms(k_positions[:, -1] - sub.targets)[0] < norms(positions[row : row + 1, -1] - sub.targets)[0]:
                found[row], positions[row] = k_frames[0], k_positions[0]
        if norms(positions[row : row + 1, -1] - sub.targets)[0] <= tolerance:
            for memo in (_rounds, _tried, _progress, _best, _own_done):
                memo.pop(key, None)
        else:
            _remember(_rounds, key, int(rounds[row]) + 1)
            _best[key] = local_rotations(sub, found[row][None])[0]
            _best.move_to_end(key)
            while len(_best) > _MEMO_SIZE:
                _best.popitem(last=False)
    improved = norms(positions[:, -1] - batch.targets) < before
    found[~improved] = frames[~improved]
    positions[~improved] = frame_positions(batch.take(~improved), frames[~improved])
    return found, positions, improved


def _search(
    batch: ChainBatch, frames: F64, tolerance: float, starts: int, iterations: int, keys: list[bytes] | None = None
) -> tuple[F64, F64, Bools]:
    """:func:`search` for chains to search (a budgeted update's out-of-reach chains left out; ``keys``: their
    targets' keys when budgeted: the own pose descends until a descent of it ends within the budget)."""
    global _cut
    fresh = None if keys is None else np.array([key not in _own_done for key in keys], dtype=np.bool_)
    a, n = frames.shape[:2]
    # First from the chain's own pose alone: most chains reach from there (92-97 % of the harsh suite), and
    # a pose found near the solver's keeps a chain continuous from frame to frame and a bake near live
    # playback. Only the chains still short take the pseudo-random starts, which can land anywhere.
    own = project(_orthonormal(local_rotations(batch, frames)), batch.limits)
    global _deadline
    deadline = _deadline
    if deadline is not None:
        # Live: the own pose's descent takes half the time left, the starts (which go on next time) the rest.
        _deadline = time.perf_counter() + 0.5 * max(deadline - time.perf_counter(), 0.0)
    cut_before, _cut = _cut, False
    try:
        if fresh is None or fresh.all():
            _local, found, positions, best = descend(batch, own, np.arange(a), tolerance, iterations)
        else:
            found, positions = frames.copy(), frame_positions(batch, frames)
            best = norms(positions[:, -1] - batch.targets)
            if fresh.any():
                rows = np.flatnonzero(fresh)
                _l, found[rows], positions[rows], best[rows] = descend(
                    batch.take(rows), own[rows], np.arange(rows.size), tolerance, iterations
                )
    finally:
        _deadline = deadline
        own_cut, _cut = _cut, cut_before or _cut
    if keys is not None and fresh is not None and not own_cut:
        for key in (k for k, f in zip(keys, fresh.tolist(), strict=True) if f):
            _remember(_own_done, key, 1)
    short = np.flatnonzero(best > tolerance)
    if short.size and starts and _deadline is not None:
        _budgeted_starts(batch, short, found, positions, best, tolerance, starts, iterations)
    elif short.size and starts:
        rows = np.repeat(np.arange(short.size), starts)
        sub = batch.take(short).take(rows)
        local = random_locals(np.random.default_rng(SEARCH_SEED), sub.limits, sub.size, n)
        _l, r_found, r_positions, r_best = descend(sub, project(local, sub.limits), rows, tolerance, iterations)
        pick = np.arange(short.size) * starts + np.argmin(r_best.reshape(short.size, starts), axis=1)
        better = r_best[pick] < best[short]
        use = short[better]
        found[use], positions[use] = r_found[pick[better]], r_positions[pick[better]]
    before = norms(frame_positions(batch, frames)[:, -1] - batch.targets)
    improved = norms(positions[:, -1] - batch.targets) < before
    found[~improved] = frames[~improved]
    positions[~improved] = frame_positions(batch.take(~improved), frames[~improved])
    if batch.hinted is not None:
        _toward_hint(batch, found, positions, batch.hinted & improved, tolerance)
    return found, positions, improved


def _budgeted_starts(
    batch: ChainBatch,
    short: I64,
    found: F64,
    positions: F64,
    best: F64,
    tolerance: float,
    starts: int,
    iterations: int,
) -> None:
    """The pseudo-random starts of ``search`` within the live budget, in place: each chain goes on where its
    target's search stopped in the last update (`_tried`: the starts used up; `_progress`: the descent the
    deadline cut), one start at a time while time remains."""
    global _cut
    n = batch.n_bones
    for row in short.tolist():
        key = _key(batch, row)
        chain = batch.take(np.array([row]))
        while True:
            if _out_of_time():
                _cut = True
                return
            done = _tried.get(key, 0)
            if done >= starts:
                break  # every start failed: out of reach under the limits (not searched again)
            going = _progress.pop(key, None)
            if going is None:
                many = chain.take(np.zeros(starts, dtype=np.int64))
                local = project(random_locals(np.random.default_rng(SEARCH_SEED), many.limits, starts, n), many.limits)
                local, left = local[done : done + 1], iterations
            else:
                local, left = going
            before, _cut = _cut, False
            r_local, r_found, r_positions, r_best = descend(chain, local, np.zeros(1, dtype=np.int64), tolerance, left)
            stopped, _cut = _cut, before or _cut
            left -= _iterations_done
            if r_best[0] < best[row]:
                found[row], positions[row], best[row] = r_found[0], r_positions[0], r_best[0]
            if best[row] <= tolerance:
                _tried.pop(key, None)
                break
            if stopped and left > 0:
                _progress[key] = (r_local, left)
                _progress.move_to_end(key)
                while len(_progress) > _MEMO_SIZE:
                    _progress.popitem(last=False)
                return
            _remember(_tried, key, done + 1)


def _toward_hint(batch: ChainBatch, frames: F64, positions: F64, rows: Bools, tolerance: float) -> None:
    """Turn the found poses of ``rows`` rigidly about the root-to-target line so that they bend toward
    their hint (the pole's side, or the natural bend), in place, where the root bone's limits allow it
    without losing the target: the search ignores the bend plane, and a pole names one.

    Only the root bone's local rotation changes (the bones below turn with it), so this is the same
    freedom Blender's IK uses when it rolls the root bone of a hinged limb into the pole's plane.
    """
    if not rows.any():
        return
    sub = batch.take(rows)
    p = positions[rows]
    axis = normalize(sub.targets - sub.root)
    bend = chain_bend(p, sub.root, axis)
    has_bend = norms(bend) > STRAIGHT * sub.total_length
    current = normalize(bend, sub.hints)
    want = normalize(perpendicular_part(sub.hints, axis), current)
    turn = minimal_rotation(current, want, fallback_axis=axis)
    local = local_rotations(sub, matmul(turn[:, None], frames[rows]))
    new_frames, _ = chain_frames(sub, project(_orthonormal(local), sub.limits))
    new_positions = frame_positions(sub, new_frames)
    before = norms(p[:, -1] - sub.targets)
    after = norms(new_positions[:, -1] - sub.targets)
    keep = has_bend & (after <= np.maximum(before, tolerance))
    index = np.flatnonzero(rows)[keep]
    frames[index], positions[index] = new_frames[keep], new_positions[keep]


def refine(problem: ChainProblem, result: SolveResult, settled: Bools | None = None) -> SolveResult:
    """Apply the global stage to the chains of ``problem`` that have joint limits and missed a target
    their lengths can reach (not too far, not nearer than the chain folds, not on the root).

    Parameters
    ----------
    problem
        The problem the solver solved (soft chains: the eased one).
    result
        The solver's result.
    settled
        ``(K,)`` chains whose pose is already the nearest reachable one under their limits (the two-bone
        closed form, `solvers.two_bone_limits`): never searched.

    Returns
    -------
    SolveResult
        ``result`` itself without limits or when every chain reached (no cost); otherwise a copy where
        the chains the stage brought nearer take its pose, those it reached becoming ``CONVERGED`` (the
        others keep their status).
    """
    if result.reached.all():
        return result
    limits = LimitTable.from_limits(problem.limits)
    if limits is None:
        return result
    lengths = norms(problem.offsets)
    total = lengths.sum(axis=1)
    distance = norms(problem.targets - problem.positions[:, 0])
    tol = problem.tolerance
    rows = (
        ~result.reached
        & (distance < total)
        & (distance >= 2.0 * lengths.max(axis=1) - total - tol)
        & (distance > ZERO_LENGTH * np.maximum(total, 1.0))
    )
    if settled is not None:
        rows &= ~settled
    if not rows.any():
        return result
    index = np.flatnonzero(rows)
    batch = ChainBatch.from_problem(problem).take(index)
    # Half the tolerance: a margin for the float32 pose Blender stores (the LM steps converge fast there).
    found, positions, improved = search(batch, result.frames[index], 0.5 * tol)
    if not improved.any():
        return result
    use = index[improved]
    out_positions, out_frames = result.positions.copy(), result.frames.copy()
    out_positions[use], out_frames[use] = positions[improved], found[improved]
    residual = result.residual.copy()
    residual[use] = norms(positions[improved, -1] - batch.targets[improved])
    reached = residual <= tol
    status = result.status.copy()
    status[reached] = CONVERGED
    return SolveResult(out_positions, out_frames, result.iterations, residual, reached, status)
