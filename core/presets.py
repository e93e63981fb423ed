"""Joint-limit presets (Ball, Hinge, Shoulder, Knee/Elbow, Spine) as the values they write, bpy-free.

The Limits Preset operator and the character set-up (`operators/setup.py`) both fill `PoseBone.reach_ik`
from `preset_values`. Cone sides follow the bone's frame: ``right`` +X, ``left`` -X, ``up`` +Z, ``down`` -Z
(solvers/limits.py), so which side a hinge bends toward is read from the bone's rest bend, or given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

PRESET_ITEMS = [
    ("BALL", "Ball", "Ball-and-socket (hip, wrist): 60° every way, free twist"),
    ("HINGE", "Hinge", "Bends both ways in one plane (150°), no side swing, twist ±5°"),
    ("SHOULDER", "Shoulder", "Wide ellipse: 100° in the bend plane, 70° across it, twist ±60°"),
    ("KNEE", "Knee / Elbow", "Bends one way (150°) and straightens only to straight, twist ±5°"),
    ("SPINE", "Spine", "One vertebra: 25° in the bend plane, 20° across, twist ±15°"),
]


def bend_axes(rest_parent_dir: Iterable[float]) -> tuple[str, str, float]:
    """Which cone sides a bone bends toward, from its parent's rest direction in its reference frame.

    Returns ``(bend, straighten, rest_angle)``: the side the bone bends further toward, the opposite side
    (toward straight) and the rest bend angle in radians. A bone straight in line with its parent (or a
    root) bends toward ``'up'`` (+Z): Blender's limbs, Rigify's metarig included, bend about the bone's X
    axis, toward +Z.
    """
    p = np.asarray(list(rest_parent_dir), dtype=np.float64)
    p = p / max(float(np.linalg.norm(p)), 1e-12)
    angle = float(math.atan2(math.hypot(p[0], p[2]), p[1]))
    if angle < math.radians(1.0):
        return "up", "down", 0.0
    # Bending further moves the bone's +Y away from the parent's direction: toward -p in the X-Z plane.
    if abs(p[2]) >= abs(p[0]):
        return ("up", "down", angle) if p[2] < 0 else ("down", "up", angle)
    return ("right", "left", angle) if p[0] < 0 else ("left", "right", angle)


_ACROSS = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"), "right": ("up", "down")}


def side_toward(direction: Sequence[float]) -> str:
    """The cone side (`up`, `down`, `left`, `right`) nearest to `direction`, given in the bone's own frame."""
    x, z = float(direction[0]), float(direction[2])
    if abs(z) >= abs(x):
        return "up" if z >= 0.0 else "down"
    return "right" if x >= 0.0 else "left"


_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


def preset_values(preset: str, rest_parent_dir: Iterable[float], bend: str | None = None) -> dict[str, float | bool]:
    """The limit settings a preset writes, for a bone whose parent points along `rest_parent_dir`.

    `bend` names the side a hinge bends toward when the rest pose does not say it (a straight limb): the
    character set-up passes the side the knee or elbow must bend to, found from the character's facing.
    """
    bend_side, straighten, rest = bend_axes(rest_parent_dir)
    if bend is not None and rest < math.radians(2.0):
        bend_side, straighten = bend, _OPPOSITE[bend]
    bend = bend_side
    across = _ACROSS[bend]
    deg = math.radians
    cone = {"up": 0.0, "down": 0.0, "left": 0.0, "right": 0.0}
    twist: tuple[float, float] | None
    if preset == "BALL":
        cone = dict.fromkeys(cone, deg(60.0))
        twist = None
    elif preset == "HINGE":
        cone[bend] = cone[straighten] = deg(150.0)
        cone[across[0]] = cone[across[1]] = deg(2.0)
        twist = (deg(-5.0), deg(5.0))
    elif preset == "KNEE":
        cone[bend] = deg(150.0)
        # Back to straight (the rest bend) and no further: no hyperextension.
        cone[straighten] = max(rest, deg(1.0))
        cone[across[0]] = cone[across[1]] = deg(2.0)
        twist = (deg(-5.0), deg(5.0))
    elif preset == "SHOULDER":
        cone[bend] = cone[straighten] = deg(100.0)
        cone[across[0]] = cone[across[1]] = deg(70.0)
        twist = (deg(-60.0), deg(60.0))
    elif preset == "SPINE":
        cone[bend] = cone[straighten] = deg(25.0)
        cone[across[0]] = cone[across[1]] = deg(20.0)
        twist = (deg(-15.0), deg(15.0))
    else:
        raise ValueError(f"unknown limits preset {preset!r}: use one of {[p[0] for p in PRESET_ITEMS]}")
    values: dict[str, float | bool] = {f"cone_{side}": v for side, v in cone.items()}
    values["use_cone"] = True
    values["use_twist"] = twist is not None
    if twist is not None:
        values["twist_min"], values["twist_max"] = twist
    return values
