"""IK <-> FK operators: `reach.snap_to_pose`, `reach.apply_to_fk` and `reach.switch` (the work is `rig.ikfk`).

Each works on the active chain, the chains whose tip bone is selected, or every enabled chain; refuses invalid
chains with a message, changing nothing; and is one undo step. Key, when not given, follows Auto Keying.
"""

from __future__ import annotations

import bpy
from bpy.props import BoolProperty, EnumProperty, IntProperty
from bpy.types import Context, Object, Operator

from ..rig import ikfk, snap_range
from ..rig.compat import classes_factory
from .chains import _armature, _poll_armature

CHAIN_ITEMS = [
    ("ACTIVE", "Active", "The active chain in the list"),
    ("SELECTED", "Selected Tips", "The enabled chains whose tip bone is selected"),
    ("ALL", "All Enabled", "Every enabled chain of the armature"),
]


class _IkFkOperator(Operator):
    """What the three share: which chains, whether to key, Auto Keying as the default, one report (not
    registered itself)."""

    bl_options = {"REGISTER", "UNDO"}

    # Not remembered between runs: a button means its own chains, and Key follows Auto Keying unless set.
    chains: EnumProperty(name="Chains", items=CHAIN_ITEMS, default="ACTIVE", options={"SKIP_SAVE"})
    key: BoolProperty(
        name="Key",
        description="Insert keyframes at the current frame on what changed (default: on when Auto Keying is on)",
        default=False,
        options={"SKIP_SAVE"},
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        scene = context.scene
        if not self.properties.is_property_set("key") and scene is not None:
            # Not given (a button, a script): as the animator's Auto Keying (the timeline's record button).
            self.key = bool(scene.tool_settings.use_keyframe_insert_auto)
        try:
            obj = _armature(context)
            if obj is None:
                raise ikfk.IkFkError("make an armature the active object first")
            outcome = self.run(obj)
        except ikfk.IkFkError as exc:
            self.report({"ERROR"}, f"Reach IK: {exc}")
            return {"CANCELLED"}
        keyed = " and keyed them" if self.key else ""
        text = f"Reach IK: {self.done()} for {', '.join(repr(n) for n in outcome.chains)}{keyed}"
        if outcome.warnings:
            self.report({"WARNING"}, f"{text}; " + "; ".join(outcome.warnings))
        else:
            self.report({"INFO"}, text)
        return {"FINISHED"}

    def run(self, obj: Object) -> ikfk.Outcome:
        raise NotImplementedError

    def done(self) -> str:
        raise NotImplementedError


class REACH_OT_snap_to_pose(_IkFkOperator):
    """Move the chains' targets and poles so that the IK solution is the pose the bones show now"""

    bl_idname = "reach.snap_to_pose"
    bl_label = "Snap IK to Pose"

    use_range: BoolProperty(
        name="Frame Range",
        description=(
            "Snap on every frame of a range and key the targets and poles there, so the IK reproduces the "
            "animation (edit a motion-capture clip with its IK controls)"
        ),
        default=False,
        options={"SKIP_SAVE"},
    )
    frame_start: IntProperty(name="Start", description="First frame (default: the scene's)", options={"SKIP_SAVE"})
    frame_end: IntProperty(name="End", description="Last frame (default: the scene's)", options={"SKIP_SAVE"})

    def done(self) -> str:
        if self.use_range:
            return f"snapped and keyed the targets and poles on frames {self.frame_start}-{self.frame_end}"
        return "snapped the targets and poles to the pose"

    def run(self, obj: Object) -> ikfk.Outcome:
        if self.use_range:
            scene = bpy.context.scene
            if scene is not None:
                if not self.properties.is_property_set("frame_start"):
                    self.frame_start = scene.frame_start
                if not self.properties.is_property_set("frame_end"):
                    self.frame_end = scene.frame_end
            self.key = True  # a range snap is its keys
            return snap_range.snap_range(obj, self.chains, self.frame_start, self.frame_end)
        return ikfk.snap(obj, self.chains, self.key)


class REACH_OT_apply_to_fk(_IkFkOperator):
    """Make the pose the chain bones show now their FK pose (what Influence 0 shows)"""

    bl_idname = "reach.apply_to_fk"
    bl_label = "Apply IK to FK"

    def done(self) -> str:
        return "made the pose the FK pose"

    def run(self, obj: Object) -> ikfk.Outcome:
        return ikfk.apply_fk(obj, self.chains, self.key)


class REACH_OT_switch(_IkFkOperator):
    """Switch chains between IK and FK without moving them: snap IK to the pose and set Influence to 1, or
    apply IK to FK and set Influence to 0"""

    bl_idname = "reach.switch"
    bl_label = "Switch IK/FK"

    mode: EnumProperty(
        name="Mode",
        items=[
            ("IK", "IK", "Snap the targets and poles to the pose, then Influence 1"),
            ("FK", "FK", "Make the pose the FK pose, then Influence 0"),
        ],
        default="IK",
    )

    def done(self) -> str:
        return f"switched to {self.mode}"

    def run(self, obj: Object) -> ikfk.Outcome:
        return ikfk.switch(obj, self.chains, self.mode, self.key)


classes = (REACH_OT_snap_to_pose, REACH_OT_apply_to_fk, REACH_OT_switch)
register, unregister = classes_factory(classes)
