"""`reach.fix_chain`: apply the bone-setting fix a refused chain's message describes, as one undo step."""

from __future__ import annotations

from bpy.props import IntProperty
from bpy.types import Context, Operator

from ..rig import fixes
from ..rig.compat import classes_factory
from ..rig.props import rig_settings


class REACH_OT_fix_chain(Operator):
    """Change the bone setting this chain's message names (Inherit Rotation, Inherit Scale) so it can be solved"""

    bl_idname = "reach.fix_chain"
    bl_label = "Fix Bone Settings"
    bl_options = {"REGISTER", "UNDO"}

    index: IntProperty(name="Chain", description="The chain to fix (-1: the active chain)", default=-1)

    @classmethod
    def poll(cls, context: Context) -> bool:
        obj = context.active_object
        return obj is not None and obj.type == "ARMATURE" and obj.mode != "EDIT"

    def execute(self, context: Context) -> set[str]:
        obj = context.active_object
        if obj is None or obj.type != "ARMATURE":
            self.report({"ERROR"}, "Reach IK: select an armature first")
            return {"CANCELLED"}
        if obj.mode == "EDIT":
            self.report({"ERROR"}, "Reach IK: leave Edit Mode first (the fix changes Bone > Relations)")
            return {"CANCELLED"}
        settings = rig_settings(obj)
        i = settings.active_chain_index if self.index < 0 else self.index
        if not 0 <= i < len(settings.chains):
            self.report({"ERROR"}, f"Reach IK: '{obj.name}' has no chain #{i}")
            return {"CANCELLED"}
        name = fixes.chain_name(obj, i)
        refusal = fixes.find(obj, i)
        if refusal is None:
            ch = settings.chains[i]
            why = f"its message is: {ch.message}" if not ch.is_valid and ch.message else "it is not refused for one"
            self.report({"ERROR"}, f"Reach IK: chain '{name}' has no bone setting Reach IK can fix ({why})")
            return {"CANCELLED"}
        before = fixes.refused(obj)
        try:
            undo = fixes.apply(obj, refusal.fix)
        except (KeyError, AttributeError, TypeError) as exc:
            self.report({"ERROR"}, f"Reach IK: could not fix chain '{name}': {exc}")
            return {"CANCELLED"}
        # A fix never makes another chain invalid: if it would, it is taken back and the operator says why.
        broken = {j: msg for j, msg in fixes.refused(obj).items() if j != i and j not in before}
        if broken:
            fixes.apply(obj, undo)
            j, msg = next(iter(sorted(broken.items())))
            self.report(
                {"ERROR"},
                f"Reach IK: fixing chain '{name}' ({fixes.label(refusal.fix)}) would refuse chain "
                f"'{fixes.chain_name(obj, j)}' ({msg}); nothing was changed",
            )
            return {"CANCELLED"}
        left = fixes.find(obj, i)
        done = fixes.label(refusal.fix)
        if left is not None:
            self.report({"WARNING"}, f"Reach IK: set {done}; chain '{name}' still needs: {left}")
        else:
            self.report({"INFO"}, f"Reach IK: set {done} (chain '{name}')")
        return {"FINISHED"}


classes = (REACH_OT_fix_chain,)
register, unregister = classes_factory(classes)
