"""Rigs built in code for the in-process tests (Blender's own tests do the same in setUp)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import bpy
import numpy as np
from mathutils import Matrix, Vector

from demo import rigs as demo_rigs


def armature(name: str = "Rig", bones: Sequence[tuple[str, str | None, tuple, tuple, bool]] = ()) -> bpy.types.Object:
    """An armature object linked to the scene; bones are (name, parent, head, tail, connected)."""
    return demo_rigs.armature(name, bones)


def chain_rig(
    n: int = 3, length: float = 1.0, name: str = "Rig", gap: float = 0.0, bend: float = 0.15
) -> bpy.types.Object:
    """A chain of n bones along +Z with a slight zig-zag bend (so 'KEEP' has a bend plane).

    `gap` > 0 makes the bones disconnected: each head sits `gap` beyond its parent's tail.
    """
    bones = []
    head = Vector((0.0, 0.0, 0.0))
    for i in range(n):
        tail = head + Vector((bend * (1 if i % 2 else -1) * length, 0.0, length))
        bones.append((f"b{i}", f"b{i - 1}" if i else None, tuple(head), tuple(tail), gap == 0.0))
        head = tail + Vector((gap, 0.0, 0.0))
    return armature(name, bones)


def empty(name: str, location: Sequence[float] = (0, 0, 0), parent: bpy.types.Object | None = None) -> bpy.types.Object:
    ob = demo_rigs.empty(name, location, display="PLAIN_AXES", size=0.1)
    if parent is not None:
        ob.parent = parent
    return ob


def add_chain(
    rig: bpy.types.Object,
    tip: str,
    length: int,
    target: bpy.types.Object,
    solver: str = "FABRIK",
    pole: bpy.types.Object | None = None,
    name: str = "",
) -> bpy.types.PropertyGroup:
    ch = rig.reach_ik.chains.add()
    ch.name = name or tip
    ch.tip_bone = tip
    ch.chain_length = length
    ch.solver = solver
    ch.target = target
    ch.pole = pole
    return ch


def update() -> None:
    """Evaluate, and let live rigs settle: where the live budget cut a search (`rig.live.carry_on`), evaluate
    again as a viewport's redraws do, until no rig has one left to go on with."""
    bpy.context.view_layer.update()
    live = next((m for name, m in sys.modules.items() if name.endswith("reach_ik.rig.live")), None)
    for _ in range(500):
        if live is None or not live.carrying():
            break
        live.carry_on()
        bpy.context.view_layer.update()


def world_tail(rig: bpy.types.Object, bone: str) -> np.ndarray:
    """The bone's tail in world space, measured from Blender's evaluated pose (not our arrays)."""
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    pb = ev.pose.bones[bone]
    return np.array(ev.matrix_world @ pb.tail)


def world_head(rig: bpy.types.Object, bone: str) -> np.ndarray:
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    return np.array(ev.matrix_world @ ev.pose.bones[bone].head)


def pose_snapshot(rig: bpy.types.Object) -> bytes:
    """Every pose channel of every bone, as raw bytes (for 'byte-identical' checks)."""
    out = b""
    pbs = rig.pose.bones
    for attr, width in (
        ("rotation_quaternion", 4),
        ("rotation_euler", 3),
        ("rotation_axis_angle", 4),
        ("location", 3),
        ("scale", 3),
    ):
        buf = np.empty(len(pbs) * width, dtype=np.float32)
        pbs.foreach_get(attr, buf)
        out += buf.tobytes()
    return out


def world_matrix(m: Matrix) -> np.ndarray:
    return np.array(m)
