"""3-vectors, 3x3 frames and one bone's joint limits on plain Python floats.

The per-bone steps of `solvers.rotations`, `solvers.frames` and `solvers.limits` (minimal rotations with
their half-turn fallback, aiming a segment by the roll modes, `limits.apply_joint_limits` for one frame with
the exact nearest point of `solvers.cone_floats`, the exact cone violation), for the plain-float solvers that
must decide as the numpy ones do (`solvers.two_bone_floats`). Matrices are tuples of rows, a frame's columns
its axes, as in the numpy modules. No numpy, no ``mathutils``.
"""

from __future__ import annotations

import math
import sys
from typing import Final

from .cone_floats import cone_table, nearest
from .limits import INSIDE_TOLERANCE
from .rotations import NEAR_OPPOSITE, TINY

Vec = tuple[float, float, float]
Mat = tuple[Vec, Vec, Vec]
"""Rows."""
Cone = tuple[float, float, float, float]

_PI: Final = math.pi
_TAU: Final = 2.0 * math.pi
_X: Final = (1.0, 0.0, 0.0)
_Y: Final = (0.0, 1.0, 0.0)
_Z: Final = (0.0, 0.0, 1.0)
_TINY_COMPONENT: Final = 8.0 * sys.float_info.epsilon  # as limits._inside


def dot(a: Vec, b: Vec) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def cross(a: Vec, b: Vec) -> Vec:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def norm(a: Vec) -> float:
    return math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


def normalize(v: Vec, fallback: Vec) -> Vec:
    n = math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    return (v[0] / n, v[1] / n, v[2] / n) if n > TINY else fallback


def mv(m: Mat, v: Vec) -> Vec:
    """``m @ v``."""
    r0, r1, r2 = m
    return (
        r0[0] * v[0] + r0[1] * v[1] + r0[2] * v[2],
        r1[0] * v[0] + r1[1] * v[1] + r1[2] * v[2],
        r2[0] * v[0] + r2[1] * v[1] + r2[2] * v[2],
    )


def mtv(m: Mat, v: Vec) -> Vec:
    """``m.T @ v``."""
    r0, r1, r2 = m
    return (
        r0[0] * v[0] + r1[0] * v[1] + r2[0] * v[2],
        r0[1] * v[0] + r1[1] * v[1] + r2[1] * v[2],
        r0[2] * v[0] + r1[2] * v[1] + r2[2] * v[2],
    )


def mm(a: Mat, b: Mat) -> Mat:
    """``a @ b``."""
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = b
    return (
        (
            a[0][0] * b00 + a[0][1] * b10 + a[0][2] * b20,
            a[0][0] * b01 + a[0][1] * b11 + a[0][2] * b21,
            a[0][0] * b02 + a[0][1] * b12 + a[0][2] * b22,
        ),
        (
            a[1][0] * b00 + a[1][1] * b10 + a[1][2] * b20,
            a[1][0] * b01 + a[1][1] * b11 + a[1][2] * b21,
            a[1][0] * b02 + a[1][1] * b12 + a[1][2] * b22,
        ),
        (
            a[2][0] * b00 + a[2][1] * b10 + a[2][2] * b20,
            a[2][0] * b01 + a[2][1] * b11 + a[2][2] * b21,
            a[2][0] * b02 + a[2][1] * b12 + a[2][2] * b22,
        ),
    )


def mtm(a: Mat, b: Mat) -> Mat:
    """``a.T @ b``."""
    return mm(((a[0][0], a[1][0], a[2][0]), (a[0][1], a[1][1], a[2][1]), (a[0][2], a[1][2], a[2][2])), b)


def col(m: Mat, j: int) -> Vec:
    return (m[0][j], m[1][j], m[2][j])


def axis_angle(a: Vec, angle: float) -> Mat:
    """`rotations.axis_angle_matrix`: ``(1 - c) a a^T + [s a]x``, then ``c`` added on the diagonal."""
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    sx, sy, sz = s * a[0], s * a[1], s * a[2]
    return (
        (t * (a[0] * a[0]) + c, t * (a[0] * a[1]) - sz, t * (a[0] * a[2]) + sy),
        (t * (a[1] * a[0]) + sz, t * (a[1] * a[1]) + c, t * (a[1] * a[2]) - sx),
        (t * (a[2] * a[0]) - sy, t * (a[2] * a[1]) + sx, t * (a[2] * a[2]) + c),
    )


def halfway(a: Vec, b: Vec, s: Vec, ns: float) -> Mat:
    """`rotations._halfway_rotation`: ``I - 2 (b g^T + h h^T)``."""
    k = max(ns, TINY)
    h = (s[0] / k, s[1] / k, s[2] / k)
    bh = 2.0 * dot(b, h)
    g = (b[0] - bh * h[0], b[1] - bh * h[1], b[2] - bh * h[2])
    return (
        (
            -2.0 * (b[0] * g[0] + h[0] * h[0]) + 1.0,
            -2.0 * (b[0] * g[1] + h[0] * h[1]),
            -2.0 * (b[0] * g[2] + h[0] * h[2]),
        ),
        (
            -2.0 * (b[1] * g[0] + h[1] * h[0]),
            -2.0 * (b[1] * g[1] + h[1] * h[1]) + 1.0,
            -2.0 * (b[1] * g[2] + h[1] * h[2]),
        ),
        (
            -2.0 * (b[2] * g[0] + h[2] * h[0]),
            -2.0 * (b[2] * g[1] + h[2] * h[1]),
            -2.0 * (b[2] * g[2] + h[2] * h[2]) + 1.0,
        ),
    )


def any_perpendicular(v: Vec) -> Vec:
    """`rotations.any_perpendicular`: ``v`` crossed with the basis axis least aligned with it."""
    m = (abs(v[0]), abs(v[1]), abs(v[2]))
    i = 0 if m[0] <= m[1] and m[0] <= m[2] else (1 if m[1] <= m[2] else 2)
    p = cross(v, (_X, _Y, _Z)[i])
    n = norm(p)
    return (p[0] / n, p[1] / n, p[2] / n) if n > TINY else _X


def minimal_rotation(a: Vec, b: Vec, fallback_axis: Vec) -> Mat:
    """`rotations.minimal_rotation` of unit ``a`` onto unit ``b``."""
    s = (a[0] + b[0], a[1] + b[1], a[2] + b[2])
    ns = norm(s)
    if ns >= NEAR_OPPOSITE:
        return halfway(a, b, s, ns)
    perp = fallback_axis[0] * a[0] + fallback_axis[1] * a[1] + fallback_axis[2] * a[2]
    n = normalize(
        (fallback_axis[0] - perp * a[0], fallback_axis[1] - perp * a[1], fallback_axis[2] - perp * a[2]),
        any_perpendicular(a),
    )
    n0, n1, n2 = 2.0 * n[0], 2.0 * n[1], 2.0 * n[2]
    half = (
        (n0 * n[0] - 1.0, n0 * n[1], n0 * n[2]),
        (n1 * n[0], n1 * n[1] - 1.0, n1 * n[2]),
        (n2 * n[0], n2 * n[1], n2 * n[2] - 1.0),
    )
    so = (b[0] - a[0], b[1] - a[1], b[2] - a[2])
    return mm(halfway((-a[0], -a[1], -a[2]), b, so, norm(so)), half)


def aim_frame(direction: Vec, local_dir: Vec, start: Mat, current: Vec | None = None) -> Mat:
    """`frames.aim_frames` for one frame, from ``start`` (the keep frame or the reference frame)."""
    if current is None:
        current = mv(start, local_dir)
    return mm(minimal_rotation(current, direction, col(start, 0)), start)


# --------------------------------------------------------------------------------------------------------
# Limits (limits.py)
# --------------------------------------------------------------------------------------------------------


def inside(x: float, y: float, z: float, cone: Cone, tol: float) -> bool:
    """`limits._inside` for one direction (with its rounding rule for tiny components when ``tol`` is set)."""
    if tol:
        if abs(x) <= _TINY_COMPONENT:
            x = 0.0
        if abs(z) <= _TINY_COMPONENT:
            z = 0.0
    rho2 = x * x + z * z
    theta = math.atan2(math.sqrt(rho2), y)
    a = cone[3] if x >= 0.0 else cone[2]
    b = cone[0] if z >= 0.0 else cone[1]
    if tol:
        a = a + tol
        b = b + tol
    qx = x / max(a, 1e-150)
    qz = z / max(b, 1e-150)
    return theta * theta * (qx * qx + qz * qz) <= rho2 and theta < _PI


def frame_twist(rel: Mat) -> float:
    """The twist of ``rel`` about Y as `limits.apply_joint_limits` reads it (no wrap)."""
    return math.atan2(rel[0][2] - rel[2][0], rel[0][0] + rel[2][2])


def twist_target(tw: float, tmin: float, tmax: float, tol: float) -> float | None:
    """`limits._twist_target`: the nearest end of the range around the circle, None when inside."""
    u = (tw - tmin) % _TAU
    past_max = u - (tmax - tmin)
    back_to_min = _TAU - u
    if past_max > tol and back_to_min > tol:
        return tmax if past_max <= back_to_min else tmin
    return None


class Bone:
    """One bone's limits: its cone (or None) and its twist range (or None)."""

    __slots__ = ("cone", "twist")

    def __init__(self, cone: Cone | None, twist: tuple[float, float] | None) -> None:
        self.cone, self.twist = cone, twist


def limit(ref: Mat, frame: Mat, bone: Bone) -> Mat:
    """`limits.apply_joint_limits` for one frame: ``frame`` itself where it is within its limits."""
    cone, twist = bone.cone, bone.twist
    if cone is None and twist is None:
        return frame
    rel = mtm(ref, frame)
    changed = False
    if cone is not None:
        y = col(rel, 1)
        if not inside(y[0], y[1], y[2], cone, INSIDE_TOLERANCE):
            near = nearest(y[0], y[1], y[2], cone_table(cone))
            # limits._min_rotation: c I + [a]x + a a^T / (1 + c), a = y x near.
            a = cross(y, near)
            c = dot(y, near)
            k = 1.0 + c
            ak = (a[0] / k, a[1] / k, a[2] / k)
            rot = (
                (a[0] * ak[0] + c, a[0] * ak[1] - a[2], a[0] * ak[2] + a[1]),
                (a[1] * ak[0] + a[2], a[1] * ak[1] + c, a[1] * ak[2] - a[0]),
                (a[2] * ak[0] - a[1], a[2] * ak[1] + a[0], a[2] * ak[2] + c),
            )
            rel = mm(rot, rel)
            changed = True
    if twist is not None:
        tw = frame_twist(rel)
        target = twist_target(tw, twist[0], twist[1], INSIDE_TOLERANCE)
        if target is not None:
            angle = target - tw
            c, s = math.cos(angle), math.sin(angle)
            rel = mm(rel, ((c, 0.0, s), (0.0, 1.0, 0.0), (-s, 0.0, c)))
            changed = True
    return mm(ref, rel) if changed else frame


def beyond(ds: list[Vec], cone: Cone, gap: float) -> bool:
    """Whether every direction of ``ds`` lies more than ``gap`` from the cone (`violation`): the minimum of
    `two_bone_limits._violations` above ``gap``. Each direction is at least its swing beyond the cone's widest
    half-angle from it (the cone lies inside the circular cone of that half-angle), so the exact angles are
    computed in the order of that bound, and only until the bound passes ``gap`` or one is not beyond it."""
    widest = max(cone)
    bounds = [math.atan2(math.sqrt(d[0] * d[0] + d[2] * d[2]), d[1]) - widest for d in ds]
    for k in sorted(range(len(ds)), key=bounds.__getitem__):
        if bounds[k] > gap:
            return True
        if violation(ds[k], cone) <= gap:
            return False
    return True


def violation(d: Vec, cone: Cone) -> float:
    """`limits.cone_violation` for one direction: the angle to the cone's nearest point, 0 inside."""
    if inside(d[0], d[1], d[2], cone, 0.0):
        return 0.0
    near = nearest(d[0], d[1], d[2], cone_table(cone))
    cr = cross(d, near)
    return math.atan2(norm(cr), dot(d, near))
