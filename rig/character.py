"""The character set-up's bpy side: read a skeleton for `core.humanoid`, make a `core.character` plan real.

`read_skeleton` returns plain arrays (no solving here); `apply_plan` creates the control bones (or Empties),
the chains and the limits in one pass, leaving the pose as it was: every control is placed where the pose
puts its chain's tip now, also under a posed parent bone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import bpy
import numpy as np
from mathutils import Matrix, Vector
from numpy.typing import NDArray

from ..core import convert
from ..core.character import ChainSpec, SetupPlan
from ..core.humanoid import SkeletonInfo
from . import anim, ikfk_follow
from .ikfk_follow import FOLLOW_CONSTRAINT
from .props import bone_limits, rig_settings

#: At most this many frames of an animation are read to fit limits to it (a longer action is sampled evenly).
MOTION_FRAMES = 4000

#: The bone collection control bones go to (Blender 4.0+ armatures), so a rigger can show or hide them.
CONTROLS_COLLECTION = "Reach IK Controls"


@dataclass(frozen=True)
class SkeletonRead:
    info: SkeletonInfo
    rest: NDArray[np.float64]  # (B,4,4) Bone.matrix_local
    length: NDArray[np.float64]  # (B,) Bone.length
    pose: NDArray[np.float64]  # (B,4,4) PoseBone.matrix


def read_skeleton(obj: bpy.types.Object) -> SkeletonRead:
    """Names, parents, rest and pose matrices (armature space) of `obj`'s bones, in `obj.data.bones` order."""
    arm = obj.data
    assert isinstance(arm, bpy.types.Armature) and obj.pose is not None
    bones = list(arm.bones)
    index = {b.name: i for i, b in enumerate(bones)}
    parent = tuple(index[b.parent.name] if b.parent is not None else -1 for b in bones)
    rest = np.array([np.array(b.matrix_local) for b in bones], dtype=np.float64).reshape(-1, 4, 4)
    length = np.array([b.length for b in bones], dtype=np.float64)
    pose = np.array([np.array(obj.pose.bones[b.name].matrix) for b in bones], dtype=np.float64).reshape(-1, 4, 4)
    head = np.array([b.head_local for b in bones], dtype=np.float64).reshape(-1, 3)
    tail = np.array([b.tail_local for b in bones], dtype=np.float64).reshape(-1, 3)
    info = SkeletonInfo(tuple(b.name for b in bones), parent, head, tail)
    return SkeletonRead(info, rest, length, pose)


def read_motion(obj: bpy.types.Object, names: tuple[str, ...]) -> tuple[NDArray[np.float64], str] | None:
    """(F,B,3,3) every bone's basis rotation on each frame of `obj`'s action (bones in `names` order), and the
    action's name; None when the armature has no action.

    Read from the action's F-Curves (a channel with no curve keeps its value now), without stepping the
    scene: mocap clips run to thousands of frames. Constraints and drivers are not part of it."""
    ad = obj.animation_data
    action = ad.action if ad is not None else None
    if action is None or obj.pose is None:
        return None
    start, end = round(action.frame_range[0]), round(action.frame_range[1])
    frames = np.arange(start, end + 1, dtype=np.float64)
    if len(frames) > MOTION_FRAMES:
        frames = np.linspace(start, end, MOTION_FRAMES)
    curves = anim.fcurve_map(action, obj)
    out = np.empty((len(frames), len(names), 3, 3))
    for b, name in enumerate(names):
        pb = obj.pose.bones[name]
        mode = pb.rotation_mode
        path, width = {
            "QUATERNION": ("rotation_quaternion", 4),
            "AXIS_ANGLE": ("rotation_axis_angle", 4),
        }.get(mode, ("rotation_euler", 3))
        now = list(getattr(pb, path))
        base = f'pose.bones["{bpy.utils.escape_identifier(name)}"].{path}'
        values = np.empty((len(frames), width))
        for i in range(width):
            fc = curves.get((base, i))
            values[:, i] = [fc.evaluate(float(f)) for f in frames] if fc is not None else now[i]
        if mode == "QUATERNION":
            q = values / np.maximum(np.linalg.norm(values, axis=1, keepdims=True), 1e-12)
            out[:, b] = convert.quaternion_to_matrix(q)
        elif mode == "AXIS_ANGLE":
            axis = values[:, 1:] / np.maximum(np.linalg.norm(values[:, 1:], axis=1, keepdims=True), 1e-12)
            half = 0.5 * values[:, :1]
            out[:, b] = convert.quaternion_to_matrix(np.concatenate([np.cos(half), axis * np.sin(half)], axis=1))
        else:
            out[:, b] = convert.euler_to_matrix(values, mode)
    return out, action.name


def unique_name(existing: Collection[str], base: str, first: int = 1) -> str:
    """`base`, or `base.001` (from `first`) and up, whichever is not in `existing` (Blender's own scheme)."""
    if base not in existing:
        return base
    i = first
    while f"{base}.{i:03d}" in existing:
        i += 1
    return f"{base}.{i:03d}"


@contextmanager
def edit_mode(context: bpy.types.Context, obj: bpy.types.Object) -> Iterator[bpy.types.Armature]:
    """Edit Mode on armature `obj` for the block (its data yielded), then back to Object or Pose Mode."""
    arm = obj.data
    assert isinstance(arm, bpy.types.Armature)
    mode = obj.mode
    view_layer = context.view_layer
    assert view_layer is not None
    view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    try:
        yield arm
    finally:
        bpy.ops.object.mode_set(mode=mode if mode in {"OBJECT", "POSE"} else "OBJECT")


def _rest_under(parent: str, want: NDArray[np.float64], sk: SkeletonRead | None) -> NDArray[np.float64]:
    """The rest matrix a new child of bone `parent` needs so that its pose (identity channels) is `want`."""
    if not parent or sk is None:
        return want
    p = sk.info.names.index(parent)
    return np.asarray(sk.rest[p] @ np.linalg.inv(sk.pose[p]) @ want)


class Journal:
    """What a set-up made or changed, newest last, so a failure half-way can take all of it back
    (`rollback`): the operator is all or nothing."""

    def __init__(self, obj: bpy.types.Object) -> None:
        self.obj_name = obj.name
        self.chains = len(rig_settings(obj).chains)
        self.active_chain = rig_settings(obj).active_chain_index
        self.bones: list[str] = []  # control bones made
        self.collection = False  # whether the controls' bone collection was made
        self.empties: list[str] = []  # Empty objects made
        self.constraints: list[tuple[str, str, tuple[object, str] | None]] = []  # bone, name, old (target, sub)
        self.limits: list[tuple[str, str, object]] = []  # bone, property, old value
        self.had_animation_data = obj.animation_data is not None

    def rollback(self, context: bpy.types.Context) -> None:
        """Take back everything recorded, newest first (names looked up again: nothing held across it)."""
        obj = bpy.data.objects[self.obj_name]
        assert obj.pose is not None
        for bone, key, old in reversed(self.limits):
            setattr(bone_limits(obj.pose.bones[bone]), key, old)
        for bone, name, was in reversed(self.constraints):
            pb = obj.pose.bones[bone]
            con = pb.constraints.get(name)
            if con is None:
                continue
            if was is None:
                con.driver_remove("influence")
                pb.constraints.remove(con)
            else:
                con.target, con.subtarget = was
        chains = rig_settings(obj).chains
        while len(chains) > self.chains:
            chains.remove(len(chains) - 1)
        rig_settings(obj).active_chain_index = self.active_chain
        for name in reversed(self.empties):
            ob = bpy.data.objects.get(name)
            if ob is not None:
                bpy.data.objects.remove(ob)
        if self.bones or self.collection:
            with edit_mode(context, obj) as arm:
                for name in reversed(self.bones):
                    eb = arm.edit_bones.get(name)
                    if eb is not None:
                        arm.edit_bones.remove(eb)
                coll = arm.collections.get(CONTROLS_COLLECTION) if self.collection else None
                if coll is not None:
                    arm.collections.remove(coll)
        ad = obj.animation_data
        if not self.had_animation_data and ad is not None and ad.action is None and not len(ad.drivers):
            obj.animation_data_clear()
        obj.update_tag()


def _controls_collection(arm: bpy.types.Armature, journal: Journal | None = None) -> bpy.types.BoneCollection | None:
    colls = getattr(arm, "collections", None)
    if colls is None:
        return None
    found: bpy.types.BoneCollection | None = colls.get(CONTROLS_COLLECTION)
    if found is None:
        found = colls.new(CONTROLS_COLLECTION)
        if journal is not None:
            journal.collection = True
    return found


def new_bones(
    context: bpy.types.Context,
    obj: bpy.types.Object,
    specs: list[tuple[str, NDArray[np.float64], float]],
    parent: str,
    sk: SkeletonRead | None = None,
    journal: Journal | None = None,
) -> list[str]:
    """Non-deforming bones (name, pose matrix wanted, length), made in one Edit Mode visit; their names.

    `sk` is the skeleton as read before (read here when not given); only `parent`'s matrices are used.
    `journal` records what is made, for a rollback.
    """
    if sk is None:
        sk = read_skeleton(obj) if parent else None
    made = []
    with edit_mode(context, obj) as arm:
        coll = _controls_collection(arm, journal)
        existing = {b.name for b in arm.edit_bones}
        for base, want, length in specs:
            name = unique_name(existing, base)
            existing.add(name)
            rest = _rest_under(parent, want, sk)
            rot = Matrix([list(r[:3]) for r in rest[:3]]).normalized()
            head = Vector(rest[:3, 3].tolist())
            eb = arm.edit_bones.new(name)
            if journal is not None:
                journal.bones.append(name)
            eb.head = head
            eb.tail = head + rot.col[1] * length
            eb.align_roll(rot.col[2])
            eb.use_deform = False
            if parent:
                eb.parent = arm.edit_bones[parent]
            if coll is not None:
                coll.assign(eb)
            made.append(name)
    return made


def collection_for(context: bpy.types.Context, obj: bpy.types.Object) -> bpy.types.Collection:
    """Where new Empties go: the armature's own (editable) collection, else the scene's."""
    for coll in obj.users_collection:
        if coll.library is None and not getattr(coll, "override_library", None):
            return coll
    scene = context.scene
    assert scene is not None, "operators run with a scene"
    return scene.collection


def _new_empty(
    context: bpy.types.Context,
    obj: bpy.types.Object,
    name: str,
    world: Matrix,
    size: float,
    display: str,
    parent: str,
    journal: Journal,
) -> bpy.types.Object:
    ob = bpy.data.objects.new(name, None)
    journal.empties.append(ob.name)
    ob.empty_display_type = display  # type: ignore[assignment]
    ob.empty_display_size = size
    collection_for(context, obj).objects.link(ob)
    if not parent:
        ob.matrix_world = world
        return ob
    ob.parent = obj
    ob.parent_type = "BONE"
    ob.parent_bone = parent
    # A bone parent's frame is the posed bone moved to its tail; the parent inverse takes the Empty from
    # there to `world` with identity channels (its own channels stay free for the animator).
    assert obj.pose is not None
    pb = obj.pose.bones[parent]
    bone_world = obj.matrix_world @ pb.matrix @ Matrix.Translation((0.0, pb.length, 0.0))
    ob.matrix_parent_inverse = bone_world.inverted() @ world
    return ob


def _follow(obj: bpy.types.Object, bone: str, target: bpy.types.Object, subtarget: str, journal: Journal) -> None:
    """Bone `bone` takes the world rotation of the control (`target` / `subtarget`), after the IK."""
    assert obj.pose is not None
    pb = obj.pose.bones[bone]
    con = pb.constraints.get(FOLLOW_CONSTRAINT)
    if con is None:
        con = pb.constraints.new("COPY_ROTATION")
        con.name = FOLLOW_CONSTRAINT
        journal.constraints.append((bone, FOLLOW_CONSTRAINT, None))
    else:
        journal.constraints.append((bone, FOLLOW_CONSTRAINT, (con.target, con.subtarget)))
    assert isinstance(con, bpy.types.CopyRotationConstraint)
    con.target = target
    con.subtarget = subtarget
    con.target_space = con.owner_space = "WORLD"


def apply_plan(
    context: bpy.types.Context,
    obj: bpy.types.Object,
    sk: SkeletonRead,
    plan: SetupPlan,
    chains: list[ChainSpec],
    controls: str,
    parent: str,
) -> tuple[list[str], int]:
    """Create `chains` of `plan` (controls 'BONE' or 'EMPTY', parented to bone `parent` or none) and the
    plan's limits on their bones; the names of the chains made, and how many bones kept limits they had.
    `sk` is the skeleton the plan was made from (its bone indices). All or nothing: on any failure what was
    made is taken back and the exception raised again."""
    journal = Journal(obj)
    try:
        return _apply_plan(context, obj, sk, plan, chains, controls, parent, journal)
    except Exception:
        journal.rollback(context)
        raise


def _apply_plan(
    context: bpy.types.Context,
    obj: bpy.types.Object,
    sk: SkeletonRead,
    plan: SetupPlan,
    chains: list[ChainSpec],
    controls: str,
    parent: str,
    journal: Journal,
) -> tuple[list[str], int]:
    names = sk.info.names
    settings = rig_settings(obj)
    world = obj.matrix_world
    scale = float(np.mean(np.linalg.norm(np.array(world.to_3x3()), axis=0)))
    made: list[str] = []
    bone_specs: list[tuple[str, NDArray[np.float64], float]] = []
    for spec in chains:
        size = max(0.5 * float(sk.length[spec.tip]), 1e-3)
        bone_specs.append((spec.target_name, spec.target_matrix, size))
        if spec.pole_at is not None:
            m = np.eye(4)
            m[:3, :3] = spec.target_matrix[:3, :3]
            m[:3, 3] = spec.pole_at
            bone_specs.append((spec.pole_name, m, 0.5 * size))
    if controls == "BONE":
        bone_names = iter(new_bones(context, obj, bone_specs, parent, sk, journal))
    for spec in chains:
        ch = settings.chains.add()
        ch.name = unique_name({c.name for c in settings.chains if c != ch}, spec.name, first=2)
        ch.tip_bone = names[spec.tip]
        ch.chain_length = spec.length
        ch.solver = spec.solver
        ch.use_target_rotation = spec.use_target_rotation
        if controls == "BONE":
            ch.target, ch.target_bone, ch.created_target_bone = obj, next(bone_names), True
            if spec.pole_at is not None:
                ch.pole, ch.pole_bone, ch.created_pole_bone = obj, next(bone_names), True
        else:
            size = max(0.3 * float(sk.length[spec.tip]) * scale, 1e-4)
            target_world = world @ Matrix([list(r) for r in spec.target_matrix])
            rot = target_world.to_quaternion()
            target_world = Matrix.LocRotScale(target_world.to_translation(), rot, None)
            ch.target = _new_empty(context, obj, spec.target_name, target_world, size, "SPHERE", parent, journal)
            ch.created_target = True
            if spec.pole_at is not None:
                pole_world = Matrix.Translation(world @ Vector(spec.pole_at.tolist()))
                ch.pole = _new_empty(
                    context, obj, spec.pole_name, pole_world, 0.7 * size, "PLAIN_AXES", parent, journal
                )
                ch.created_pole = True
        if spec.end >= 0:
            _follow(obj, names[spec.end], ch.target, ch.target_bone, journal)
            # Off in FK, on in IK, blended as the chain (rig/ikfk_follow.py).
            ikfk_follow.drive(obj, names[spec.end], ch.name)
        made.append(ch.name)
    assert obj.pose is not None
    # Limits only on the bones of the chains made now, and never over limits a bone already has (the user's,
    # or a previous set-up's that the user may have tuned): a re-run that adds a chain changes nothing else.
    ours = set()
    for spec in chains:
        b = spec.tip
        for _ in range(spec.length):
            ours.add(b)
            b = sk.info.parent[b]
    kept = 0
    for b, values in plan.limits.items():
        if b not in ours:
            continue
        limits = bone_limits(obj.pose.bones[names[b]])
        if limits.use_cone or limits.use_twist:
            kept += 1
            continue
        for key, value in values.items():
            journal.limits.append((names[b], key, getattr(limits, key)))
            setattr(limits, key, value)
    settings.active_chain_index = len(settings.chains) - 1
    return made, kept
