"""Demo rigs built in code: a character, a tail, a tentacle with cone limits, a spider.

Used by `make demo` and by the benchmarks. Each builder returns the armature and the chains it describes as
plain tuples, so the same rig can be driven by Reach IK (`use_reach`) or by Blender's IK constraint
(`use_blender_ik`) for comparisons.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import bpy
from mathutils import Vector

Bone = tuple[str, str | None, tuple[float, float, float], tuple[float, float, float], bool]


@dataclass
class ChainSpec:
    name: str
    tip: str
    length: int
    solver: str
    target: bpy.types.Object
    pole: bpy.types.Object | None = None
    weight: float = 1.0


@dataclass
class Rig:
    obj: bpy.types.Object
    chains: list[ChainSpec] = field(default_factory=list)


def empty(name: str, location: Sequence[float], display: str = "SPHERE", size: float = 0.08) -> bpy.types.Object:
    ob = bpy.data.objects.new(name, None)
    ob.empty_display_type = display
    ob.empty_display_size = size
    bpy.context.scene.collection.objects.link(ob)
    ob.location = location
    return ob


def armature(name: str, bones: Sequence[Bone], location: Sequence[float] = (0, 0, 0)) -> bpy.types.Object:
    arm = bpy.data.armatures.new(name)
    obj = bpy.data.objects.new(name, arm)
    obj.location = location
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    for bname, parent, head, tail, connected in bones:
        eb = arm.edit_bones.new(bname)
        eb.head, eb.tail = head, tail
        if parent:
            eb.parent = arm.edit_bones[parent]
            eb.use_connect = connected
    bpy.ops.object.mode_set(mode="OBJECT")
    return obj


def _world(obj: bpy.types.Object, p: Sequence[float]) -> Vector:
    return obj.matrix_world @ Vector(p)


def character(location: Sequence[float] = (0, 0, 0), name: str = "Character") -> Rig:
    """A humanoid: FABRIK spine, two-bone arms and legs with poles, a CCD tail (6 chains)."""
    bones: list[Bone] = [
        ("hips", None, (0, 0, 1.0), (0, 0, 1.15), False),
        ("spine", "hips", (0, 0, 1.15), (0, 0.02, 1.35), True),
        ("spine.001", "spine", (0, 0.02, 1.35), (0, 0.0, 1.55), True),
        ("chest", "spine.001", (0, 0.0, 1.55), (0, -0.02, 1.72), True),
        ("neck", "chest", (0, -0.02, 1.72), (0, -0.02, 1.82), True),
        ("head", "neck", (0, -0.02, 1.82), (0, -0.02, 2.05), True),
    ]
    for side, s in (("L", 1.0), ("R", -1.0)):
        bones += [
            (f"shoulder.{side}", "chest", (s * 0.04, 0, 1.68), (s * 0.18, 0, 1.68), False),
            (f"upper_arm.{side}", f"shoulder.{side}", (s * 0.18, 0, 1.68), (s * 0.45, 0.04, 1.68), True),
            (f"forearm.{side}", f"upper_arm.{side}", (s * 0.45, 0.04, 1.68), (s * 0.72, 0, 1.68), True),
            (f"hand.{side}", f"forearm.{side}", (s * 0.72, 0, 1.68), (s * 0.82, 0, 1.68), True),
            (f"thigh.{side}", "hips", (s * 0.1, 0, 1.0), (s * 0.1, -0.04, 0.55), False),
            (f"shin.{side}", f"thigh.{side}", (s * 0.1, -0.04, 0.55), (s * 0.1, 0, 0.1), True),
            (f"foot.{side}", f"shin.{side}", (s * 0.1, 0, 0.1), (s * 0.1, -0.15, 0.0), True),
        ]
    prev = "hips"
    head = (0.0, 0.08, 1.02)
    for i in range(6):
        tail = (0.0, head[1] + 0.13, head[2] - 0.05 + 0.02 * i)
        bones.append((f"tail.{i:03d}", prev, head, tail, i > 0))
        prev, head = f"tail.{i:03d}", tail
    obj = armature(name, bones, location)
    rig = Rig(obj)
    rig.chains.append(
        ChainSpec("spine", "chest", 3, "FABRIK", empty(f"{name}.spine.target", _world(obj, (0, -0.02, 1.72))))
    )
    for side, s in (("L", 1.0), ("R", -1.0)):
        rig.chains.append(
            ChainSpec(
                f"arm.{side}",
                f"forearm.{side}",
                2,
                "TWO_BONE",
                empty(f"{name}.hand.{side}", _world(obj, (s * 0.72, 0, 1.68)), "CUBE", 0.05),
                empty(f"{name}.elbow.{side}", _world(obj, (s * 0.45, 0.5, 1.68)), "PLAIN_AXES", 0.05),
            )
        )
        rig.chains.append(
            ChainSpec(
                f"leg.{side}",
                f"shin.{side}",
                2,
                "TWO_BONE",
                empty(f"{name}.foot.{side}", _world(obj, (s * 0.1, 0, 0.1)), "CUBE", 0.05),
                empty(f"{name}.knee.{side}", _world(obj, (s * 0.1, -0.6, 0.55)), "PLAIN_AXES", 0.05),
            )
        )
    rig.chains.append(ChainSpec("tail", "tail.005", 6, "CCD", empty(f"{name}.tail.target", _world(obj, head))))
    return rig


def chain_bones(
    name: str, n: int, length: float, direction: Sequence[float] = (0, 0, 1), bend: float = 0.08
) -> list[Bone]:
    """n connected bones of `length` along `direction`, zig-zagging slightly so they have a bend plane."""
    d = Vector(direction).normalized()
    side = d.orthogonal().normalized()
    bones: list[Bone] = []
    head = Vector((0, 0, 0))
    for i in range(n):
        tail = head + d * length + side * (bend * length * (1 if i % 2 else -1))
        bones.append((f"{name}.{i:03d}", f"{name}.{i - 1:03d}" if i else None, tuple(head), tuple(tail), i > 0))
        head = tail
    return bones


def tentacle(location: Sequence[float] = (0, 0, 0), name: str = "Tentacle", n: int = 8) -> Rig:
    """A FABRIK tentacle with elliptical cone limits on every joint (wide sideways, narrow up/down)."""
    obj = armature(name, chain_bones("seg", n, 0.25), location)
    for pb in obj.pose.bones[1:]:
        lim = pb.reach_ik  # type: ignore[attr-defined]
        lim.use_cone = True
        lim.cone_left = lim.cone_right = math.radians(35)
        lim.cone_up = math.radians(20)
        lim.cone_down = math.radians(10)
        lim.use_twist = True
        lim.twist_min, lim.twist_max = math.radians(-10), math.radians(10)
    tip = obj.matrix_world @ obj.pose.bones[-1].tail
    rig = Rig(obj)
    rig.chains.append(ChainSpec("tentacle", f"seg.{n - 1:03d}", n, "FABRIK", empty(f"{name}.target", tip)))
    return rig


def spider(location: Sequence[float] = (0, 0, 0), name: str = "Spider") -> Rig:
    """8 legs that share the body bone: one multi-effector FABRIK tree."""
    bones: list[Bone] = [("body", None, (0, -0.3, 0.5), (0, 0.3, 0.5), False)]
    feet = []
    for i in range(8):
        a = math.radians(-67.5 + 45 * (i % 4))
        s = 1.0 if i < 4 else -1.0
        d = Vector((s * math.cos(a), math.sin(a), 0.0))
        hip = Vector((0.0, 0.0, 0.5)) + 0.15 * d
        knee = hip + 0.45 * d + Vector((0, 0, 0.3))
        foot = knee + 0.55 * d + Vector((0, 0, -0.8))
        bones.append((f"leg{i}.a", "body", tuple(hip), tuple(knee), False))
        bones.append((f"leg{i}.b", f"leg{i}.a", tuple(knee), tuple(foot), True))
        feet.append(foot)
    obj = armature(name, bones, location)
    rig = Rig(obj)
    for i, foot in enumerate(feet):
        rig.chains.append(
            ChainSpec(f"leg{i}", f"leg{i}.b", 3, "FABRIK", empty(f"{name}.foot{i}", _world(obj, foot), "CUBE", 0.04))
        )
    return rig


def wave_pose(rig: Rig, t: float, amplitude: float) -> None:
    """Pose every bone with smooth Euler waves (reachable target paths are made from such poses)."""
    for i, pb in enumerate(rig.obj.pose.bones):
        pb.rotation_mode = "XYZ"
        pb.rotation_euler = (
            amplitude * math.sin(t + 0.7 * i),
            0.5 * amplitude * math.sin(1.3 * t + i),
            amplitude * math.cos(0.9 * t + 0.3 * i),
        )


def rest_pose(rig: Rig) -> None:
    for pb in rig.obj.pose.bones:
        pb.rotation_euler = (0.0, 0.0, 0.0)


def use_reach(rig: Rig, **settings: object) -> None:
    """Drive the rig with Reach IK chains."""
    s = rig.obj.reach_ik  # type: ignore[attr-defined]
    for key, value in settings.items():
        setattr(s, key, value)
    for spec in rig.chains:
        ch = s.chains.add()
        ch.name, ch.tip_bone, ch.chain_length, ch.solver = spec.name, spec.tip, spec.length, spec.solver
        ch.target, ch.pole, ch.weight = spec.target, spec.pole, spec.weight


def use_blender_ik(rig: Rig, iterations: int = 500) -> None:
    """Drive the same chains with Blender's own IK constraint (the reference we compare against)."""
    for spec in rig.chains:
        con = rig.obj.pose.bones[spec.tip].constraints.new("IK")
        con.target = spec.target
        con.chain_count = spec.length
        con.iterations = iterations
        if spec.pole is not None:
            con.pole_target = spec.pole
            con.pole_angle = math.radians(-90)


def humanoid(convention: str, name: str = "Character", bent: bool = True, scale: float = 1.0) -> bpy.types.Object:
    """A humanoid skeleton in a naming convention of `demo.humanoids` (no IK), built in metres / `scale`.

    With `scale` 0.01 the bones are 100x longer under an object scale of 0.01, as a centimetre game rig
    imported from FBX is.
    """
    from .humanoids import bones

    rows = bones(convention, bent)
    k = 1.0 / scale
    obj = armature(
        name,
        [(n, p or None, tuple(x * k for x in h), tuple(x * k for x in t), False) for n, p, h, t in rows],
    )
    obj.scale = (scale, scale, scale)
    return obj
