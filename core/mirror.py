"""Mirroring joint limits to the other side of a symmetric rig (Symmetrize), bpy-free.

A mirror through the armature's X = 0 plane (Blender's Symmetrize plane) turns a cone side of one bone into
a side of its mirrored twin. For bones whose rolls mirror (as Blender's Symmetrize makes them), left and
right swap, up and down stay, and a twist to one side becomes a twist to the other (min -max, max -min). For
any other pair of rest frames each side goes to the twin's side nearest its mirror image.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]

_SIDE_AXES: dict[str, tuple[int, float]] = {"right": (0, 1.0), "left": (0, -1.0), "up": (2, 1.0), "down": (2, -1.0)}
MIRROR_X = np.diag([-1.0, 1.0, 1.0])


def _side_of(v: F64) -> str:
    return max(_SIDE_AXES, key=lambda s: float(v[_SIDE_AXES[s][0]]) * _SIDE_AXES[s][1])


def mirror_limits(values: dict[str, float | bool], rest_a: F64, rest_b: F64) -> dict[str, float | bool]:
    """Bone A's limit settings as bone B's, B being A mirrored through X = 0 (rest rotations, armature space).

    `values` holds ``use_cone``, ``cone_up``/``down``/``left``/``right``, ``use_twist``, ``twist_min``/``max``.
    """
    ra = np.asarray(rest_a, dtype=np.float64)[:3, :3]
    rb = np.asarray(rest_b, dtype=np.float64)[:3, :3]
    ra = ra / np.maximum(np.linalg.norm(ra, axis=0), 1e-12)
    rb = rb / np.maximum(np.linalg.norm(rb, axis=0), 1e-12)
    to_a = ra.T @ MIRROR_X @ rb  # a direction in B's frame -> its mirror image in A's frame
    out = dict(values)
    for side, (axis, sign) in _SIDE_AXES.items():
        v = np.zeros(3)
        v[axis] = sign
        out[f"cone_{side}"] = values[f"cone_{_side_of(to_a @ v)}"]
    # A mirror reverses the sense of a turn about the bone's own axis.
    out["twist_min"], out["twist_max"] = -float(values["twist_max"]), -float(values["twist_min"])
    return out
