"""The two-bone closed form under limits (``solvers.two_bone_limits``) for one chain on ``mathutils``.

Step for step the batched form: the lower bone's fold plane and range from its cone, the upper bone aimed by
the roll mode and turned about its own segment so the lower bone lies in its hinge's bend plane (kept as it is
where its cone already holds it), the fold clamped, the swivel search where the upper bone's limits refuse the
pole's plane, and the out-of-reach proof. The live program and the scalar solvers call it for a limb whose
analytic pose the limits moved off its target, so a limb costs a few dozen ``mathutils`` operations instead of
a numpy solve (about 1 ms of call overhead) or the global stage.
"""

from __future__ import annotations

import math
from typing import Final

from mathutils import Quaternion, Vector

from .. import cone_floats as _cone
from ..fold import Cone, Vec3, circle_outside, settle_fold, swing_radius
from ..frames_floats import beyond
from ..two_bone_limits import (
    ALONG_Y,
    AZIMUTH_SAMPLES,
    HELD_F32,
    OUT_OF_REACH_SLACK,
    STRAIGHT_TURN,
    SWIVEL_BISECTIONS,
    SWIVEL_SAMPLES,
)
from ._chain import INSIDE, Chain, Frames, aim_frame, cross, limit_frame, product, sweep

_SIDES: Final = (Vector((0.0, 0.0, 1.0)), Vector((0.0, 0.0, -1.0)), Vector((-1.0, 0.0, 0.0)), Vector((1.0, 0.0, 0.0)))
_BENT: Final = 1e-3  # as two_bone_limits._BENT
_Y: Final = Vector((0.0, 1.0, 0.0))


def _radius(cone: Cone | None, ex: float, ez: float) -> float:
    """``two_bone_limits._radius`` for one direction ``(ex, 0, ez)``."""
    return math.pi if cone is None else swing_radius(cone, ex, ez)


class Limb:
    """One limb's constant geometry for the closed form: the fold plane, range and the bones' limits (all but
    `ref0`, the upper bone's reference frame, hold while the chain's shape does: `rebased`)."""

    __slots__ = ("a0", "along", "bound", "c", "c_cone", "high", "lim0", "lim1", "low", "n", "q1", "ref0")

    def rebased(self, c: Chain) -> Limb:
        """This limb's geometry for chain `c` of the same shape (its parent's frame may have turned)."""
        out = Limb.__new__(Limb)
        out.a0, out.along, out.bound, out.c, out.c_cone, out.high = (
            self.a0,
            self.along,
            self.bound,
            self.c,
            self.c_cone,
            self.high,
        )
        out.lim0, out.lim1, out.low, out.n, out.q1 = self.lim0, self.lim1, self.low, self.n, self.q1
        out.ref0 = product(c.base, c.ref_local[0])
        return out

    def __init__(self, c: Chain) -> None:
        limits = c.limits
        assert limits is not None
        self.lim0, self.lim1 = limits[0], limits[1]
        table1 = self.lim1[0] if self.lim1 is not None else None
        cone1 = table1.cone if table1 is not None else None
        self.c_cone = cone1
        self.q1 = c.ref_local[1]
        self.a0 = c.directions[0]
        self.along = abs(self.a0.x) <= ALONG_Y and abs(self.a0.z) <= ALONG_Y and self.a0.y > 0.0
        cv = self.q1.conjugated() @ self.a0
        cv.normalize()
        away = Vector((-cv.x, 0.0, -cv.z))
        size = away.length
        bent = size > _BENT
        if bent:
            e = away / size
            rest = math.atan2(size, cv.y)
        else:
            e = _SIDES[max(range(4), key=lambda i: cone1[i])] if cone1 is not None else _SIDES[0]
            rest = 0.0
        n = e - cv * e.dot(cv)
        self.n = n.normalized() if n.length > 1e-12 else e
        self.c = cv
        self.low = max(rest - _radius(cone1, -e.x, -e.z), 0.0)
        self.high = max(min(rest + _radius(cone1, e.x, e.z), math.pi), self.low)
        self.bound = min(rest + (max(cone1) if cone1 is not None else math.pi), math.pi)
        self.ref0 = product(c.base, c.ref_local[0])


def _twist_into_range(limb: Limb, f1: Quaternion, d2: Vector) -> Quaternion:
    """``two_bone_limits._twist_into_range`` for one limb: the upper twist clamped to its range where the
    lower bone stays inside its cone at the clamped twist."""
    if limb.lim0 is None or limb.lim0[1] is None or not limb.along:
        return f1
    lo, hi = limb.lim0[1]
    rel = product(limb.ref0.conjugated(), f1)
    tw = _cone.twist_of(rel.w, rel.y)
    end = _cone.twist_target(tw, lo, hi, INSIDE)
    if end is None:
        return f1
    turned = product(f1, Quaternion(_Y, end - tw))
    if limb.lim1 is not None and limb.lim1[0] is not None:
        u0 = limb.q1.conjugated() @ (turned.conjugated() @ d2)
        if not _cone.inside(u0.x, u0.y, u0.z, limb.lim1[0].cone, INSIDE):
            return f1
    return turned


def _upper_inside(limb: Limb, f1: Quaternion) -> bool:
    """``two_bone_limits._upper_inside`` for one frame (to the scalar kernels' ``INSIDE``)."""
    if limb.lim0 is None:
        return True
    table, twist = limb.lim0
    rel = product(limb.ref0.conjugated(), f1)
    if table is not None:
        y = rel @ Vector((0.0, 1.0, 0.0))
        if not _cone.inside(y.x, y.y, y.z, table.cone, INSIDE):
            return False
    if twist is not None:
        return _cone.twist_target(_cone.twist_of(rel.w, rel.y), twist[0], twist[1], INSIDE) is None
    return True


class _Upper:
    """``two_bone_limits._upper`` for one limb at one fold: the pose with the elbow toward a bend direction (the
    upper frame, aimed by the roll mode and turned about its own segment so the lower bone lies in its hinge's
    plane, its twist then clamped into range; `pose`), and the swivel search's test of it (`allowed`). What does
    not depend on the bend is worked out once, and the test reads the frame relative to ``ref0`` once, by the same
    ``mathutils`` operations on the same operands as `pose` then `_upper_inside`, so a probe decides as they
    would, to the bit, for less (~12 probes where the swivel is found, 24 where none is allowed: most of a
    limited limb's solve). Bisection probes refuse into `rels` too; only a search that found nothing reads it.

    `rels` (each refused frame as ``ref0^-1 @ frame``) and `strict` (one of them has its upper bone's direction
    inside the cone itself, not widened) are for `_beyond`: with such a frame it cannot prove the limb out of
    reach, and is not asked."""

    __slots__ = (
        "a0",
        "along",
        "chord_cos",
        "current",
        "l0",
        "limb",
        "lower",
        "q1_inv",
        "ref0_inv",
        "rels",
        "sin_a",
        "start",
        "strict",
        "tip",
        "upper",
        "v_perp",
        "v_straight",
    )

    def __init__(
        self, c: Chain, limb: Limb, chord: Vector, cos_a: float, sin_a: float, reach: float, u: Vector
    ) -> None:
        self.limb = limb
        self.chord_cos = chord * cos_a
        self.sin_a = sin_a
        self.l0 = c.lengths[0]
        self.tip = chord * reach
        self.start = c.keep[0] if c.roll_mode == "KEEP" else limb.ref0
        self.a0 = limb.a0
        self.current = self.start @ limb.a0
        table1 = limb.lim1[0] if limb.lim1 is not None else None
        self.lower = table1.cone if table1 is not None else None
        self.q1_inv = limb.q1.conjugated()
        v = limb.q1 @ u
        self.v_perp = v - limb.a0 * v.dot(limb.a0)
        self.v_straight = self.v_perp.length <= STRAIGHT_TURN
        table0 = limb.lim0[0] if limb.lim0 is not None else None
        self.upper = table0.cone if table0 is not None else None
        self.along = limb.along
        self.ref0_inv = limb.ref0.conjugated()
        self.rels: list[Quaternion] = []
        self.strict = False

    def _hinged(self, bend: Vector) -> tuple[Quaternion, Vector]:
        """The upper frame before its twist is clamped, and the lower bone's direction."""
        elbow = (self.chord_cos + bend * self.sin_a) * self.l0
        d1 = elbow.normalized()
        d2 = (self.tip - elbow).normalized()
        g = aim_frame(d1, self.a0, self.start, self.current)
        lower = self.lower
        if lower is None:
            return g, d2
        w = g.conjugated() @ d2
        u0 = self.q1_inv @ w
        if _cone.inside(u0.x, u0.y, u0.z, lower, INSIDE):
            return g, d2
        a0 = self.a0
        w_perp = w - a0 * w.dot(a0)
        if self.v_straight or w_perp.length <= STRAIGHT_TURN:
            return g, d2
        v_perp = self.v_perp
        tau = math.atan2(a0.dot(cross(v_perp, w_perp)), v_perp.dot(w_perp))
        return product(g, Quaternion(a0, tau)), d2

    def pose(self, bend: Vector) -> tuple[Quaternion, Vector]:
        """The upper frame and the lower bone's direction with the elbow toward unit ``bend``."""
        g, d2 = self._hinged(bend)
        return _twist_into_range(self.limb, g, d2), d2

    def allowed(self, bend: Vector) -> bool:
        """Whether the upper bone's limits allow `pose(bend)`: `_twist_into_range` then `_upper_inside`, with
        the frame relative to ``ref0`` worked out once where both would work it out alike."""
        lim0 = self.limb.lim0
        if lim0 is None:
            return True
        g, d2 = self._hinged(bend)
        twist = lim0[1]
        rel: Quaternion | None = None
        if twist is not None and self.along:
            rel = product(self.ref0_inv, g)
            tw = _cone.twist_of(rel.w, rel.y)
            end = _cone.twist_target(tw, twist[0], twist[1], INSIDE)
            if end is None:
                twist = None  # in range: `_upper_inside` tests the same value
            else:
                turned = product(g, Quaternion(_Y, end - tw))
                lower = self.lower
                if lower is not None:
                    u0 = self.q1_inv @ (turned.conjugated() @ d2)
                    if not _cone.inside(u0.x, u0.y, u0.z, lower, INSIDE):
                        self._refuse(rel, True)  # `g` stands, its twist out of range
                        return False
                rel = None
                g = turned
        if rel is None:
            rel = product(self.ref0_inv, g)
        upper = self.upper
        if upper is not None:
            y = rel @ _Y
            if not _cone.inside(y.x, y.y, y.z, upper, INSIDE):
                self._refuse(rel, False)
                return False
        if twist is None or _cone.twist_target(_cone.twist_of(rel.w, rel.y), twist[0], twist[1], INSIDE) is None:
            return True
        self._refuse(rel, True)
        return False

    def refused(self, frame: Quaternion) -> None:
        """A frame refused by `_upper_inside` outside the search (the pose in the bend's plane)."""
        self._refuse(product(self.ref0_inv, frame), True)

    def _refuse(self, rel: Quaternion, maybe_inside: bool) -> None:
        """A refused frame, as ``ref0^-1 @ frame``; `maybe_inside`: its direction passed the cone's test (or was
        not tested), so it may lie strictly inside it."""
        self.rels.append(rel)
        if maybe_inside and not self.strict and self.upper is not None:
            y = rel @ _Y
            y.normalize()
            self.strict = _cone.inside(y.x, y.y, y.z, self.upper, 0.0)


def _outside(limb: Limb, chord: Vector, bend: Vector, swivel: Vector, cos_a: float, sin_a: float) -> bool:
    """``two_bone_limits.out_of_reach`` for one limb: its elbow's whole circle misses the upper cone."""
    if not limb.along:
        return False
    assert limb.lim0 is not None and limb.lim0[0] is not None
    inv = limb.ref0.conjugated()
    c, e1, e2 = (_xyz(inv @ v) for v in (chord, bend, swivel))
    return circle_outside(c, e1, e2, cos_a, sin_a, limb.lim0[0].cone, INSIDE, OUT_OF_REACH_SLACK)


def _beyond(limb: Limb, rels: list[Quaternion], gap: float) -> bool:
    """Whether every one of the refused frames (``rels``: each as ``ref0^-1 @ frame``) puts the upper bone's
    direction more than ``gap`` from its cone (`frames_floats.beyond`: the minimum of
    ``two_bone_limits._violations`` above it)."""
    assert limb.lim0 is not None and limb.lim0[0] is not None
    ds: list[Vec3] = []
    for rel in rels:
        y = rel @ _Y
        y.normalize()
        ds.append((y.x, y.y, y.z))
    return beyond(ds, limb.lim0[0].cone, gap)


def _toward_axis(
    c: Chain, limb: Limb, chord: Vector, bend: Vector, swivel: Vector, cos_a: float, sin_a: float
) -> Frames:
    """The pose of a limb out of reach under its upper cone: the elbow swivelled toward the cone's axis
    (``two_bone_limits.axis_swivel``), then the sweep with limits toward the target."""
    axis = limb.ref0 @ _Y
    psi = math.atan2(axis.dot(swivel), axis.dot(bend))
    b = bend * math.cos(psi) + swivel * math.sin(psi)
    elbow = (chord * cos_a + b * sin_a) * c.lengths[0]
    return sweep(c, [c.root, elbow, c.target])[1]


def _xyz(v: Vector) -> Vec3:
    return (v.x, v.y, v.z)


def _fold_azimuth(limb: Limb, fold: float, cone: Cone) -> Vector | None:
    """``two_bone_limits._fold_azimuth`` for one limb: the direction at ``fold`` from ``c`` inside the
    lower bone's cone nearest the chosen plane by azimuth (0, +1, -1, +2 ... samples), or None."""
    m = cross(limb.c, limb.n)
    if m.length <= 1e-300:
        return None
    m.normalize()
    step = 2.0 * math.pi / AZIMUTH_SAMPLES
    cf, sf = math.cos(fold), math.sin(fold)
    for j in range(AZIMUTH_SAMPLES):
        phi = ((j + 1) // 2) * step * (1.0 if j % 2 else -1.0)
        u = limb.c * cf + (limb.n * math.cos(phi) + m * math.sin(phi)) * sf
        if _cone.inside(u.x, u.y, u.z, cone, -1e-9):
            return u
    return None


def applies(c: Chain) -> bool:
    """Whether the closed form takes the chain: its lower segment along the bone's Y axis (`settle`)."""
    d = c.directions[1]
    return abs(d.x) <= ALONG_Y and abs(d.z) <= ALONG_Y and d.y > 0.0


def two_bone_limited(c: Chain, side: tuple[float, float, float], shape: Limb | None = None) -> tuple[Frames, bool]:
    """The closed-form limited pose of one two-bone chain with limits (target off the root), and whether it
    is settled (exact, or provably the nearest reachable point): ``two_bone_limits.solve_limited``. `shape`:
    the `Limb` of a chain of the same shape, if one was made (the live program keeps one per chain)."""
    limb = Limb(c) if shape is None else shape.rebased(c)
    l1, l2 = c.lengths
    d = c.distance
    chord = c.target / d
    bend = Vector(side)
    cos_f = min(max((d * d - l1 * l1 - l2 * l2) / (2.0 * l1 * l2), -1.0), 1.0)
    fold = math.acos(cos_f)
    want = min(max(fold, limb.low), limb.high)
    clamped = abs(want - fold) > 1e-12
    proven = limb.low <= 0.0 if fold < limb.low else limb.high >= limb.bound - 1e-12
    u = limb.c * math.cos(want) + limb.n * math.sin(want)
    if clamped and not proven and limb.c_cone is not None:
        # As `two_bone_limits.solve_limited`: the fold's circle by azimuth, then the cone's boundary.
        on_circle = _fold_azimuth(limb, fold, limb.c_cone)
        if on_circle is not None:
            u, want, clamped = on_circle, fold, False
        else:
            got = settle_fold(_xyz(limb.c), _xyz(limb.n), fold, limb.c_cone)
            if got is not None:
                u, want, clamped, proven = Vector(got[0]), got[1], got[2], True
    reach = math.sqrt(max(l1 * l1 + l2 * l2 + 2.0 * l1 * l2 * math.cos(want), 0.0))
    safe = max(reach, 1e-300)
    cos_a = min(max((l1 * l1 + safe * safe - l2 * l2) / (2.0 * l1 * safe), -1.0), 1.0)
    sin_a = math.sqrt(1.0 - cos_a * cos_a)
    upper = _Upper(c, limb, chord, cos_a, sin_a, reach, u)
    tip = upper.tip
    f1, d2 = upper.pose(bend)
    if not _upper_inside(limb, f1):
        swivel = cross(chord, bend)
        track = limb.lim0 is not None and limb.lim0[0] is not None and not clamped
        if track and _outside(limb, chord, bend, swivel, cos_a, sin_a):
            # No swivel is inside (the samples below would all refuse): out of reach whatever the twist.
            return _toward_axis(c, limb, chord, bend, swivel, cos_a, sin_a), True
        step = 2.0 * math.pi / SWIVEL_SAMPLES
        found: float | None = None
        upper.refused(f1)
        for j in range(1, SWIVEL_SAMPLES):
            psi = ((j + 1) // 2) * step * (1.0 if j % 2 else -1.0)
            if upper.allowed(bend * math.cos(psi) + swivel * math.sin(psi)):
                found = psi
                break
        if found is not None:
            hi = found
            lo = hi - math.copysign(step, hi)
            for _ in range(SWIVEL_BISECTIONS):
                mid = 0.5 * (lo + hi)
                if upper.allowed(bend * math.cos(mid) + swivel * math.sin(mid)):
                    hi = mid
                else:
                    lo = mid
            bend = bend * math.cos(hi) + swivel * math.sin(hi)
            f1, d2 = upper.pose(bend)
        elif track and not upper.strict and _beyond(limb, upper.rels, 0.5 * step * sin_a + 1e-9):
            # Out of reach under the upper bone's cone whatever the twist (`two_bone_limits`): every sample
            # misses it by more than half the arc between samples.
            return _toward_axis(c, limb, chord, bend, swivel, cos_a, sin_a), True
        else:
            return sweep(c, [c.root, (chord * cos_a + bend * sin_a) * l1, c.target])[1], False
    f1_limited = limit_frame(limb.ref0, f1, limb.lim0) if limb.lim0 is not None else f1
    ref1 = product(f1_limited, limb.q1)
    start1 = c.keep[1] if c.roll_mode == "KEEP" else ref1
    f2 = aim_frame(d2, c.directions[1], start1)
    if limb.lim1 is not None:
        f2 = limit_frame(ref1, f2, limb.lim1)
    at = f1_limited @ c.offsets[0] + f2 @ c.offsets[1]
    held = (at - tip).length <= HELD_F32 * (l1 + l2)
    return [f1_limited, f2], f1_limited is f1 and held and (not clamped or proven)
