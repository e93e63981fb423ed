"""Chain and limit set-up without Python: add/remove/move chains, chains from a hierarchy, limit presets.

Every operator here is undoable and reports what it did, or why it could not, naming the object and bone.
"""

from __future__ import annotations

from typing import Literal

import bpy
import numpy as np
from bpy.props import BoolProperty, EnumProperty, IntProperty
from bpy.types import Context, Object, Operator, PoseBone
from mathutils import Matrix, Vector

from ..core.presets import PRESET_ITEMS, preset_values
from ..rig import cache, ikfk_follow
from ..rig.character import collection_for, new_bones, unique_name
from ..rig.compat import classes_factory, is_bone_selected
from ..rig.props import ReachBoneLimits, ReachChain, ReachRigSettings, bone_limits, rig_settings

# ---------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------


def _armature(context: Context) -> Object | None:
    obj = context.active_object
    return obj if obj is not None and obj.type == "ARMATURE" else None


def _poll_armature(cls: type[Operator], context: Context) -> bool:
    if _armature(context) is None:
        cls.poll_message_set("Reach IK: make an armature the active object first")
        return False
    if context.mode not in {"OBJECT", "POSE"}:
        cls.poll_message_set("Reach IK: switch to Object or Pose Mode")
        return False
    return True


def pose_bones(obj: Object) -> bpy.types.bpy_prop_collection[PoseBone]:
    """`obj.pose.bones` of an armature object (the stubs type `pose` as optional)."""
    pose = obj.pose
    assert pose is not None, f"'{obj.name}' is not an armature"
    return pose.bones


def armature_data(obj: Object) -> bpy.types.Armature:
    arm = obj.data
    assert isinstance(arm, bpy.types.Armature), f"'{obj.name}' is not an armature"
    return arm


def active_pose_bone(context: Context, obj: Object) -> PoseBone | None:
    """The active bone of armature `obj` as a pose bone, in Pose Mode and in Object Mode."""
    pb = context.active_pose_bone
    if pb is not None and pb.id_data == obj:
        return pb
    active = armature_data(obj).bones.active
    return pose_bones(obj).get(active.name) if active is not None else None


def _parent_line(pb: PoseBone) -> list[PoseBone]:
    """`pb`, its parent, its parent's parent... up to the root."""
    line = [pb]
    while line[-1].parent is not None:
        line.append(line[-1].parent)
    return line


def _world_scale(obj: Object) -> float:
    return float(np.linalg.norm(np.array(obj.matrix_world.to_3x3()), axis=0).mean())


def _new_empty(
    context: Context,
    rig: Object,
    name: str,
    matrix: Matrix,
    size: float,
    display: Literal["PLAIN_AXES", "SPHERE"],
) -> Object:
    ob = bpy.data.objects.new(name, None)
    ob.empty_display_type = display
    ob.empty_display_size = size
    collection_for(context, rig).objects.link(ob)
    ob.matrix_world = matrix
    return ob


def _tip_matrix(obj: Object, pb: PoseBone) -> Matrix:
    """World matrix at the tip's tail, oriented like the posed tip bone (unit scale)."""
    world = obj.matrix_world
    rot = (world.to_3x3() @ pb.matrix.to_3x3()).normalized().to_quaternion()
    return Matrix.LocRotScale(world @ pb.tail, rot, None)


def pole_location(root: Vector, middle: Vector, tip: Vector, fallback: Vector) -> Vector:
    """A pole in front of the current bend of a two-bone chain, so adding it changes nothing.

    The two-bone solver bends toward the pole's side of the root->target line. Placed at the middle joint,
    pushed out along the current bend direction (perpendicular to root->tip) by half the chain's length,
    the pole names exactly the bend the chain already has. A straight chain has no bend: `fallback` (the
    upper bone's +Z) decides, and the pose still does not move because a straight chain has one solution.
    """
    chord = tip - root
    reach = (middle - root).length + (tip - middle).length
    if chord.length < 1e-9:
        chord = middle - root
    axis = chord.normalized()
    side = (middle - root) - axis * (middle - root).dot(axis)
    if side.length <= 1e-4 * max(reach, 1e-9):
        side = fallback - axis * fallback.dot(axis)
        if side.length < 1e-9:
            side = axis.orthogonal()
    return middle + side.normalized() * (0.5 * reach)


def _unique_name(settings: ReachRigSettings, base: str) -> str:
    """A chain name not yet in `settings` (`base`, else `base.002` and up)."""
    return unique_name({ch.name for ch in settings.chains}, base, first=2)


def _uses(settings: ReachRigSettings, ob: Object, skip: ReachChain | None = None) -> bool:
    return any((ch.target == ob or ch.pole == ob) for ch in settings.chains if ch != skip)


# ---------------------------------------------------------------------------------------------------------
# Chains
# ---------------------------------------------------------------------------------------------------------


class REACH_OT_chain_add(Operator):
    """Add an IK chain ending at the active bone, with a new Empty target at its tip.

    The chain runs up to the farthest selected bone in the tip's parent line (2 bones when only the tip is
    selected). Two-bone chains get the exact 'TWO_BONE' solver and a pole Empty placed in front of the
    current bend (see `pole_location`), so adding them moves nothing; longer chains get 'FABRIK'.
    """

    bl_idname = "reach.chain_add"
    bl_label = "Add Chain"
    bl_description = (
        "Add an IK chain ending at the active bone, with an Empty target at its tip (and a pole for two "
        "bones). It runs up to the farthest selected bone above the tip (2 bones if only the tip is selected)"
    )
    bl_options = {"REGISTER", "UNDO"}

    length: IntProperty(
        name="Length",
        description="Bones counted up from the tip; 0 = from the selected bones (or 2)",
        default=0,
        min=0,
        soft_max=64,
    )
    add_pole: BoolProperty(
        name="Add Pole",
        description="Two-bone chains: also create a pole in front of the current bend",
        default=True,
    )
    controls: EnumProperty(
        name="Controls",
        description="What the target (and pole) are",
        items=[
            ("EMPTY", "Empties", "New Empty objects", "EMPTY_AXIS", 0),
            (
                "BONE",
                "Control Bones",
                "New non-deforming bones in this armature, named after the tip (IK-hand.L), keyed with the rig's "
                "own action",
                "BONE_DATA",
                1,
            ),
        ],
        default="EMPTY",
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        if obj is None:
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        pb = active_pose_bone(context, obj)
        if pb is None:
            self.report({"ERROR"}, f"Reach IK: '{obj.name}' has no active bone: click the chain's tip bone first")
            return {"CANCELLED"}
        settings = rig_settings(obj)
        for ch in settings.chains:
            if ch.tip_bone == pb.name:
                self.report(
                    {"ERROR"},
                    f"Reach IK: chain '{ch.name}' already ends at bone '{pb.name}': select it in the list to "
                    "edit it, or pick another tip bone",
                )
                return {"CANCELLED"}
        line = _parent_line(pb)
        if self.length:
            n = self.length
            if n > len(line):
                self.report(
                    {"ERROR"},
                    f"Reach IK: length {n} is longer than the hierarchy above '{pb.name}' ({len(line)} bones): "
                    f"use {len(line)} or less",
                )
                return {"CANCELLED"}
        else:
            selected = [i for i, b in enumerate(line) if is_bone_selected(b)]
            far = max(selected, default=0) + 1
            n = far if far > 1 else min(2, len(line))
        chain_bones = line[:n]
        scale = _world_scale(obj)
        tip_len = max(pb.length * scale, 1e-4)

        world = obj.matrix_world
        pole_at: Vector | None = None
        if n == 2 and self.add_pole:
            root_pb, tip_pb = chain_bones[1], chain_bones[0]
            fallback = (world.to_3x3() @ root_pb.matrix.to_3x3()).col[2]
            pole_at = pole_location(world @ root_pb.head, world @ tip_pb.head, world @ tip_pb.tail, fallback)
        tip_name = pb.name
        if self.controls == "BONE":
            target_bone, pole_bone = _new_control_bones(context, obj, pb, pole_at)
            target_text = f"control bone '{target_bone}'"
            pole_text = f" and pole bone '{pole_bone}'" if pole_bone else ""
        else:
            target = _new_empty(context, obj, f"{tip_name}.target", _tip_matrix(obj, pb), 0.3 * tip_len, "SPHERE")
            pole = None
            if pole_at is not None:
                pole = _new_empty(
                    context, obj, f"{tip_name}.pole", Matrix.Translation(pole_at), 0.2 * tip_len, "PLAIN_AXES"
                )
            target_text = f"target '{target.name}'"
            pole_text = f" and pole '{pole.name}'" if pole is not None else ""

        ch = settings.chains.add()
        ch.name = _unique_name(settings, tip_name)
        ch.tip_bone = tip_name
        ch.chain_length = n
        ch.solver = "TWO_BONE" if n == 2 else "FABRIK"
        if self.controls == "BONE":
            ch.target, ch.target_bone, ch.created_target_bone = obj, target_bone, True
            if pole_bone:
                ch.pole, ch.pole_bone, ch.created_pole_bone = obj, pole_bone, True
        else:
            ch.target = target
            ch.created_target = True
            if pole is not None:
                ch.pole = pole
                ch.created_pole = True
        settings.active_chain_index = len(settings.chains) - 1
        self.report(
            {"INFO"},
            f"Reach IK: chain '{ch.name}' ({n} bones up from '{tip_name}', {ch.solver}) with {target_text}"
            f"{pole_text}; move the target to pose the chain",
        )
        return {"FINISHED"}


def _new_control_bones(context: Context, obj: Object, tip: PoseBone, pole_at: Vector | None) -> tuple[str, str]:
    """Non-deforming control bones for the chain ending at `tip`: 'IK-<tip>' at the tip's tail, oriented like the
    posed tip (so Use Target Rotation takes the pose it has), and 'Pole-<tip>' at `pole_at` (world) if given.

    Both are unparented (they move only when animated) and built where the pose puts the tip now, so adding
    them moves nothing. Edit Mode is entered for that and left again in the mode the armature was in.
    """
    rot = np.array(tip.matrix.to_3x3().normalized(), dtype=np.float64)
    length = max(0.5 * tip.length, 1e-3)
    target = np.eye(4)
    target[:3, :3], target[:3, 3] = rot, np.array(tip.tail.to_tuple())
    specs = [(f"IK-{tip.name}", target, length)]
    if pole_at is not None:
        pole = target.copy()
        pole[:3, 3] = np.array((obj.matrix_world.inverted() @ pole_at).to_tuple())
        specs.append((f"Pole-{tip.name}", pole, 0.5 * length))
    names = new_bones(context, obj, specs, parent="")
    return names[0], names[1] if len(names) > 1 else ""


class REACH_OT_chain_remove(Operator):
    """Remove the active chain (optionally with the Empties that Add Chain created for it)"""

    bl_idname = "reach.chain_remove"
    bl_label = "Remove Chain"
    bl_options = {"REGISTER", "UNDO"}

    delete_empties: BoolProperty(
        name="Delete Created Empties",
        description="Also delete the target/pole Empties that Add Chain created for this chain "
        "(never objects you picked yourself, nor ones another chain still uses)",
        default=True,
    )
    remove_follow: BoolProperty(
        name="Remove Follow Constraint",
        description="Also remove the 'Reach IK: follow control' constraint Set Up Character gave the chain's hand "
        "or foot (the hand then shows its own rotation, as the chain's bones show their FK pose); off, the "
        "constraint stays, no longer driven by the chain's Influence",
        default=True,
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        if not _poll_armature(cls, context):
            return False
        obj = _armature(context)
        assert obj is not None
        if not len(rig_settings(obj).chains):
            cls.poll_message_set("Reach IK: this armature has no chains")
            return False
        return True

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        settings = rig_settings(obj) if obj is not None else None
        if obj is None or settings is None or not len(settings.chains):
            self.report({"ERROR"}, "Reach IK: the active object has no chains to remove")
            return {"CANCELLED"}
        i = settings.active_chain_index
        if not 0 <= i < len(settings.chains):
            self.report({"ERROR"}, f"Reach IK: no active chain (index {i}): click a chain in the list")
            return {"CANCELLED"}
        ch = settings.chains[i]
        name = ch.name
        doomed: list[Object] = []
        if self.delete_empties:
            for ob, created in ((ch.target, ch.created_target), (ch.pole, ch.created_pole)):
                if ob is not None and created and ob.type == "EMPTY" and not _uses(settings, ob, skip=ch):
                    doomed.append(ob)
        # The hand's follow constraint is driven by this chain's Influence, by the chain's name: the driver
        # would point at nothing. Another chain with the same tip keeps it.
        follower = ikfk_follow.owned(obj, i)
        if follower and any(c.tip_bone == ch.tip_bone for k, c in enumerate(settings.chains) if k != i):
            follower = ""
        settings.chains.remove(i)
        followed = ""
        if follower:
            ikfk_follow.undrive(obj, follower)
            pb = obj.pose.bones[follower]
            if self.remove_follow:
                pb.constraints.remove(pb.constraints[ikfk_follow.FOLLOW_CONSTRAINT])
                followed = f" and the follow constraint of '{follower}'"
                ikfk_follow.forget_muted(pb)
        settings.active_chain_index = min(i, max(len(settings.chains) - 1, 0))
        # The next update gives the chain's bones their FK pose back (rig/fk.py): removing an item of a
        # collection tags nothing by itself.
        cache.mark_dirty(obj)
        obj.update_tag()
        deleted = [ob.name for ob in doomed]
        for ob in doomed:
            bpy.data.objects.remove(ob)
        note = f" and deleted {', '.join(repr(n) for n in deleted)}" if deleted else ""
        self.report({"INFO"}, f"Reach IK: removed chain '{name}'{followed}{note}")
        return {"FINISHED"}


class REACH_OT_chain_move(Operator):
    """Move the active chain up or down in the list (order is only for display; the solver orders chains
    by the hierarchy)"""

    bl_idname = "reach.chain_move"
    bl_label = "Move Chain"
    bl_options = {"REGISTER", "UNDO"}

    direction: EnumProperty(
        name="Direction",
        items=[("UP", "Up", "Move up the list"), ("DOWN", "Down", "Move down the list")],
        default="UP",
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        if obj is None:
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        settings = rig_settings(obj)
        i, count = settings.active_chain_index, len(settings.chains)
        if not 0 <= i < count:
            self.report({"ERROR"}, f"Reach IK: '{obj.name}' has no active chain to move")
            return {"CANCELLED"}
        j = i - 1 if self.direction == "UP" else i + 1
        if not 0 <= j < count:
            self.report(
                {"INFO"},
                f"Reach IK: chain '{settings.chains[i].name}' is already at the "
                f"{'top' if self.direction == 'UP' else 'bottom'}",
            )
            return {"CANCELLED"}
        settings.chains.move(i, j)
        settings.active_chain_index = j
        return {"FINISHED"}


def hierarchy_chains(
    parents: dict[str, str | None], children: dict[str, list[str]], pivots: frozenset[str] = frozenset()
) -> list[list[str]]:
    """The chains `reach.chains_from_hierarchy` creates, as bone names root first (see its docstring).

    `pivots` are bones whose head sits on their parent's head: a chain stops at such a bone (it is the
    chain's first bone), because its parent cannot move it by rotating; for finding leaves the pivot's
    subtree is detached, so a parent whose children are all pivots is a leaf itself.
    """
    out: list[list[str]] = []
    for leaf, kids in children.items():
        if any(k not in pivots for k in kids):
            continue
        line = [leaf]
        while True:
            top = line[-1]
            parent = parents[top]
            # Stop at the hierarchy's root (excluded: it stays where the animator puts it) and at pivots.
            if parent is None or top in pivots or parents[parent] is None:
                break
            line.append(parent)
        out.append(list(reversed(line)))
    return out


class REACH_OT_chains_from_hierarchy(Operator):
    """Split the armature's hierarchy at every fork: one FABRIK chain and one target Empty per leaf bone.

    Rule: every leaf bone (a bone without children) gets a FABRIK chain that runs from the leaf up to just
    below the root bone of its hierarchy, so the root (hips, body, a root/master bone) stays where the
    animator puts it and everything hanging from it reaches. Chains that pass through the same bones (two
    legs through a spider's body, fingers and head through a spine) share them, and the solver solves
    FABRIK chains that share bones together as one multi-effector tree: each fork bone is pulled toward all
    of its branches by their weights. A bone that hangs straight from the root gives a one-bone chain; a
    lone bone (no parent, no children) gets a one-bone chain of itself. A chain also stops at a bone whose
    head sits on its parent's head (Rigify's 'face' on 'spine.006'): rotating the parent cannot move that
    joint, so the bones above it add nothing to the reach (and the tree solver needs every joint it
    places to have a lever); the part below it becomes its own tree, and a parent whose children are all
    such pivots counts as a leaf (Rigify's head 'spine.006' gets its own chain through the neck).
    Targets are Empties at each leaf's tail, so nothing moves until a target does. Leaves that already
    end a chain are skipped. With Selected Only (pose mode), only leaves at or below the selected bones
    get chains.
    """

    bl_idname = "reach.chains_from_hierarchy"
    bl_label = "Chains from Hierarchy"
    bl_description = (
        "One FABRIK chain and one target Empty per leaf bone, each running up to just below the root bone; "
        "chains that share bones are solved together as a tree"
    )
    bl_options = {"REGISTER", "UNDO"}

    selected_only: BoolProperty(
        name="Selected Only", description="Only leaves at or below the selected bones", default=False
    )
    deform_only: BoolProperty(
        name="Deform Bones Only",
        description="Ignore bones with Deform off (control and mechanism bones) when finding leaves",
        default=False,
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        if obj is None:
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        settings = rig_settings(obj)
        pbs = pose_bones(obj)
        keep = {pb.name for pb in pbs if pb.bone.use_deform or not self.deform_only}
        if not keep:
            self.report({"ERROR"}, f"Reach IK: '{obj.name}' has no deform bones: turn Deform Bones Only off")
            return {"CANCELLED"}

        def kept_parent(pb: PoseBone) -> str | None:
            p = pb.parent
            while p is not None and p.name not in keep:
                p = p.parent
            return p.name if p is not None else None

        parents = {pb.name: kept_parent(pb) for pb in pbs if pb.name in keep}
        children: dict[str, list[str]] = {name: [] for name in parents}
        for name, p in parents.items():
            if p is not None:
                children[p].append(name)
        rest = armature_data(obj).bones
        pivots = frozenset(
            name
            for name, p in parents.items()
            if p is not None and (rest[name].head_local - rest[p].head_local).length <= 1e-6 * max(rest[p].length, 1e-3)
        )
        chains = hierarchy_chains(parents, children, pivots)
        if self.selected_only:
            chosen = {pb.name for pb in pbs if is_bone_selected(pb)}
            if not chosen:
                self.report({"ERROR"}, f"Reach IK: no bones of '{obj.name}' are selected (Selected Only is on)")
                return {"CANCELLED"}
            chains = [c for c in chains if _in_subtree(pbs[c[-1]], chosen)]
        used = {ch.tip_bone for ch in settings.chains}
        skipped = [c[-1] for c in chains if c[-1] in used]
        chains = [c for c in chains if c[-1] not in used]
        if not chains:
            why = f" ({len(skipped)} leaves already end a chain)" if skipped else ""
            self.report({"WARNING"}, f"Reach IK: no new chains for '{obj.name}'{why}")
            return {"CANCELLED"}
        scale = _world_scale(obj)
        for names in chains:
            tip = pbs[names[-1]]
            # Chain bones must be contiguous parents: with deform_only, skipped bones in between count too.
            length = len(_parent_line(tip)) - len(_parent_line(pbs[names[0]])) + 1
            target = _new_empty(
                context,
                obj,
                f"{tip.name}.target",
                _tip_matrix(obj, tip),
                max(0.3 * tip.length * scale, 1e-4),
                "SPHERE",
            )
            ch = settings.chains.add()
            ch.name = _unique_name(settings, tip.name)
            ch.tip_bone = tip.name
            ch.chain_length = length
            ch.solver = "FABRIK"
            ch.target = target
            ch.created_target = True
        settings.active_chain_index = len(settings.chains) - 1
        note = f"; skipped {len(skipped)} leaves that already end a chain" if skipped else ""
        self.report({"INFO"}, f"Reach IK: added {len(chains)} chain(s) to '{obj.name}', one target per leaf{note}")
        return {"FINISHED"}


def _in_subtree(pb: PoseBone, chosen: set[str]) -> bool:
    return any(b.name in chosen for b in _parent_line(pb))


# ---------------------------------------------------------------------------------------------------------
# Limit presets
# ---------------------------------------------------------------------------------------------------------


def rest_parent_direction(pb: PoseBone) -> tuple[float, float, float]:
    """The parent's rest +Y in `pb`'s rest frame ((0, 1, 0) for a root bone)."""
    bone = pb.bone
    if bone.parent is None:
        return (0.0, 1.0, 0.0)
    rel = bone.matrix_local.to_3x3().transposed() @ bone.parent.matrix_local.to_3x3()
    y = rel.col[1]
    return (y.x, y.y, y.z)


class REACH_OT_limits_preset(Operator):
    """Fill the joint limits of the active and selected pose bones from a preset (cone sides follow each
    bone's rest bend, so knees and elbows bend the way they are modelled)"""

    bl_idname = "reach.limits_preset"
    bl_label = "Limits Preset"
    bl_options = {"REGISTER", "UNDO"}

    preset: EnumProperty(name="Preset", items=PRESET_ITEMS, default="BALL")

    @classmethod
    def description(cls, context: Context, properties: bpy.types.OperatorProperties) -> str:
        # The tooltip of each preset button says what that preset sets.
        preset = getattr(properties, "preset", "BALL")
        text = next((p[2] for p in PRESET_ITEMS if p[0] == preset), "")
        return f"{text}. Sets the active and selected pose bones' limits"

    selected: BoolProperty(
        name="Selected Bones Too",
        description="Also set the selected pose bones, not only the active one",
        default=True,
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        if not _poll_armature(cls, context):
            return False
        obj = _armature(context)
        assert obj is not None
        if active_pose_bone(context, obj) is None:
            cls.poll_message_set("Reach IK: click a bone first: presets set the active bone's limits")
            return False
        return True

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        pb = active_pose_bone(context, obj) if obj is not None else None
        if obj is None or pb is None:
            self.report({"ERROR"}, "Reach IK: click the bone whose limits the preset should set")
            return {"CANCELLED"}
        bones = [pb]
        if self.selected:
            bones += [b for b in pose_bones(obj) if b != pb and is_bone_selected(b)]
        for b in bones:
            limits: ReachBoneLimits = bone_limits(b)
            for key, value in preset_values(self.preset, rest_parent_direction(b)).items():
                setattr(limits, key, value)
        label = next(p[1] for p in PRESET_ITEMS if p[0] == self.preset)
        names = ", ".join(f"'{b.name}'" for b in bones[:4]) + (" ..." if len(bones) > 4 else "")
        self.report({"INFO"}, f"Reach IK: {label} limits on {names}")
        return {"FINISHED"}


classes = (
    REACH_OT_chain_add,
    REACH_OT_chain_remove,
    REACH_OT_chain_move,
    REACH_OT_chains_from_hierarchy,
    REACH_OT_limits_preset,
)
register, unregister = classes_factory(classes)
