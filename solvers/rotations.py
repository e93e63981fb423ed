"""Vectorized rotation helpers on batches of vectors ``(M, 3)`` and matrices ``(M, 3, 3)``.

Matrices act on column vectors (``R @ v``); a frame's columns are its axes. Quaternions are
``(w, x, y, z)``, scalar first. Every function is branch-free per row (``np.where`` / masks) so that one
call handles a whole batch, and every degenerate input (zero vectors, opposite vectors) has a defined,
deterministic answer instead of NaN.
"""

from __future__ import annotations

import math
from typing import Final, cast

import numpy as np

from .arrays import F64

# Below this norm a vector has no usable direction. The inputs are lengths in scene units (metres at
# most ~1e3), so 1e-300 would be too small: squaring underflows. 1e-150 squared is still a normal float.
TINY: Final = 1e-150
# |a + b| below this (for unit a, b: angle within ~1e-4 rad of 180 degrees) makes the half-way vector too
# noisy to trust; such pairs are rotated by a half turn about a chosen axis and then a small correction.
NEAR_OPPOSITE: Final = 1e-4

_EYE: Final = np.eye(3)
# Index tables of the cross product: (a x b)_i = a_{i+1} b_{i+2} - a_{i+2} b_{i+1}, as one gather of six
# products (the first three minus the last three).
_CROSS_A: Final = np.array([1, 2, 0, 2, 0, 1])
_CROSS_B: Final = np.array([2, 0, 1, 1, 2, 0])
# Below this many vectors the gathered form is faster (fewer numpy calls); above it the strided one is
# (a gather on the last axis is slow per element). Both compute the same products and differences, so
# they agree bit for bit.
_GATHER_BELOW: Final = 64
# The skew-symmetric matrix [v]x of v: entry (i, j) is sign * v[index].
_SKEW_INDEX: Final = np.array([[0, 2, 1], [2, 0, 0], [1, 0, 0]])
_SKEW_SIGN: Final = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
_DIAG: Final = np.arange(3)


def norms(v: F64) -> F64:
    """Euclidean norms over the last axis."""
    return cast(F64, np.sqrt(np.einsum("...i,...i->...", v, v)))


def dots(a: F64, b: F64) -> F64:
    """Row-wise dot products over the last axis."""
    return cast(F64, np.einsum("...i,...i->...", a, b))


def matvec(m: F64, v: F64) -> F64:
    """Batched ``m @ v`` for ``m`` ``(..., 3, 3)`` and ``v`` ``(..., 3)``."""
    return cast(F64, np.matmul(m, v[..., None])[..., 0])


def matmul(a: F64, b: F64) -> F64:
    """Batched matrix product ``a @ b`` of ``(..., 3, 3)`` stacks.

    ``np.matmul`` rather than ``einsum``: on 1000 stacked 3x3 products it is ~5x faster (numpy 1.26).
    """
    return cast(F64, np.matmul(a, b))


def cross(a: F64, b: F64) -> F64:
    """Row-wise cross products ``a x b`` over the last axis (``(..., 3)``, broadcasting).

    Equal bit for bit to :func:`numpy.cross` (each component is ``a_j b_k - a_k b_j``), without its
    per-call overhead (``np.cross`` moves axes around and costs ~20 us even for one vector).
    """
    if a.shape == b.shape and a.size <= 3 * _GATHER_BELOW:
        prod = a[..., _CROSS_A] * b[..., _CROSS_B]
        # An annotated local, not cast(): numpy 1.26's stubs infer Any here, numpy 2's infer F64.
        crossed: F64 = prod[..., :3] - prod[..., 3:]
        return crossed
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    np.multiply(a1, b2, out=out[..., 0])
    out[..., 0] -= a2 * b1
    np.multiply(a2, b0, out=out[..., 1])
    out[..., 1] -= a0 * b2
    np.multiply(a0, b1, out=out[..., 2])
    out[..., 2] -= a1 * b0
    return out


def skew(v: F64) -> F64:
    """Skew-symmetric matrices ``[v]x`` ``(..., 3, 3)`` with ``[v]x @ w == v x w``."""
    return cast(F64, v[..., _SKEW_INDEX] * _SKEW_SIGN)


def any_perpendicular(v: F64) -> F64:
    """Return a unit vector perpendicular to each row of ``v`` (deterministic, not continuous).

    The basis axis least aligned with ``v`` is crossed with it, which is always well conditioned.
    """
    v = np.asarray(v, dtype=np.float64)
    p = cross(v, _EYE[np.argmin(np.abs(v), axis=-1)])
    n = norms(p)
    ok = n > TINY
    if ok.all():
        scaled: F64 = p / n[..., None]
        return scaled
    # A zero input has no perpendicular; any unit vector will do, and X keeps the result defined.
    fallback = np.zeros_like(v)
    fallback[..., 0] = 1.0
    return np.where(ok[..., None], p / np.where(ok, n, 1.0)[..., None], fallback)


def normalize(v: F64, fallback: F64 | None = None) -> F64:
    """Unit vectors along the rows of ``v``; rows too short to normalize take ``fallback``.

    Parameters
    ----------
    v
        ``(..., 3)`` vectors.
    fallback
        ``(..., 3)`` unit vectors used where ``|v|`` is (near) zero. Default: a perpendicular of X,
        i.e. the X axis itself.
    """
    n = norms(v)
    if n.size == 0 or float(n.min()) > TINY:
        unit: F64 = v / n[..., None]
        return unit
    ok = n > TINY
    out = v / np.where(ok, n, 1.0)[..., None]
    if fallback is None:
        fallback = np.zeros_like(v)
        fallback[..., 0] = 1.0
    return np.where(ok[..., None], out, fallback)


def perpendicular_part(v: F64, axis: F64) -> F64:
    """Component of ``v`` perpendicular to the unit vectors ``axis``."""
    return v - dots(v, axis)[..., None] * axis


def quaternion_to_matrix(q: F64) -> F64:
    """Rotation matrices ``(..., 3, 3)`` of quaternions ``(..., 4)`` (w, x, y, z); normalizes first.

    A zero quaternion gives the identity (callers overwrite such rows, but they must not warn or NaN).
    """
    q = q / np.maximum(norms(q), TINY)[..., None]
    w, u = q[..., 0], q[..., 1:]
    # R = (w^2 - |u|^2) I + 2 u u^T + 2 w [u]x, with the diagonal written 1 - 2 (|u|^2 - u_i^2) as before.
    out = 2.0 * (u[..., :, None] * u[..., None, :] + skew(w[..., None] * u))
    diag = out[..., _DIAG, _DIAG]
    out[..., _DIAG, _DIAG] = 1.0 - (2.0 * dots(u, u)[..., None] - diag)
    return out


def matrix_to_quaternion(m: F64) -> F64:
    """Unit quaternions ``(..., 4)`` (w, x, y, z, with w >= 0) of rotation matrices ``(..., 3, 3)``.

    Uses Shepperd's method: of the four ways to extract a quaternion, each row takes the one with the
    largest pivot, which is never smaller than 1/2 and so never divides by a tiny number.
    """
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    trace = m00 + m11 + m22
    pivots = np.stack([trace, m00, m11, m22], axis=-1)
    choice = np.argmax(pivots, axis=-1)
    q = np.empty((*m.shape[:-2], 4))
    # Candidate 0: from the trace.
    s0 = np.sqrt(np.maximum(1.0 + trace, 1e-300)) * 2.0
    c0 = np.stack(
        [
            0.25 * s0,
            (m[..., 2, 1] - m[..., 1, 2]) / s0,
            (m[..., 0, 2] - m[..., 2, 0]) / s0,
            (m[..., 1, 0] - m[..., 0, 1]) / s0,
        ],
        axis=-1,
    )
    s1 = np.sqrt(np.maximum(1.0 + m00 - m11 - m22, 1e-300)) * 2.0
    c1 = np.stack(
        [
            (m[..., 2, 1] - m[..., 1, 2]) / s1,
            0.25 * s1,
            (m[..., 0, 1] + m[..., 1, 0]) / s1,
            (m[..., 0, 2] + m[..., 2, 0]) / s1,
        ],
        axis=-1,
    )
    s2 = np.sqrt(np.maximum(1.0 + m11 - m00 - m22, 1e-300)) * 2.0
    c2 = np.stack(
        [
            (m[..., 0, 2] - m[..., 2, 0]) / s2,
            (m[..., 0, 1] + m[..., 1, 0]) / s2,
            0.25 * s2,
            (m[..., 1, 2] + m[..., 2, 1]) / s2,
        ],
        axis=-1,
    )
    s3 = np.sqrt(np.maximum(1.0 + m22 - m00 - m11, 1e-300)) * 2.0
    c3 = np.stack(
        [
            (m[..., 1, 0] - m[..., 0, 1]) / s3,
            (m[..., 0, 2] + m[..., 2, 0]) / s3,
            (m[..., 1, 2] + m[..., 2, 1]) / s3,
            0.25 * s3,
        ],
        axis=-1,
    )
    q = np.select([choice[..., None] == i for i in range(4)], [c0, c1, c2, c3])
    # q and -q are the same rotation; a fixed sign makes the output a function of the input.
    q = np.where(q[..., :1] < 0.0, -q, q)
    return q / norms(q)[..., None]


def axis_angle_matrix(axis: F64, angle: F64) -> F64:
    """Rodrigues' formula: rotations by ``angle`` (radians, ``(...)``) about unit ``axis`` ``(..., 3)``."""
    c = np.cos(angle)[..., None, None]
    s = np.sin(angle)[..., None]
    # R = c I + s [axis]x + (1 - c) axis axis^T
    out = (1.0 - c) * (axis[..., :, None] * axis[..., None, :]) + skew(s * axis)
    out[..., _DIAG, _DIAG] += c[..., 0]
    result: F64 = out
    return result


def _halfway_rotation(a: F64, b: F64, s: F64, ns: F64) -> F64:
    """Minimal rotation taking unit ``a`` onto unit ``b`` (not for opposites), given ``s = a + b`` and
    ``ns = |s|``.

    It is the product of two reflections: across the plane normal to the half-way vector
    ``h = s / |s|`` (taking ``a`` to ``-b``), then across the plane normal to ``b`` (taking ``-b`` to
    ``b``): ``R = (I - 2 b b^T)(I - 2 h h^T) = I - 2 (b g^T + h h^T)`` with ``g = b - 2 (b . h) h``. Both
    reflections are orthogonal to rounding for unit ``b`` and ``h``, so ``R`` is orthonormal with det +1
    for every angle short of 180 degrees, and it needs no cross product and no trigonometry.
    """
    h = s / np.maximum(ns, TINY)[..., None]
    g = b - (2.0 * dots(b, h))[..., None] * h
    out: F64 = b[..., :, None] * g[..., None, :] + h[..., :, None] * h[..., None, :]
    out *= -2.0
    out += _EYE
    return out


def minimal_rotation(a: F64, b: F64, fallback_axis: F64 | None = None) -> F64:
    """Rotations ``(M, 3, 3)`` of least angle taking unit vectors ``a`` onto unit vectors ``b``.

    Parameters
    ----------
    a, b
        ``(M, 3)`` unit vectors.
    fallback_axis
        ``(M, 3)``, used when ``a`` and ``b`` are (nearly) opposite, where no minimal rotation is
        unique: the result is then a half turn about this axis (made perpendicular to ``a``) followed
        by the small rotation onto ``b``. Default: :func:`any_perpendicular`.

    Returns
    -------
    numpy.ndarray
        ``R`` with ``R @ a == b`` to rounding, orthonormal with det +1.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    s = a + b
    ns = norms(s)
    out = _halfway_rotation(a, b, s, ns)
    if ns.size and float(ns.min()) < NEAR_OPPOSITE:
        opposite = ns < NEAR_OPPOSITE
        ao, bo = a[opposite], b[opposite]
        if fallback_axis is None:
            n = any_perpendicular(ao)
        else:
            n = normalize(perpendicular_part(fallback_axis[opposite], ao), any_perpendicular(ao))
        half_turn = 2.0 * n[..., :, None] * n[..., None, :] - np.eye(3)
        so = bo - ao
        out[opposite] = matmul(_halfway_rotation(-ao, bo, so, norms(so)), half_turn)
    return out


def rotvec_matrix(rotvec: F64) -> F64:
    """Rotation matrices ``(..., 3, 3)`` of rotation vectors ``(..., 3)`` (axis times angle in radians).

    A zero vector gives the identity exactly.
    """
    angle = norms(rotvec)
    turning = angle > 0.0
    axis = rotvec / np.where(turning, angle, 1.0)[..., None]
    axis = np.where(turning[..., None], axis, _EYE[0])
    return axis_angle_matrix(axis, angle)


def rotation_between(a: F64, b: F64, max_angle: float | None = None) -> F64:
    """Rotations turning the directions of (not necessarily unit) ``a`` toward ``b``, at most ``max_angle``.

    Rows where ``a`` or ``b`` is zero give the identity (nothing to aim). Opposite directions turn about
    :func:`any_perpendicular` of ``a``. The common case (nonzero vectors, not near opposite, within the
    cap) is the minimal rotation of :func:`minimal_rotation`, without trigonometry.
    """
    na, nb = norms(a), norms(b)
    if na.size and min(float(na.min()), float(nb.min())) > TINY:
        ua: F64 = a / na[..., None]
        ub: F64 = b / nb[..., None]
        s: F64 = ua + ub
        ns = norms(s)
        if float(ns.min()) >= NEAR_OPPOSITE and (
            max_angle is None or float(dots(ua, ub).min()) >= math.cos(min(max_angle, math.pi))
        ):
            return _halfway_rotation(ua, ub, s, ns)
    return _rotation_between_general(a, b, na, nb, max_angle)


def _rotation_between_general(a: F64, b: F64, na: F64, nb: F64, max_angle: float | None) -> F64:
    """:func:`rotation_between` for every case, by axis and angle."""
    ok = (na > TINY) & (nb > TINY)
    ua = a / np.where(ok, na, 1.0)[..., None]
    ub = b / np.where(ok, nb, 1.0)[..., None]
    axis = cross(ua, ub)
    sin = norms(axis)
    angle = np.arctan2(sin, dots(ua, ub))
    axis = np.where((sin > 1e-12)[..., None], axis / np.maximum(sin, TINY)[..., None], any_perpendicular(ua))
    if max_angle is not None:
        angle = np.minimum(angle, max_angle)
    angle = np.where(ok, angle, 0.0)
    return axis_angle_matrix(axis, angle)


def orthonormalize(m: F64) -> F64:
    """Nearest right-handed orthonormal frames, keeping each frame's Y axis direction.

    Y is kept because it is the bone axis; Z is made perpendicular to it and X completes a right-handed
    frame. Degenerate inputs (zero or parallel columns) still give a valid rotation.
    """
    m = np.asarray(m, dtype=np.float64)
    out = np.empty(m.shape)
    col_y, col_z = m[..., :, 1], m[..., :, 2]
    ny = norms(col_y)
    if ny.size and float(ny.min()) > TINY:
        y = col_y / ny[..., None]
        z = col_z - dots(col_z, y)[..., None] * y
        nz = norms(z)
        if float(nz.min()) > TINY:
            out[..., :, 1] = y
            out[..., :, 2] = z / nz[..., None]
            out[..., :, 0] = cross(out[..., :, 1], out[..., :, 2])
            return out
    # Rare: some frame has a zero Y column or a Z column parallel to Y.
    y = normalize(col_y, np.broadcast_to(np.array([0.0, 1.0, 0.0]), m.shape[:-1]).copy())
    z = normalize(perpendicular_part(col_z, y), any_perpendicular(y))
    out[..., :, 1] = y
    out[..., :, 2] = z
    out[..., :, 0] = cross(y, z)
    return out


def nearest_rotation(m: F64) -> F64:
    """Rotations closest (Frobenius) to matrices ``(..., 3, 3)``: the polar factor with det +1."""
    u, _, vt = np.linalg.svd(m)
    d = np.sign(np.linalg.det(matmul(u, vt)))
    d = np.where(d == 0.0, 1.0, d)
    u = u.copy()
    u[..., :, 2] *= d[..., None]
    return matmul(u, vt)


def fit_rotation(local: F64, world: F64, weights: F64, prior: F64 | None = None, prior_weight: float = 0.0) -> F64:
    """Weighted Kabsch: the rotation R minimizing ``sum w |R @ local - world|^2 + prior_weight |R - prior|^2``.

    Parameters
    ----------
    local, world
        ``(..., P, 3)`` point sets, already relative to the pivot (or centred).
    weights
        ``(..., P)`` non-negative weights.
    prior, prior_weight
        Optional ``(..., 3, 3)`` rotation that breaks ties when the points do not fix every axis (for
        example two points on a line through the pivot leave the spin about that line free).
    """
    m = np.einsum("...p,...pi,...pj->...ij", weights, world, local)
    if prior is not None and prior_weight > 0.0:
        m = m + prior_weight * prior
    return nearest_rotation(m)
