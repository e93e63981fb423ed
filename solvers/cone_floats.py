"""The joint limit maths of :mod:`solvers.limits` for one direction at a time, on Python floats.

The scalar solvers and the plain-float two-bone closed form (`solvers.two_bone_floats`) clamp one bone at a
time, where numpy's fixed cost per call (1-3 us) would be most of the work. It lives outside
``solvers/scalar`` (whose package imports ``mathutils``) so that numpy-path code can use it. This is the same
mathematics as ``limits.py`` (the inside test with widened half-angles, the nearest point of the elliptical
cone found by maximising ``d . b(psi)`` over the four quadrant arcs with the coarse samples, the Lipschitz
pruning, the zoom, the bracketed Newton iteration and the four extreme directions, and the twist range
measured around the circle), written for a single row on Python floats (float64), so it is as exact as the
batched search. It imports neither numpy nor mathutils.

Conventions as in ``limits.py``: a cone is ``(up, down, left, right)`` half-angles in radians in the bone's
reference frame (+Y along the bone, right = +X, up = +Z).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Final

UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
Cone = tuple[float, float, float, float]
Vec3 = tuple[float, float, float]

_TAU: Final = 2.0 * math.pi
_N: Final = 8  # coarse samples per quadrant arc, as limits._SAMPLES_PER_QUADRANT
_H: Final = math.pi / 2 / _N
_ZOOM: Final = 16  # as limits._ZOOM_SAMPLES
_NEWTON_ITERATIONS: Final = 60
_NEWTON_STEP_TOL: Final = 1e-7
# Per quadrant arc: the cone sides of its x and z semi-axes, and the signs of x and z on it.
_A_SIDE: Final = (RIGHT, LEFT, LEFT, RIGHT)
_B_SIDE: Final = (UP, UP, DOWN, DOWN)
_X_SIGN: Final = (1.0, -1.0, -1.0, 1.0)
_Z_SIGN: Final = (1.0, 1.0, -1.0, -1.0)


def _tables() -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """The coarse parameters of the four arcs and their cosines and sines, exact zeros on the axes (so a zero
    half-angle gives exactly zero swing toward its side), as ``limits._sample_table``."""
    psi = [[q * (math.pi / 2) + i * _H for i in range(_N + 1)] for q in range(4)]
    cos = [[math.cos(v) for v in row] for row in psi]
    sin = [[math.sin(v) for v in row] for row in psi]
    for q, i in ((0, 0), (1, _N), (2, 0), (3, _N)):
        sin[q][i] = 0.0
    for q, i in ((0, _N), (1, 0), (2, _N), (3, 0)):
        cos[q][i] = 0.0
    return psi, cos, sin


_PSI, _COS, _SIN = _tables()
# Zoom offsets within a bracket of one and of two coarse steps (as limits._ZOOM_COS/_ZOOM_SIN).
_ZOOM_ANGLES: Final = [[w * _H * s / (_ZOOM - 1) for s in range(_ZOOM)] for w in (1.0, 2.0)]
_ZOOM_COS: Final = [[math.cos(v) for v in row] for row in _ZOOM_ANGLES]
_ZOOM_SIN: Final = [[math.sin(v) for v in row] for row in _ZOOM_ANGLES]
# The four extreme directions (right, up, left, down) as (quadrant, sample), as limits._AXIS_Q/_AXIS_I.
_AXES: Final = ((0, 0), (0, _N), (1, _N), (2, _N))


def inside(x: float, y: float, z: float, cone: Cone, tol: float) -> bool:
    """Whether the unit direction ``(x, y, z)`` lies in ``cone`` with every half-angle widened by ``tol``.

    ``limits._inside`` for one direction: the ellipse test multiplied through by ``rho**2`` (no division by
    the azimuth); a zero semi-axis, floored at 1e-150, lets only an exactly zero component pass; exactly
    -Y is always outside.
    """
    rho2 = x * x + z * z
    theta = math.atan2(math.sqrt(rho2), y)
    # The hottest function of a limb's solve (~90 calls a live update of four limbs): the sides by literal index
    # (UP 0, DOWN 1, LEFT 2, RIGHT 3) and the floor by a conditional, exactly `max(a, 1e-150)` (NaN included),
    # ~0.2 us less a call than global names and `max`.
    a = (cone[3] if x >= 0.0 else cone[2]) + tol
    b = (cone[0] if z >= 0.0 else cone[1]) + tol
    qx = x / (a if not a < 1e-150 else 1e-150)
    qz = z / (b if not b < 1e-150 else 1e-150)
    return theta * theta * (qx * qx + qz * qz) <= rho2 and theta < math.pi


def _slope_curvature(psi: float, k: tuple[float, float, float, float, float, float]) -> tuple[float, float]:
    """``limits._slope_curvature`` for one parameter: first and second derivatives of ``d . b(psi)``."""
    alpha, beta, mu, nu2, nu4, dyh = k
    c, s = math.cos(psi), math.sin(psi)
    two = psi + psi
    cos2 = math.cos(two)
    r2 = max(mu + 0.5 * nu2 * -cos2, 0.0)
    r2_1 = nu2 * math.sin(two)
    r2_2 = nu4 * cos2
    w = alpha * c + beta * s
    w1 = beta * c - alpha * s
    t = max(math.sqrt(r2), 1e-30)
    st, ct = math.sin(t), math.cos(t)
    tc = t * ct
    tt = t * t
    t3 = tt * t
    sinc = st / t
    d1 = (tc - st) / (t3 + t3)
    d2 = (3.0 * (st - tc) - tt * st) / (4.0 * t3 * tt)
    g = d1 * w - dyh * sinc
    slope = r2_1 * g + sinc * w1
    curvature = r2_1 * r2_1 * (d2 * w - dyh * d1) + r2_2 * g + 2.0 * d1 * r2_1 * w1 - sinc * w
    return slope, curvature


def _boundary(psi: float, a: float, b: float, q: int) -> Vec3:
    """Boundary direction at ``psi`` of arc ``q`` (signs from the quadrant, as ``limits._boundary_point``)."""
    px = a * _X_SIGN[q] * abs(math.cos(psi))
    pz = b * _Z_SIGN[q] * abs(math.sin(psi))
    th = math.sqrt(px * px + pz * pz)
    sinc = math.sin(th) / max(th, 1e-30)
    return (sinc * px, math.cos(th), sinc * pz)


class ConeTable:
    """The boundary samples of one cone, computed once: the coarse samples of the four arcs, the four
    extreme directions, and (filled in as the searches need them) the zoomed samples of each bracket.

    A bone's cone does not change while a chain is solved (nor, in live posing, from one solve to the
    next), and these samples are most of the search's trigonometry: with them a search costs dot products.
    """

    __slots__ = ("a4", "axes", "b4", "circle", "cone", "points", "reach", "zoom")

    def __init__(self, cone: Cone) -> None:
        self.cone = cone
        # A circular cone (every side the same, > 0) has its nearest point in closed form.
        self.circle = cone[0] if cone[0] > 0.0 and cone[0] == cone[1] == cone[2] == cone[3] else None
        self.a4 = [cone[s] for s in _A_SIDE]
        self.b4 = [cone[s] for s in _B_SIDE]
        a4, b4 = self.a4, self.b4
        self.points = [[_point(a4[q] * _COS[q][i], b4[q] * _SIN[q][i]) for i in range(_N + 1)] for q in range(4)]
        self.axes = [_point(self.a4[q] * _COS[q][i], self.b4[q] * _SIN[q][i]) for q, i in _AXES]
        self.reach = [0.5 * _H * max(a, b) for a, b in zip(self.a4, self.b4, strict=True)]
        self.zoom: dict[tuple[int, int], list[Vec3]] = {}

    def zoomed(self, q: int, i_lo: int, i_hi: int) -> list[Vec3]:
        """The zoom samples of the bracket ``[i_lo, i_hi]`` of arc ``q`` (``_ZOOM`` points from ``i_lo``)."""
        key = (q, i_lo * 2 + (i_hi - i_lo - 1))
        points = self.zoom.get(key)
        if points is None:
            a, b = self.a4[q], self.b4[q]
            c0, s0 = _COS[q][i_lo], _SIN[q][i_lo]
            zc, zs = _ZOOM_COS[i_hi - i_lo - 1], _ZOOM_SIN[i_hi - i_lo - 1]
            points = [_point(a * (c0 * zc[s] - s0 * zs[s]), b * (s0 * zc[s] + c0 * zs[s])) for s in range(_ZOOM)]
            self.zoom[key] = points
        return points


def _point(px: float, pz: float) -> Vec3:
    """The boundary direction of swing coordinates ``(px, pz)``: ``(sinc(t) px, cos(t), sinc(t) pz)``."""
    th = math.sqrt(px * px + pz * pz)
    sinc = math.sin(th) / max(th, 1e-30)
    return (sinc * px, math.cos(th), sinc * pz)


@lru_cache(maxsize=4096)
def cone_table(cone: Cone) -> ConeTable:
    """The (cached) :class:`ConeTable` of ``cone``."""
    return ConeTable(cone)


def _polish(table: ConeTable, q: int, i: int, dx: float, dy: float, dz: float) -> float:
    """The maximum of ``d . b(psi)`` in the bracket around coarse sample ``i`` of arc ``q``: the zoom, the
    parabola's vertex and the bracketed Newton iteration of ``limits._nearest_general``."""
    a, b = table.a4[q], table.b4[q]
    i_lo = max(i - 1, 0)
    i_hi = min(i + 1, _N)
    lo = _PSI[q][i_lo]
    fz = [dx * x + dy * y + dz * z for x, y, z in table.zoomed(q, i_lo, i_hi)]
    j = fz.index(max(fz))  # the first of equal maxima, as np.argmax
    last = _ZOOM - 1
    jl, jr = max(j - 1, 0), min(j + 1, last)
    step = (i_hi - i_lo) * (_H / last)
    hi = lo + step * jr
    lo = lo + step * jl
    fc, fl, fr = fz[j], fz[jl], fz[jr]
    den = fl - 2.0 * fc + fr
    if 0 < j < last and den < 0.0:
        psi = lo + step * (1.0 + min(max(0.5 * (fl - fr) / den, -1.0), 1.0))
    else:
        psi = 0.5 * (lo + hi)
    a2, b2 = a * a, b * b
    consts = (dx * a, dz * b, 0.5 * (a2 + b2), b2 - a2, 2.0 * (b2 - a2), 0.5 * dy)
    jumped = False
    for _ in range(_NEWTON_ITERATIONS):
        slope, curv = _slope_curvature(psi, consts)
        up = slope > 0.0
        if up:
            lo = psi
        else:
            hi = psi
        newton = psi - slope / (curv if curv < 0.0 else -1.0)
        ok = curv < 0.0 and lo <= newton <= hi
        if ok:
            new = newton
        elif jumped:
            new = 0.5 * (lo + hi)
        else:
            new = hi if up else lo
        done = abs(new - psi) <= _NEWTON_STEP_TOL
        jumped = not ok and not jumped
        psi = new
        if done:
            break
    return psi


def nearest(dx: float, dy: float, dz: float, table: ConeTable) -> Vec3:
    """The direction of the cone of ``table`` nearest (geodesic) to the unit direction ``d`` outside it.

    ``limits._nearest_general`` for one direction: every local maximum of the coarse samples of the four
    quadrant arcs that can still hold the nearest point (Lipschitz bound) is zoomed into and polished; the
    nearest of those and of the four extreme directions (where every corner lies) wins, ranked by the
    squared chord.
    """
    circle = table.circle
    if circle is not None:
        rho = math.sqrt(dx * dx + dz * dz)
        if rho > 1e-12:
            # The nearest point of a circular cone lies on the great circle through +Y and d.
            s = math.sin(circle) / rho
            return (s * dx, math.cos(circle), s * dz)
    f = [[dx * x + dy * y + dz * z for x, y, z in row] for row in table.points]
    top = max(max(row) for row in f)
    # limits.py keeps the samples whose distance acos(f) is within best + 1e-7 + reach; acos is
    # decreasing, so that is f >= cos(bound) (every sample when the bound passes pi).
    best = math.acos(min(max(top, -1.0), 1.0))
    chosen: Vec3 | None = None
    chosen_c2 = math.inf
    for q in range(4):
        row = f[q]
        bound = best + 1e-7 + table.reach[q]
        floor = math.cos(bound) if bound < math.pi else -math.inf
        if max(row) < floor:
            continue  # no sample of this arc is kept
        for i in range(_N + 1):
            v = row[i]
            if v < floor or (i > 0 and v < row[i - 1]) or (i < _N and v < row[i + 1]):
                continue
            a, b = table.a4[q], table.b4[q]
            point = _boundary(_polish(table, q, i, dx, dy, dz), a, b, q)
            c2 = (point[0] - dx) ** 2 + (point[1] - dy) ** 2 + (point[2] - dz) ** 2
            if c2 < chosen_c2:
                chosen, chosen_c2 = point, c2
    for point in table.axes:
        c2 = (point[0] - dx) ** 2 + (point[1] - dy) ** 2 + (point[2] - dz) ** 2
        if c2 < chosen_c2:
            chosen, chosen_c2 = point, c2
    assert chosen is not None  # the extreme directions are always candidates
    return chosen


_AXIS_SIDE: Final = (RIGHT, UP, LEFT, DOWN)
"""The cone side along swing azimuth k pi / 2 (0 toward +X, pi / 2 toward +Z)."""


def _reach(cone: Cone, phi: float) -> float:
    """How far (polar angle from +Y) the cone reaches at swing azimuth ``phi`` (0 toward +X, pi/2 toward +Z):
    its quadrant's ellipse radius, as `inside` tests it (0 toward a zero half-angle off its axis)."""
    c, s = math.cos(phi), math.sin(phi)
    a = cone[RIGHT] if c >= 0.0 else cone[LEFT]
    b = cone[UP] if s >= 0.0 else cone[DOWN]
    inv = 0.0
    for comp, half in ((c, a), (s, b)):
        if comp != 0.0:
            if half <= 0.0:
                return 0.0
            q = comp / half
            inv += q * q
    return 1.0 / math.sqrt(inv) if inv > 0.0 else math.pi


def farther(dx: float, dy: float, dz: float, cone: Cone, gap: float) -> bool:
    """Whether every direction of ``cone`` is provably more than ``gap`` radians (geodesic) from the unit
    direction ``d``: then ``nearest`` would move ``d`` by more than ``gap``. False when it cannot tell.

    A bound, not the distance: a direction within ``gap`` of ``d`` has a polar angle (from +Y) at least
    ``theta(d) - gap`` and a swing azimuth within ``asin(sin(gap) / sin(theta(d)))`` of ``d``'s (the cap of
    radius ``gap`` about ``d`` seen from +Y); in the cone, its polar angle is at most the cone's reach at its
    azimuth. So when ``theta(d) - gap`` exceeds the cone's largest reach over that azimuth window, no direction
    of the cone is within ``gap``. The reach is monotonic within a quadrant (its ellipse), so its largest value
    over a window is at the window's ends or at a quadrant's axis inside it. Costs a few trigonometric calls,
    where `nearest` costs tens of microseconds: for callers that only need to know a clamp moves a bone far.
    """
    rho = math.sqrt(dx * dx + dz * dz)
    theta = math.atan2(rho, dy)
    low = theta - gap - 1e-12
    if gap < 0.0 or low <= 0.0 or theta + gap >= math.pi or rho <= 0.0:
        return False  # the cap about d holds a pole: every azimuth (or +Y itself) is within reach of it
    spread = math.sin(gap) / math.sin(theta)
    if spread >= 1.0:
        return False
    # Widened past rounding: a zero half-angle reaches only along its axis, so an axis at the window's very
    # edge must count as inside it.
    alpha = math.asin(spread) * (1.0 + 1e-6) + 1e-9
    phi = math.atan2(dz, dx)
    reach = max(_reach(cone, phi - alpha), _reach(cone, phi + alpha))
    for k in range(-4, 5):  # the quadrant axes (k pi / 2) inside the window: right, up, left, down
        if abs(k * (math.pi / 2) - phi) <= alpha:
            reach = max(reach, cone[_AXIS_SIDE[k % 4]])
    return low > reach


def clamp_cone(dx: float, dy: float, dz: float, cone: Cone, tol: float = 0.0) -> Vec3 | None:
    """The nearest direction of ``cone`` to unit ``d``, or None when ``d`` is inside (widened by ``tol``)."""
    if inside(dx, dy, dz, cone, tol):
        return None
    return nearest(dx, dy, dz, cone_table(cone))


def twist_target(tw: float, tmin: float, tmax: float, tol: float) -> float | None:
    """The nearest end of ``[tmin, tmax]`` to twist ``tw`` around the circle, or None when ``tw`` is within
    ``tol`` of the range (``limits._twist_outside`` and ``limits._twist_target`` for one angle)."""
    u = (tw - tmin) % _TAU  # how far past tmin going forward, in [0, 2 pi)
    past_max = u - (tmax - tmin)
    back_to_min = _TAU - u
    if past_max > tol and back_to_min > tol:
        return tmax if past_max <= back_to_min else tmin
    return None


def twist_of(w: float, y: float) -> float:
    """Twist about Y of a unit quaternion ``(w, x, y, z)``: ``2 atan2(y, w)`` wrapped to ``(-pi, pi]``.

    Written as ``atan2(2 w y, w**2 - y**2)``, which is the matrix form of ``limits.twist_angle``
    (``atan2(R02 - R20, R00 + R22)`` divided through by 2) and does not depend on the sign of ``q``.
    """
    tw = math.atan2(2.0 * w * y, w * w - y * y)
    return math.pi if tw <= -math.pi else tw
