"""Joint limits that hold a pose, or every frame of an animation: widening a limit to take in rotations.

bpy-free. A limit (`PoseBone.reach_ik` values: cone half-angles per side, a twist range) is measured in the
bone's reference frame, its rest frame carried by its parent's pose (`solvers/limits.py`), so the rotation a
limit sees is ``rel = ref.T @ frame``: for a bone without constraints, its basis rotation. `relative_rotations`
gives it from armature-space matrices; `fit` widens limit values until every given rotation lies inside,
with a margin, and says by how much each grew.

Widening keeps the limit's shape where it can: a point outside one quadrant of the elliptical cone widens
the one half-angle of that quadrant that takes it in with the smallest growth of the quadrant's area (a
hinge's 2-degree across side grows a little for a knee a little off its plane, rather than its bend side
growing past 180), and scales both when neither alone can.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
Limits = dict[str, float | bool]

#: The widest a cone side is made (a half-angle must stay below 180 degrees, `solvers/limits.py`).
MAX_SIDE = math.radians(179.0)


def _rotations(m: F64) -> F64:
    """(...,3,3) with unit columns (scale divided out)."""
    return np.asarray(m / np.maximum(np.linalg.norm(m, axis=-2, keepdims=True), 1e-12), dtype=np.float64)


def relative_rotations(rest: F64, parents: tuple[int, ...], pose: F64, bones: list[int]) -> F64:
    """(F, len(bones), 3, 3) each bone's rotation in its reference frame, for F poses (F,B,4,4) or one (B,4,4).

    `rest` (B,4,4) are `Bone.matrix_local`; `pose` `PoseBone.matrix` (armature space)."""
    p = pose if pose.ndim == 4 else pose[None]
    rest_rot = _rotations(rest[:, :3, :3])
    pose_rot = _rotations(p[:, :, :3, :3])
    out = np.empty((p.shape[0], len(bones), 3, 3))
    for k, b in enumerate(bones):
        q = parents[b]
        if q < 0:
            ref = np.broadcast_to(rest_rot[b], (p.shape[0], 3, 3))
        else:
            ref = pose_rot[:, q] @ (rest_rot[q].T @ rest_rot[b])
        out[:, k] = np.swapaxes(ref, -1, -2) @ pose_rot[:, b]
    return out


def swing_twist(rel: F64) -> tuple[F64, F64, F64]:
    """(theta_x, theta_z, twist) of rotations (...,3,3): swing coordinates and twist as the solver reads them."""
    d = rel[..., :, 1]
    theta = np.arccos(np.clip(d[..., 1], -1.0, 1.0))
    s = np.hypot(d[..., 0], d[..., 2])
    safe = np.where(s > 1e-12, s, 1.0)
    tx = np.where(s > 1e-12, theta * d[..., 0] / safe, 0.0)
    tz = np.where(s > 1e-12, theta * d[..., 2] / safe, 0.0)
    twist = np.arctan2(rel[..., 0, 2] - rel[..., 2, 0], rel[..., 0, 0] + rel[..., 2, 2])
    return tx, tz, twist


@dataclass(frozen=True)
class Widened:
    """How far (radians) a limit grew: the largest growth of any cone side, and of the twist range."""

    cone: float
    twist: float

    @property
    def most(self) -> float:
        return max(self.cone, self.twist)


def _ratio(x: float, a: float) -> float:
    """(x / a)**2, with a zero half-angle holding only zero."""
    if a > 0.0:
        return (x / a) ** 2
    return 0.0 if x == 0.0 else math.inf


def _widen_quadrant(a: float, b: float, x: float, z: float) -> tuple[float, float]:
    """Semi-axes (a along x, b along z) grown so that the point (x, z) >= 0 lies inside the ellipse."""
    if _ratio(x, a) + _ratio(z, b) <= 1.0:
        return a, b
    if a <= 0.0 and b <= 0.0:
        return x * math.sqrt(2.0), z * math.sqrt(2.0)
    options: list[tuple[float, float, float]] = []  # (cost: area ratio, a, b)
    if a > 0.0 and x < a * 0.999:
        b1 = z / math.sqrt(1.0 - (x / a) ** 2)
        options.append((b1 / b if b > 0.0 else b1 / max(a, 1e-9), a, b1))
    if b > 0.0 and z < b * 0.999:
        a1 = x / math.sqrt(1.0 - (z / b) ** 2)
        options.append((a1 / a if a > 0.0 else a1 / max(b, 1e-9), a1, b))
    if a > 0.0 and b > 0.0:
        s = math.hypot(x / a, z / b)
        options.append((s * s, a * s, b * s))
    if not options:
        return (max(a, x * math.sqrt(2.0)), max(b, z * math.sqrt(2.0)))
    _, a2, b2 = min(options)
    return a2, b2


def fit(values: Limits, rel: F64, margin: float) -> tuple[Limits, Widened]:
    """`values` widened so that every rotation of `rel` (N,3,3) lies inside with `margin` (radians) to spare.

    Only the parts in use are widened (a bone with `use_cone` False keeps no cone). Returns the new values and
    how much they grew (zero when every rotation was inside already)."""
    out = dict(values)
    tx, tz, tw = (np.asarray(a, dtype=np.float64).ravel() for a in swing_twist(rel))
    grown_cone = grown_twist = 0.0
    if bool(values.get("use_cone", False)):
        theta = np.hypot(tx, tz)
        scale = np.where(theta > 1e-9, (theta + margin) / np.maximum(theta, 1e-9), 0.0)
        px, pz = tx * scale, tz * scale
        for xs, zs in (("right", "up"), ("right", "down"), ("left", "up"), ("left", "down")):
            sx = 1.0 if xs == "right" else -1.0
            sz = 1.0 if zs == "up" else -1.0
            pick = (px * sx >= 0.0) & (pz * sz >= 0.0) & (theta > 1e-9)
            if not pick.any():
                continue
            a, b = float(out[f"cone_{xs}"]), float(out[f"cone_{zs}"])
            xs_, zs_ = np.abs(px[pick]), np.abs(pz[pick])
            inside = np.array([_ratio(float(x), a) + _ratio(float(z), b) for x, z in zip(xs_, zs_, strict=True)])
            order = np.argsort(-inside)
            for k in order[inside[order] > 1.0]:
                a, b = _widen_quadrant(a, b, float(xs_[k]), float(zs_[k]))
            a, b = min(a, MAX_SIDE), min(b, MAX_SIDE)
            grown_cone = max(grown_cone, a - float(out[f"cone_{xs}"]), b - float(out[f"cone_{zs}"]))
            out[f"cone_{xs}"], out[f"cone_{zs}"] = a, b
    if bool(values.get("use_twist", False)) and tw.size:
        lo, hi = float(values["twist_min"]), float(values["twist_max"])
        new_lo = max(min(lo, float(tw.min()) - margin), -math.pi)
        new_hi = min(max(hi, float(tw.max()) + margin), math.pi)
        grown_twist = max(lo - new_lo, new_hi - hi)
        out["twist_min"], out["twist_max"] = new_lo, new_hi
    return out, Widened(grown_cone, grown_twist)
