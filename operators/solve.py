"""`reach.solve`: solve the active armature's chains once, now (for rigs with Live off)."""

from __future__ import annotations

from bpy.types import Context, Operator

from ..rig.compat import classes_factory
from ..rig.solve import solve_rig, store_status


class REACH_OT_solve(Operator):
    """Solve the active armature's IK chains once, now (for rigs with Live off)"""

    bl_idname = "reach.solve"
    bl_label = "Solve Now"
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context: Context) -> bool:
        obj = context.active_object
        return obj is not None and obj.type == "ARMATURE"

    def execute(self, context: Context) -> set[str]:
        obj = context.active_object
        if obj is None or obj.type != "ARMATURE":
            self.report({"ERROR"}, "Reach IK: select an armature first")
            return {"CANCELLED"}
        report = solve_rig(obj, write=True)
        store_status(obj, report)
        if report.rig_error:
            self.report({"ERROR"}, f"Reach IK: {report.rig_error}")
            return {"CANCELLED"}
        bad = {i: o for i, o in report.outcomes.items() if not o.valid}
        chains = obj.reach_ik.chains  # type: ignore[attr-defined]
        if bad:
            i, o = next(iter(sorted(bad.items())))
            self.report({"WARNING"}, f"Reach IK: {len(bad)} chain(s) invalid; '{chains[i].name}': {o.message}")
        elif not report.outcomes:
            self.report({"WARNING"}, f"Reach IK: '{obj.name}' has no enabled chains")
        else:
            self.report({"INFO"}, f"Reach IK: solved {len(report.outcomes)} chain(s)")
        return {"FINISHED"}


classes = (REACH_OT_solve,)
register, unregister = classes_factory(classes)
