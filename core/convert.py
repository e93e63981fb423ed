"""Rotation conversions between solver frames and Blender's rotation channels, batched in numpy.

numpy only (no bpy) so the maths is testable and fast; the bpy calls stay in `rig/armature.py`.
Euler conversion follows Blender's own rules (`mat3_normalized_to_compatible_eulO`): of the two Euler
solutions, pick the one closest to the previous value after removing whole turns, so keys never flip.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]

# Blender's Euler orders: axis indices (i, j, k) and parity, as in BLI's `EulerOrderTable`.
_EULER_ORDERS: dict[str, tuple[tuple[int, int, int], bool]] = {
    "XYZ": ((0, 1, 2), False),
    "XZY": ((0, 2, 1), True),
    "YXZ": ((1, 0, 2), True),
    "YZX": ((1, 2, 0), False),
    "ZXY": ((2, 0, 1), False),
    "ZYX": ((2, 1, 0), True),
}
EULER_ORDERS = tuple(_EULER_ORDERS)


def matrix_to_quaternion(m: F64) -> F64:
    """(M,3,3) rotation matrices -> (M,4) unit quaternions (w, x, y, z), w >= 0 not enforced."""
    m = np.asarray(m, dtype=np.float64)
    t = np.trace(m, axis1=-2, axis2=-1)
    q = np.empty((*m.shape[:-2], 4))
    # Shepperd's method: branch on the largest of w, x, y, z so the square root never nears zero.
    cand = np.stack([t, m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]], axis=-1)
    which = np.argmax(cand, axis=-1)
    for case in range(4):
        sel = which == case
        if not sel.any():
            continue
        r = m[sel]
        if case == 0:
            s = np.sqrt(1.0 + r[:, 0, 0] + r[:, 1, 1] + r[:, 2, 2]) * 2.0
            vals = [
                0.25 * s,
                (r[:, 2, 1] - r[:, 1, 2]) / s,
                (r[:, 0, 2] - r[:, 2, 0]) / s,
                (r[:, 1, 0] - r[:, 0, 1]) / s,
            ]
        elif case == 1:
            s = np.sqrt(1.0 + r[:, 0, 0] - r[:, 1, 1] - r[:, 2, 2]) * 2.0
            vals = [
                (r[:, 2, 1] - r[:, 1, 2]) / s,
                0.25 * s,
                (r[:, 0, 1] + r[:, 1, 0]) / s,
                (r[:, 0, 2] + r[:, 2, 0]) / s,
            ]
        elif case == 2:
            s = np.sqrt(1.0 + r[:, 1, 1] - r[:, 0, 0] - r[:, 2, 2]) * 2.0
            vals = [
                (r[:, 0, 2] - r[:, 2, 0]) / s,
                (r[:, 0, 1] + r[:, 1, 0]) / s,
                0.25 * s,
                (r[:, 1, 2] + r[:, 2, 1]) / s,
            ]
        else:
            s = np.sqrt(1.0 + r[:, 2, 2] - r[:, 0, 0] - r[:, 1, 1]) * 2.0
            vals = [
                (r[:, 1, 0] - r[:, 0, 1]) / s,
                (r[:, 0, 2] + r[:, 2, 0]) / s,
                (r[:, 1, 2] + r[:, 2, 1]) / s,
                0.25 * s,
            ]
        q[sel] = np.stack(vals, axis=-1)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return q


def quaternion_continuous(q: F64, previous: F64) -> F64:
    """Flip each quaternion's sign where that brings it nearer the previous value (same rotation)."""
    flip = np.einsum("...i,...i->...", q, previous) < 0.0
    out = q.copy()
    out[flip] *= -1.0
    return out


def quaternion_to_axis_angle(q: F64, previous: F64) -> F64:
    """(M,4) quaternions -> (M,4) Blender axis-angle (angle, x, y, z), continuous with `previous`.

    (angle, axis) and (-angle, -axis) are the same rotation; the one whose axis is nearer the previous
    axis is kept so interpolated keys do not swing through a half turn.
    """
    q = q * np.where(q[:, :1] < 0.0, -1.0, 1.0)
    vec = q[:, 1:]
    s = np.linalg.norm(vec, axis=1)
    angle = 2.0 * np.arctan2(s, q[:, 0])
    axis = np.where(s[:, None] > 1e-12, vec / np.maximum(s, 1e-300)[:, None], previous[:, 1:])
    # A zero rotation keeps the previous axis (any axis is right; this one does not jump).
    zero_axis = np.linalg.norm(axis, axis=1) < 1e-12
    axis[zero_axis] = (0.0, 1.0, 0.0)
    flip = np.einsum("ij,ij->i", axis, previous[:, 1:]) < 0.0
    angle = np.where(flip, -angle, angle)
    axis = np.where(flip[:, None], -axis, axis)
    return np.concatenate([angle[:, None], axis], axis=1)


def euler_pair(m: F64, order: str) -> tuple[F64, F64]:
    """Both Euler solutions of (M,3,3) rotations for `order`, as Blender's `mat3_normalized_to_eulO2`."""
    (i, j, k), parity = _EULER_ORDERS[order]
    cy = np.hypot(m[:, i, i], m[:, j, i])
    e1 = np.empty((m.shape[0], 3))
    e2 = np.empty((m.shape[0], 3))
    ok = cy > 16.0 * np.finfo(np.float32).eps
    # Blender indexes its matrices [column][row]; m here is [row][column], hence the transposed indices.
    e1[:, i] = np.where(ok, np.arctan2(m[:, k, j], m[:, k, k]), np.arctan2(-m[:, j, k], m[:, j, j]))
    e1[:, j] = np.arctan2(-m[:, k, i], cy)
    e1[:, k] = np.where(ok, np.arctan2(m[:, j, i], m[:, i, i]), 0.0)
    e2[:, i] = np.where(ok, np.arctan2(-m[:, k, j], -m[:, k, k]), e1[:, i])
    e2[:, j] = np.where(ok, np.arctan2(-m[:, k, i], -cy), e1[:, j])
    e2[:, k] = np.where(ok, np.arctan2(-m[:, j, i], -m[:, i, i]), e1[:, k])
    if parity:
        e1, e2 = -e1, -e2
    return e1, e2


def _turns(d: F64) -> F64:
    """Whole turns (signed) that bring an angle `d` away from the old one back within pi of it."""
    pi_x2 = 2.0 * np.pi
    up = np.where(d < -np.pi, np.floor(-d / pi_x2 + 0.5), 0.0)
    down = np.where(d > np.pi, np.floor(d / pi_x2 + 0.5), 0.0)
    turns: F64 = up - down
    return turns


def _compatible(eul: F64, old: F64) -> F64:
    """Blender's `compatible_eul`: remove the whole turns that take an angle more than pi from the old one.

    Blender >= 3.6 (!104856) wraps at pi; that also made its older half-turn fix-up a no-op, so it is gone.
    """
    out: F64 = eul + _turns(eul - old) * (2.0 * np.pi)
    return out


def _prefers_second(e1: F64, e2: F64, previous: F64) -> NDArray[np.bool_]:
    """Whether Blender's rule takes `e2` over `e1` (any leading shape, last axis the three angles)."""
    d1 = np.abs(_compatible(e1, previous) - previous).sum(axis=-1)
    d2 = np.abs(_compatible(e2, previous) - previous).sum(axis=-1)
    prefers: NDArray[np.bool_] = d1 > d2
    return prefers


def choose_compatible(e1: F64, e2: F64, previous: F64) -> F64:
    """Of two (M,3) Euler solutions, the one nearer `previous` after removing whole turns (Blender's rule)."""
    return np.where(_prefers_second(e1, e2, previous)[:, None], _compatible(e2, previous), _compatible(e1, previous))


def compatible_sequence(e1: F64, e2: F64, previous: F64) -> F64:
    """(F,n,3) Euler solution pairs over F frames -> (F,n,3) angles, each frame compatible with the one before.

    The same as applying :func:`choose_compatible` frame after frame starting from `previous` (n,3), without
    a Python loop over frames doing the arithmetic. The choice between the two solutions at a frame depends
    on the previous value only modulo whole turns, that is on which solution the previous frame took: both
    outcomes are computed for every frame at once, and only the walk through those yes/no answers is
    sequential. The whole turns are then integers summed along the frames, so every angle is its solution
    (as ``atan2`` gives it) plus a whole number of turns, as in the frame-by-frame version.

    The walk itself is a prefix scan: frame i's answer is a function of frame i-1's (a yes/no -> yes/no
    table), tables compose, and composing them in doubling strides (1, 2, 4...) gives every frame's table
    from the first frame in log2(F) array steps instead of F.
    """
    pi_x2 = 2.0 * np.pi
    took2 = np.empty(e1.shape[:2], dtype=np.bool_)  # whether frame i takes e2
    took2[0] = _prefers_second(e1[0], e2[0], previous)
    if e1.shape[0] > 1:
        # Frame i's choice when frame i-1 took e1 (if_1) and when it took e2 (if_2): (F-1, n) each.
        if_1 = _prefers_second(e1[1:], e2[1:], e1[:-1])
        if_2 = _prefers_second(e1[1:], e2[1:], e2[:-1])
        stride = 1
        while stride < if_1.shape[0]:
            # Table i becomes (table i) after (table i - stride): look up i's answers at i-stride's.
            late_1, late_2, early_1, early_2 = if_1[stride:], if_2[stride:], if_1[:-stride], if_2[:-stride]
            if_1, if_2 = (
                np.concatenate([if_1[:stride], np.where(early_1, late_2, late_1)]),
                np.concatenate([if_2[:stride], np.where(early_2, late_2, late_1)]),
            )
            stride *= 2
        took2[1:] = np.where(took2[0], if_2, if_1)
    chosen = np.where(took2[..., None], e2, e1)
    turns = np.empty_like(chosen)
    turns[0] = _turns(chosen[0] - previous)
    turns[1:] = _turns(chosen[1:] - chosen[:-1])
    out: F64 = chosen + pi_x2 * np.cumsum(turns, axis=0)
    return out


def matrix_to_euler(m: F64, order: str, previous: F64) -> F64:
    """(M,3,3) rotations -> (M,3) Euler angles in `order`, compatible with `previous` (M,3)."""
    e1, e2 = euler_pair(np.asarray(m, dtype=np.float64), order)
    return choose_compatible(e1, e2, previous)


def euler_to_matrix(e: F64, order: str) -> F64:
    """(M,3) Euler angles -> (M,3,3); `order` 'XYZ' means X is applied first (Blender's convention)."""
    mats = {}
    for axis in range(3):
        c, s = np.cos(e[:, axis]), np.sin(e[:, axis])
        r = np.zeros((e.shape[0], 3, 3))
        a, b = (axis + 1) % 3, (axis + 2) % 3
        r[:, axis, axis] = 1.0
        r[:, a, a] = c
        r[:, b, b] = c
        r[:, b, a] = s
        r[:, a, b] = -s
        mats["XYZ"[axis]] = r
    return mats[order[2]] @ mats[order[1]] @ mats[order[0]]


def quaternion_to_matrix(q: F64) -> F64:
    """(M,4) unit quaternions (w, x, y, z) -> (M,3,3) rotation matrices."""
    w, x, y, z = q.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=-1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=-1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1),
        ],
        axis=1,
    )


def slerp_rotations(a: F64, b: F64, t: F64) -> F64:
    """(M,3,3) rotations from `a` toward `b` (M,3,3) by fractions `t` (M,) along the shortest arc.

    t = 0 gives `a` and t = 1 gives `b` to float64 rounding (the callers use `a` and `b` themselves there).
    """
    qa, qb = matrix_to_quaternion(a), matrix_to_quaternion(b)
    dot = np.einsum("mi,mi->m", qa, qb)
    qb = np.where(dot[:, None] < 0.0, -qb, qb)  # the shorter way round
    dot = np.clip(np.abs(dot), -1.0, 1.0)
    theta = np.arccos(dot)
    sin = np.sin(theta)
    near = sin < 1e-9  # (nearly) the same rotation: a straight blend is exact enough, and finite
    safe = np.where(near, 1.0, sin)
    wa = np.where(near, 1.0 - t, np.sin((1.0 - t) * theta) / safe)
    wb = np.where(near, t, np.sin(t * theta) / safe)
    q = wa[:, None] * qa + wb[:, None] * qb
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return quaternion_to_matrix(q)


def rotation_parts(m: F64) -> tuple[F64, F64]:
    """Split (...,3,3) pose matrices into rotations and per-axis scales (the columns' lengths).

    Blender evaluates poses in float32 and long hierarchies drift from orthonormal by ~1e-5, so the rotation
    is rebuilt by Gram-Schmidt that keeps the bone's Y axis (its direction) exact.
    """
    scale = np.linalg.norm(m, axis=-2)
    y = m[..., :, 1] / np.maximum(scale[..., 1], 1e-300)[..., None]
    x = m[..., :, 0] - np.einsum("...i,...i->...", m[..., :, 0], y)[..., None] * y
    x /= np.maximum(np.linalg.norm(x, axis=-1), 1e-300)[..., None]
    out = np.empty(m.shape)
    out[..., :, 0] = x
    out[..., :, 1] = y
    # z = x cross y, written out: the same products as np.cross (bit for bit) without its per-call overhead.
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    y0, y1, y2 = y[..., 0], y[..., 1], y[..., 2]
    out[..., 0, 2] = x1 * y2 - x2 * y1
    out[..., 1, 2] = x2 * y0 - x0 * y2
    out[..., 2, 2] = x0 * y1 - x1 * y0
    return out, scale
