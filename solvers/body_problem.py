"""The full-body stage's problem and result, its settings, and the spine's limit tests shared by its two
computations: on numpy arrays (`solvers.body`, the reference) and in plain floats (`solvers.body_floats`).
`solvers.body` describes the method."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from .arrays import F64, I64, Bools
from .limits import JointLimits
from .rotations import minimal_rotation

BODY_ITERATIONS: Final = 12
"""Gauss-Newton iterations at most (3-6 are typical: the rows are exact distances)."""
ROOT_MOVE: Final = 1.0
"""Cost of moving the root by one unit of the body's size (the metric's translation weight)."""
ROOT_TURN: Final = 1.0
"""Cost of turning the root by one radian (times the body's size squared)."""
SPINE_TURN: Final = 0.5
"""Cost of turning one spine bone by one radian: below the root's, so a reach bends the spine first."""
PIN_WEIGHT: Final = 1e4
"""Weight of a bound's row next to a pull's (weight 1): bounds are kept whatever the pulls want."""
FOLLOW: Final = 1e-3
"""A leader's weight (times its pull) just past its reach, next to one far past: it gives way."""
LEAD_RAMP: Final = 0.05
"""Excess (times the body's size) over which a pull's weight ramps from ``FOLLOW`` up to its pull."""
REACH_MARGIN: Final = 1e-6
"""The body brings a pulling anchor to within (1 - margin) of its reach (the limb then reaches exactly)."""
MAX_TURN: Final = 0.35
"""Largest turn (radians) and move (times the body's size) of one iteration: Gauss-Newton's linear model
holds within about this much."""
_DAMPING: Final = 1e-9
_FOLLOW_DAMPING: Final = 1e-4
_HALVINGS: Final = 3
_CORRECTIONS: Final = 3
_STALL: Final = 1e-3
_SLACK: Final = 1e-9
"""How far (times the body's size) a pin may end past its bound: rounding, far below any tolerance."""


@dataclass(frozen=True)
class BodyProblem:
    """A body and its anchors (all positions in one common space; frames' columns are the bones' axes).

    Parameters
    ----------
    parents : (B,) int
        Body bone parents, topological (``parents[b] < b``); bone 0 is the root (-1).
    heads, frames : (B, 3), (B, 3, 3)
        The body's pose now (the start: nothing pulls, nothing moves).
    ref_local : (B, 3, 3)
        Each bone's rest frame relative to its body parent's frame (where its limits live; row 0 unused).
    anchor_bones, anchor_offsets : (A,) int, (A, 3)
        The body bone each anchor hangs from and the anchor's offset from that bone's head, in its frame.
    reach : (A,)
        How far each anchor's limb reaches (> 0).
    targets : (A, 3)
        What each limb reaches for.
    pull : (A,)
        How strongly each unpinned anchor moves the body (>= 0; 0: its limb alone moves).
    pinned : (A,) bool
        Anchors the body never takes out of their limb's reach.
    limits : JointLimits, shape (1, B), optional
        Joint limits of the body bones (row 0, the root, is ignored).
    move_root : bool
        Whether the root may move (a connected root bone only turns).
    max_iterations : int
    tolerance : float
        A pull within this of its reach counts as reached.
    """

    parents: I64
    heads: F64
    frames: F64
    ref_local: F64
    anchor_bones: I64
    anchor_offsets: F64
    reach: F64
    targets: F64
    pull: F64
    pinned: Bools
    limits: JointLimits | None = None
    move_root: bool = True
    max_iterations: int = BODY_ITERATIONS
    tolerance: float = 1e-4

    def __post_init__(self) -> None:
        b = np.asarray(self.parents).shape[0]
        a = np.asarray(self.anchor_bones).shape[0]
        shapes = {
            "heads": (b, 3),
            "frames": (b, 3, 3),
            "ref_local": (b, 3, 3),
            "anchor_offsets": (a, 3),
            "reach": (a,),
            "targets": (a, 3),
            "pull": (a,),
            "pinned": (a,),
        }
        for name, shape in shapes.items():
            value = np.asarray(getattr(self, name))
            if value.shape != shape:
                raise ValueError(f"BodyProblem.{name} must have shape {shape}, got {value.shape}")
            if name != "pinned" and not np.isfinite(value).all():
                raise ValueError(f"BodyProblem.{name} holds NaN or inf")
        parents = np.asarray(self.parents)
        if b == 0 or parents[0] != -1 or (b > 1 and not ((parents[1:] >= 0) & (parents[1:] < np.arange(1, b))).all()):
            raise ValueError("BodyProblem.parents must be topological with bone 0 the only root (-1)")
        bones = np.asarray(self.anchor_bones)
        if a and ((bones < 0) | (bones >= b)).any():
            raise ValueError(f"BodyProblem.anchor_bones must index the {b} body bones")
        if a and (np.asarray(self.reach) <= 0.0).any():
            raise ValueError("BodyProblem.reach must be above 0 for every anchor")
        if a and (np.asarray(self.pull) < 0.0).any():
            raise ValueError("BodyProblem.pull must be 0 or more")


@dataclass(frozen=True)
class BodyResult:
    """The body's new pose and how far each anchor's target still lies beyond its limb's reach."""

    heads: F64  # (B, 3)
    frames: F64  # (B, 3, 3)
    iterations: int
    excess: F64  # (A,) max(|target - anchor| - reach, 0) after the solve
    blocked: bool  # a pin's bound held the body back while a pull was still beyond reach
    moved: bool  # the body's pose differs from the start


def _radial_cone(ref: F64, local: F64, cone: F64, use_cone: Bools) -> F64:
    """`local` frames whose Y axis lies outside its elliptical cone (about `ref`) turned back into it along
    the same azimuth (a hair inside the boundary), so `apply_joint_limits` finds them inside and skips its
    exact nearest-point search (~0.4 ms a bone here, a third of a body solve). Inside the limits as well,
    and continuous, though not the nearest point: the body stage only needs its poses inside the limits."""
    rel = np.swapaxes(ref, 1, 2) @ local
    x, y, z = rel[:, 0, 1], rel[:, 1, 1], rel[:, 2, 1]
    rho = np.sqrt(x * x + z * z)
    theta = np.arctan2(rho, y)
    a = np.where(x >= 0.0, cone[:, 3], cone[:, 2])  # right, left (limits.RIGHT, limits.LEFT)
    b = np.where(z >= 0.0, cone[:, 0], cone[:, 1])  # up, down
    q = np.sqrt((x / np.maximum(a, 1e-150)) ** 2 + (z / np.maximum(b, 1e-150)) ** 2)
    most = rho / np.maximum(q, 1e-300) * (1.0 - 1e-9)
    # Straight backward (rho ~ 0 with theta ~ pi) has no azimuth: left to the exact clamp.
    out_rows = use_cone & (theta > most) & (rho > 1e-9)
    if not out_rows.any():
        return local
    idx = np.flatnonzero(out_rows)
    old = rel[idx, :, 1]
    s_new = np.sin(most[idx]) / rho[idx]
    new = np.stack([x[idx] * s_new, np.cos(most[idx]), z[idx] * s_new], axis=1)
    out = local.copy()
    out[idx] = ref[idx] @ (minimal_rotation(old, new) @ rel[idx])
    return out


_CLEAR: Final = 1e-6
"""How far inside its limits (relative, radians) a bone must be for `_clearly_inside` to say so."""
_LimitRow = tuple[list[list[float]], tuple[float, float, float, float] | None, tuple[float, float] | None]


def _limit_rows(ref: F64, limits: JointLimits) -> list[_LimitRow] | None:
    """Per body bone below the root: its reference frame transposed, its cone and twist range (None: unused),
    as Python floats for `_clearly_inside`; None when a cone is too thin for that test (the exact path)."""
    rows: list[_LimitRow] = []
    n = ref.shape[0]
    use_cone, use_twist = limits.use_cone[0, 1 : n + 1].tolist(), limits.use_twist[0, 1 : n + 1].tolist()
    cones, twists = limits.cone[0, 1 : n + 1].tolist(), limits.twist[0, 1 : n + 1].tolist()
    for ref_t, uc, c, ut, t in zip(np.swapaxes(ref, 1, 2).tolist(), use_cone, cones, use_twist, twists, strict=True):
        cone = tuple(c) if uc else None
        if cone is not None and min(cone) < 1e-3:
            return None
        rows.append((ref_t, cone, tuple(t) if ut else None))
    return rows


def _clearly_inside(rows: list[_LimitRow], local: F64 | list[list[list[float]]]) -> bool:
    """Whether every bone's `local` frame (an array, or nested lists of rows) is inside its cone and twist
    range by a margin (plain floats, a few microseconds): then `_radial_cone` and `apply_joint_limits` would
    give `local` back unchanged, bit for bit, and are skipped. False when in doubt (they run: the exact path)."""
    for (ref_t, cone, twist), m in zip(rows, local.tolist() if isinstance(local, np.ndarray) else local, strict=True):
        if cone is not None:
            x = ref_t[0][0] * m[0][1] + ref_t[0][1] * m[1][1] + ref_t[0][2] * m[2][1]
            y = ref_t[1][0] * m[0][1] + ref_t[1][1] * m[1][1] + ref_t[1][2] * m[2][1]
            z = ref_t[2][0] * m[0][1] + ref_t[2][1] * m[1][1] + ref_t[2][2] * m[2][1]
            if y <= 0.0:
                return False
            rho = math.sqrt(x * x + z * z)
            if rho > 0.0:
                a = cone[3] if x >= 0.0 else cone[2]  # right, left
                b = cone[0] if z >= 0.0 else cone[1]  # up, down
                most = rho / math.sqrt((x / a) ** 2 + (z / b) ** 2)
                if math.atan2(rho, y) > most * (1.0 - _CLEAR):
                    return False
        if twist is not None and twist[1] - twist[0] < 2.0 * math.pi - _CLEAR:
            r0, r2 = ref_t[0], ref_t[2]
            r00 = r0[0] * m[0][0] + r0[1] * m[1][0] + r0[2] * m[2][0]
            r02 = r0[0] * m[0][2] + r0[1] * m[1][2] + r0[2] * m[2][2]
            r20 = r2[0] * m[0][0] + r2[1] * m[1][0] + r2[2] * m[2][0]
            r22 = r2[0] * m[0][2] + r2[1] * m[1][2] + r2[2] * m[2][2]
            tw = math.atan2(r02 - r20, r00 + r22)
            if not twist[0] + _CLEAR <= tw <= twist[1] - _CLEAR:
                return False
    return True
