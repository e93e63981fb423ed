"""The two-bone closed form under limits (`solvers.two_bone_limits.solve_limited`) on plain Python floats.

`solve_limited` is the reference: numpy, batched over chains. The live path and the bakes send it one to four
chains at a time, where its cost is numpy's per-call overhead (~2-3 ms a call, a few hundred numpy calls on
arrays of a row or two). This module does the same steps on tuples of Python floats, one chain after the
other: the fold plane and range, the fold clamp, the azimuth search with the zero-width hinge's closed form,
`solvers.fold.settle_fold`, the hinge turn, `_twist_into_range`, the swivel search and its bisections, the
out-of-reach proof with the exact cone violations, the limits (`limits.apply_joint_limits` for one frame,
with the exact nearest point of `solvers.cone_floats`), the roll modes and the forward sweep.

It decides as the reference does and gives its pose to float64 rounding (`tests/unit/test_two_bone_floats.py`
compares both on random limbs). Matrices are tuples of rows, a frame's columns its axes, as in the reference.
No numpy per step (numpy only reads the batch and writes the result) and no ``mathutils``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Final

import numpy as np

from .cone_floats import cone_table, nearest
from .fold import settle_fold
from .frames import ChainBatch
from .limits import INSIDE_TOLERANCE
from .rotations import NEAR_OPPOSITE, TINY
from .two_bone_limits import (
    _BENT,
    _EXACT,
    ALONG_Y,
    AZIMUTH_SAMPLES,
    HELD,
    STRAIGHT_TURN,
    SWIVEL_BISECTIONS,
    SWIVEL_SAMPLES,
)
from .types import F64, Bools

Vec = tuple[float, float, float]
Mat = tuple[Vec, Vec, Vec]
"""Rows."""
Cone = tuple[float, float, float, float]

_PI: Final = math.pi
_TAU: Final = 2.0 * math.pi
_X: Final = (1.0, 0.0, 0.0)
_Y: Final = (0.0, 1.0, 0.0)
_Z: Final = (0.0, 0.0, 1.0)
_SIDES: Final = ((0.0, 0.0, 1.0), (0.0, 0.0, -1.0), (-1.0, 0.0, 0.0), (1.0, 0.0, 0.0))
_TINY_COMPONENT: Final = 8.0 * sys.float_info.epsilon  # as limits._inside


def _azimuths() -> list[tuple[float, float]]:
    """``two_bone_limits._fold_azimuth``'s samples in its order (nearest the chosen plane first): cos, sin."""
    phi = np.arange(AZIMUTH_SAMPLES) * (2.0 * np.pi / AZIMUTH_SAMPLES)
    order = np.argsort(np.minimum(phi, 2.0 * np.pi - phi), kind="stable")
    phi = phi[order]
    return list(zip(np.cos(phi).tolist(), np.sin(phi).tolist(), strict=True))


def _swivels() -> list[float]:
    """``two_bone_limits._nearest_swivel``'s sampled angles: +step, -step, +2 step, ..."""
    step = 2.0 * np.pi / SWIVEL_SAMPLES
    order = np.arange(1, SWIVEL_SAMPLES // 2 + 1)
    angles: list[float] = np.stack((order * step, -order * step), axis=1).reshape(-1)[: SWIVEL_SAMPLES - 1].tolist()
    return angles


_AZIMUTHS: Final = _azimuths()
_SWIVEL_ANGLES: Final = _swivels()
_SWIVEL_STEP: Final = 2.0 * math.pi / SWIVEL_SAMPLES


# --------------------------------------------------------------------------------------------------------
# Vectors and matrices (rotations.py)
# --------------------------------------------------------------------------------------------------------


def _dot(a: Vec, b: Vec) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _cross(a: Vec, b: Vec) -> Vec:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _norm(a: Vec) -> float:
    return math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


def _normalize(v: Vec, fallback: Vec) -> Vec:
    n = math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
    return (v[0] / n, v[1] / n, v[2] / n) if n > TINY else fallback


def _mv(m: Mat, v: Vec) -> Vec:
    """``m @ v``."""
    r0, r1, r2 = m
    return (
        r0[0] * v[0] + r0[1] * v[1] + r0[2] * v[2],
        r1[0] * v[0] + r1[1] * v[1] + r1[2] * v[2],
        r2[0] * v[0] + r2[1] * v[1] + r2[2] * v[2],
    )


def _mtv(m: Mat, v: Vec) -> Vec:
    """``m.T @ v``."""
    r0, r1, r2 = m
    return (
        r0[0] * v[0] + r1[0] * v[1] + r2[0] * v[2],
        r0[1] * v[0] + r1[1] * v[1] + r2[1] * v[2],
        r0[2] * v[0] + r1[2] * v[1] + r2[2] * v[2],
    )


def _mm(a: Mat, b: Mat) -> Mat:
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


def _mtm(a: Mat, b: Mat) -> Mat:
    """``a.T @ b``."""
    return _mm(((a[0][0], a[1][0], a[2][0]), (a[0][1], a[1][1], a[2][1]), (a[0][2], a[1][2], a[2][2])), b)


def _col(m: Mat, j: int) -> Vec:
    return (m[0][j], m[1][j], m[2][j])


def _axis_angle(a: Vec, angle: float) -> Mat:
    """`rotations.axis_angle_matrix`: ``(1 - c) a a^T + [s a]x``, then ``c`` added on the diagonal."""
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    sx, sy, sz = s * a[0], s * a[1], s * a[2]
    return (
        (t * (a[0] * a[0]) + c, t * (a[0] * a[1]) - sz, t * (a[0] * a[2]) + sy),
        (t * (a[1] * a[0]) + sz, t * (a[1] * a[1]) + c, t * (a[1] * a[2]) - sx),
        (t * (a[2] * a[0]) - sy, t * (a[2] * a[1]) + sx, t * (a[2] * a[2]) + c),
    )


def _halfway(a: Vec, b: Vec, s: Vec, ns: float) -> Mat:
    """`rotations._halfway_rotation`: ``I - 2 (b g^T + h h^T)``."""
    k = max(ns, TINY)
    h = (s[0] / k, s[1] / k, s[2] / k)
    bh = 2.0 * _dot(b, h)
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


def _any_perpendicular(v: Vec) -> Vec:
    """`rotations.any_perpendicular`: ``v`` crossed with the basis axis least aligned with it."""
    m = (abs(v[0]), abs(v[1]), abs(v[2]))
    i = 0 if m[0] <= m[1] and m[0] <= m[2] else (1 if m[1] <= m[2] else 2)
    p = _cross(v, (_X, _Y, _Z)[i])
    n = _norm(p)
    return (p[0] / n, p[1] / n, p[2] / n) if n > TINY else _X


def _minimal_rotation(a: Vec, b: Vec, fallback_axis: Vec) -> Mat:
    """`rotations.minimal_rotation` of unit ``a`` onto unit ``b``."""
    s = (a[0] + b[0], a[1] + b[1], a[2] + b[2])
    ns = _norm(s)
    if ns >= NEAR_OPPOSITE:
        return _halfway(a, b, s, ns)
    perp = fallback_axis[0] * a[0] + fallback_axis[1] * a[1] + fallback_axis[2] * a[2]
    n = _normalize(
        (fallback_axis[0] - perp * a[0], fallback_axis[1] - perp * a[1], fallback_axis[2] - perp * a[2]),
        _any_perpendicular(a),
    )
    n0, n1, n2 = 2.0 * n[0], 2.0 * n[1], 2.0 * n[2]
    half = (
        (n0 * n[0] - 1.0, n0 * n[1], n0 * n[2]),
        (n1 * n[0], n1 * n[1] - 1.0, n1 * n[2]),
        (n2 * n[0], n2 * n[1], n2 * n[2] - 1.0),
    )
    so = (b[0] - a[0], b[1] - a[1], b[2] - a[2])
    return _mm(_halfway((-a[0], -a[1], -a[2]), b, so, _norm(so)), half)


def _aim(direction: Vec, local_dir: Vec, start: Mat, current: Vec | None = None) -> Mat:
    """`frames.aim_frames` for one frame, from ``start`` (the keep frame or the reference frame)."""
    if current is None:
        current = _mv(start, local_dir)
    return _mm(_minimal_rotation(current, direction, _col(start, 0)), start)


# --------------------------------------------------------------------------------------------------------
# Limits (limits.py)
# --------------------------------------------------------------------------------------------------------


def _inside(x: float, y: float, z: float, cone: Cone, tol: float) -> bool:
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


def _twist(rel: Mat) -> float:
    """The twist of ``rel`` about Y as `limits.apply_joint_limits` reads it (no wrap)."""
    return math.atan2(rel[0][2] - rel[2][0], rel[0][0] + rel[2][2])


def _twist_target(tw: float, tmin: float, tmax: float, tol: float) -> float | None:
    """`limits._twist_target`: the nearest end of the range around the circle, None when inside."""
    u = (tw - tmin) % _TAU
    past_max = u - (tmax - tmin)
    back_to_min = _TAU - u
    if past_max > tol and back_to_min > tol:
        return tmax if past_max <= back_to_min else tmin
    return None


class _Bone:
    """One bone's limits: its cone (or None) and its twist range (or None)."""

    __slots__ = ("cone", "twist")

    def __init__(self, cone: Cone | None, twist: tuple[float, float] | None) -> None:
        self.cone, self.twist = cone, twist


def _limit(ref: Mat, frame: Mat, bone: _Bone) -> Mat:
    """`limits.apply_joint_limits` for one frame: ``frame`` itself where it is within its limits."""
    cone, twist = bone.cone, bone.twist
    if cone is None and twist is None:
        return frame
    rel = _mtm(ref, frame)
    changed = False
    if cone is not None:
        y = _col(rel, 1)
        if not _inside(y[0], y[1], y[2], cone, INSIDE_TOLERANCE):
            near = nearest(y[0], y[1], y[2], cone_table(cone))
            # limits._min_rotation: c I + [a]x + a a^T / (1 + c), a = y x near.
            a = _cross(y, near)
            c = _dot(y, near)
            k = 1.0 + c
            ak = (a[0] / k, a[1] / k, a[2] / k)
            rot = (
                (a[0] * ak[0] + c, a[0] * ak[1] - a[2], a[0] * ak[2] + a[1]),
                (a[1] * ak[0] + a[2], a[1] * ak[1] + c, a[1] * ak[2] - a[0]),
                (a[2] * ak[0] - a[1], a[2] * ak[1] + a[0], a[2] * ak[2] + c),
            )
            rel = _mm(rot, rel)
            changed = True
    if twist is not None:
        tw = _twist(rel)
        target = _twist_target(tw, twist[0], twist[1], INSIDE_TOLERANCE)
        if target is not None:
            angle = target - tw
            c, s = math.cos(angle), math.sin(angle)
            rel = _mm(rel, ((c, 0.0, s), (0.0, 1.0, 0.0), (-s, 0.0, c)))
            changed = True
    return _mm(ref, rel) if changed else frame


def _least_violation(ds: list[Vec], cone: Cone) -> tuple[int, float]:
    """The first of the directions ``ds`` least far from the cone, and how far (`_violation`): the minimum of
    `two_bone_limits._violations`, by branch and bound. Each direction is at least its swing beyond the
    cone's widest half-angle from it (the cone lies inside the circular cone of that half-angle), so the
    exact angles are computed in the order of that bound until the bound passes the least one found."""
    widest = max(cone)
    bounds = [max(math.atan2(math.sqrt(d[0] * d[0] + d[2] * d[2]), d[1]) - widest, 0.0) for d in ds]
    least, best = 0, math.inf
    for k in sorted(range(len(ds)), key=bounds.__getitem__):
        if bounds[k] > best:
            break
        gap = _violation(ds[k], cone)
        if gap < best or (gap == best and k < least):
            least, best = k, gap
    return least, best


def _violation(d: Vec, cone: Cone) -> float:
    """`limits.cone_violation` for one direction: the angle to the cone's nearest point, 0 inside."""
    if _inside(d[0], d[1], d[2], cone, 0.0):
        return 0.0
    near = nearest(d[0], d[1], d[2], cone_table(cone))
    cr = _cross(d, near)
    return math.atan2(_norm(cr), _dot(d, near))


# --------------------------------------------------------------------------------------------------------
# The closed form (two_bone_limits.py)
# --------------------------------------------------------------------------------------------------------


class _Chain:
    """One chain's rows of the batch, as Python floats."""

    __slots__ = (
        "a0",
        "a1",
        "base",
        "bound",
        "c",
        "high",
        "keep",
        "keep_dirs",
        "l1",
        "l2",
        "low",
        "lower",
        "n",
        "offsets",
        "q0",
        "q1",
        "ref0",
        "roll",
        "root",
        "target",
        "upper",
    )

    def __init__(self, rows: tuple[Any, ...], roll: str) -> None:
        root, target, lengths, directions, offsets, ref_local, base, keep, cone, use_cone, twist, use_twist = rows
        self.root: Vec = tuple(root)
        self.target: Vec = tuple(target)
        self.l1, self.l2 = lengths
        self.a0: Vec = tuple(directions[0])
        self.a1: Vec = tuple(directions[1])
        self.offsets: tuple[Vec, Vec] = (tuple(offsets[0]), tuple(offsets[1]))
        self.q0: Mat = _mat(ref_local[0])
        self.q1: Mat = _mat(ref_local[1])
        self.base: Mat = _mat(base)
        self.keep: tuple[Mat, Mat] = (_mat(keep[0]), _mat(keep[1]))
        self.keep_dirs = (_mv(self.keep[0], self.a0), _mv(self.keep[1], self.a1))
        self.roll = roll
        self.upper = _Bone(
            tuple(cone[0]) if use_cone[0] else None,
            (twist[0][0], twist[0][1]) if use_twist[0] else None,
        )
        self.lower = _Bone(
            tuple(cone[1]) if use_cone[1] else None,
            (twist[1][0], twist[1][1]) if use_twist[1] else None,
        )
        self.ref0 = _mm(self.base, self.q0)
        self._fold_plane(tuple(cone[1]), use_cone[1])

    def _fold_plane(self, cone: Cone, use_cone: bool) -> None:
        """`two_bone_limits.fold_plane` (with the lower bone's cone row, used or not, as the reference)."""
        c = _normalize(_mtv(self.q1, self.a0), _X)
        away = (-c[0], 0.0, -c[2])
        size = _norm(away)
        widest = _SIDES[max(range(4), key=lambda i: (cone[i], -i))]
        bent = size > _BENT
        e = (away[0] / max(size, 1e-300), away[1] / max(size, 1e-300), away[2] / max(size, 1e-300)) if bent else widest
        rest = math.atan2(size, c[1]) if bent else 0.0
        ec = _dot(e, c)
        self.n = _normalize((e[0] - ec * c[0], e[1] - ec * c[1], e[2] - ec * c[2]), e)
        self.c = c
        low = max(rest - _radius(cone, use_cone, -e[0], -e[2]), 0.0)
        high = min(rest + _radius(cone, use_cone, e[0], e[2]), _PI)
        self.bound = min(rest + (max(cone) if use_cone else _PI), _PI)
        self.low, self.high = low, max(high, low)


def _mat(rows: list[list[float]]) -> Mat:
    r0, r1, r2 = rows
    return ((r0[0], r0[1], r0[2]), (r1[0], r1[1], r1[2]), (r2[0], r2[1], r2[2]))


def _radius(cone: Cone, use_cone: bool, ex: float, ez: float) -> float:
    """`two_bone_limits._radius` for one direction ``(ex, 0, ez)``."""
    if not use_cone:
        return _PI
    ax = cone[3] if ex >= 0.0 else cone[2]
    bz = cone[0] if ez >= 0.0 else cone[1]
    inv = 0.0
    for comp, half in ((ex, ax), (ez, bz)):
        if comp != 0.0:
            if half == 0.0:
                return 0.0
            q = comp / half
            inv += q * q
    if inv > 0.0:
        r = 1.0 / math.sqrt(inv)
        return min(r if math.isfinite(r) else 0.0, _PI)
    return _PI


def _upper(ch: _Chain, chord: Vec, bend: Vec, cos_a: float, sin_a: float, reach: float, u: Vec) -> tuple[Mat, Vec, Vec]:
    """`two_bone_limits._upper` for one chain: the upper frame, the tip and the lower segment's direction."""
    root, l1 = ch.root, ch.l1
    elbow = (
        root[0] + l1 * (cos_a * chord[0] + sin_a * bend[0]),
        root[1] + l1 * (cos_a * chord[1] + sin_a * bend[1]),
        root[2] + l1 * (cos_a * chord[2] + sin_a * bend[2]),
    )
    tip = (root[0] + reach * chord[0], root[1] + reach * chord[1], root[2] + reach * chord[2])
    d1 = _normalize((elbow[0] - root[0], elbow[1] - root[1], elbow[2] - root[2]), chord)
    d2 = _normalize((tip[0] - elbow[0], tip[1] - elbow[1], tip[2] - elbow[2]), chord)
    a0 = ch.a0
    g = _aim(d1, a0, ch.keep[0] if ch.roll == "KEEP" else ch.ref0)
    w = _mtv(g, d2)
    tau = 0.0
    cone1 = ch.lower.cone
    fits = True
    if cone1 is not None:
        u0 = _mtv(ch.q1, w)
        fits = _inside(u0[0], u0[1], u0[2], cone1, INSIDE_TOLERANCE)
    if not fits:
        v = _mv(ch.q1, u)
        va, wa = _dot(v, a0), _dot(w, a0)
        v_perp = (v[0] - va * a0[0], v[1] - va * a0[1], v[2] - va * a0[2])
        w_perp = (w[0] - wa * a0[0], w[1] - wa * a0[1], w[2] - wa * a0[2])
        if _norm(v_perp) > STRAIGHT_TURN and _norm(w_perp) > STRAIGHT_TURN:
            tau = math.atan2(_dot(a0, _cross(v_perp, w_perp)), _dot(v_perp, w_perp))
    f1 = _mm(g, _axis_angle(a0, tau)) if tau != 0.0 else g
    return _twist_into_range(ch, f1, d2), tip, d2


def _twist_into_range(ch: _Chain, f1: Mat, d2: Vec) -> Mat:
    """`two_bone_limits._twist_into_range` for one chain."""
    twist = ch.upper.twist
    if twist is None:
        return f1
    a0 = ch.a0
    if max(abs(a0[0]), abs(a0[1] - 1.0), abs(a0[2])) > ALONG_Y:
        return f1
    tw = _twist(_mtm(ch.ref0, f1))
    if tw <= -_PI:
        tw = _PI
    target = _twist_target(tw, twist[0], twist[1], INSIDE_TOLERANCE)
    if target is None:
        return f1
    turned = _mm(f1, _axis_angle(_Y, target - tw))
    cone1 = ch.lower.cone
    if cone1 is not None:
        u0 = _mtv(ch.q1, _mtv(turned, d2))
        if not _inside(u0[0], u0[1], u0[2], cone1, INSIDE_TOLERANCE):
            return f1
    return turned


def _upper_inside(ch: _Chain, f1: Mat) -> bool:
    """`two_bone_limits._upper_inside` for one frame."""
    cone, twist = ch.upper.cone, ch.upper.twist
    if cone is None and twist is None:
        return True
    rel = _mtm(ch.ref0, f1)
    if cone is not None and not _inside(rel[0][1], rel[1][1], rel[2][1], cone, INSIDE_TOLERANCE):
        return False
    if twist is not None:
        tw = _twist(rel)
        if tw <= -_PI:
            tw = _PI
        return twist[0] - INSIDE_TOLERANCE <= tw <= twist[1] + INSIDE_TOLERANCE
    return True


def _swivel(chord: Vec, bend: Vec, psi: float) -> Vec:
    """`two_bone_limits._swivel`: ``bend`` turned by ``psi`` about ``chord``."""
    c, s = math.cos(psi), math.sin(psi)
    x = _cross(chord, bend)
    return (c * bend[0] + s * x[0], c * bend[1] + s * x[1], c * bend[2] + s * x[2])


def _fold_azimuth(c: Vec, n: Vec, fold: float, cone: Cone) -> Vec | None:
    """`two_bone_limits._fold_azimuth` for one chain."""
    m = _normalize(_cross(c, n), n)
    cf, sf = math.cos(fold), math.sin(fold)
    for cp, sp in _AZIMUTHS:
        ring = (cp * n[0] + sp * m[0], cp * n[1] + sp * m[1], cp * n[2] + sp * m[2])
        u = (cf * c[0] + sf * ring[0], cf * c[1] + sf * ring[1], cf * c[2] + sf * ring[2])
        if _inside(u[0], u[1], u[2], cone, -1e-9):
            return u
    flat_z = cone[0] <= 0.0 and cone[1] <= 0.0
    flat_x = cone[2] <= 0.0 and cone[3] <= 0.0
    if not (flat_z or flat_x):
        return None
    # A zero-width hinge: the circle meets its plane in closed form.
    b = _X if flat_z else _Z
    ca, cb = c[1], _dot(b, c)
    r = math.hypot(ca, cb)
    ratio = math.cos(fold) / max(r, 1e-300)
    if not abs(ratio) <= 1.0:
        return None
    psi0 = math.atan2(cb, ca)
    half = math.acos(min(max(ratio, -1.0), 1.0))
    best: Vec | None = None
    score = -math.inf
    for sign in (1.0, -1.0):
        theta = psi0 + sign * half
        ct, st = math.cos(theta), math.sin(theta)
        cand = (ct * 0.0 + st * b[0], ct * 1.0 + st * b[1], ct * 0.0 + st * b[2])
        if _inside(cand[0], cand[1], cand[2], cone, 1e-9):
            pref = _dot(cand, n)
            if pref > score:
                best, score = cand, pref
    return best


def _nearest_swivel(
    ch: _Chain, chord: Vec, bend: Vec, cos_a: float, sin_a: float, reach: float, u: Vec
) -> tuple[float | None, float | None]:
    """`two_bone_limits._nearest_swivel` for one chain: the allowed swivel nearest 0 (None: none), and
    where the upper cone refuses every sample, the angle nearest the cone when proven out of reach."""
    refused: list[Mat] = []
    found: float | None = None
    for psi in _SWIVEL_ANGLES:
        f1, _, _ = _upper(ch, chord, _swivel(chord, bend, psi), cos_a, sin_a, reach, u)
        if _upper_inside(ch, f1):
            found = psi
            break
        refused.append(f1)
    if found is None:
        cone = ch.upper.cone
        if cone is None:
            return None, None
        f0, _, _ = _upper(ch, chord, bend, cos_a, sin_a, reach, u)
        least, gap = _least_violation([_mtv(ch.ref0, _col(f, 1)) for f in [f0, *refused]], cone)
        if gap > 0.5 * _SWIVEL_STEP * sin_a + 1e-9:
            return None, (0.0 if least == 0 else _SWIVEL_ANGLES[least - 1])
        return None, None
    hi = found
    lo = hi - math.copysign(_SWIVEL_STEP, hi)
    for _ in range(SWIVEL_BISECTIONS):
        mid = 0.5 * (lo + hi)
        f1, _, _ = _upper(ch, chord, _swivel(chord, bend, mid), cos_a, sin_a, reach, u)
        if _upper_inside(ch, f1):
            hi = mid
        else:
            lo = mid
    return hi, None


def _sweep(ch: _Chain, elbow: Vec) -> tuple[list[Vec], list[Mat]]:
    """`frames.forward_sweep` of one chain with limits toward ``[root, elbow, target]``."""
    positions = [ch.root]
    frames: list[Mat] = []
    parent = ch.base
    aims = (elbow, ch.target)
    locals_ = (ch.a0, ch.a1)
    for i, (q, bone) in enumerate(((ch.q0, ch.upper), (ch.q1, ch.lower))):
        head = positions[i]
        ref = _mm(parent, q)
        current = ch.keep_dirs[i] if ch.roll == "KEEP" else _mv(ref, locals_[i])
        aim = aims[i]
        direction = _normalize((aim[0] - head[0], aim[1] - head[1], aim[2] - head[2]), current)
        frame = _aim(direction, locals_[i], ch.keep[i] if ch.roll == "KEEP" else ref, current)
        frame = _limit(ref, frame, bone)
        frames.append(frame)
        step = _mv(frame, ch.offsets[i])
        positions.append((head[0] + step[0], head[1] + step[1], head[2] + step[2]))
        parent = frame
    return positions, frames


def _solve(ch: _Chain, chord: Vec, bend: Vec, distance: float) -> tuple[list[Vec], list[Mat], bool, bool]:
    """`two_bone_limits.solve_limited` for one chain: joints, frames, settled, clamped."""
    l1, l2 = ch.l1, ch.l2
    c, n, low, high = ch.c, ch.n, ch.low, ch.high
    cos_f = min(max((distance * distance - l1 * l1 - l2 * l2) / (2.0 * l1 * l2), -1.0), 1.0)
    fold = math.acos(cos_f)
    want = min(max(fold, low), high)
    clamped = abs(want - fold) > 1e-12
    proven = low <= 0.0 if fold < low else high >= ch.bound - 1e-12
    cw, sw = math.cos(want), math.sin(want)
    u = (cw * c[0] + sw * n[0], cw * c[1] + sw * n[1], cw * c[2] + sw * n[2])
    if clamped and not proven:
        # As the reference, with the lower cone's row used or not (the reference reads it either way).
        cone1 = ch.lower.cone if ch.lower.cone is not None else (0.0, 0.0, 0.0, 0.0)
        found = _fold_azimuth(c, n, fold, cone1)
        if found is not None:
            u, want, clamped = found, fold, False
        else:
            got = settle_fold(c, n, fold, cone1)
            if got is not None:
                u, want, clamped = got
                proven = True
    reach = math.sqrt(max(l1 * l1 + l2 * l2 + 2.0 * l1 * l2 * math.cos(want), 0.0))
    safe = max(reach, 1e-300)
    cos_a = min(max((l1 * l1 + safe * safe - l2 * l2) / (2.0 * l1 * safe), -1.0), 1.0)
    sin_a = math.sqrt(1.0 - cos_a * cos_a)
    f1, tip, d2 = _upper(ch, chord, bend, cos_a, sin_a, reach, u)
    if not _upper_inside(ch, f1):
        psi, near = _nearest_swivel(ch, chord, bend, cos_a, sin_a, reach, u)
        if psi is not None:
            bend = _swivel(chord, bend, psi)
            f1, tip, d2 = _upper(ch, chord, bend, cos_a, sin_a, reach, u)
        elif near is not None and not clamped:
            # Out of reach under the upper bone's limits whatever the twist: the sweep from the elbow nearest
            # the cone (settled).
            b = _swivel(chord, bend, near)
            root = ch.root
            elbow = (
                root[0] + l1 * (cos_a * chord[0] + sin_a * b[0]),
                root[1] + l1 * (cos_a * chord[1] + sin_a * b[1]),
                root[2] + l1 * (cos_a * chord[2] + sin_a * b[2]),
            )
            positions, frames = _sweep(ch, elbow)
            return positions, frames, True, clamped
    f1_limited = _limit(ch.ref0, f1, ch.upper)
    upper_ok = (
        f1_limited is f1
        or max(abs(x - y) for r, s in zip(f1_limited, f1, strict=True) for x, y in zip(r, s, strict=True)) <= _EXACT
    )
    ref1 = _mm(f1_limited, ch.q1)
    f2 = _aim(d2, ch.a1, ch.keep[1] if ch.roll == "KEEP" else ref1)
    f2 = _limit(ref1, f2, ch.lower)
    root = ch.root
    s1 = _mv(f1_limited, ch.offsets[0])
    p1 = (root[0] + s1[0], root[1] + s1[1], root[2] + s1[2])
    s2 = _mv(f2, ch.offsets[1])
    p2 = (p1[0] + s2[0], p1[1] + s2[1], p1[2] + s2[2])
    held = _norm((p2[0] - tip[0], p2[1] - tip[1], p2[2] - tip[2])) <= HELD * (l1 + l2)
    settled = upper_ok and held and (not clamped or proven)
    return [root, p1, p2], [f1_limited, f2], settled, clamped


def solve_limited_floats(batch: ChainBatch, chord: F64, bend: F64, distance: F64) -> tuple[F64, F64, Bools, Bools]:
    """`two_bone_limits.solve_limited` on plain floats, one chain after the other (same arguments and
    results, to float64 rounding): for a few chains, where numpy's cost per call is most of the work."""
    lim = batch.limits
    assert lim is not None
    columns = (
        batch.root.tolist(),
        batch.targets.tolist(),
        batch.lengths.tolist(),
        batch.directions.tolist(),
        batch.offsets.tolist(),
        batch.ref_local.tolist(),
        batch.base.tolist(),
        batch.keep_frames.tolist(),
        lim.cone.tolist(),
        lim.use_cone.tolist(),
        lim.twist.tolist(),
        lim.use_twist.tolist(),
    )
    roll = batch.roll_mode
    chords, bends, distances = chord.tolist(), bend.tolist(), distance.tolist()
    positions, frames, settled, clamped = [], [], [], []
    for k, rows in enumerate(zip(*columns, strict=True)):
        p, f, s, c = _solve(_Chain(rows, roll), tuple(chords[k]), tuple(bends[k]), distances[k])
        positions.append(p)
        frames.append(f)
        settled.append(s)
        clamped.append(c)
    size = batch.size
    return (
        np.array(positions, dtype=np.float64).reshape(size, 3, 3),
        np.array(frames, dtype=np.float64).reshape(size, 2, 3, 3),
        np.array(settled, dtype=np.bool_).reshape(size),
        np.array(clamped, dtype=np.bool_).reshape(size),
    )
