"""Bone frames: roll modes, the shared forward sweep, bend planes (poles and the natural roll).

Every solver turns joint positions into bone frames here and nowhere else, and every solver applies the
joint limits through :func:`limit_frames` (called by :func:`forward_sweep`), so a roll mode or a limit
behaves the same in FABRIK, CCD, two-bone and trees.

The working set of a batched solve is a :class:`ChainBatch`: all per-chain arrays of the chains still
being solved, which the shared loop shrinks (:meth:`ChainBatch.take`) as chains finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Final

import numpy as np

from .limits import apply_joint_limits
from .rotations import (
    any_perpendicular,
    matmul,
    matvec,
    minimal_rotation,
    normalize,
    norms,
    perpendicular_part,
)
from .types import F64, I64, Bools, ChainProblem

if TYPE_CHECKING:
    from .limits import JointLimits

# A chain whose interior joints are all closer than this (relative to its length) to the root-to-tip
# line has no bend plane of its own.
STRAIGHT: Final = 1e-6
# Weight of the frame's X axis when the Z axis alone cannot give a bend direction (Z along the chord).
# Blending instead of switching keeps the direction a continuous function of the chord.
_BLEND_X: Final = 1e-3
# Size of the bend given to a straight chain before iterating (fraction of its length): FABRIK and CCD
# cannot leave a straight line toward a nearer target on their own.
PREBEND: Final = 0.05


@dataclass(frozen=True)
class LimitTable:
    """Joint limit rows of a batch: the arrays of :class:`solvers.limits.JointLimits`, subsettable."""

    cone: F64
    use_cone: Bools
    twist: F64
    use_twist: Bools

    @staticmethod
    def from_limits(limits: JointLimits | None) -> LimitTable | None:
        """Return the table of ``limits``, or None when it limits nothing (so solvers take the fast path)."""
        if limits is None:
            return None
        use_cone = np.asarray(limits.use_cone, dtype=np.bool_)
        use_twist = np.asarray(limits.use_twist, dtype=np.bool_)
        if not (use_cone.any() or use_twist.any()):
            return None
        return LimitTable(
            cone=np.asarray(limits.cone, dtype=np.float64),
            use_cone=use_cone,
            twist=np.asarray(limits.twist, dtype=np.float64),
            use_twist=use_twist,
        )

    def take(self, rows: I64 | Bools) -> LimitTable:
        """The rows ``rows`` (indices or mask) of every array."""
        return LimitTable(self.cone[rows], self.use_cone[rows], self.twist[rows], self.use_twist[rows])


@dataclass(frozen=True)
class ChainSource:
    """Constant per-chain input of a solve, for all K chains (batches index into it lazily)."""

    keep_frames: F64
    offsets: F64
    directions: F64
    ref_local: F64
    base: F64
    limits: LimitTable | None
    roll_mode: str

    @cached_property
    def keep_directions(self) -> F64:
        """``(K, N, 3)`` world segment directions of the problem's frames (``keep_frames @ directions``)."""
        return matvec(self.keep_frames, self.directions)


@dataclass(frozen=True)
class ChainBatch:
    """The chains being solved (A of them): working pose, small per-chain arrays, and the constant input.

    ``positions`` (and ``frames`` when a solver tracks them) are the working pose, updated in place by
    the iteration steps. ``idx`` maps each row to its chain in the problem. The large constant arrays
    (``keep_frames``, ``ref_local``, ...) are indexed from :class:`ChainSource` only when first used, so
    dropping finished chains (:meth:`take`) copies little: the FABRIK step never touches them.
    """

    idx: I64
    full: bool  # idx is every chain of the source, in order (no indexing needed)
    positions: F64
    frames: F64 | None
    lengths: F64
    root: F64
    targets: F64
    hints: F64  # (A, 3) unit bend hints, NaN rows for none (see bend_hints)
    hinted: Bools | None  # rows with a hint; None when no row has one (the common case, skipped cheaply)
    source: ChainSource

    @staticmethod
    def from_problem(problem: ChainProblem) -> ChainBatch:
        """Build the batch of all chains of ``problem`` (with a working copy of the positions)."""
        lengths = norms(problem.offsets)
        positions = problem.positions.copy()
        source = ChainSource(
            keep_frames=problem.frames,
            offsets=problem.offsets,
            directions=problem.offsets / lengths[..., None],
            ref_local=problem.ref_local,
            base=problem.base,
            limits=LimitTable.from_limits(problem.limits),
            roll_mode=problem.roll_mode,
        )
        batch = ChainBatch(
            idx=np.arange(problem.n_chains, dtype=np.int64),
            full=True,
            positions=positions,
            frames=None,
            lengths=lengths,
            root=positions[:, 0].copy(),
            targets=problem.targets,
            hints=np.full((problem.n_chains, 3), np.nan),
            hinted=None,
            source=source,
        )
        if problem.poles is None and problem.roll_mode != "NATURAL":
            return batch
        hints = bend_hints(batch, problem.poles)
        hinted = ~np.isnan(hints[:, 0])
        # The constructor rather than dataclasses.replace, which is several times slower (the source's
        # cached arrays carry over).
        return ChainBatch(
            batch.idx,
            True,
            positions,
            None,
            lengths,
            batch.root,
            batch.targets,
            hints,
            hinted if hinted.any() else None,
            source,
        )

    def _rows(self, arr: F64) -> F64:
        return arr if self.full else arr[self.idx]

    @cached_property
    def keep_frames(self) -> F64:
        """``(A, N, 3, 3)`` the problem's frames (``'KEEP'`` rotates these)."""
        return self._rows(self.source.keep_frames)

    @cached_property
    def offsets(self) -> F64:
        """``(A, N, 3)`` bone offsets."""
        return self._rows(self.source.offsets)

    @cached_property
    def directions(self) -> F64:
        """``(A, N, 3)`` unit offsets (segment directions in the bones' frames)."""
        return self._rows(self.source.directions)

    @cached_property
    def keep_directions(self) -> F64:
        """``(A, N, 3)`` world segment directions of the problem's frames (``keep_frames @ directions``)."""
        return self._rows(self.source.keep_directions)

    @cached_property
    def ref_local(self) -> F64:
        """``(A, N, 3, 3)`` rest frames relative to the parents."""
        return self._rows(self.source.ref_local)

    @cached_property
    def base(self) -> F64:
        """``(A, 3, 3)`` frames of the roots' parents."""
        return self._rows(self.source.base)

    @cached_property
    def limits(self) -> LimitTable | None:
        """Joint limit rows, or None."""
        lim = self.source.limits
        return lim if lim is None or self.full else lim.take(self.idx)

    @cached_property
    def lengths_t(self) -> F64:
        """``(N, A)`` segment lengths, bone-major (for the coordinate-major FABRIK passes)."""
        return np.ascontiguousarray(self.lengths.T)

    @cached_property
    def total_length(self) -> F64:
        """``(A,)`` each chain's length (the sum of its segment lengths)."""
        return np.asarray(self.lengths.sum(axis=1), dtype=np.float64)

    @property
    def roll_mode(self) -> str:
        """``'KEEP'``, ``'REST'`` or ``'NATURAL'``."""
        return self.source.roll_mode

    @property
    def size(self) -> int:
        """Number of chains A in the batch."""
        return int(self.idx.shape[0])

    @property
    def n_bones(self) -> int:
        """Bones per chain N."""
        return int(self.source.offsets.shape[1])

    def take(self, rows: I64 | Bools) -> ChainBatch:
        """A new batch of the rows ``rows`` (indices or mask) of this one; the pose arrays are copied."""
        hinted = None
        if self.hinted is not None:
            hinted = self.hinted[rows]
            if not hinted.any():
                hinted = None
        return ChainBatch(
            idx=self.idx[rows],
            full=False,
            positions=self.positions[rows],
            frames=None if self.frames is None else self.frames[rows],
            lengths=self.lengths[rows],
            root=self.root[rows],
            targets=self.targets[rows],
            hints=self.hints[rows],
            hinted=hinted,
            source=self.source,
        )


def aim_frames(
    direction: F64, local_dir: F64, keep: F64, ref: F64 | None, roll_mode: str, current: F64 | None = None
) -> F64:
    """Frames whose segment (``frame @ local_dir``) points along ``direction``, rolled per ``roll_mode``.

    Parameters
    ----------
    direction
        ``(M, 3)`` unit world directions of the segments.
    local_dir
        ``(M, 3)`` unit segment directions in the bones' own frames (``offset / |offset|``).
    keep
        ``(M, 3, 3)`` frames rotated minimally in ``'KEEP'`` mode (the current pose, twist kept).
    ref
        ``(M, 3, 3)`` reference frames (parent's solved frame @ ref_local) rotated minimally in
        ``'REST'`` and ``'NATURAL'`` modes; unused (may be None) for ``'KEEP'``.
    roll_mode
        ``'KEEP'``, ``'REST'`` or ``'NATURAL'`` (the natural roll only changes the bend plane, which the
        solvers handle; bones roll as in ``'REST'``).
    current
        ``(M, 3)`` the segment direction of the starting frame (``start @ local_dir``), when the caller
        already has it.
    """
    start = keep if roll_mode == "KEEP" or ref is None else ref
    if current is None:
        current = matvec(start, local_dir)
    # The half turn for an exactly reversed segment goes about the frame's own X axis: for a connected
    # bone that is the hinge axis Blender bends around, so a reversal reads as a fold, not a spin.
    return matmul(minimal_rotation(current, direction, fallback_axis=start[:, :, 0]), start)


def limit_frames(ref: F64, frames: F64, limits: LimitTable | None, bone: int) -> F64:
    """Clamp bone ``bone`` of each chain into its joint limits (``solvers.limits.apply_joint_limits``).

    Parameters
    ----------
    ref
        ``(M, 3, 3)`` reference frames of the bone (parent's frame @ ref_local).
    frames
        ``(M, 3, 3)`` frames to clamp.
    limits
        Limit rows of the same M chains, or None (frames returned unchanged).
    bone
        Which bone of the chains (column of the limit arrays).
    """
    if limits is None:
        return frames
    use_cone = limits.use_cone[:, bone]
    use_twist = limits.use_twist[:, bone]
    if not (use_cone.any() or use_twist.any()):
        return frames
    return apply_joint_limits(ref, frames, limits.cone[:, bone], use_cone, limits.twist[:, bone], use_twist)


def forward_sweep(batch: ChainBatch, aims: F64) -> tuple[F64, F64]:
    """Place the chains root to tip, each bone aimed at its aim point, rolled and limited.

    For bone i: the direction from the already placed head ``positions[:, i]`` to ``aims[:, i+1]``, a frame
    from the roll mode (:func:`aim_frames`), the joint limits (:func:`limit_frames`), then the next joint
    at ``head + frame @ offset``. FABRIK's forward pass is this sweep; CCD and two-bone call it once at the
    end. The positions are computed from the frames, so ``positions[i+1] == positions[i] + frames[i] @
    offsets[i]`` holds to rounding whatever the aims.

    Parameters
    ----------
    batch
        The chains (root, offsets, keep/ref frames, base, limits, roll mode).
    aims
        ``(A, N+1, 3)`` desired joint positions; ``aims[:, 0]`` is ignored (the root never moves).

    Returns
    -------
    positions, frames
        ``(A, N+1, 3)`` and ``(A, N, 3, 3)``.
    """
    a, n = batch.size, batch.n_bones
    if batch.roll_mode == "KEEP" and batch.limits is None:
        return _independent_sweep(batch, aims)
    positions = np.empty((a, n + 1, 3))
    frames = np.empty((a, n, 3, 3))
    positions[:, 0] = batch.root
    need_ref = batch.roll_mode != "KEEP" or batch.limits is not None
    parent = batch.base
    for i in range(n):
        head = positions[:, i]
        ref = matmul(parent, batch.ref_local[:, i]) if need_ref else None
        if ref is None or batch.roll_mode == "KEEP":
            current = batch.keep_directions[:, i]
        else:
            current = matvec(ref, batch.directions[:, i])
        # An aim on the head gives no direction: the bone keeps the one its roll mode starts from.
        direction = normalize(aims[:, i + 1] - head, current)
        frame = aim_frames(direction, batch.directions[:, i], batch.keep_frames[:, i], ref, batch.roll_mode, current)
        if ref is not None:
            frame = limit_frames(ref, frame, batch.limits, i)
        frames[:, i] = frame
        positions[:, i + 1] = head + matvec(frame, batch.offsets[:, i])
        parent = frame
    return positions, frames


def _independent_sweep(batch: ChainBatch, aims: F64) -> tuple[F64, F64]:
    """:func:`forward_sweep` for ``'KEEP'`` without limits, all bones at once.

    A bone's frame then depends on its own direction only, so every bone is aimed in one batched call
    instead of N sequential ones. Directions are taken between consecutive aims (the sequential sweep
    takes them from the placed heads); for aims that form a chain of the right lengths, as every solver
    passes, the two agree to rounding. The positions are still accumulated joint by joint from the
    frames, so ``positions[i+1] == positions[i] + frames[i] @ offsets[i]`` holds exactly as before.
    """
    a, n = batch.size, batch.n_bones
    segments = aims[:, 1:] - aims[:, :-1]
    segments[:, 0] = aims[:, 1] - batch.root
    current = batch.keep_directions
    direction = normalize(segments, current)
    flat = aim_frames(
        direction.reshape(-1, 3),
        batch.directions.reshape(-1, 3),
        batch.keep_frames.reshape(-1, 3, 3),
        None,
        "KEEP",
        current.reshape(-1, 3),
    )
    frames = flat.reshape(a, n, 3, 3)
    steps = np.empty((a, n + 1, 3))
    steps[:, 0] = batch.root
    steps[:, 1:] = matvec(frames, batch.offsets)
    # add.accumulate adds left to right: exactly head + frame @ offset, joint after joint.
    positions = np.add.accumulate(steps, axis=1)
    return positions, frames


def frame_positions(batch: ChainBatch, frames: F64) -> F64:
    """Joint positions ``(A, N+1, 3)`` that ``frames`` give the chains, joint after joint from the root:
    ``positions[i+1] == positions[i] + frames[i] @ offsets[i]`` exactly, as in :func:`forward_sweep`."""
    steps = np.empty((batch.size, batch.n_bones + 1, 3))
    steps[:, 0] = batch.root
    steps[:, 1:] = matvec(frames, batch.offsets)
    positions: F64 = np.add.accumulate(steps, axis=1)
    return positions


def rest_pose(batch: ChainBatch) -> tuple[F64, F64]:
    """Joint positions and frames of the rest pose carried by the current base, from the current root."""
    a, n = batch.size, batch.n_bones
    positions = np.empty((a, n + 1, 3))
    frames = np.empty((a, n, 3, 3))
    positions[:, 0] = batch.root
    parent = batch.base
    for i in range(n):
        parent = matmul(parent, batch.ref_local[:, i])
        frames[:, i] = parent
        positions[:, i + 1] = positions[:, i] + matvec(parent, batch.offsets[:, i])
    return positions, frames


def chain_bend(positions: F64, origin: F64, axis: F64) -> F64:
    """Bend vectors ``(A, 3)``: sum of the interior joints' offsets perpendicular to a line.

    The line runs through ``origin`` along unit ``axis``. The sum is zero for a straight chain along the
    line; otherwise it points to the side the chain bends toward.
    """
    rel = positions[:, 1:-1] - origin[:, None]
    return np.asarray(perpendicular_part(rel, axis[:, None]).sum(axis=1), dtype=np.float64)


def off_line(positions: F64, origin: F64, axis: F64) -> F64:
    """``(A,)`` largest distance of a chain's interior joints from the line (``origin``, unit ``axis``).

    Zero exactly when the chain is straight along the line. (The bend vector of :func:`chain_bend` is a
    sum, which cancels for an S-shaped chain such as a zig-zag; this does not.)
    """
    rel = positions[:, 1:-1] - origin[:, None]
    perp = perpendicular_part(rel, axis[:, None])
    return np.asarray(np.sqrt(np.einsum("anj,anj->an", perp, perp).max(axis=1, initial=0.0)), dtype=np.float64)


def _frame_bend(frame: F64, axis: F64) -> F64:
    """A bend direction perpendicular to ``axis`` from a frame: its Z axis, blended with X near Z."""
    z = perpendicular_part(frame[:, :, 2], axis)
    x = perpendicular_part(frame[:, :, 0], axis)
    return normalize(z + _BLEND_X * x, any_perpendicular(axis))


def natural_bend(batch: ChainBatch, targets: F64) -> F64:
    """Seed 002's natural bend direction per chain: the rest bend plane carried by the base frame,
    rotated by the minimal rotation taking the rest chord (root to tip) onto the chord to the target.

    Always defined: a straight rest chain bends toward its root bone's rest Z axis (blended with X so the
    direction never vanishes); a target on the root uses the rest chord; a chord opposite the rest chord
    turns about the rest bend plane's normal.

    Returns
    -------
    numpy.ndarray
        ``(A, 3)`` unit vectors perpendicular to the chords ``targets - root``.
    """
    rest, rest_frames = rest_pose(batch)
    rest_chord = normalize(rest[:, -1] - batch.root, rest_frames[:, 0, :, 1])
    rest_bend = chain_bend(rest, batch.root, rest_chord)
    scale = batch.lengths.sum(axis=1)
    straight = norms(rest_bend) <= STRAIGHT * scale
    rest_bend = np.where(straight[:, None], _frame_bend(rest_frames[:, 0], rest_chord), normalize(rest_bend))
    chord = normalize(targets - batch.root, rest_chord)
    normal = np.cross(rest_chord, rest_bend)
    turned = matvec(minimal_rotation(rest_chord, chord, fallback_axis=normal), rest_bend)
    # The rotation keeps the bend perpendicular to the chord up to rounding; clean it so callers can
    # rely on an exactly perpendicular unit vector.
    return normalize(perpendicular_part(turned, chord), any_perpendicular(chord))


def bend_hints(batch: ChainBatch, poles: F64 | None) -> F64:
    """The side each chain should bend toward: from its pole, else the natural roll, else NaN (none).

    Returns
    -------
    numpy.ndarray
        ``(A, 3)`` unit vectors perpendicular to the root-to-target chord, or NaN rows.
    """
    hints = np.full((batch.size, 3), np.nan)
    chord = normalize(batch.targets - batch.root, batch.keep_directions[:, 0])
    scale = batch.lengths.sum(axis=1)
    if poles is not None:
        has_pole = ~np.isnan(poles[:, 0])
        side = perpendicular_part(np.where(has_pole[:, None], poles, 0.0) - batch.root, chord)
        # A pole on the chord line names no side; such chains fall through to the next rule.
        ok = has_pole & (norms(side) > STRAIGHT * scale)
        hints[ok] = normalize(side[ok])
    if batch.roll_mode == "NATURAL":
        missing = np.isnan(hints[:, 0])
        if missing.any():
            hints[missing] = natural_bend(batch.take(missing), batch.targets[missing])
    return hints


def fallback_bends(batch: ChainBatch, axis: F64) -> F64:
    """Bend directions for chains without a hint or a bend of their own (perpendicular to ``axis``).

    The natural bend when it is usable, which depends only on the rest pose and the target, so a straight
    chain always bends the same way for the same target.
    """
    natural = natural_bend(batch, batch.targets)
    return normalize(perpendicular_part(natural, axis), _frame_bend(batch.keep_frames[:, 0], axis))


def rotate_bend(positions: F64, origin: F64, axis: F64, desired: F64, rows: Bools) -> None:
    """Rotate chains rigidly about the line (``origin``, unit ``axis``) so they bend toward ``desired``.

    Only ``rows`` are changed (in place); chains without a bend of their own are left alone.
    """
    if not rows.any():
        return
    p = positions[rows]
    o, ax, want = origin[rows], axis[rows], desired[rows]
    bend = chain_bend(p, o, ax)
    scale = norms(p[:, 1:] - p[:, :-1]).sum(axis=1)
    has_bend = norms(bend) > STRAIGHT * scale
    current = normalize(bend, want)
    want = normalize(perpendicular_part(want, ax), current)
    rot = minimal_rotation(current, want, fallback_axis=ax)
    rotated = o[:, None] + np.einsum("aij,akj->aki", rot, p - o[:, None])
    p = np.where(has_bend[:, None, None], rotated, p)
    positions[rows] = p


def prebend(positions: F64, lengths: F64, directions: F64, rows: Bools) -> None:
    """Give straight chains (``rows``) a small arc toward ``directions``, keeping segment lengths.

    FABRIK and CCD cannot bend a chain that lies straight on the line to a nearer target (every
    backward/forward step stays on the line), so such chains start slightly bent toward their hint.
    """
    if not rows.any():
        return
    p = positions[rows]
    length = lengths[rows]
    total = length.sum(axis=1)
    side = directions[rows]
    frac = np.concatenate([np.zeros((p.shape[0], 1)), np.cumsum(length, axis=1)], axis=1) / total[:, None]
    aims = p + (PREBEND * total[:, None] * np.sin(np.pi * frac))[..., None] * side[:, None]
    out = p.copy()
    for i in range(length.shape[1]):
        seg = aims[:, i + 1] - out[:, i]
        out[:, i + 1] = out[:, i] + normalize(seg, normalize(p[:, i + 1] - p[:, i])) * length[:, i, None]
    positions[rows] = out


def straight_toward(root: F64, targets: F64, lengths: F64, fallback: F64) -> F64:
    """Joint positions of chains laid straight from ``root`` toward ``targets`` (``fallback`` direction
    when the target is on the root)."""
    direction = normalize(targets - root, fallback)
    reach = np.concatenate([np.zeros((lengths.shape[0], 1)), np.cumsum(lengths, axis=1)], axis=1)
    return np.asarray(root[:, None] + reach[..., None] * direction[:, None], dtype=np.float64)


def is_rotation(frames: F64, tol: float = 1e-9) -> Bools:
    """Whether each frame is orthonormal with det +1 to ``tol`` (used by tests and debug checks)."""
    gram = matmul(np.swapaxes(frames, -1, -2), frames)
    err = np.abs(gram - np.eye(3)).max(axis=(-2, -1))
    return np.asarray((err <= tol) & (np.abs(np.linalg.det(frames) - 1.0) <= tol))


__all__ = [
    "ChainBatch",
    "LimitTable",
    "aim_frames",
    "bend_hints",
    "chain_bend",
    "fallback_bends",
    "forward_sweep",
    "is_rotation",
    "limit_frames",
    "natural_bend",
    "off_line",
    "prebend",
    "rest_pose",
    "rotate_bend",
    "straight_toward",
]
