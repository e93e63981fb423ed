"""One chain at a time with ``mathutils``: the scalar forms of the frames, limits, loop and solver steps.

Everything here mirrors a batched function of ``solvers/`` (named in each docstring) for a single chain,
on ``mathutils`` objects (C, float32 inside, ~0.05 us per operation) instead of numpy arrays (1-3 us per
call whatever the size). Conventions as in the batched code, with two float32 rules:

* frames are unit :class:`mathutils.Quaternion` objects, normalised after every product (float32
  rounding would otherwise let bone lengths drift by ~5e-6 within a solve);
* positions are rebuilt from frames and offsets (``head + frame @ offset``), or from segments rescaled to
  their lengths, so segment lengths stay exact to float32.

Where float32 would lose precision that the batched code keeps (the law of cosines next to full
extension, minimal rotations between nearly opposite directions, the cone search), the arithmetic is done
on Python floats (float64).

Objects are never modified in place once made (every step builds new Vectors and lists), so the loop can
keep its best pose by reference.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Final, Protocol

from mathutils import Matrix, Quaternion, Vector

from .. import cone_floats as _cone
from ..frames import PREBEND, STRAIGHT
from ..loop import (
    POLISH_DAMPING,
    POLISH_FADE,
    POLISH_FAR,
    POLISH_FROM,
    POLISH_FULL,
    POLISH_GAIN,
    POLISH_NEAR,
    POLISH_RETRY,
    STALL_PATIENCE,
    STALL_RELATIVE,
)
from ..rotations import NEAR_OPPOSITE
from ..types import CAP, CONVERGED, STALLED
from . import _f64

# float32 has no use for the batched code's 1e-150: a vector shorter than this has no direction in it.
TINY: Final = 1e-18
# A cone or twist within this angle (radians) counts as inside. The batched code uses 1e-9; a frame
# clamped in float32 lies on the boundary only to ~1e-7, and would otherwise be searched again each time.
INSIDE: Final = 3e-7
# Below this cosine between two directions, minimal rotations are built on Python floats: in float32 the
# axis of two nearly opposite directions (their cross product) loses its precision.
_WIDE: Final = -0.9
# Rounding of the end effector in float32, relative to the chain's length (with margin: ~N eps measured).
FLOAT32_MARGIN: Final = 1e-6
_TINY_RATIO: Final = 1e-300  # as loop._TINY
_X: Final = Vector((1.0, 0.0, 0.0))
_Y: Final = Vector((0.0, 1.0, 0.0))
_AXES: Final = (Vector((1.0, 0.0, 0.0)), Vector((0.0, 1.0, 0.0)), Vector((0.0, 0.0, 1.0)))
_ZERO: Final = Vector((0.0, 0.0, 0.0))
_IDENTITY: Final = Quaternion((1.0, 0.0, 0.0, 0.0))

BoneLimit = tuple[_cone.ConeTable | None, tuple[float, float] | None]
"""A bone's limits: its cone (as the search's table) or None, its twist range or None."""
Positions = list[Vector]
Frames = list[Quaternion]
# Vector.cross of 3D vectors, typed as such (the stubs also allow 2D vectors, whose cross is a float); the
# unbound C method, so a call costs no Python frame.
cross: Callable[[Vector, Vector], Vector] = Vector.cross  # type: ignore[assignment]


# --------------------------------------------------------------------------------------------------------
# Vector helpers (rotations.py)
# --------------------------------------------------------------------------------------------------------


def normalize(v: Vector, fallback: Vector) -> Vector:
    """``v`` made unit, or ``fallback`` when it is too short (``rotations.normalize``)."""
    n = v.length
    return v / n if n > TINY else fallback


def perpendicular(v: Vector, axis: Vector) -> Vector:
    """The part of ``v`` perpendicular to unit ``axis``."""
    return v - axis * v.dot(axis)


def any_perpendicular(v: Vector) -> Vector:
    """A unit vector perpendicular to ``v``: ``v`` crossed with its least aligned axis (``rotations``)."""
    x, y, z = abs(v.x), abs(v.y), abs(v.z)
    pick = 0 if x <= y and x <= z else (1 if y <= z else 2)
    p = cross(v, _AXES[pick])
    n = p.length
    return p / n if n > TINY else _X.copy()


def _quaternion_between(ax: float, ay: float, az: float, bx: float, by: float, bz: float) -> Quaternion:
    """The minimal rotation from unit ``a`` to unit ``b`` on Python floats (not for opposite directions):
    the half-way quaternion ``(1 + a . b, a x b)`` normalised."""
    w = 1.0 + (ax * bx + ay * by + az * bz)
    cx, cy, cz = ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx
    n = math.sqrt(w * w + cx * cx + cy * cy + cz * cz)
    return Quaternion((w / n, cx / n, cy / n, cz / n))


def _unit64(v: Vector) -> tuple[float, float, float]:
    x, y, z = v.x, v.y, v.z
    n = math.sqrt(x * x + y * y + z * z)
    return x / n, y / n, z / n


def minimal_rotation(a: Vector, b: Vector, fallback: Vector | None = None) -> Quaternion:
    """The least rotation taking unit ``a`` onto unit ``b`` (``rotations.minimal_rotation``).

    Nearly opposite directions (``|a + b| < NEAR_OPPOSITE``) have no unique minimal rotation: a half turn
    about ``fallback`` (made perpendicular to ``a``; default :func:`any_perpendicular`), then the small
    rotation onto ``b``.
    """
    if a.dot(b) > _WIDE:
        return a.rotation_difference(b)
    ax, ay, az = _unit64(a)
    bx, by, bz = _unit64(b)
    if math.sqrt((ax + bx) ** 2 + (ay + by) ** 2 + (az + bz) ** 2) >= NEAR_OPPOSITE:
        return _quaternion_between(ax, ay, az, bx, by, bz)
    au = Vector((ax, ay, az))
    n = any_perpendicular(au) if fallback is None else normalize(perpendicular(fallback, au), any_perpendicular(au))
    half = Quaternion((0.0, n.x, n.y, n.z))
    out = _quaternion_between(-ax, -ay, -az, bx, by, bz) @ half
    out.normalize()
    return out


def rotation_between(a: Vector, b: Vector, max_angle: float | None = None) -> Quaternion | None:
    """The rotation turning the direction of ``a`` toward ``b``, at most ``max_angle``
    (``rotations.rotation_between``); None for the identity (a zero ``a`` or ``b``)."""
    na, nb = a.length, b.length
    if na <= TINY or nb <= TINY:
        return None
    ua, ub = a / na, b / nb
    dot = ua.dot(ub)
    if max_angle is None or dot >= math.cos(min(max_angle, math.pi)):
        if dot > _WIDE:
            return ua.rotation_difference(ub)
        ax, ay, az = _unit64(ua)
        bx, by, bz = _unit64(ub)
        if math.sqrt((ax + bx) ** 2 + (ay + by) ** 2 + (az + bz) ** 2) >= NEAR_OPPOSITE:
            return _quaternion_between(ax, ay, az, bx, by, bz)
    # The general case by axis and angle (rotations._rotation_between_general), on Python floats.
    ax, ay, az = _unit64(ua)
    bx, by, bz = _unit64(ub)
    cx, cy, cz = ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx
    sin = math.sqrt(cx * cx + cy * cy + cz * cz)
    angle = math.atan2(sin, ax * bx + ay * by + az * bz)
    axis = Vector((cx / sin, cy / sin, cz / sin)) if sin > 1e-12 else any_perpendicular(Vector((ax, ay, az)))
    if max_angle is not None:
        angle = min(angle, max_angle)
    return Quaternion(axis, angle)


def product(a: Quaternion, b: Quaternion) -> Quaternion:
    """``a @ b`` normalised (float32 products drift off unit length)."""
    out = a @ b
    out.normalize()
    return out


# --------------------------------------------------------------------------------------------------------
# The chain
# --------------------------------------------------------------------------------------------------------


class RestRows(Protocol):
    """The problem's float64 rows a chain reads only when it needs them (read lazily, once per problem)."""

    def rest(self, k: int) -> tuple[list[_f64.Mat3], _f64.Mat3]:
        """Chain ``k``'s ``ref_local`` and ``base`` as nested lists (rows)."""

    def keep(self, k: int) -> _f64.Mat3:
        """Chain ``k``'s root bone frame from the problem, as nested lists (rows)."""


class Chain:
    """The constant input of one chain (``frames.ChainSource`` and ``ChainBatch`` for one row)."""

    __slots__ = (
        "base",
        "directions",
        "distance",
        "hint",
        "k",
        "keep",
        "keep_directions",
        "lengths",
        "limits",
        "loop_tolerance",
        "max_length",
        "n",
        "offsets",
        "offsets64",
        "ref_local",
        "roll_mode",
        "root",
        "rows",
        "target",
        "target64",
        "total",
    )

    def __init__(
        self,
        rows: RestRows,
        k: int,
        root: list[float],
        target: list[float],
        frames: list[list[list[float]]],
        keep_directions: list[list[float]],
        offsets: list[list[float]],
        pole: list[float] | None,
        limits: list[BoneLimit | None] | None,
        roll_mode: str,
        need_ref: bool,
    ) -> None:
        self.n = len(offsets)
        self.rows = rows
        self.k = k
        # The chain is solved with its root at the origin: float32 then rounds coordinates relative to the
        # chain's size, not to its distance from the scene's origin (the result adds the root back in
        # float64). Distances on Python floats: the law of cosines and the reach checks need them exact.
        self.root = _ZERO.copy()
        self.target64 = (target[0] - root[0], target[1] - root[1], target[2] - root[2])
        self.target = Vector(self.target64)
        self.distance = math.dist(target, root)
        self.offsets = [Vector(o) for o in offsets]
        self.offsets64 = offsets
        self.lengths = [math.sqrt(o[0] * o[0] + o[1] * o[1] + o[2] * o[2]) for o in offsets]
        self.total = math.fsum(self.lengths)
        self.max_length = max(self.lengths)
        self.directions = [Vector((o[0] / n, o[1] / n, o[2] / n)) for o, n in zip(offsets, self.lengths, strict=True)]
        self.keep = [Matrix(f).to_quaternion() for f in frames]
        self.keep_directions = [Vector(d) for d in keep_directions]
        # The reference frames are needed by the roll modes other than 'KEEP' and by limits only (the
        # rest pose of the natural bend is read in float64 from ``rows``).
        self.ref_local: Frames = []
        self.base = _IDENTITY
        if need_ref:
            ref_local, base = rows.rest(k)
            self.ref_local = [Matrix(f).to_quaternion() for f in ref_local]
            self.base = Matrix(base).to_quaternion()
        self.limits = limits
        self.roll_mode = roll_mode
        self.loop_tolerance = 0.0  # set by solve_chains
        self.hint: Vector | None = None
        if pole is not None or roll_mode == "NATURAL":
            self.hint = bend_hint(self, None if pole is None else [pole[i] - root[i] for i in range(3)])

    @classmethod
    def assemble(
        cls,
        rows: RestRows,
        shape: Chain,
        root: tuple[float, float, float],
        target: tuple[float, float, float],
        keep: Frames,
        keep_directions: list[Vector],
        pole: list[float] | None,
        base: Quaternion,
    ) -> Chain:
        """A chain like ``Chain(...)``, from parts already in ``mathutils`` form (the live program's path).

        ``shape`` is a chain of the same bones built before (its offsets, lengths, directions, reference
        frames, limits and roll mode are taken as they are: they hold while the bones' local geometry
        does); ``keep`` and ``keep_directions`` are the bones' current frames and segment directions, and
        ``base`` the root's parent frame. The result is the chain ``Chain(...)`` builds from the same numbers
        (up to float32 rounding of the frames' conversions).
        """
        c = cls.__new__(cls)
        c.n = shape.n
        c.rows = rows
        c.k = 0
        c.root = _ZERO.copy()
        c.target64 = (target[0] - root[0], target[1] - root[1], target[2] - root[2])
        c.target = Vector(c.target64)
        c.distance = math.dist(target, root)
        c.offsets = shape.offsets
        c.offsets64 = shape.offsets64
        c.lengths = shape.lengths
        c.total = shape.total
        c.max_length = shape.max_length
        c.directions = shape.directions
        c.keep = keep
        c.keep_directions = keep_directions
        c.ref_local = shape.ref_local
        c.base = base if shape.ref_local else _IDENTITY
        c.limits = shape.limits
        c.roll_mode = shape.roll_mode
        c.loop_tolerance = 0.0
        c.hint = None
        if pole is not None or c.roll_mode == "NATURAL":
            c.hint = bend_hint(c, None if pole is None else [pole[i] - root[i] for i in range(3)])
        return c

    def chord(self) -> Vector:
        """Unit root-to-target direction (the root bone's current direction when the target is on it)."""
        return normalize(self.target - self.root, self.keep_directions[0])


# --------------------------------------------------------------------------------------------------------
# Frames, roll modes, limits and the forward sweep (frames.py, limits.py)
# --------------------------------------------------------------------------------------------------------


def aim_frame(direction: Vector, local_dir: Vector, start: Quaternion, current: Vector | None = None) -> Quaternion:
    """``start`` rotated minimally so its segment points along unit ``direction`` (``frames.aim_frames``,
    with ``start`` the keep or the reference frame as the roll mode says). A reversed segment turns about
    the start frame's X axis (the hinge of a connected bone)."""
    if current is None:
        current = start @ local_dir
    rot = minimal_rotation(current, direction, start @ _X if current.dot(direction) <= _WIDE else None)
    return product(rot, start)


def limit_frame(ref: Quaternion, frame: Quaternion, limit: BoneLimit) -> Quaternion:
    """``frame`` clamped into the bone's cone and twist range about ``ref`` (``limits.apply_joint_limits``):
    the Y axis (in ``ref``) moved to the nearest direction of the cone by the minimal rotation, then the
    twist about Y clamped to the nearest end of its range. ``frame`` itself when it is within both."""
    table, twist = limit
    rel = product(ref.conjugated(), frame)
    changed = False
    if table is not None:
        # The Y axis of rel, read off the quaternion on Python floats.
        w, x, y, z = rel[:]
        dx, dy, dz = 2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x)
        n = math.sqrt(dx * dx + dy * dy + dz * dz)
        dx, dy, dz = dx / n, dy / n, dz / n
        if not _cone.inside(dx, dy, dz, table.cone, INSIDE):
            nx, ny, nz = _cone.nearest(dx, dy, dz, table)
            rel = product(_quaternion_between(dx, dy, dz, nx, ny, nz), rel)
            changed = True
    if twist is not None:
        tw = _cone.twist_of(rel.w, rel.y)
        goal = _cone.twist_target(tw, twist[0], twist[1], INSIDE)
        if goal is not None:
            half = 0.5 * (goal - tw)
            rel = product(rel, Quaternion((math.cos(half), 0.0, math.sin(half), 0.0)))
            changed = True
    return product(ref, rel) if changed else frame


def _clamp_misses(
    c: Chain, i: int, ref: Quaternion, frame: Quaternion, limit: BoneLimit, reach: float, miss: float
) -> bool:
    """Whether bone ``i``'s limits provably leave its tail more than ``miss`` from the point it was aimed at
    (``reach`` from its head), without clamping it: `sweep`'s shortcut, sparing `cone_floats.nearest` (tens of
    microseconds) where its answer could only say "missed".

    The cone moves the bone's Y axis by the angle ``delta`` to its nearest direction, a rotation about an
    axis square to Y; the segment (``eps`` from Y) turns by at least ``2 asin(cos(eps) sin(delta / 2))``, the
    twist clamp turns it back by at most ``2 eps``, and a segment of length ``l`` turned by ``beta`` from the
    aim leaves its tip at least ``2 sqrt(reach * l) sin(beta / 2)`` from the aim point. So a ``delta`` above
    the one that makes that ``miss`` misses; `cone_floats.farther` proves it from the cone's shape."""
    table = limit[0]
    if table is None:
        return False
    w, x, y, z = product(ref.conjugated(), frame)[:]
    dx, dy, dz = 2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x)
    size = math.sqrt(dx * dx + dy * dy + dz * dz)
    dx, dy, dz = dx / size, dy / size, dz / size
    if _cone.inside(dx, dy, dz, table.cone, INSIDE):
        return False
    length = c.lengths[i]
    eps = math.acos(min(max(c.directions[i].y, -1.0), 1.0))
    t = (miss + _CLAMP_SLACK * c.total) / (2.0 * math.sqrt(reach * length))
    turn = math.asin(t) + eps if t < 1.0 else math.pi
    if turn >= 0.5 * math.pi:
        return False
    arg = math.sin(turn) / math.cos(eps)
    return arg < 1.0 and _cone.farther(dx, dy, dz, table.cone, 2.0 * math.asin(arg))


_CLAMP_SLACK: Final = 1e-7
"""Float32 rounding of the frames and positions a sweep builds, relative to the chain's length."""


def sweep(c: Chain, aims: Positions, miss: float | None = None, slack: float | None = None) -> tuple[Positions, Frames]:
    """Place the chain root to tip, each bone aimed at its aim point, rolled and limited
    (``frames.forward_sweep``): positions from the frames, ``head + frame @ offset``.

    With ``miss``: once the last bone's head is placed, if its distance to the last aim point differs from the
    last segment's length by more than ``miss``, no frame of the last bone can bring the tip within ``miss`` of
    that point (the triangle inequality): the sweep stops there and returns no frames (empty lists), sparing the
    last bone's limits; so it does when the last bone's cone provably turns it far enough to leave the tip
    more than ``miss`` from there (`_clamp_misses`). With ``slack`` too: no frames when the first bone's limits
    move its tail more than ``slack`` from ``aims[1]`` (`two_bone`'s rule for an analytic pose)."""
    positions = [c.root]
    frames: Frames = []
    keep_mode = c.roll_mode == "KEEP"
    need_ref = not keep_mode or c.limits is not None
    parent = c.base
    head = c.root
    limits = c.limits
    for i in range(c.n):
        ref = product(parent, c.ref_local[i]) if need_ref else None
        if ref is None or keep_mode:
            start = c.keep[i]
            current = c.keep_directions[i]
        else:
            start = ref
            current = ref @ c.directions[i]
        # An aim on the head gives no direction: the bone keeps the one its roll mode starts from.
        aim = aims[i + 1] - head
        n = aim.length
        direction = aim / n if n > TINY else current
        # `aim_frame` written out for the usual turn (no helper calls: a sweep runs on every bone several
        # times per solve); a reversed segment takes the helpers' careful route.
        if current.dot(direction) > _WIDE:
            frame = current.rotation_difference(direction) @ start
            frame.normalize()
        else:
            frame = aim_frame(direction, c.directions[i], start, current)
        if ref is not None and limits is not None:
            limit = limits[i]
            if limit is not None:
                if miss is not None and i == c.n - 1 and _clamp_misses(c, i, ref, frame, limit, n, miss):
                    return [], []
                if slack is not None and i == 0 and _clamp_misses(c, i, ref, frame, limit, n, slack):
                    return [], []
                frame = limit_frame(ref, frame, limit)
        frames.append(frame)
        head = head + frame @ c.offsets[i]
        positions.append(head)
        parent = frame
        if slack is not None and i == 0 and (head - aims[1]).length > slack:
            return [], []
        if miss is not None and i == c.n - 2:
            if abs((aims[-1] - head).length - c.offsets[i + 1].length) > miss:
                return [], []
    return positions, frames


def frame_positions(c: Chain, frames: Frames) -> Positions:
    """Joint positions that ``frames`` give the chain (``frames.frame_positions``)."""
    positions = [c.root]
    head = c.root
    for frame, offset in zip(frames, c.offsets, strict=True):
        head = head + frame @ offset
        positions.append(head)
    return positions


def rest_pose(c: Chain) -> tuple[Positions, Frames]:
    """Positions and frames of the rest pose carried by the base, from the root (``frames.rest_pose``)."""
    positions = [c.root]
    frames: Frames = []
    parent = c.base
    head = c.root
    for i in range(c.n):
        parent = product(parent, c.ref_local[i])
        frames.append(parent)
        head = head + parent @ c.offsets[i]
        positions.append(head)
    return positions, frames


def chain_bend(positions: Positions, origin: Vector, axis: Vector) -> Vector:
    """Sum of the interior joints' offsets perpendicular to the line (``frames.chain_bend``)."""
    bend = _ZERO.copy()
    for p in positions[1:-1]:
        bend = bend + perpendicular(p - origin, axis)
    return bend


def off_line(positions: Positions, origin: Vector, axis: Vector) -> float:
    """Largest distance of the interior joints from the line (``frames.off_line``)."""
    return max((perpendicular(p - origin, axis).length for p in positions[1:-1]), default=0.0)


def natural_bend(c: Chain) -> _f64.Vec3:
    """Seed 002's natural bend toward the chain's target (``frames.natural_bend``), in float64: the rest
    bend of a nearly straight rest pose is a small vector whose direction float32 would spoil."""
    ref_local, base = c.rows.rest(c.k)
    return _f64.natural_bend(base, ref_local, c.offsets64, c.total, c.target64, STRAIGHT)


def _side(v: Vector | list[float] | _f64.Vec3, cx: float, cy: float, cz: float, shortest: float) -> _f64.Vec3 | None:
    """The unit part of ``v`` perpendicular to the unit chord, or None when it is no longer than ``shortest``."""
    s = v[0] * cx + v[1] * cy + v[2] * cz
    bx, by, bz = v[0] - cx * s, v[1] - cy * s, v[2] - cz * s
    n = math.sqrt(bx * bx + by * by + bz * bz)
    return (bx / n, by / n, bz / n) if n > shortest else None


def bend_hint(c: Chain, pole: list[float] | None) -> Vector | None:
    """The side the chain should bend toward: its pole, else the natural bend in ``'NATURAL'`` mode, else
    None (``frames.bend_hints``)."""
    if pole is not None:
        cx, cy, cz = _f64.normalize(c.target64, _vec64(c.keep_directions[0]))
        side = _side(pole, cx, cy, cz, STRAIGHT * c.total)
        # A pole on the chord line names no side; the chain falls through to the next rule.
        if side is not None:
            return Vector(side)
    if c.roll_mode == "NATURAL":
        return Vector(natural_bend(c))
    return None


def fallback_bend(c: Chain, axis: Vector) -> Vector:
    """Bend direction for a chain without a hint or a bend of its own (``frames.fallback_bends``)."""
    ax = _f64.normalize(_vec64(axis), (1.0, 0.0, 0.0))
    bend = _f64.perpendicular(natural_bend(c), ax)
    return Vector(_f64.normalize(bend, _f64.frame_bend(c.rows.keep(c.k), ax)))


def _vec64(v: Vector) -> _f64.Vec3:
    return (v.x, v.y, v.z)


def rotate_bend(positions: Positions, origin: Vector, axis: Vector, desired: Vector) -> Positions:
    """The chain turned rigidly about the line so it bends toward ``desired`` (``frames.rotate_bend``)."""
    bend = chain_bend(positions, origin, axis)
    scale = sum((b - a).length for a, b in itertools.pairwise(positions))
    if bend.length <= STRAIGHT * scale:
        return positions
    current = normalize(bend, desired)
    want = normalize(perpendicular(desired, axis), current)
    # The minimal rotation between two directions perpendicular to the axis turns about the axis. Built
    # about the axis itself: the axis of ``current x want`` is only as perpendicular as float32 makes the
    # two, which next to a half turn would tilt it enough to move the end effector off the line.
    angle = math.atan2(cross(current, want).dot(axis), current.dot(want))
    rot = Quaternion(axis, angle)
    return [origin + rot @ (p - origin) for p in positions]


def prebend(c: Chain, positions: Positions, side: Vector) -> Positions:
    """A straight chain given a small arc toward ``side``, lengths kept (``frames.prebend``)."""
    total = c.total
    reach = 0.0
    aims = []
    for i, p in enumerate(positions):
        aims.append(p + side * (PREBEND * total * math.sin(math.pi * reach / total)))
        if i < c.n:
            reach += c.lengths[i]
    out = [positions[0]]
    for i in range(c.n):
        seg = aims[i + 1] - out[i]
        out.append(out[i] + normalize(seg, normalize(positions[i + 1] - positions[i], _X)) * c.lengths[i])
    return out


def straight_toward(c: Chain) -> Positions:
    """Joints of the chain laid straight from the root toward the target (``frames.straight_toward``)."""
    direction = normalize(c.target - c.root, c.keep_directions[0])
    out = [c.root]
    reach = 0.0
    for length in c.lengths:
        reach += length
        out.append(c.root + direction * reach)
    return out


# --------------------------------------------------------------------------------------------------------
# The shared loop (loop.py)
# --------------------------------------------------------------------------------------------------------


class Run:
    """A chain being solved: its working pose and the loop's per-chain state (``loop._Tracker``)."""

    __slots__ = (
        "best",
        "best_frames",
        "best_positions",
        "chain",
        "current",
        "frames",
        "iterations",
        "positions",
        "record",
        "stalls",
        "status",
    )

    def __init__(self, chain: Chain, positions: Positions, frames: Frames | None) -> None:
        self.chain = chain
        self.positions = positions
        self.frames = frames
        self.best = self.current = (positions[-1] - chain.target).length
        self.best_positions = positions
        self.best_frames = frames
        self.stalls = 0
        self.record = 0.0
        self.iterations = 0
        self.status = CAP


Step = Callable[[Run], None]
"""One iteration of a solver on one chain: replaces ``run.positions`` (and ``run.frames`` if tracked)."""


def ramp(x: float, low: float, high: float) -> float:
    """0 below ``low``, 1 above ``high``, linear between (``loop.ramp``)."""
    return min(max((x - low) * (1.0 / (high - low)), 0.0), 1.0)


def polish_turns(c: Chain, positions: Positions) -> list[Vector]:
    """The damped least-squares turns ``W_i`` of the segments (``loop.polish_turns``): one 3x3 system,
    solved on Python floats by Cramer's rule."""
    tip = positions[-1]
    e = c.target - tip
    levers = [tip - p for p in positions[:-1]]
    sxx = sxy = sxz = syy = syz = szz = 0.0
    for r in levers:
        x, y, z = r.x, r.y, r.z
        sxx += x * x
        sxy += x * y
        sxz += x * z
        syy += y * y
        syz += y * z
        szz += z * z
    diagonal = sxx + syy + szz + POLISH_DAMPING * e.length * c.total
    # (diagonal I - sum r r^T) y = e, symmetric.
    a, b, cc = diagonal - sxx, -sxy, -sxz
    d, f = diagonal - syy, -syz
    g = diagonal - szz
    co0 = d * g - f * f
    co1 = f * cc - b * g
    co2 = b * f - d * cc
    det = a * co0 + b * co1 + cc * co2
    ex, ey, ez = e.x, e.y, e.z
    inv = 1.0 / det
    solution = Vector(
        (
            (co0 * ex + co1 * ey + co2 * ez) * inv,
            (co1 * ex + (a * g - cc * cc) * ey + (b * cc - a * f) * ez) * inv,
            (co2 * ex + (b * cc - a * f) * ey + (a * d - b * b) * ez) * inv,
        )
    )
    turns = []
    total = _ZERO.copy()
    for r in levers:
        total = total + cross(r, solution)
        turns.append(total)
    return turns


def turned(c: Chain, positions: Positions, turns: list[Vector], weight: float = 1.0) -> Positions:
    """Joints after turning segment ``i`` by ``weight * turns[i]`` (``loop.turned``): ``s + W x s``
    rescaled to the segment's length, root fixed."""
    out = [c.root]
    head = c.root
    for i in range(c.n):
        s = positions[i + 1] - positions[i]
        w = turns[i] if weight == 1.0 else turns[i] * weight
        s = s + cross(w, s)
        head = head + s * (c.lengths[i] / s.length)
        out.append(head)
    return out


def _polish(run: Run, r: float, previous: float, track: bool) -> float:
    """The weighted polish step after the solver's step (``loop._polish_in_place`` and ``_polish_rows``
    for one chain); returns the new residual."""
    c = run.chain
    pace = r / max(previous, _TINY_RATIO)
    size = r / c.total
    slow = ramp(pace, POLISH_FROM, POLISH_FULL)
    slow *= 1.0 - ramp(size, POLISH_NEAR, POLISH_FAR)
    slow *= 1.0 - ramp(run.record, POLISH_RETRY, 1.0)
    run.record *= POLISH_FADE * (1.0 - slow)  # the part of the record that stays (the rest: this gain)
    if slow <= 0.0:
        return r
    turns = polish_turns(c, run.positions)
    candidate = turned(c, run.positions, turns)
    candidate_frames = None
    if track:
        candidate, candidate_frames = sweep(c, candidate)
    reached = (candidate[-1] - c.target).length
    gain = reached / max(r, _TINY_RATIO)
    run.record += slow * gain
    weight = (1.0 - ramp(gain, POLISH_GAIN, 1.0)) * slow
    if weight <= 0.0:
        return r
    if weight < 1.0:
        # Part of the step: the same turns, scaled.
        candidate = turned(c, run.positions, turns, weight)
        if track:
            candidate, candidate_frames = sweep(c, candidate)
        reached = (candidate[-1] - c.target).length
    run.positions = candidate
    if candidate_frames is not None:
        run.frames = candidate_frames
    return reached


def iterate(runs: list[Run], step: Step, max_iterations: int, polished: bool, uniform: bool, track: bool) -> None:
    """Run ``step`` on every chain until it converges, stalls or hits the cap (``loop.iterate``).

    The chains advance in lockstep so that ``uniform`` (converged chains keep iterating until every chain
    has converged, stalled or hit the cap) means what it means in the batched loop. Each run ends with its
    best pose in ``best_positions``/``best_frames``, its iterations and its status. A chain converges at
    its ``loop_tolerance``.
    """
    if all(run.best <= run.chain.loop_tolerance for run in runs):
        for run in runs:
            run.status = CONVERGED
        return
    active = []
    for run in runs:
        if run.best <= run.chain.loop_tolerance and not uniform:
            run.status = CONVERGED
        else:
            active.append(run)
    for it in range(1, max_iterations + 1):
        every = True
        for run in active:
            step(run)
            r = (run.positions[-1] - run.chain.target).length
            if polished:
                r = _polish(run, r, run.current, track)
            run.current = r
            if r < run.best:
                run.best_positions = run.positions
                run.best_frames = run.frames
            every = every and r <= run.chain.loop_tolerance
        if every:
            # Every chain still running converged (the usual way a loop ends).
            for run in active:
                run.status = CONVERGED
                run.iterations = it
            return
        still = []
        for run in active:
            r = run.current
            progress = r < run.best * (1.0 - STALL_RELATIVE)
            run.best = min(run.best, r)
            run.stalls = 0 if progress else run.stalls + 1
            done = r <= run.chain.loop_tolerance
            if run.stalls >= STALL_PATIENCE or (done and not uniform):
                run.status = CONVERGED if done else STALLED
                run.iterations = it
            else:
                still.append(run)
        active = still
        if not active:
            return
    for run in active:
        run.iterations = max_iterations


def warm_start(c: Chain, positions: Positions, chord: Vector) -> Positions:
    """The warm start: bent toward the hint, straight chains pre-bent (``loop.warm_start``)."""
    p = positions
    if c.hint is not None:
        p = rotate_bend(p, c.root, chord, c.hint)
    if c.n < 2:
        return p
    along = normalize(p[-1] - c.root, chord)
    if off_line(p, c.root, along) > STRAIGHT * c.total:
        return p
    side = c.hint if c.hint is not None else fallback_bend(c, chord)
    side = normalize(perpendicular(side, along), any_perpendicular(along))
    return prebend(c, p, side)


def _start(c: Chain, positions: Positions, chord: Vector, track: bool) -> Run:
    """A run from ``positions``: warm-started, and swept once when the step tracks frames (which need a
    consistent, limited pose to start from)."""
    p = warm_start(c, positions, chord)
    frames = None
    if track:
        p, frames = sweep(c, p)
    return Run(c, p, frames)


Outcome = tuple[Frames | None, int, int]
"""A solved chain: its frames (None: the problem's pose, for a target on the root), iterations, status."""


def solve_chains(
    chains: list[Chain],
    positions: list[list[list[float]]],
    step: Step,
    track: bool,
    polished: bool,
    limited: bool,
    tolerance: float,
    max_iterations: int,
    uniform: bool,
) -> list[Outcome]:
    """Every chain solved with ``step`` (``loop.solve_chains``): reach check, warm start, loop, the pole's
    bend plane restored, final frames from the sweep (or the step's own when they
    reach nearer), and a target nearer than the chain can fold reported unreachable."""
    from ..types import UNREACHABLE, ZERO_LENGTH

    outcomes: list[Outcome | None] = [None] * len(chains)
    runs = []
    for k, c in enumerate(chains):
        if c.distance <= ZERO_LENGTH * max(c.total, 1.0):
            outcomes[k] = (None, 0, UNREACHABLE)
        elif c.distance >= c.total:
            outcomes[k] = (sweep(c, straight_toward(c))[1], 0, UNREACHABLE)
        else:
            # The result's residual is measured in float64 on the pose rebuilt from the frames; the loop
            # stops a little inside the tolerance so that float32 rounding cannot push it back out.
            c.loop_tolerance = tolerance - min(0.5 * tolerance, FLOAT32_MARGIN * c.total)
            runs.append(_start(c, [Vector(p) for p in positions[k]], c.chord(), track))
    if runs:
        iterate(runs, step, max_iterations, polished, uniform, track)
    solved = iter(runs)
    for k, c in enumerate(chains):
        if outcomes[k] is not None:
            continue
        run = next(solved)
        best = run.best_positions
        if c.hint is not None:
            # The loop may drift the bend plane; turn it back about the root-to-tip line.
            best = rotate_bend(best, c.root, normalize(best[-1] - c.root, c.chord()), c.hint)
        swept_positions, frames = sweep(c, best)
        if run.best_frames is not None:
            # A step that tracks frames keeps them unless the sweep does at least as well or reaches the
            # target (sweeping its positions again re-rolls each bone, which can move the tip).
            kept = (frame_positions(c, run.best_frames)[-1] - c.target).length
            if (swept_positions[-1] - c.target).length > max(kept, tolerance):
                frames = run.best_frames
        too_close = c.distance < 2.0 * c.max_length - c.total - tolerance
        outcomes[k] = (frames, run.iterations, UNREACHABLE if too_close else run.status)
    return [o for o in outcomes if o is not None]


# --------------------------------------------------------------------------------------------------------
# The solvers' steps (fabrik.py, ccd.py) and two-bone (two_bone.py)
# --------------------------------------------------------------------------------------------------------


def backward_pass(c: Chain, p: Positions) -> Positions:
    """End effector onto the target, each joint pulled to its length from its successor
    (``fabrik.backward_pass``; a joint on its successor heads back toward the root)."""
    out = list(p)
    nxt = c.target
    out[c.n] = nxt
    for i in range(c.n - 1, -1, -1):
        d = p[i] - nxt
        n = d.length
        if n > TINY:
            nxt = nxt + d * (c.lengths[i] / n)
        else:
            nxt = nxt + normalize(c.root - nxt, -c.keep_directions[i]) * c.lengths[i]
        out[i] = nxt
    return out


def forward_pass(c: Chain, p: Positions) -> Positions:
    """Root back in place, each joint pulled to its length from its predecessor (``fabrik.forward_pass``;
    a joint on its predecessor heads toward the target)."""
    out = [c.root]
    prev = c.root
    for i in range(c.n):
        d = p[i + 1] - prev
        n = d.length
        if n > TINY:
            prev = prev + d * (c.lengths[i] / n)
        else:
            prev = prev + normalize(c.target - prev, c.keep_directions[i]) * c.lengths[i]
        out.append(prev)
    return out


def fabrik_step(run: Run) -> None:
    """One FABRIK iteration, positions only (``fabrik.fabrik_step``)."""
    run.positions = forward_pass(run.chain, backward_pass(run.chain, run.positions))


def fabrik_step_limited(run: Run) -> None:
    """One FABRIK iteration whose forward pass is the sweep (``fabrik.fabrik_step_limited``)."""
    run.positions, frames = sweep(run.chain, backward_pass(run.chain, run.positions))
    run.frames = frames


def make_ccd_step(max_angle: float | None, limited: bool) -> Step:
    """The CCD iteration (``ccd.make_ccd_step``), O(N) per sweep.

    During a tip-to-root sweep only the end effector needs to move: joint j's turn depends on the tip and
    its own head, which the turns below it do not move. The turns are recorded and the chain is rebuilt
    once at the end, segment i turned by the product ``R_0 ... R_i`` of the turns above and at it.
    """

    def free(run: Run) -> None:
        c = run.chain
        p = run.positions
        tip = p[-1]
        rots: list[Quaternion | None] = [None] * c.n
        for j in range(c.n - 1, -1, -1):
            head = p[j]
            lever = tip - head
            rot = rotation_between(lever, c.target - head, max_angle)
            if rot is not None:
                rots[j] = rot
                tip = head + rot @ lever
        out = [c.root]
        head = c.root
        acc: Quaternion | None = None
        for i in range(c.n):
            rot = rots[i]
            if rot is not None:
                acc = rot if acc is None else product(acc, rot)
            s = p[i + 1] - p[i]
            if acc is not None:
                s = acc @ s
            head = head + s * (c.lengths[i] / s.length)
            out.append(head)
        run.positions = out

    def tracked(run: Run) -> None:
        # The turned bone is rolled by the roll mode and clamped (as the sweep would), and the bones below
        # turn rigidly with the clamped frame: F_i = T_0 ... T_{i-1} new_i with T_j = new_j old_j^-1.
        c = run.chain
        p = run.positions
        frames = run.frames
        assert frames is not None, "the loop gives tracked steps a run with frames"
        keep_mode = c.roll_mode == "KEEP"
        tip = p[-1]
        news: Frames = list(frames)
        turns: list[Quaternion] = list(frames)
        for j in range(c.n - 1, -1, -1):
            head = p[j]
            lever = tip - head
            rot = rotation_between(lever, c.target - head, max_angle)
            parent = c.base if j == 0 else frames[j - 1]
            ref = product(parent, c.ref_local[j])
            old = frames[j]
            local_dir = c.directions[j]
            direction = old @ local_dir
            if rot is not None:
                direction = rot @ direction
            new = aim_frame(direction, local_dir, c.keep[j] if keep_mode else ref)
            if c.limits is not None:
                limit = c.limits[j]
                if limit is not None:
                    new = limit_frame(ref, new, limit)
            turn = product(new, old.conjugated())
            news[j] = new
            turns[j] = turn
            tip = head + turn @ lever
        out: Frames = []
        acc: Quaternion | None = None
        for i in range(c.n):
            out.append(news[i] if acc is None else product(acc, news[i]))
            acc = turns[i] if acc is None else product(acc, turns[i])
        run.frames = out
        run.positions = frame_positions(c, out)

    return tracked if limited else free


def bend_side(c: Chain, elbow_now: Vector | list[float]) -> _f64.Vec3:
    """The unit bend direction of a two-bone chain: the hint, else the current bend (``elbow_now``, relative
    to the root), else the fallback bend (``two_bone.bend_directions`` for one chain)."""
    tx, ty, tz = c.target64
    d = c.distance
    cx, cy, cz = tx / d, ty / d, tz / d
    if c.hint is not None:
        return (c.hint.x, c.hint.y, c.hint.z)
    side = _side(elbow_now, cx, cy, cz, STRAIGHT * c.total)
    if side is None:
        bend = fallback_bend(c, Vector((cx, cy, cz)))
        side = (bend.x, bend.y, bend.z)
    return side


def two_bone(
    c: Chain, elbow_now: Vector | list[float], miss: float | None = None, slack: float | None = None
) -> Frames:
    """The analytic two-bone pose (``two_bone.solve_two_bone`` for one chain whose target is off the
    root): the law of cosines and the elbow on Python floats; the bend plane from the hint, else the
    current bend (``elbow_now``, relative to the root), else the fallback bend; frames, roll and limits
    from one sweep. With ``miss``: no frames (an empty list) when the limited upper bone leaves the tip
    provably farther than ``miss`` from the target (`sweep`), whatever the lower bone's limits make of it;
    with ``slack`` (the Tolerance, and the caller's rounding): none either when the upper bone's limits move the
    elbow more than that from where the law of cosines put it (such a pose does not count as reaching:
    ``two_bone.elbow_moved``)."""
    return sweep(c, [c.root, aimed_elbow(c, elbow_now), c.target], miss, slack)[1]


def aimed_elbow(c: Chain, elbow_now: Vector | list[float]) -> Vector:
    """Where the law of cosines puts a two-bone chain's elbow (relative to the root): `two_bone`'s aim."""
    tx, ty, tz = c.target64
    d = c.distance
    cx, cy, cz = tx / d, ty / d, tz / d
    side = bend_side(c, elbow_now)
    l1, l2 = c.lengths
    cos_a = min(max((l1 * l1 + d * d - l2 * l2) / (2.0 * l1 * d), -1.0), 1.0)
    a, b = cos_a * l1, math.sqrt(1.0 - cos_a * cos_a) * l1
    return Vector((cx * a + side[0] * b, cy * a + side[1] * b, cz * a + side[2] * b))
