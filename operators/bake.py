"""`reach.bake`: bake the IK of an armature's chains to keyframes, in one undo step."""

from __future__ import annotations

import sys

import bpy
from bpy.props import BoolProperty, EnumProperty, FloatProperty, IntProperty
from bpy.types import Context, Event, Operator

from ..rig.bake import BakeError, BakeOptions, bake_rig
from ..rig.compat import classes_factory


class REACH_OT_bake(Operator):
    """Bake the IK of the active armature's chains to rotation keyframes"""

    bl_idname = "reach.bake"
    bl_label = "Bake IK"
    bl_options = {"REGISTER", "UNDO"}

    frame_start: IntProperty(name="Start", description="First frame to bake (default: the scene's)", default=1)
    frame_end: IntProperty(name="End", description="Last frame to bake (default: the scene's)", default=250)
    step: IntProperty(
        name="Step", description="Bake every Nth frame (the last frame is always baked)", default=1, min=1
    )
    chains: EnumProperty(
        name="Chains",
        items=[
            ("ALL", "All Enabled", "Every enabled chain of the armature"),
            ("ACTIVE", "Active", "Only the active chain in the list"),
            ("SELECTED", "Selected Tips", "Chains whose tip bone is selected"),
        ],
        default="ALL",
    )
    replace: BoolProperty(
        name="Replace Keys in Range",
        description="Remove every key in the range on the baked rotation channels (off: only keys on baked frames)",
        default=True,
    )
    reduce: BoolProperty(
        name="Reduce Keys", description="Drop keys that a straight line between neighbours reproduces", default=False
    )
    reduce_tolerance: FloatProperty(
        name="Reduce Tolerance",
        description="Largest allowed error of a dropped key (channel units)",
        default=1e-4,
        min=0.0,
        soft_max=0.01,
        precision=5,
    )
    disable_after: BoolProperty(
        name="Disable Chains After",
        description="Turn the baked chains off so the baked motion plays back",
        default=True,
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        obj = context.active_object
        return obj is not None and obj.type == "ARMATURE"

    def invoke(self, context: Context, event: Event) -> set[str]:
        scene = context.scene
        self.frame_start, self.frame_end = scene.frame_start, scene.frame_end
        return set(context.window_manager.invoke_props_dialog(self))

    def execute(self, context: Context) -> set[str]:
        obj = context.active_object
        if obj is None or obj.type != "ARMATURE":
            self.report({"ERROR"}, "Reach IK: select an armature to bake")
            return {"CANCELLED"}
        opts = BakeOptions(
            frame_start=self.frame_start,
            frame_end=self.frame_end,
            step=self.step,
            chains=self.chains,
            replace=self.replace,
            reduce=self.reduce,
            reduce_tolerance=self.reduce_tolerance,
            disable_after=self.disable_after,
        )
        wm = context.window_manager
        background = bpy.app.background

        def progress(fraction: float, message: str) -> None:
            if background:
                print(f"Reach IK bake '{obj.name}': {100 * fraction:5.1f}% {message}", file=sys.stderr)
            else:
                wm.progress_update(int(1000 * fraction))

        if not background:
            wm.progress_begin(0, 1000)
        try:
            result = bake_rig(obj, opts, progress)
        except BakeError as exc:
            self.report({"ERROR"}, f"Reach IK: {exc}")
            return {"CANCELLED"}
        finally:
            if not background:
                wm.progress_end()
        worst = max((c.max_residual for c in result.chains), default=0.0)
        missed = any(c.frames_missed for c in result.chains)
        self.report(
            {"WARNING"} if missed else {"INFO"},
            f"Reach IK: baked {len(result.chains)} chain(s) over {len(result.frames)} frames "
            f"({result.keys_written} keys, {result.seconds:.2f} s, worst residual {worst:.3g})",
        )
        for text in result.warnings:
            self.report({"WARNING"}, f"Reach IK: {text}")
        return {"FINISHED"}


classes = (REACH_OT_bake,)
register, unregister = classes_factory(classes)
