"""Float64 vector helpers on Python floats, for the few scalar computations float32 would spoil.

The natural bend of a chain whose rest pose is nearly straight is the direction of a small vector (the
rest joints' offsets from the rest chord): float32 rounding of the rest pose (~1e-7) would turn it by
``1e-7 / bend``. It is computed once per solve, so Python floats (float64, ~50 ns per operation) cost
little. No numpy, no mathutils.
"""

from __future__ import annotations

import math
from typing import Final

Vec3 = tuple[float, float, float]
Mat3 = list[list[float]]  # rows

_BLEND_X: Final = 1e-3  # as frames._BLEND_X
_NEAR_OPPOSITE: Final = 1e-4  # as rotations.NEAR_OPPOSITE
_TINY: Final = 1e-150  # as rotations.TINY


def sub(a: Vec3, b: Vec3) -> Vec3:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def add(a: Vec3, b: Vec3) -> Vec3:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def scale(a: Vec3, s: float) -> Vec3:
    return (a[0] * s, a[1] * s, a[2] * s)


def dot(a: Vec3, b: Vec3) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def cross(a: Vec3, b: Vec3) -> Vec3:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def norm(a: Vec3) -> float:
    return math.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])


def normalize(a: Vec3, fallback: Vec3) -> Vec3:
    """``a`` made unit, or ``fallback`` when too short (``rotations.normalize``)."""
    n = norm(a)
    return (a[0] / n, a[1] / n, a[2] / n) if n > _TINY else fallback


def perpendicular(v: Vec3, axis: Vec3) -> Vec3:
    """The part of ``v`` perpendicular to unit ``axis``."""
    return sub(v, scale(axis, dot(v, axis)))


def any_perpendicular(v: Vec3) -> Vec3:
    """``rotations.any_perpendicular``: ``v`` crossed with its least aligned axis, made unit."""
    x, y, z = abs(v[0]), abs(v[1]), abs(v[2])
    pick = 0 if x <= y and x <= z else (1 if y <= z else 2)
    e = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))[pick]
    return normalize(cross(v, e), (1.0, 0.0, 0.0))


def matvec(m: Mat3, v: Vec3) -> Vec3:
    return (
        m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
        m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
        m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2],
    )


def matmul(a: Mat3, b: Mat3) -> Mat3:
    return [[a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j] for j in range(3)] for i in range(3)]


def column(m: Mat3, j: int) -> Vec3:
    return (m[0][j], m[1][j], m[2][j])


def _halfway(a: Vec3, b: Vec3, v: Vec3) -> Vec3:
    """``v`` turned by the minimal rotation from unit ``a`` to unit ``b`` (not opposite), as two
    reflections: ``R v = v - 2 b (g . v) - 2 h (h . v)`` (``rotations._halfway_rotation``)."""
    h = normalize(add(a, b), (1.0, 0.0, 0.0))
    g = sub(b, scale(h, 2.0 * dot(b, h)))
    return sub(v, add(scale(b, 2.0 * dot(g, v)), scale(h, 2.0 * dot(h, v))))


def rotate_minimal(a: Vec3, b: Vec3, v: Vec3, fallback_axis: Vec3) -> Vec3:
    """``v`` turned by ``rotations.minimal_rotation(a, b, fallback_axis)``."""
    if norm(add(a, b)) >= _NEAR_OPPOSITE:
        return _halfway(a, b, v)
    n = normalize(perpendicular(fallback_axis, a), any_perpendicular(a))
    half = sub(scale(n, 2.0 * dot(n, v)), v)  # the half turn about n
    return _halfway((-a[0], -a[1], -a[2]), b, half)


def frame_bend(frame: Mat3, axis: Vec3) -> Vec3:
    """A bend direction perpendicular to ``axis`` from a frame's Z axis, blended with X (``frames``)."""
    z = perpendicular(column(frame, 2), axis)
    x = perpendicular(column(frame, 0), axis)
    return normalize(add(z, scale(x, _BLEND_X)), any_perpendicular(axis))


def natural_bend(
    base: Mat3, ref_local: list[Mat3], offsets: list[list[float]], total: float, target: Vec3, straight: float
) -> Vec3:
    """``frames.natural_bend`` for one chain with its root at the origin: the rest bend plane carried by
    the base, turned by the minimal rotation from the rest chord onto the chord to ``target``."""
    parent = base
    head = (0.0, 0.0, 0.0)
    joints = []
    first: Mat3 | None = None
    for local, offset in zip(ref_local, offsets, strict=True):
        parent = matmul(parent, local)
        if first is None:
            first = parent
        head = add(head, matvec(parent, (offset[0], offset[1], offset[2])))
        joints.append(head)
    assert first is not None
    rest_chord = normalize(joints[-1], column(first, 1))
    bend = (0.0, 0.0, 0.0)
    for p in joints[:-1]:
        bend = add(bend, perpendicular(p, rest_chord))
    rest_bend = frame_bend(first, rest_chord) if norm(bend) <= straight * total else normalize(bend, bend)
    chord = normalize(target, rest_chord)
    turned = rotate_minimal(rest_chord, chord, rest_bend, cross(rest_chord, rest_bend))
    return normalize(perpendicular(turned, chord), any_perpendicular(chord))
