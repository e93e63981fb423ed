"""Vectorized rotation helpers on batches of vectors ``(M, 3)`` and matrices ``(M, 3, 3)``.

Matrices act on column vectors (``R @ v``); a frame's columns are its axes. Quaternions are
``(w, x, y, z)``, scalar first. Every function is branch-free per row (``np.where`` / masks) so that one
call handles a whole batch, and every degenerate input (zero vectors, opposite vectors) has a defined,
deterministic answer instead of NaN.
"""

from __future__ import annotations

from typing import Final, cast

import numpy as np

from .types import F64

# Below this norm a vector has no usable direction. The inputs are lengths in scene units (metres at
# most ~1e3), so 1e-300 would be too small: squaring underflows. 1e-150 squared is still a normal float.
TINY: Final = 1e-150
# |a + b| below this (for unit a, b: angle within ~1e-4 rad of 180 degrees) makes the half-way vector too
# noisy to trust; such pairs are rotated by a half turn about a chosen axis and then a small correction.
NEAR_OPPOSITE: Final = 1e-4


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


def any_perpendicular(v: F64) -> F64:
    """Return a unit vector perpendicular to each row of ``v`` (deterministic, not continuous).

    The basis axis least aligned with ``v`` is crossed with it, which is always well conditioned.
    """
    v = np.asarray(v, dtype=np.float64)
    axis = np.argmin(np.abs(v), axis=-1)
    e = np.zeros_like(v)
    np.put_along_axis(e, axis[..., None], 1.0, axis=-1)
    p = np.cross(v, e)
    n = norms(p)
    # A zero input has no perpendicular; any unit vector will do, and X keeps the result defined.
    fallback = np.zeros_like(v)
    fallback[..., 0] = 1.0
    ok = n > TINY
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
    ok = n > TINY
    out = v / np.where(ok, n, 1.0)[..., None]
    if ok.all():
        return cast(F64, out)
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
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    out = np.empty((*q.shape[:-1], 3, 3))
    out[..., 0, 0] = 1 - 2 * (y * y + z * z)
    out[..., 0, 1] = 2 * (x * y - w * z)
    out[..., 0, 2] = 2 * (x * z + w * y)
    out[..., 1, 0] = 2 * (x * y + w * z)
    out[..., 1, 1] = 1 - 2 * (x * x + z * z)
    out[..., 1, 2] = 2 * (y * z - w * x)
    out[..., 2, 0] = 2 * (x * z - w * y)
    out[..., 2, 1] = 2 * (y * z + w * x)
    out[..., 2, 2] = 1 - 2 * (x * x + y * y)
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
        [0.25 * s0, (m[..., 2, 1] - m[..., 1, 2]) / s0, (m[..., 0, 2] - m[..., 2, 0]) / s0,
         (m[..., 1, 0] - m[..., 0, 1]) / s0],
        axis=-1,
    )
    s1 = np.sqrt(np.maximum(1.0 + m00 - m11 - m22, 1e-300)) * 2.0
    c1 = np.stack(
        [(m[..., 2, 1] - m[..., 1, 2]) / s1, 0.25 * s1, (m[..., 0, 1] + m[..., 1, 0]) / s1,
         (m[..., 0, 2] + m[..., 2, 0]) / s1],
        axis=-1,
    )
    s2 = np.sqrt(np.maximum(1.0 + m11 - m00 - m22, 1e-300)) * 2.0
    c2 = np.stack(
        [(m[..., 0, 2] - m[..., 2, 0]) / s2, (m[..., 0, 1] + m[..., 1, 0]) / s2, 0.25 * s2,
         (m[..., 1, 2] + m[..., 2, 1]) / s2],
        axis=-1,
    )
    s3 = np.sqrt(np.maximum(1.0 + m22 - m00 - m11, 1e-300)) * 2.0
    c3 = np.stack(
        [(m[..., 1, 0] - m[..., 0, 1]) / s3, (m[..., 0, 2] + m[..., 2, 0]) / s3,
         (m[..., 1, 2] + m[..., 2, 1]) / s3, 0.25 * s3],
        axis=-1,
    )
    q = np.select([choice[..., None] == i for i in range(4)], [c0, c1, c2, c3])
    # q and -q are the same rotation; a fixed sign makes the output a function of the input.
    q = np.where(q[..., :1] < 0.0, -q, q)
    return q / norms(q)[..., None]


def axis_angle_matrix(axis: F64, angle: F64) -> F64:
    """Rodrigues' formula: rotations by ``angle`` (radians, ``(...)``) about unit ``axis`` ``(..., 3)``."""
    x, y, z = axis[..., 0], axis[..., 1], axis[..., 2]
    c = np.cos(angle)
    s = np.sin(angle)
    t = 1.0 - c
    out = np.empty((*axis.shape[:-1], 3, 3))
    out[..., 0, 0] = c + t * x * x
    out[..., 0, 1] = t * x * y - s * z
    out[..., 0, 2] = t * x * z + s * y
    out[..., 1, 0] = t * x * y + s * z
    out[..., 1, 1] = c + t * y * y
    out[..., 1, 2] = t * y * z - s * x
    out[..., 2, 0] = t * x * z - s * y
    out[..., 2, 1] = t * y * z + s * x
    out[..., 2, 2] = c + t * z * z
    return out


def _halfway_rotation(a: F64, b: F64) -> F64:
    """Minimal rotation taking unit ``a`` onto unit ``b`` via the half-way vector (not for opposites).

    The quaternion ``(a . h, a x h)`` with ``h = (a + b) / |a + b|`` is exactly unit length, so the
    matrix is orthonormal to rounding for every angle short of 180 degrees.
    """
    s = a + b
    h = s / np.maximum(norms(s), TINY)[..., None]
    q = np.concatenate([dots(a, h)[..., None], np.cross(a, h)], axis=-1)
    return quaternion_to_matrix(q)


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
    out = _halfway_rotation(a, b)
    opposite = norms(a + b) < NEAR_OPPOSITE
    if opposite.any():
        ao, bo = a[opposite], b[opposite]
        if fallback_axis is None:
            n = any_perpendicular(ao)
        else:
            n = normalize(perpendicular_part(fallback_axis[opposite], ao), any_perpendicular(ao))
        half_turn = 2.0 * n[..., :, None] * n[..., None, :] - np.eye(3)
        out[opposite] = matmul(_halfway_rotation(-ao, bo), half_turn)
    return out


def rotation_between(a: F64, b: F64, max_angle: float | None = None) -> F64:
    """Rotations turning the directions of (not necessarily unit) ``a`` toward ``b``, at most ``max_angle``.

    Rows where ``a`` or ``b`` is zero give the identity (nothing to aim). Opposite directions turn about
    :func:`any_perpendicular` of ``a``.
    """
    na, nb = norms(a), norms(b)
    ok = (na > TINY) & (nb > TINY)
    ua = a / np.where(ok, na, 1.0)[..., None]
    ub = b / np.where(ok, nb, 1.0)[..., None]
    cross = np.cross(ua, ub)
    sin = norms(cross)
    angle = np.arctan2(sin, dots(ua, ub))
    axis = np.where((sin > 1e-12)[..., None], cross / np.maximum(sin, TINY)[..., None], any_perpendicular(ua))
    if max_angle is not None:
        angle = np.minimum(angle, max_angle)
    angle = np.where(ok, angle, 0.0)
    return axis_angle_matrix(axis, angle)


def orthonormalize(m: F64) -> F64:
    """Nearest right-handed orthonormal frames, keeping each frame's Y axis direction.

    Y is kept because it is the bone axis; Z is made perpendicular to it and X completes a right-handed
    frame. Degenerate inputs (zero or parallel columns) still give a valid rotation.
    """
    y = normalize(m[..., :, 1], np.broadcast_to(np.array([0.0, 1.0, 0.0]), m.shape[:-1]).copy())
    z = normalize(perpendicular_part(m[..., :, 2], y), any_perpendicular(y))
    x = np.cross(y, z)
    return np.stack([x, y, z], axis=-1)


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
