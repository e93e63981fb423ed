"""Symmetrize (`reach.symmetrize`): limits and chains of the selected side copied, mirrored, to the other.

The other side's bone is found by name (`core.names.mirror_name`: ``.L``/``.R``, ``_l``/``_r``, ``Left``/
``Right``, ``L_``/``R_``, Daz's ``l``/``r``...). Limits mirror through the armature's X = 0 plane
(`core.mirror`). A chain is created on the other side, or updated when one already ends at the mirrored tip,
with its settings (Pole Angle negated: the bend plane turns the other way), and mirrored controls: the
mirrored-name control bone or Empty when it exists, else a new one made at the mirror image.
"""

from __future__ import annotations

import bpy
import numpy as np
from bpy.types import Context, Object, Operator
from mathutils import Matrix

from ..core.mirror import mirror_limits
from ..core.names import mirror_name
from ..rig.character import collection_for, edit_mode
from ..rig.compat import classes_factory, is_bone_selected
from ..rig.props import ReachChain, bone_limits, rig_settings
from .chains import _armature, _poll_armature, active_pose_bone, armature_data, pose_bones

LIMIT_KEYS = ("use_cone", "cone_up", "cone_down", "cone_left", "cone_right", "use_twist", "twist_min", "twist_max")
CHAIN_KEYS = (
    "enabled",
    "solver",
    "chain_length",
    "weight",
    "use_target_rotation",
    "soft",
    "stretch",
    "influence",
)
_MIRROR = Matrix.Diagonal((-1.0, 1.0, 1.0, 1.0))


def _mirror_world(rig: Object, world: Matrix) -> Matrix:
    """`world` mirrored through the armature's X = 0 plane, kept a rotation (mirrored on both sides)."""
    to_rig = rig.matrix_world.inverted()
    return rig.matrix_world @ _MIRROR @ to_rig @ world @ _MIRROR


def _mirror_bone(context: Context, rig: Object, name: str, other: str) -> None:
    """Bone `other` made as the mirror image of bone `name` (head, tail, roll; parent by mirrored name)."""
    with edit_mode(context, rig) as arm:
        src = arm.edit_bones[name]
        eb = arm.edit_bones.new(other)
        eb.head = (-src.head.x, src.head.y, src.head.z)
        eb.tail = (-src.tail.x, src.tail.y, src.tail.z)
        eb.roll = -src.roll
        eb.use_deform = src.use_deform
        if src.parent is not None:
            pname = mirror_name(src.parent.name, lambda n: n in arm.edit_bones) or src.parent.name
            eb.parent = arm.edit_bones[pname]
        for coll in getattr(src, "collections", ()):
            coll.assign(eb)


def _mirror_object(context: Context, rig: Object, ob: Object) -> Object:
    """The mirrored-name object of `ob` if it exists, else a new Empty at `ob`'s mirror image."""
    other = mirror_name(ob.name, lambda n: n in bpy.data.objects)
    if other:
        return bpy.data.objects[other]
    name = mirror_name(ob.name) or f"{ob.name}.mirror"
    new = bpy.data.objects.new(name, None)
    new.empty_display_type = ob.empty_display_type if ob.type == "EMPTY" else "PLAIN_AXES"
    new.empty_display_size = ob.empty_display_size if ob.type == "EMPTY" else 0.1
    collection_for(context, rig).objects.link(new)
    new.matrix_world = _mirror_world(rig, ob.matrix_world)
    return new


class REACH_OT_symmetrize(Operator):
    """Copy the joint limits of the selected bones, and the chains whose tip bones are selected, to the other
    side (found by name: .L/.R, _l/_r, Left/Right, L_/R_...), mirrored"""

    bl_idname = "reach.symmetrize"
    bl_label = "Symmetrize"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        rig = _armature(context)
        if rig is None:
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        bones = pose_bones(rig)
        active = active_pose_bone(context, rig)
        chosen = [b for b in bones if is_bone_selected(b) or b == active]
        if not chosen:
            self.report({"ERROR"}, f"Reach IK: select the bones (or chains' tip bones) of '{rig.name}' to mirror")
            return {"CANCELLED"}
        exists = bones.get
        limits_done, unmatched = [], []
        for pb in chosen:
            other = mirror_name(pb.name, lambda n: exists(n) is not None)
            if not other:
                unmatched.append(pb.name)
                continue
            src = bone_limits(pb)
            if not (src.use_cone or src.use_twist):
                continue
            values = {k: getattr(src, k) for k in LIMIT_KEYS}
            rest_a, rest_b = (np.array(b.bone.matrix_local, dtype=np.float64) for b in (pb, bones[other]))
            mirrored = mirror_limits(values, rest_a, rest_b)
            dst = bone_limits(bones[other])
            for k, v in mirrored.items():
                setattr(dst, k, v)
            limits_done.append(other)
        settings = rig_settings(rig)
        tips = {pb.name for pb in chosen}
        chains_done = []
        # By index, never by a held item: `chains.add()` in `_mirror_chain` may reallocate the collection, so a
        # reference taken before it points into freed memory (a crash with several tips selected). add()
        # appends, so the indices of the chains already there stay valid.
        for index in [i for i, c in enumerate(settings.chains) if c.tip_bone in tips]:
            other_tip = mirror_name(settings.chains[index].tip_bone, lambda n: exists(n) is not None)
            if not other_tip:
                continue
            chains_done.append(self._mirror_chain(context, rig, index, other_tip))
        if not limits_done and not chains_done:
            why = f" (no mirrored name found for {', '.join(unmatched[:3])})" if unmatched else ""
            self.report({"WARNING"}, f"Reach IK: nothing to mirror: the selected bones have no limits or chains{why}")
            return {"CANCELLED"}
        rig.update_tag()
        text = f"Reach IK: mirrored limits onto {len(limits_done)} bone(s)"
        if chains_done:
            text += f" and chain(s) {', '.join(chains_done)}"
        self.report({"INFO"}, text)
        return {"FINISHED"}

    def _mirror_chain(self, context: Context, rig: Object, index: int, other_tip: str) -> str:
        """Chain `index` copied, mirrored, onto the chain ending at `other_tip` (made when there is none)."""
        settings = rig_settings(rig)
        dst_index = next((i for i, c in enumerate(settings.chains) if c.tip_bone == other_tip), -1)
        if dst_index < 0:
            names = {c.name for c in settings.chains}
            settings.chains.add()
            dst_index = len(settings.chains) - 1
            src_name = settings.chains[index].name
            name = mirror_name(src_name) or f"{src_name}.mirror"
            settings.chains[dst_index].name = name if name not in names else f"{name}.001"
            settings.chains[dst_index].tip_bone = other_tip
        # Fetched after the add: items taken before it may be dangling.
        ch: ReachChain = settings.chains[index]
        dst: ReachChain = settings.chains[dst_index]
        for key in CHAIN_KEYS:
            setattr(dst, key, getattr(ch, key))
        dst.pole_angle = -ch.pole_angle
        for role in ("target", "pole"):
            ob: Object | None = getattr(ch, role)
            bone: str = getattr(ch, f"{role}_bone")
            if ob is None:
                setattr(dst, role, None)
                continue
            if ob.type == "ARMATURE" and bone:
                arm = armature_data(ob)
                other = mirror_name(bone, arm.bones.__contains__)
                if not other and ob == rig and bone in arm.bones:
                    other = mirror_name(bone) or f"{bone}.mirror"
                    _mirror_bone(context, rig, bone, other)
                    setattr(dst, f"created_{role}_bone", True)
                elif not other:
                    # The source's control bone is gone (deleted): nothing to mirror it from. The copy names the
                    # bone that would mirror it, and says it is missing, as the source chain does.
                    other = mirror_name(bone) or bone
                setattr(dst, role, ob)
                setattr(dst, f"{role}_bone", other or bone)
            else:
                existed = bool(mirror_name(ob.name, lambda n: n in bpy.data.objects))
                setattr(dst, role, _mirror_object(context, rig, ob))
                setattr(dst, f"{role}_bone", "")
                if not existed:
                    setattr(dst, f"created_{role}", True)
        return str(dst.name)


classes = (REACH_OT_symmetrize,)
register, unregister = classes_factory(classes)
