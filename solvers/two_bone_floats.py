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
from typing import Any, Final

import numpy as np

from .fold import circle_outside, settle_fold, swing_radius
from .frames import ChainBatch
from .frames_floats import (
    Bone,
    Cone,
    Mat,
    Vec,
    aim_frame,
    axis_angle,
    beyond,
    col,
    cross,
    dot,
    frame_twist,
    inside,
    limit,
    mm,
    mtm,
    mtv,
    mv,
    norm,
    normalize,
    twist_target,
)
from .limits import INSIDE_TOLERANCE
from .two_bone_limits import (
    _BENT,
    _EXACT,
    ALONG_Y,
    AZIMUTH_SAMPLES,
    HELD,
    OUT_OF_REACH_SLACK,
    STRAIGHT_TURN,
    SWIVEL_BISECTIONS,
    SWIVEL_SAMPLES,
)
from .types import F64, Bools

_PI: Final = math.pi
_X: Final = (1.0, 0.0, 0.0)
_Y: Final = (0.0, 1.0, 0.0)
_Z: Final = (0.0, 0.0, 1.0)
_SIDES: Final = ((0.0, 0.0, 1.0), (0.0, 0.0, -1.0), (-1.0, 0.0, 0.0), (1.0, 0.0, 0.0))


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
# The closed form (two_bone_limits.py)
# --------------------------------------------------------------------------------------------------------


class _Chain:
    """One chain's rows of the batch, as Python floats."""

    __slots__ = (
        "a0",
        "a1",
        "along",
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
        # The upper segment runs along the bone's Y axis (`two_bone_limits.ALONG_Y`): its twist range and the
        # whole-circle out-of-reach proof apply.
        self.along = max(abs(self.a0[0]), abs(self.a0[1] - 1.0), abs(self.a0[2])) <= ALONG_Y
        self.a1: Vec = tuple(directions[1])
        self.offsets: tuple[Vec, Vec] = (tuple(offsets[0]), tuple(offsets[1]))
        self.q0: Mat = _mat(ref_local[0])
        self.q1: Mat = _mat(ref_local[1])
        self.base: Mat = _mat(base)
        self.keep: tuple[Mat, Mat] = (_mat(keep[0]), _mat(keep[1]))
        self.keep_dirs = (mv(self.keep[0], self.a0), mv(self.keep[1], self.a1))
        self.roll = roll
        self.upper = Bone(
            tuple(cone[0]) if use_cone[0] else None,
            (twist[0][0], twist[0][1]) if use_twist[0] else None,
        )
        self.lower = Bone(
            tuple(cone[1]) if use_cone[1] else None,
            (twist[1][0], twist[1][1]) if use_twist[1] else None,
        )
        self.ref0 = mm(self.base, self.q0)
        self._fold_plane(tuple(cone[1]), use_cone[1])

    def _fold_plane(self, cone: Cone, use_cone: bool) -> None:
        """`two_bone_limits.fold_plane` (with the lower bone's cone row, used or not, as the reference)."""
        c = normalize(mtv(self.q1, self.a0), _X)
        away = (-c[0], 0.0, -c[2])
        size = norm(away)
        widest = _SIDES[max(range(4), key=lambda i: (cone[i], -i))]
        bent = size > _BENT
        e = (away[0] / max(size, 1e-300), away[1] / max(size, 1e-300), away[2] / max(size, 1e-300)) if bent else widest
        rest = math.atan2(size, c[1]) if bent else 0.0
        ec = dot(e, c)
        self.n = normalize((e[0] - ec * c[0], e[1] - ec * c[1], e[2] - ec * c[2]), e)
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
    return swing_radius(cone, ex, ez) if use_cone else _PI


def _upper(ch: _Chain, chord: Vec, bend: Vec, cos_a: float, sin_a: float, reach: float, u: Vec) -> tuple[Mat, Vec, Vec]:
    """`two_bone_limits._upper` for one chain: the upper frame, the tip and the lower segment's direction."""
    root, l1 = ch.root, ch.l1
    elbow = (
        root[0] + l1 * (cos_a * chord[0] + sin_a * bend[0]),
        root[1] + l1 * (cos_a * chord[1] + sin_a * bend[1]),
        root[2] + l1 * (cos_a * chord[2] + sin_a * bend[2]),
    )
    tip = (root[0] + reach * chord[0], root[1] + reach * chord[1], root[2] + reach * chord[2])
    d1 = normalize((elbow[0] - root[0], elbow[1] - root[1], elbow[2] - root[2]), chord)
    d2 = normalize((tip[0] - elbow[0], tip[1] - elbow[1], tip[2] - elbow[2]), chord)
    a0 = ch.a0
    g = aim_frame(d1, a0, ch.keep[0] if ch.roll == "KEEP" else ch.ref0)
    w = mtv(g, d2)
    tau = 0.0
    cone1 = ch.lower.cone
    fits = True
    if cone1 is not None:
        u0 = mtv(ch.q1, w)
        fits = inside(u0[0], u0[1], u0[2], cone1, INSIDE_TOLERANCE)
    if not fits:
        v = mv(ch.q1, u)
        va, wa = dot(v, a0), dot(w, a0)
        v_perp = (v[0] - va * a0[0], v[1] - va * a0[1], v[2] - va * a0[2])
        w_perp = (w[0] - wa * a0[0], w[1] - wa * a0[1], w[2] - wa * a0[2])
        if norm(v_perp) > STRAIGHT_TURN and norm(w_perp) > STRAIGHT_TURN:
            tau = math.atan2(dot(a0, cross(v_perp, w_perp)), dot(v_perp, w_perp))
    f1 = mm(g, axis_angle(a0, tau)) if tau != 0.0 else g
    return _twist_into_range(ch, f1, d2), tip, d2


def _twist_into_range(ch: _Chain, f1: Mat, d2: Vec) -> Mat:
    """`two_bone_limits._twist_into_range` for one chain."""
    twist = ch.upper.twist
    if twist is None:
        return f1
    if not ch.along:
        return f1
    tw = frame_twist(mtm(ch.ref0, f1))
    if tw <= -_PI:
        tw = _PI
    target = twist_target(tw, twist[0], twist[1], INSIDE_TOLERANCE)
    if target is None:
        return f1
    turned = mm(f1, axis_angle(_Y, target - tw))
    cone1 = ch.lower.cone
    if cone1 is not None:
        u0 = mtv(ch.q1, mtv(turned, d2))
        if not inside(u0[0], u0[1], u0[2], cone1, INSIDE_TOLERANCE):
            return f1
    return turned


def _upper_inside(ch: _Chain, f1: Mat) -> bool:
    """`two_bone_limits._upper_inside` for one frame."""
    cone, twist = ch.upper.cone, ch.upper.twist
    if cone is None and twist is None:
        return True
    rel = mtm(ch.ref0, f1)
    if cone is not None and not inside(rel[0][1], rel[1][1], rel[2][1], cone, INSIDE_TOLERANCE):
        return False
    if twist is not None:
        tw = frame_twist(rel)
        if tw <= -_PI:
            tw = _PI
        return twist[0] - INSIDE_TOLERANCE <= tw <= twist[1] + INSIDE_TOLERANCE
    return True


def _swivel(chord: Vec, bend: Vec, psi: float) -> Vec:
    """`two_bone_limits._swivel`: ``bend`` turned by ``psi`` about ``chord``."""
    c, s = math.cos(psi), math.sin(psi)
    x = cross(chord, bend)
    return (c * bend[0] + s * x[0], c * bend[1] + s * x[1], c * bend[2] + s * x[2])


def _fold_azimuth(c: Vec, n: Vec, fold: float, cone: Cone) -> Vec | None:
    """`two_bone_limits._fold_azimuth` for one chain."""
    m = normalize(cross(c, n), n)
    cf, sf = math.cos(fold), math.sin(fold)
    for cp, sp in _AZIMUTHS:
        ring = (cp * n[0] + sp * m[0], cp * n[1] + sp * m[1], cp * n[2] + sp * m[2])
        u = (cf * c[0] + sf * ring[0], cf * c[1] + sf * ring[1], cf * c[2] + sf * ring[2])
        if inside(u[0], u[1], u[2], cone, -1e-9):
            return u
    flat_z = cone[0] <= 0.0 and cone[1] <= 0.0
    flat_x = cone[2] <= 0.0 and cone[3] <= 0.0
    if not (flat_z or flat_x):
        return None
    # A zero-width hinge: the circle meets its plane in closed form.
    b = _X if flat_z else _Z
    ca, cb = c[1], dot(b, c)
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
        if inside(cand[0], cand[1], cand[2], cone, 1e-9):
            pref = dot(cand, n)
            if pref > score:
                best, score = cand, pref
    return best


def _outside(ch: _Chain, chord: Vec, bend: Vec, cos_a: float, sin_a: float, cone: Cone) -> bool:
    """`two_bone_limits.out_of_reach` for one chain."""
    if not ch.along:
        return False
    ref0 = ch.ref0
    side = cross(chord, bend)
    return circle_outside(
        mtv(ref0, chord), mtv(ref0, bend), mtv(ref0, side), cos_a, sin_a, cone, INSIDE_TOLERANCE, OUT_OF_REACH_SLACK
    )


def _axis_swivel(ch: _Chain, chord: Vec, bend: Vec) -> float:
    """`two_bone_limits.axis_swivel` for one chain."""
    axis = col(ch.ref0, 1)
    return math.atan2(dot(axis, cross(chord, bend)), dot(axis, bend))


def _nearest_swivel(
    ch: _Chain, chord: Vec, bend: Vec, cos_a: float, sin_a: float, reach: float, u: Vec
) -> tuple[float | None, float | None]:
    """`two_bone_limits._nearest_swivel` for one chain: the allowed swivel nearest 0 (None: none), and
    where the upper cone refuses every swivel, proven out of reach, the swivel toward the cone's axis: the
    whole circle tried first (`_outside`), as the batched form tries it last (the same decision)."""
    cone = ch.upper.cone
    if cone is not None and _outside(ch, chord, bend, cos_a, sin_a, cone):
        return None, _axis_swivel(ch, chord, bend)  # no swivel is inside: the samples would all refuse
    refused: list[Mat] = []
    found: float | None = None
    for psi in _SWIVEL_ANGLES:
        f1, _, _ = _upper(ch, chord, _swivel(chord, bend, psi), cos_a, sin_a, reach, u)
        if _upper_inside(ch, f1):
            found = psi
            break
        refused.append(f1)
    if found is None:
        if cone is None:
            return None, None
        f0, _, _ = _upper(ch, chord, bend, cos_a, sin_a, reach, u)
        if beyond([mtv(ch.ref0, col(f, 1)) for f in [f0, *refused]], cone, 0.5 * _SWIVEL_STEP * sin_a + 1e-9):
            return None, _axis_swivel(ch, chord, bend)
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
        ref = mm(parent, q)
        current = ch.keep_dirs[i] if ch.roll == "KEEP" else mv(ref, locals_[i])
        aim = aims[i]
        direction = normalize((aim[0] - head[0], aim[1] - head[1], aim[2] - head[2]), current)
        frame = aim_frame(direction, locals_[i], ch.keep[i] if ch.roll == "KEEP" else ref, current)
        frame = limit(ref, frame, bone)
        frames.append(frame)
        step = mv(frame, ch.offsets[i])
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
    f1_limited = limit(ch.ref0, f1, ch.upper)
    upper_ok = (
        f1_limited is f1
        or max(abs(x - y) for r, s in zip(f1_limited, f1, strict=True) for x, y in zip(r, s, strict=True)) <= _EXACT
    )
    ref1 = mm(f1_limited, ch.q1)
    f2 = aim_frame(d2, ch.a1, ch.keep[1] if ch.roll == "KEEP" else ref1)
    f2 = limit(ref1, f2, ch.lower)
    root = ch.root
    s1 = mv(f1_limited, ch.offsets[0])
    p1 = (root[0] + s1[0], root[1] + s1[1], root[2] + s1[2])
    s2 = mv(f2, ch.offsets[1])
    p2 = (p1[0] + s2[0], p1[1] + s2[1], p1[2] + s2[2])
    held = norm((p2[0] - tip[0], p2[1] - tip[1], p2[2] - tip[2])) <= HELD * (l1 + l2)
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
