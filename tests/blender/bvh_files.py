"""Small BVH files of the shapes other motion-capture datasets come in, written from the format's docs.

The BVH format (Biovision; as documented by the CMU conversions and Blender's importer): a HIERARCHY of
`ROOT`/`JOINT` blocks, each with an `OFFSET` from its parent joint and `CHANNELS` (the root's three positions
and every joint's three rotations, here in Z X Y order as CMU's files), a leaf closed by an `End Site`, then
MOTION: `Frames:`, `Frame Time:` and one line of channel values per frame, degrees for rotations. Y is up.

Shapes (`SHAPES`):
- ``lying``: every offset along +-X (a rest pose lying along one axis, the left and right limbs on top of each
  other), generic names (`UpperArm_L`, `LowerLeg_R`), the motion standing it up;
- ``apose``: Mixamo's names in an A-pose (arms 45 degrees down), centimetres;
- ``unreal_cm``: the Unreal mannequin's names in a T-pose, centimetres.

Each motion walks: thighs swing, knees and elbows bend one way, the spine sways.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

Vec = tuple[float, float, float]
# (name, parent, offset from the parent joint)
Joint = tuple[str, str, Vec]
Pose = dict[str, Vec]  # joint -> (z, x, y) rotation in degrees


def _humanoid(names: dict[str, str], s: float, arm_dir: Vec, lying: bool) -> list[Joint]:
    """A humanoid's joints under `names` (role -> joint name), `s` units a metre; arms along `arm_dir` from
    the shoulder (left side; mirrored in X for the right). `lying`: every offset along +-X instead."""

    def o(x: float, y: float, z: float = 0.0) -> Vec:
        if lying:
            # Along X only: up becomes +X, down -X, sideways folds onto the axis.
            return (s * (y if abs(y) > 1e-9 else abs(x)), 0.0, 0.0)
        return (s * x, s * y, s * z)

    n = names
    out: list[Joint] = [
        (n["hips"], "", (0.0, 0.0, 0.0)),
        (n["spine"], n["hips"], o(0.0, 0.1)),
        (n["chest"], n["spine"], o(0.0, 0.2)),
        (n["neck"], n["chest"], o(0.0, 0.25)),
        (n["head"], n["neck"], o(0.0, 0.1)),
    ]
    for side, sx in (("L", 1.0), ("R", -1.0)):
        ax, ay, az = arm_dir
        out += [
            (n[f"clavicle{side}"], n["chest"], o(0.03 * sx, 0.2)),
            (n[f"upperarm{side}"], n[f"clavicle{side}"], o(0.15 * sx, 0.0)),
            (n[f"forearm{side}"], n[f"upperarm{side}"], o(0.28 * ax * sx, 0.28 * ay, 0.28 * az)),
            (n[f"hand{side}"], n[f"forearm{side}"], o(0.25 * ax * sx, 0.25 * ay, 0.25 * az)),
            (n[f"thigh{side}"], n["hips"], o(0.1 * sx, -0.05) if not lying else (0.0, 0.0, 0.0)),
            (n[f"shin{side}"], n[f"thigh{side}"], o(0.0, -0.45)),
            (n[f"foot{side}"], n[f"shin{side}"], o(0.0, -0.42)),
        ]
        if lying:
            # Legs run along -X (down once stood up), arms along +X (raised).
            out = [
                (j, p, (-abs(v[0]), 0.0, 0.0) if j in (n[f"shin{side}"], n[f"foot{side}"]) else v) for j, p, v in out
            ]
    return out


MIXAMO = {
    "hips": "mixamorig:Hips",
    "spine": "mixamorig:Spine",
    "chest": "mixamorig:Spine2",
    "neck": "mixamorig:Neck",
    "head": "mixamorig:Head",
} | {
    f"{role}{side}": f"mixamorig:{word}{bone}"
    for side, word in (("L", "Left"), ("R", "Right"))
    for role, bone in (
        ("clavicle", "Shoulder"),
        ("upperarm", "Arm"),
        ("forearm", "ForeArm"),
        ("hand", "Hand"),
        ("thigh", "UpLeg"),
        ("shin", "Leg"),
        ("foot", "Foot"),
    )
}
UNREAL = {"hips": "pelvis", "spine": "spine_01", "chest": "spine_03", "neck": "neck_01", "head": "head"} | {
    f"{role}{side}": f"{bone}_{side.lower()}"
    for side in ("L", "R")
    for role, bone in (
        ("clavicle", "clavicle"),
        ("upperarm", "upperarm"),
        ("forearm", "lowerarm"),
        ("hand", "hand"),
        ("thigh", "thigh"),
        ("shin", "calf"),
        ("foot", "foot"),
    )
}
GENERIC = {"hips": "Hips", "spine": "Spine", "chest": "Chest", "neck": "Neck", "head": "Head"} | {
    f"{role}{side}": f"{bone}_{side}"
    for side in ("L", "R")
    for role, bone in (
        ("clavicle", "Clavicle"),
        ("upperarm", "UpperArm"),
        ("forearm", "LowerArm"),
        ("hand", "Hand"),
        ("thigh", "UpperLeg"),
        ("shin", "LowerLeg"),
        ("foot", "Foot"),
    )
}


def _walk(names: dict[str, str], stand: Vec, bend_axis: int) -> Callable[[float], Pose]:
    """A walk cycle: joint rotations (z, x, y degrees) at phase t; `stand` rotates the root (a lying skeleton
    stands up); knees and elbows bend about local axis `bend_axis` (0 z, 1 x, 2 y)."""

    def about(axis: int, deg: float) -> Vec:
        v = [0.0, 0.0, 0.0]
        v[axis] = deg
        return (v[0], v[1], v[2])

    def pose(t: float) -> Pose:
        out: Pose = {names["hips"]: stand, names["spine"]: (3.0 * math.sin(t), 0.0, 5.0 * math.sin(t))}
        for side, phase in (("L", 0.0), ("R", math.pi)):
            swing = math.sin(t + phase)
            out[names[f"thigh{side}"]] = about(bend_axis, -30.0 * swing)
            out[names[f"shin{side}"]] = about(bend_axis, 35.0 + 30.0 * math.sin(t + phase + 1.0))
            out[names[f"upperarm{side}"]] = about(bend_axis, 20.0 * swing)
            out[names[f"forearm{side}"]] = about(bend_axis, -(25.0 + 20.0 * math.sin(t + phase)))
        return out

    return pose


SHAPES: dict[str, tuple[list[Joint], Callable[[float], Pose], float]] = {
    # The root turned 90 degrees about Z stands the lying skeleton up (+X up); its lateral axis is then local Y.
    "lying": (_humanoid(GENERIC, 1.0, (1.0, 0.0, 0.0), lying=True), _walk(GENERIC, (90.0, 0.0, 0.0), 2), 1.0),
    "apose": (
        _humanoid(MIXAMO, 100.0, (math.sqrt(0.5), -math.sqrt(0.5), 0.0), lying=False),
        _walk(MIXAMO, (0.0, 0.0, 0.0), 1),
        100.0,
    ),
    "unreal_cm": (_humanoid(UNREAL, 100.0, (1.0, 0.0, 0.0), lying=False), _walk(UNREAL, (0.0, 0.0, 0.0), 1), 100.0),
}


def write(path: Path, shape: str, frames: int = 48) -> Path:
    """Write the BVH file of `shape` with `frames` frames of its walk to `path`."""
    joints, walk, scale = SHAPES[shape]
    kids: dict[str, list[Joint]] = {}
    for j in joints:
        kids.setdefault(j[1], []).append(j)
    lines = ["HIERARCHY"]

    def block(j: Joint, depth: int) -> None:
        pad = "\t" * depth
        name, _parent, off = j
        lines.append(f"{pad}{'ROOT' if depth == 0 else 'JOINT'} {name}")
        lines.append(f"{pad}{{")
        lines.append(f"{pad}\tOFFSET {off[0]:.6f} {off[1]:.6f} {off[2]:.6f}")
        if depth == 0:
            lines.append(f"{pad}\tCHANNELS 6 Xposition Yposition Zposition Zrotation Xrotation Yrotation")
        else:
            lines.append(f"{pad}\tCHANNELS 3 Zrotation Xrotation Yrotation")
        for k in kids.get(name, []):
            block(k, depth + 1)
        if name not in kids:
            length = math.sqrt(sum(c * c for c in off)) or 0.1 * scale
            d = [c / length for c in off] if any(off) else [0.0, 1.0, 0.0]
            end = [0.4 * length * c for c in d]
            lines.append(f"{pad}\tEnd Site")
            lines.append(f"{pad}\t{{")
            lines.append(f"{pad}\t\tOFFSET {end[0]:.6f} {end[1]:.6f} {end[2]:.6f}")
            lines.append(f"{pad}\t}}")
        lines.append(f"{pad}}}")

    block(kids[""][0], 0)
    lines += ["MOTION", f"Frames: {frames}", "Frame Time: 0.0333333"]
    order = [j[0] for j in _depth_first(kids, kids[""][0])]
    for f in range(frames):
        pose = walk(2.0 * math.pi * f / frames)
        values = [0.0, 1.0 * scale, 0.02 * scale * f]
        for name in order:
            values += list(pose.get(name, (0.0, 0.0, 0.0)))
        lines.append(" ".join(f"{v:.5f}" for v in values))
    path.write_text("\n".join(lines) + "\n")
    return path


def _depth_first(kids: dict[str, list[Joint]], j: Joint) -> list[Joint]:
    out = [j]
    for k in kids.get(j[0], []):
        out += _depth_first(kids, k)
    return out
