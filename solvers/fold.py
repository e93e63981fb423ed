"""The lower bone's fold under its cone, on plain floats: every fold the cone allows, and where.

A two-bone limb's fold (the angle between the upper segment's direction ``c`` and the lower bone's direction
``u``, in the lower bone's reference frame) is limited by the lower bone's cone. The closed form
(:mod:`solvers.two_bone_limits`) first looks along one great circle (the modelled bend) and then at 36
azimuths around ``c``; what those miss is settled here from the cone's boundary curve:

* the largest and smallest fold the cone allows at all (the farthest and nearest boundary directions from
  ``c``, or pi / 0 where ``-c`` / ``c`` is inside): a target nearer than every fold allows (a hand pulled to
  the chest) or farther than every fold allows gets the nearest reachable point *proven*, so neither the
  global stage nor a search runs for it;
* a direction at exactly a given fold between those, on the boundary (the arc of directions at that fold
  inside the cone can be too short for the azimuth samples to hit: near the largest fold it shrinks to a
  point).

The boundary is sampled once per limb (cached by ``c`` and the cone: a limb's rest geometry does not change
between updates) and refined by bisection, so a call costs a few dozen float operations after the first.
Used by the batched closed form (per row) and the scalar one alike, so both give the same pose.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Final

Vec3 = tuple[float, float, float]
Cone = tuple[float, float, float, float]
"""Half-angles ``(up, down, left, right)`` in radians, as :mod:`solvers.limits`."""

_SAMPLES: Final = 256
"""Boundary samples per limb (1.4 degrees of swing azimuth apart)."""
_REFINE: Final = 48
"""Bisection / golden-section steps on the boundary (to far below float32's resolution)."""
_GOLD: Final = (math.sqrt(5.0) - 1.0) / 2.0


def swing_radius(cone: Cone, ex: float, ez: float) -> float:
    """How far (radians of swing) the cone reaches along the unit swing direction ``(ex, 0, ez)``: its
    quadrant's ellipse radius ``1 / sqrt((ex/a)**2 + (ez/b)**2)``, at most pi, 0 toward a zero half-angle
    (`two_bone_limits._radius` for one direction)."""
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
        return min(r if math.isfinite(r) else 0.0, math.pi)
    return math.pi


def boundary(psi: float, cone: Cone) -> Vec3:
    """The cone's boundary direction at swing azimuth ``psi`` (0 toward +X, pi/2 toward +Z)."""
    cx, sz = math.cos(psi), math.sin(psi)
    theta = swing_radius(cone, cx, sz)
    s = math.sin(theta)
    return (s * cx, math.cos(theta), s * sz)


_CIRCLE: Final = [(math.cos(2.0 * math.pi * k / 24), math.sin(2.0 * math.pi * k / 24)) for k in range(24)]
"""The samples of :func:`circle_outside` (one every 15 degrees of the circle)."""


def circle_outside(
    c: Vec3, e1: Vec3, e2: Vec3, cos_a: float, sin_a: float, cone: Cone, tol: float, slack: float
) -> bool:
    """Whether every direction of the circle ``cos_a c + sin_a (cos t e1 + sin t e2)`` (``c``, ``e1``, ``e2``
    orthonormal, in the cone's frame), and every direction within ``slack`` of it, lies outside ``cone`` with
    its half-angles widened by ``tol``: proven for the whole circle, not only at samples.

    The cone is ``rho <= 1`` for ``rho = theta * sqrt((ex / a)**2 + (ez / b)**2)`` (``theta`` the swing angle,
    ``(ex, ez)`` its unit azimuth, ``a``, ``b`` the quadrant's half-angles: `cone_floats.inside`), a function
    of the swing vector ``theta (ex, ez)`` that is Lipschitz with ``1 / min(half-angles)``; the swing vector
    moves at most ``theta / sin(theta)`` times as far as the direction does. So ``rho`` at two neighbouring
    samples bounds it on the arc between them. First the whole circle against the cone's widest half-angle
    (one comparison: a target far out of the limits), then the arcs. False (not proven) where the circle
    passes near the cone, or near ``-Y`` (where the swing vector jumps). Used by the closed form's
    out-of-reach proof (`two_bone_limits._nearest_swivel`), which then needs no per-swivel frame.
    """
    widest = max(cone) + tol
    narrowest = min(cone) + tol
    theta_c = math.acos(max(-1.0, min(1.0, c[1])))
    if abs(theta_c - math.atan2(sin_a, cos_a)) - slack > widest:
        return True  # every direction of the circle is farther from +Y than the cone reaches
    if narrowest <= 0.0:
        return False
    lipschitz = 1.0 / narrowest
    arc = sin_a * (2.0 * math.pi / len(_CIRCLE))  # the circle's length between two samples
    right, left, up, down = cone[3] + tol, cone[2] + tol, cone[0] + tol, cone[1] + tol
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    for k in range(len(_CIRCLE) + 1):
        if k < len(_CIRCLE):
            ct, st = _CIRCLE[k]
            x = cos_a * c[0] + sin_a * (ct * e1[0] + st * e2[0])
            y = cos_a * c[1] + sin_a * (ct * e1[1] + st * e2[1])
            z = cos_a * c[2] + sin_a * (ct * e1[2] + st * e2[2])
            rxz = math.hypot(x, z)
            if rxz <= 1e-12:
                return False  # on +Y (inside) or -Y (the swing vector is undefined)
            theta = math.atan2(rxz, y)
            qx = x / (rxz * (right if x >= 0.0 else left))
            qz = z / (rxz * (up if z >= 0.0 else down))
            now = (theta * math.sqrt(qx * qx + qz * qz), theta)
            if first is None:
                first = now
        else:
            assert first is not None
            now = first
        if last is not None:
            top = 0.5 * (last[1] + now[1] + arc) + slack  # no direction of the arc is farther from +Y
            if top >= math.pi:
                return False
            lip = lipschitz * (top / math.sin(top) if top > 1e-9 else 1.0)
            if 0.5 * (last[0] + now[0] - lip * arc) - lip * slack <= 1.0 + 1e-9:
                return False
        last = now
    return True


def _angle(c: Vec3, d: Vec3) -> float:
    return math.acos(max(-1.0, min(1.0, c[0] * d[0] + c[1] * d[1] + c[2] * d[2])))


def contains(d: Vec3, cone: Cone) -> bool:
    """Whether the unit direction ``d`` lies in the cone (its swing angle within the boundary's)."""
    x, y, z = d
    rho = math.hypot(x, z)
    if rho <= 1e-15:
        return y > 0.0
    return math.atan2(rho, y) <= swing_radius(cone, x / rho, z / rho) + 1e-9


class Profile:
    """The fold range of one limb: the boundary's distances from ``c`` and the extreme folds."""

    __slots__ = ("c", "cone", "distances", "high", "high_u", "low", "low_u")

    def __init__(self, c: Vec3, cone: Cone) -> None:
        self.c, self.cone = c, cone
        step = 2.0 * math.pi / _SAMPLES
        self.distances = [_angle(c, boundary(i * step, cone)) for i in range(_SAMPLES)]
        neg = (-c[0], -c[1], -c[2])
        if contains(neg, cone):
            self.high, self.high_u = math.pi, neg
        else:
            self.high, self.high_u = self._extreme(True, step)
        if contains(c, cone):
            self.low, self.low_u = 0.0, c
        else:
            self.low, self.low_u = self._extreme(False, step)

    def _extreme(self, farthest: bool, step: float) -> tuple[float, Vec3]:
        """The farthest (or nearest) boundary direction from ``c``: the best sample, then a golden-section
        search over its two neighbouring intervals."""
        sign = 1.0 if farthest else -1.0
        i = max(range(_SAMPLES), key=lambda k: sign * self.distances[k])
        lo, hi = (i - 1) * step, (i + 1) * step

        def score(psi: float) -> float:
            return sign * _angle(self.c, boundary(psi, self.cone))

        x1, x2 = hi - _GOLD * (hi - lo), lo + _GOLD * (hi - lo)
        f1, f2 = score(x1), score(x2)
        for _ in range(_REFINE):
            if f1 < f2:
                lo, x1, f1 = x1, x2, f2
                x2 = lo + _GOLD * (hi - lo)
                f2 = score(x2)
            else:
                hi, x2, f2 = x2, x1, f1
                x1 = hi - _GOLD * (hi - lo)
                f1 = score(x1)
        best = max((sign * self.distances[i], i * step), (f1, x1), (f2, x2))
        u = boundary(best[1], self.cone)
        return _angle(self.c, u), u

    def at_fold(self, fold: float, prefer: Vec3) -> Vec3 | None:
        """A boundary direction at exactly ``fold`` from ``c`` (the crossing nearest ``prefer``), or None
        where the boundary never crosses that fold (it lies outside ``[low, high]``, or a crossing falls
        between two samples that are both on one side of it: only near an extreme, which the caller
        clamps to)."""
        step = 2.0 * math.pi / _SAMPLES
        dist = self.distances
        best: Vec3 | None = None
        best_dot = -math.inf
        for i in range(_SAMPLES):
            j = (i + 1) % _SAMPLES
            a, b = dist[i] - fold, dist[j] - fold
            if (a < 0.0) == (b < 0.0):
                continue
            lo, hi = i * step, (i + 1) * step  # a below/above fold at lo, the other side at hi
            below = a < 0.0
            for _ in range(_REFINE):
                mid = 0.5 * (lo + hi)
                if (_angle(self.c, boundary(mid, self.cone)) < fold) == below:
                    lo = mid
                else:
                    hi = mid
            u = boundary(0.5 * (lo + hi), self.cone)
            dot = u[0] * prefer[0] + u[1] * prefer[1] + u[2] * prefer[2]
            if dot > best_dot:
                best, best_dot = u, dot
        return best


@lru_cache(maxsize=512)
def profile(c: Vec3, cone: Cone) -> Profile:
    """The (cached) fold range of a limb whose upper segment runs along ``c`` under ``cone``."""
    return Profile(c, cone)


def settle_fold(c: Vec3, n: Vec3, fold: float, cone: Cone) -> tuple[Vec3, float, bool] | None:
    """For a fold the chosen plane and the azimuth samples could not give: the lower bone's direction, the
    fold it takes and whether that is clamped (the nearest fold the cone allows, which is then *proven* the
    nearest reachable point); None where the cone is degenerate (a zero half-angle: the azimuth search's
    closed form handles those) or no boundary crossing was found.

    ``c`` and ``cone`` are rounded to 1e-9 for the cache (they come from float32 reads)."""
    if min(cone) <= 0.0:
        return None
    key_c = (round(c[0], 9), round(c[1], 9), round(c[2], 9))
    key_cone = (round(cone[0], 9), round(cone[1], 9), round(cone[2], 9), round(cone[3], 9))
    p = profile(key_c, key_cone)
    if fold >= p.high:
        return p.high_u, p.high, True
    if fold <= p.low:
        return p.low_u, p.low, True
    s, co = math.sin(fold), math.cos(fold)
    prefer = (co * c[0] + s * n[0], co * c[1] + s * n[1], co * c[2] + s * n[2])
    u = p.at_fold(fold, prefer)
    if u is None:
        return None
    return u, fold, False
