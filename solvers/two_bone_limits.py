"""Two-bone chains under joint limits in closed form: the hinge turned into the bend plane, the fold clamped.

The analytic two-bone pose (:mod:`solvers.two_bone`) puts the elbow in the pole's plane at the fold angle the
target's distance asks for, and the forward sweep then clamps each bone into its limits. With a hinge on the
lower bone (a Knee/Elbow cone: wide toward the bend, narrow across) that clamp usually moves the tip: the
upper bone's twist, which the roll mode keeps, leaves the hinge's bend plane off the pole's plane. The
lower bone's direction relative to the upper bone is fixed by the fold, up to the upper bone's twist about its
own axis, so turning that twist by a closed-form angle puts the lower bone back inside the hinge.

Geometry, in the lower bone's reference frame (``upper frame @ ref_local[1]``): the upper bone's segment
direction is ``c`` (``ref_local[1]^T`` of its local segment direction: the rest bend shows there), and the
lower bone's direction ``u`` lies on the circle of angular radius ``fold`` about ``c``; the upper bone's twist
moves ``u`` along that circle. The chosen point is on the great circle from ``c`` through +Y and on toward
the hinge's bend side (for a limb modelled straight, the cone's widest side; for one modelled bent, away from
``c``: the plane the limb was modelled bending in). Along that great circle the cone's swing coordinates move
on a straight line, so the fold's range is read off the cone's ellipse in closed form, and a target inside
the smallest fold (a hand pulled to the chest) or beyond the largest reach gets the nearest reachable point:
the fold clamped, the tip on the root-to-target line at the distance that fold gives.

What this does not settle (the upper bone's own cone or twist range binding, a fold range that excludes
the pose for other reasons) the caller sends to the global stage as before (:func:`solvers.search.refine`),
which skips the chains settled here.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from .fold import Cone, Vec3, circle_outside, settle_fold
from .frames import ChainBatch, aim_frames, forward_sweep, limit_frames
from .limits import INSIDE_TOLERANCE, _twist_target, cone_contains, cone_violation, twist_angle
from .rotations import axis_angle_matrix, cross, dots, matmul, matvec, normalize, norms
from .types import F64, Bools

_Y: Final = np.array([0.0, 1.0, 0.0])
_SIDES: Final = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
"""Unit directions of the cone sides up, down, left, right in the bone's reference frame."""
_BENT: Final = 1e-3
"""A lower bone whose rest direction is within this (sine of the angle) of its parent's counts as straight."""
ALONG_Y: Final = 1e-5
"""A lower segment within this of the bone's +Y (unit vectors) counts as along it: the live reads give float32
offsets, whose noise is ~1e-7."""
HELD: Final = 1e-9
"""The tip within this fraction of the chain's length of where the closed form built it: the limits left it."""
HELD_F32: Final = 1e-5
"""The same on ``mathutils``' float32 frames (`solvers.scalar._closed`)."""
STRAIGHT_TURN: Final = 1e-6
"""A lower bone within this (sine of the angle) of the upper bone's segment is straight: no hinge turn."""
_EXACT: Final = 1e-9
"""Relative change of a frame below which the limits left it as built (the closed form held)."""


def _radius(cone: F64, use_cone: Bools, e: F64) -> F64:
    """``(K,)`` how far (radians of swing) the cone reaches along the unit swing direction ``e`` (X-Z plane):
    the ellipse quadrant's radius in swing coordinates; pi where there is no cone."""
    ex, ez = e[:, 0], e[:, 2]
    ax = np.where(ex >= 0.0, cone[:, 3], cone[:, 2])
    bz = np.where(ez >= 0.0, cone[:, 0], cone[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(ex != 0.0, (ex / ax) ** 2, 0.0) + np.where(ez != 0.0, (ez / bz) ** 2, 0.0)
        r = np.where(inv > 0.0, 1.0 / np.sqrt(inv), np.pi)
    r = np.where(np.isfinite(r), r, 0.0)
    return np.where(use_cone, np.minimum(r, np.pi), np.pi)


def _vec(v: F64) -> Vec3:
    return (float(v[0]), float(v[1]), float(v[2]))


def _cone_of(v: F64) -> Cone:
    return (float(v[0]), float(v[1]), float(v[2]), float(v[3]))


def fold_plane(batch: ChainBatch) -> tuple[F64, F64, F64, F64, F64]:
    """The lower bone's bend plane and fold range of each chain.

    Returns ``c`` ``(K, 3)`` (the upper segment's direction in the lower bone's reference frame), ``n``
    ``(K, 3)`` (the unit tangent at ``c`` toward the bend: ``u(fold) = cos(fold) c + sin(fold) n``), the
    smallest and largest fold (radians) the lower bone's cone allows along that great circle, and the
    largest fold any direction of the cone allows at most (``rest + widest half-angle``, the triangle
    inequality on the sphere): where the largest fold along the circle reaches it, no twist folds further.
    """
    lim = batch.limits
    assert lim is not None
    q = batch.ref_local[:, 1]
    c = normalize(np.einsum("kji,kj->ki", q, batch.directions[:, 0]))
    away = -c.copy()
    away[:, 1] = 0.0
    size = norms(away)
    cone, use_cone = lim.cone[:, 1], lim.use_cone[:, 1]
    widest = _SIDES[np.argmax(cone, axis=1)]
    bent = size > _BENT
    e = np.where(bent[:, None], away / np.maximum(size, 1e-300)[:, None], widest)
    rest = np.arctan2(size, c[:, 1])
    rest = np.where(bent, rest, 0.0)
    n = normalize(e - dots(e, c)[:, None] * c, e)
    low = np.maximum(rest - _radius(cone, use_cone, -e), 0.0)
    high = np.minimum(rest + _radius(cone, use_cone, e), np.pi)
    bound = np.minimum(rest + np.where(use_cone, cone.max(axis=1), np.pi), np.pi)
    return c, n, low, np.maximum(high, low), bound


def _upper(
    batch: ChainBatch, chord: F64, bend: F64, cos_a: F64, sin_a: F64, reach: F64, u: F64
) -> tuple[F64, F64, F64, F64, F64]:
    """The pose with the elbow toward ``bend`` at the root angle ``cos_a``/``sin_a``: the upper bone's frame
    (aimed by the roll mode, then turned about its own segment so the lower bone's direction relative to it
    is ``u``), its reference frame, the elbow, the tip and the lower bone's direction."""
    root = batch.root
    l1 = batch.lengths[:, 0]
    elbow = root + l1[:, None] * (cos_a[:, None] * chord + sin_a[:, None] * bend)
    tip = root + reach[:, None] * chord
    d1 = normalize(elbow - root, chord)
    d2 = normalize(tip - elbow, chord)
    a0 = batch.directions[:, 0]
    ref0 = matmul(batch.base, batch.ref_local[:, 0])
    g = aim_frames(d1, a0, batch.keep_frames[:, 0], ref0, batch.roll_mode)
    w = np.einsum("kji,kj->ki", g, d2)
    v = matvec(batch.ref_local[:, 1], u)
    v_perp = v - dots(v, a0)[:, None] * a0
    w_perp = w - dots(w, a0)[:, None] * a0
    tau = np.arctan2(dots(a0, cross(v_perp, w_perp)), dots(v_perp, w_perp))
    # A straight limb has no bend plane to turn into: the angle between two near-zero vectors is noise.
    tau = np.where((norms(v_perp) <= STRAIGHT_TURN) | (norms(w_perp) <= STRAIGHT_TURN), 0.0, tau)
    # Where the twist the roll mode gives already holds the lower bone inside its cone, it is kept: the
    # turn is for hinges the pose misses, not for cones that fit.
    lim = batch.limits
    assert lim is not None
    u0 = np.einsum("kji,kj->ki", batch.ref_local[:, 1], w)
    fits = ~lim.use_cone[:, 1]
    if lim.use_cone[:, 1].any():
        on = lim.use_cone[:, 1]
        fits[on] = cone_contains(u0[on], lim.cone[on, 1], INSIDE_TOLERANCE)
    tau = np.where(fits, 0.0, tau)
    f1 = _twist_into_range(batch, matmul(g, axis_angle_matrix(a0, tau)), ref0, d2)
    return f1, ref0, elbow, tip, d2


def _twist_into_range(batch: ChainBatch, f1: F64, ref0: F64, d2: F64) -> F64:
    """``f1`` with the upper bone's twist clamped to its range's nearest end, where the twist the hinge asked
    for leaves the range and the lower bone stays inside its own cone at the clamped twist.

    The twist turns the upper bone about its own segment (where that runs along its Y axis), so the elbow,
    the tip and the fold stay; only the lower bone's direction relative to the upper bone moves, along the
    fold's circle (off the hinge's plane, which a cone wider than a hinge allows). Rows where the lower bone
    would leave its cone keep ``f1``: the swivel search then looks for an elbow the twist range allows."""
    lim = batch.limits
    assert lim is not None
    along = np.abs(batch.directions[:, 0] - _Y).max(axis=1) <= ALONG_Y
    rows = np.flatnonzero(lim.use_twist[:, 0] & along)
    if rows.size == 0:
        return f1
    tw = twist_angle(matmul(ref0[rows].swapaxes(-1, -2), f1[rows]))
    target, outside = _twist_target(tw, lim.twist[rows, 0, 0], lim.twist[rows, 0, 1], INSIDE_TOLERANCE)
    if not outside.any():
        return f1
    rows, delta = rows[outside], (target - tw)[outside]
    turned = matmul(f1[rows], axis_angle_matrix(np.broadcast_to(_Y, (rows.size, 3)), delta))
    w = np.einsum("kji,kj->ki", turned, d2[rows])
    u0 = np.einsum("kji,kj->ki", batch.ref_local[rows, 1], w)
    ok = np.ones(rows.size, dtype=np.bool_)
    on = lim.use_cone[rows, 1]
    if on.any():
        ok[on] = cone_contains(u0[on], lim.cone[rows[on], 1], INSIDE_TOLERANCE)
    out = f1.copy()
    out[rows[ok]] = turned[ok]
    return out


def _upper_inside(batch: ChainBatch, f1: F64, ref0: F64) -> Bools:
    """``(K,)`` whether the upper bone's frames ``f1`` lie inside its cone and twist range (tested, not
    projected: the swivel search only asks which side of the boundary a pose is on)."""
    lim = batch.limits
    assert lim is not None
    rel = matmul(ref0.swapaxes(-1, -2), f1)
    ok = np.ones(batch.size, dtype=np.bool_)
    use_cone, use_twist = lim.use_cone[:, 0], lim.use_twist[:, 0]
    if use_cone.any():
        ok[use_cone] = cone_contains(rel[use_cone, :, 1], lim.cone[use_cone, 0], INSIDE_TOLERANCE)
    if use_twist.any():
        tw = twist_angle(rel[use_twist])
        lo, hi = lim.twist[use_twist, 0, 0], lim.twist[use_twist, 0, 1]
        ok[use_twist] &= (tw >= lo - INSIDE_TOLERANCE) & (tw <= hi + INSIDE_TOLERANCE)
    return ok


def _swivel(chord: F64, bend: F64, psi: F64) -> F64:
    """``bend`` turned by ``psi`` about ``chord`` (both unit, perpendicular)."""
    return np.cos(psi)[:, None] * bend + np.sin(psi)[:, None] * cross(chord, bend)


AZIMUTH_SAMPLES: Final = 36
"""Directions tried on the lower bone's fold circle when the chosen plane's fold range falls short."""


def _fold_azimuth(c: F64, n: F64, fold: F64, cone: F64) -> F64:
    """``(K, 3)`` a direction at angle ``fold`` from ``c`` inside ``cone`` (the nearest sampled azimuth to
    ``n``), NaN rows where no sample is inside."""
    k = c.shape[0]
    m = normalize(cross(c, n), n)
    phi = np.arange(AZIMUTH_SAMPLES) * (2.0 * np.pi / AZIMUTH_SAMPLES)
    # Nearest the chosen plane first: 0, +step, -step, ...
    order = np.argsort(np.minimum(phi, 2.0 * np.pi - phi), kind="stable")
    phi = phi[order]
    ring = np.cos(phi)[None, :, None] * n[:, None] + np.sin(phi)[None, :, None] * m[:, None]
    u = np.cos(fold)[:, None, None] * c[:, None] + np.sin(fold)[:, None, None] * ring
    inside = cone_contains(u.reshape(-1, 3), np.repeat(cone, AZIMUTH_SAMPLES, axis=0), -1e-9)
    inside = inside.reshape(k, AZIMUTH_SAMPLES)
    out = np.full((k, 3), np.nan)
    has = inside.any(axis=1)
    first = np.argmax(inside, axis=1)
    out[has] = u[np.flatnonzero(has), first[has]]
    # A zero-width hinge allows one plane only (through +Y): no sample lies on it, the circle meets it in
    # closed form, at up to two points.
    flat_z = (cone[:, 0] <= 0.0) & (cone[:, 1] <= 0.0)
    flat_x = (cone[:, 2] <= 0.0) & (cone[:, 3] <= 0.0)
    rows = np.flatnonzero(~has & (flat_z | flat_x))
    if rows.size:
        b = np.where(flat_z[rows, None], (1.0, 0.0, 0.0), (0.0, 0.0, 1.0))  # the plane's other axis
        ca, cb = c[rows, 1], dots(b, c[rows])
        r = np.hypot(ca, cb)
        ratio = np.cos(fold[rows]) / np.maximum(r, 1e-300)
        can = np.abs(ratio) <= 1.0
        psi0 = np.arctan2(cb, ca)
        half = np.arccos(np.clip(ratio, -1.0, 1.0))
        best: F64 = np.full((rows.size, 3), np.nan)
        score: F64 = np.full(rows.size, -np.inf)
        for sign in (1.0, -1.0):
            theta = psi0 + sign * half
            cand = np.cos(theta)[:, None] * np.array([0.0, 1.0, 0.0]) + np.sin(theta)[:, None] * b
            ok = can & cone_contains(cand, cone[rows], 1e-9)
            pref = dots(cand, n[rows])
            take = ok & (pref > score)
            best[take], score[take] = cand[take], pref[take]
        out[rows] = best
    return out


SWIVEL_SAMPLES: Final = 24
"""Swivel angles tried (evenly spaced) when the upper bone's limits refuse the elbow in the pole's plane."""
SWIVEL_BISECTIONS: Final = 7
"""Bisections of the bracket between the last refused and the first allowed sample (to 15 deg / 128)."""


def solve_limited(batch: ChainBatch, chord: F64, bend: F64, distance: F64) -> tuple[F64, F64, Bools, Bools]:
    """The closed-form limited pose of each chain of ``batch`` (2 bones, with limits).

    Parameters
    ----------
    batch
        The chains.
    chord
        ``(K, 3)`` unit root-to-target directions.
    bend
        ``(K, 3)`` unit bend directions perpendicular to ``chord`` (pole, current bend or fallback).
    distance
        ``(K,)`` root-to-target distances (not on the root).

    Returns
    -------
    positions, frames, settled, clamped
        ``(K, 3, 3)`` joints and ``(K, 2, 3, 3)`` frames; ``settled`` ``(K,)``: the limits left the built
        pose as it is, and it is the exact pose (``clamped`` False) or provably the nearest reachable point
        under the lower bone's limits (``clamped`` True, the fold or the reach clamped). Rows not settled
        (the upper bone's limits refuse every swivel, or a cone whose widest fold lies off the chosen
        plane) are for the global stage.

    Notes
    -----
    Where the upper bone's cone or twist range refuses the elbow in the bend's plane, the elbow swivels
    about the root-to-target line to the nearest angle they allow: ``SWIVEL_SAMPLES`` angles, nearest the
    bend first, then ``SWIVEL_BISECTIONS`` bisections toward the bend (a one-dimensional search).
    """
    lim = batch.limits
    assert lim is not None
    l1, l2 = batch.lengths[:, 0], batch.lengths[:, 1]
    c, n, low, high, bound = fold_plane(batch)
    cos_f = np.clip((distance * distance - l1 * l1 - l2 * l2) / (2.0 * l1 * l2), -1.0, 1.0)
    fold = np.arccos(cos_f)
    want = np.clip(fold, low, high)
    clamped = np.abs(want - fold) > 1e-12
    # A clamped fold is the limit of every twist only when proven so: toward straight, where the circle's
    # range starts at straight (the reach is the chain's length); toward folded, where it reaches `bound`.
    proven = np.where(fold < low, low <= 0.0, high >= bound - 1e-12)
    u = np.cos(want)[:, None] * c + np.sin(want)[:, None] * n
    open_rows = np.flatnonzero(clamped & ~proven)
    if open_rows.size:
        # Off the chosen plane the cone may hold the fold the target asks for (a hinge tilted from the
        # modelled bend, a zero-width one): the circle of that fold about `c`, sampled by azimuth from `n`.
        found = _fold_azimuth(c[open_rows], n[open_rows], fold[open_rows], lim.cone[open_rows, 1])
        ok = ~np.isnan(found[:, 0])
        rows = open_rows[ok]
        u[rows], want[rows], clamped[rows] = found[ok], fold[rows], False
        # What the samples miss, the cone's boundary settles (`solvers.fold`): a fold beyond every fold the
        # cone allows is clamped to the nearest one (proven), one inside the range found on the boundary.
        for r in open_rows[~ok]:
            got = settle_fold(_vec(c[r]), _vec(n[r]), float(fold[r]), _cone_of(lim.cone[r, 1]))
            if got is not None:
                u[r], want[r], clamped[r] = got
                proven[r] = True
    reach = np.sqrt(np.maximum(l1 * l1 + l2 * l2 + 2.0 * l1 * l2 * np.cos(want), 0.0))
    # The law of cosines at the reach the clamped fold gives: the tip on the chord, nearest the target.
    safe = np.maximum(reach, 1e-300)
    cos_a = np.clip((l1 * l1 + safe * safe - l2 * l2) / (2.0 * l1 * safe), -1.0, 1.0)
    sin_a = np.sqrt(1.0 - cos_a * cos_a)
    args = (cos_a, sin_a, reach, u)
    f1, ref0, _elbow, tip, d2 = _upper(batch, chord, bend, *args)
    inside = _upper_inside(batch, f1, ref0)
    out_of_reach = np.zeros(0, dtype=np.int64)
    swept: tuple[F64, F64] | None = None
    if not inside.all():
        refused = np.flatnonzero(~inside)
        psi, nearest = _nearest_swivel(batch.take(refused), chord[refused], bend[refused], *(a[refused] for a in args))
        turned = ~np.isnan(psi)
        rows = refused[turned]
        if rows.size:
            bend = bend.copy()
            bend[rows] = _swivel(chord[rows], bend[rows], psi[turned])
            f1, ref0, _elbow, tip, d2 = _upper(batch, chord, bend, *args)
        # Out of reach only where the fold is the target's own (not clamped along the chosen plane, where
        # another twist may fold further): then the elbow's circle is the same whatever the twist.
        missed = ~np.isnan(nearest) & ~clamped[refused]
        out_of_reach = refused[missed]
        if out_of_reach.size:
            # No elbow on the circle the fold allows is inside the upper bone's cone: out of reach under the
            # limits, whatever the twist. The sweep from the elbow nearest the cone gives the pose (settled:
            # the global stage cannot do better at this fold, and would search in vain every update).
            sub = batch.take(out_of_reach)
            b = _swivel(chord[out_of_reach], bend[out_of_reach], nearest[missed])
            aims = np.empty((out_of_reach.size, 3, 3))
            aims[:, 0] = sub.root
            aims[:, 1] = sub.root + batch.lengths[out_of_reach, :1] * (
                cos_a[out_of_reach, None] * chord[out_of_reach] + sin_a[out_of_reach, None] * b
            )
            aims[:, 2] = sub.targets
            swept = forward_sweep(sub, aims)
    f1_limited = limit_frames(ref0, f1, lim, 0)
    upper_ok = np.abs(f1_limited - f1).reshape(-1, 9).max(axis=1) <= _EXACT
    ref1 = matmul(f1_limited, batch.ref_local[:, 1])
    f2 = aim_frames(d2, batch.directions[:, 1], batch.keep_frames[:, 1], ref1, batch.roll_mode)
    f2 = limit_frames(ref1, f2, lim, 1)
    frames = np.stack((f1_limited, f2), axis=1)
    positions = np.empty((batch.size, 3, 3))
    positions[:, 0] = batch.root
    positions[:, 1] = batch.root + matvec(f1_limited, batch.offsets[:, 0])
    positions[:, 2] = positions[:, 1] + matvec(f2, batch.offsets[:, 1])
    # The lower bone's clamp may only fix its own twist: the tip where it was built.
    held = norms(positions[:, 2] - tip) <= HELD * (l1 + l2)
    settled = upper_ok & held & (~clamped | proven)
    if swept is not None:
        positions[out_of_reach], frames[out_of_reach] = swept
        settled[out_of_reach] = True
    return positions, frames, settled, clamped


def _violations(d: F64, cone: F64) -> F64:
    """``(K, M)`` the angles from unit directions ``d`` ``(K, M, 3)`` to each chain's cone ``(K, 4)`` (0
    inside), exact: one batched nearest-point search. (Lower bounds from the widest half-angle are cheaper,
    but a bound of 0 beside the cone defeats the out-of-reach proof, and the stage then searches in vain;
    the scalar form, `solvers.scalar._closed._violations`, finds the same minimum by branch and bound.)"""
    k, m = d.shape[:2]
    out: F64 = cone_violation(d.reshape(-1, 3), np.repeat(cone, m, axis=0)).reshape(k, m)
    return out


OUT_OF_REACH_SLACK: Final = 4.0 * ALONG_Y
"""How far the upper bone's Y axis can lie from its segment's direction on a limb the proof takes (one
whose upper segment runs along Y to `ALONG_Y`)."""


def out_of_reach(sub: ChainBatch, r: int, ref0: F64, chord: F64, bend: F64, cos_a: float, sin_a: float) -> bool:
    """Whether row ``r`` of ``sub`` is proven out of reach under its upper bone's cone whatever the swivel:
    the elbow's circle (the upper segment's directions at the fold's angle ``a`` from ``chord``) misses the
    cone (:func:`solvers.fold.circle_outside`, in the cone's frame ``ref0``). Only for an upper segment
    along the bone's Y axis (else its twist moves the Y axis off the segment); the plain-float forms call
    it with the same numbers, so all three decide alike."""
    lim = sub.limits
    assert lim is not None
    if np.abs(sub.directions[r, 0] - _Y).max() > ALONG_Y or not lim.use_cone[r, 0]:
        return False
    c, e1, e2 = (ref0.T @ v for v in (chord, bend, cross(chord, bend)))
    cone = _cone_of(lim.cone[r, 0])
    return circle_outside(
        _vec(c), _vec(e1), _vec(e2), float(cos_a), float(sin_a), cone, INSIDE_TOLERANCE, OUT_OF_REACH_SLACK
    )


def axis_swivel(ref0: F64, chord: F64, bend: F64) -> F64:
    """``(K,)`` the swivel that turns the elbow toward the upper bone's cone axis (``ref0``'s Y column),
    the pose of a limb out of reach under that cone: nearest the cone for a circular one, continuous as the
    target moves (0 where the axis lies along the chord)."""
    axis = ref0[:, :, 1]
    return np.arctan2(dots(axis, cross(chord, bend)), dots(axis, bend))


def _nearest_swivel(
    batch: ChainBatch, chord: F64, bend: F64, cos_a: F64, sin_a: F64, reach: F64, u: F64
) -> tuple[F64, F64]:
    """``(K,)`` the swivel angle nearest 0 at which the upper bone's limits allow the pose (NaN: none), and
    where the upper bone's cone refuses the elbow at every sampled angle and its circle is proven to miss
    the cone (its direction alone, whatever the twist: the target is out of reach under the limits), the
    swivel toward the cone's axis (`axis_swivel`; else NaN)."""
    k, m = batch.size, SWIVEL_SAMPLES
    step = 2.0 * np.pi / m
    # Samples ordered by distance from the bend: +step, -step, +2 step, ...
    order = np.arange(1, m // 2 + 1)
    angles = np.stack((order * step, -order * step), axis=1).reshape(-1)[: m - 1]
    rows = np.repeat(np.arange(k), angles.size)
    psi = np.tile(angles, k)
    wide = batch.take(rows)
    bends = _swivel(chord[rows], bend[rows], psi)
    f1, ref0, *_ = _upper(wide, chord[rows], bends, cos_a[rows], sin_a[rows], reach[rows], u[rows])
    ok = _upper_inside(wide, f1, ref0).reshape(k, angles.size)
    any_ok = ok.any(axis=1)
    first = np.argmax(ok, axis=1)
    out = np.full(k, np.nan)
    nearest = np.full(k, np.nan)
    lim = wide.limits
    assert lim is not None
    none = np.flatnonzero(~any_ok & lim.use_cone[:: angles.size, 0])
    if none.size:
        # Proven out of reach only when every point of the elbow's circle misses the cone: at the samples by
        # more than half a sample's arc (``step * sin(a)`` between neighbours; the violation is 1-Lipschitz
        # in the direction), or the whole circle at once (`out_of_reach`, as the plain-float forms try first).
        at = (none[:, None] * angles.size + np.arange(angles.size)).reshape(-1)
        d1 = np.einsum("kji,kj->ki", ref0[at], f1[at, :, 1]).reshape(none.size, angles.size, 3)
        sub = batch.take(none)
        f0 = _upper(sub, chord[none], bend[none], cos_a[none], sin_a[none], reach[none], u[none])
        d0 = np.einsum("kji,kj->ki", f0[1], f0[0][:, :, 1])
        gap = _violations(np.concatenate((d0[:, None], d1), axis=1), lim.cone[none * angles.size, 0])
        proof = gap.min(axis=1) > 0.5 * step * sin_a[none] + 1e-9
        for r in np.flatnonzero(~proof).tolist():
            proof[r] = out_of_reach(sub, r, f0[1][r], chord[none[r]], bend[none[r]], cos_a[none[r]], sin_a[none[r]])
        nearest[none[proof]] = axis_swivel(f0[1][proof], chord[none[proof]], bend[none[proof]])
    if not any_ok.any():
        return out, nearest
    good = np.flatnonzero(any_ok)
    hi = angles[first[good]]  # allowed
    lo = hi - np.sign(hi) * step  # refused (0 was refused; so was every sample nearer the bend)
    sub = batch.take(good)
    ch, be = chord[good], bend[good]
    rest = (cos_a[good], sin_a[good], reach[good], u[good])
    for _ in range(SWIVEL_BISECTIONS):
        mid = 0.5 * (lo + hi)
        f1, ref0, *_ = _upper(sub, ch, _swivel(ch, be, mid), *rest)
        inside = _upper_inside(sub, f1, ref0)
        hi = np.where(inside, mid, hi)
        lo = np.where(inside, lo, mid)
    out[good] = hi
    return out, nearest
