"""Reach IK's settings stored on Blender data: `Object.reach_ik` and `PoseBone.reach_ik`.

Names here are part of the product (scripts and saved files use them): keep them stable.
Every property is library-overridable so a linked, overridden character keeps working.
"""

from __future__ import annotations

import math
from typing import Literal

import bpy
from bpy.props import (
    BoolProperty,
    CollectionProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    PointerProperty,
    StringProperty,
)
from bpy.types import Context, Object, PropertyGroup

from . import cache
from .compat import classes_factory

OVERRIDE: set[Literal["LIBRARY_OVERRIDABLE"]] = {"LIBRARY_OVERRIDABLE"}

SOLVER_ITEMS = [
    ("FABRIK", "FABRIK", "Forward and backward reaching: any length, trees of chains", "CON_SPLINEIK", 0),
    ("CCD", "CCD", "Cyclic coordinate descent: tails and tentacles that curl from the tip", "CON_ROTLIKE", 1),
    ("TWO_BONE", "Two-Bone", "Exact law-of-cosines solve for arms and legs (chain length 2)", "CON_KINEMATIC", 2),
]
ROLL_ITEMS = [
    ("KEEP", "Keep", "Rotate each bone minimally from its current pose: its twist is kept", 0),
    ("REST", "Rest", "Rotate each bone minimally from its rest pose: no twist relative to rest", 1),
    ("NATURAL", "Natural", "The bend plane rolls with the target like a shoulder (no pole needed)", 2),
]
START_ITEMS = [
    ("CURRENT", "Current", "Warm start from the current pose: fast and continuous while posing", 0),
    ("REST", "Rest", "Start every solve from the rest pose: deterministic, for baking on a farm", 1),
]


def _mark_dirty(self: PropertyGroup, context: Context) -> None:
    # Settings changes must trigger a re-solve even when nothing moved: `cache` holds the flag live solving reads.
    # `id_data` is the armature object for both Object.reach_ik and PoseBone.reach_ik.
    owner = self.id_data
    if isinstance(owner, Object):
        cache.mark_dirty(owner)


class ReachChain(PropertyGroup):
    """One IK chain: a tip bone, how many bones up from it, and what it reaches for."""

    enabled: BoolProperty(name="Enabled", default=True, override=OVERRIDE, update=_mark_dirty)
    solver: EnumProperty(name="Solver", items=SOLVER_ITEMS, default="FABRIK", override=OVERRIDE, update=_mark_dirty)
    tip_bone: StringProperty(
        name="Tip Bone",
        description="The last bone of the chain; its tail reaches for the target",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    chain_length: IntProperty(
        name="Chain Length",
        description="Bones counted up from the tip bone; 0 = up to the root bone (as Blender's IK Chain Length 0)",
        default=2,
        min=0,
        soft_max=64,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    target: PointerProperty(
        name="Target",
        type=Object,
        description="The object the tip reaches for (normally an Empty)",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    target_bone: StringProperty(
        name="Target Bone",
        description="When the target is an armature: the bone whose head the tip reaches for (empty: the object)",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    pole: PointerProperty(
        name="Pole",
        type=Object,
        description="Optional: the chain bends toward this object",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    pole_bone: StringProperty(
        name="Pole Bone",
        description="When the pole is an armature: the bone whose head the chain bends toward (empty: the object)",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    pole_angle: FloatProperty(
        name="Pole Angle",
        description=(
            "Rotate the bend plane about the root-to-target axis by this angle (for rigs converted from "
            "Blender's IK constraint; a new chain does not need it)"
        ),
        subtype="ANGLE",
        default=0.0,
        soft_min=-math.pi,
        soft_max=math.pi,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    ccd_max_step: FloatProperty(
        name="Step Cap",
        description=(
            "CCD only: the largest angle a joint turns by in one iteration (0 = no cap). A cap damps CCD on "
            "long chains (no flips, a smoother approach) at the cost of more iterations: raise Max Iterations"
        ),
        subtype="ANGLE",
        default=0.0,
        min=0.0,
        max=math.pi,
        options=set(),  # a solver setting read with the plan, not per frame: not keyable
        override=OVERRIDE,
        update=_mark_dirty,
    )
    weight: FloatProperty(
        name="Weight",
        description="Pull of this effector when chains share bones (a tree)",
        default=1.0,
        min=0.0,
        soft_max=10.0,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    use_target_rotation: BoolProperty(
        name="Use Target Rotation",
        description="The tip bone also takes the target's orientation",
        default=False,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    soft: FloatProperty(
        name="Soft",
        description=(
            "Fraction of the chain's length over which its reach eases out toward full extension, so the knee "
            "never snaps straight (the tip trails the target slightly there); 0 = off"
        ),
        default=0.0,
        min=0.0,
        max=0.5,
        precision=3,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    stretch: FloatProperty(
        name="Stretch",
        description=(
            "Largest factor by which the chain's bones may lengthen (their Y scale) to reach the target; "
            "1 = off. Bones below the chain's first need Inherit Scale 'Aligned' or 'None'"
        ),
        default=1.0,
        min=1.0,
        soft_max=3.0,
        precision=3,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    influence: FloatProperty(
        name="Influence",
        description=(
            "How much of the IK solution the chain's bones show: 1 = IK, 0 = their FK pose (their own "
            "channels, as animated or posed), between = each bone's rotation blended from FK toward IK. Keyable"
        ),
        default=1.0,
        min=0.0,
        max=1.0,
        subtype="FACTOR",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    # Full Body (the rig's `full_body`): how this chain moves the body.
    pin: BoolProperty(
        name="Pin",
        description="Full Body: the body never pulls this chain's tip off its target (planted feet, a hand on a table)",
        default=False,
        options=set(),
        override=OVERRIDE,
        update=_mark_dirty,
    )
    pull: FloatProperty(
        name="Pull",
        description=(
            "Full Body: how much this chain's target may move the body when the chain alone cannot reach it "
            "(0 = only its own bones move); pulls that conflict meet where their Weights balance"
        ),
        default=1.0,
        min=0.0,
        max=1.0,
        subtype="FACTOR",
        options=set(),
        override=OVERRIDE,
        update=_mark_dirty,
    )
    # Read-only status, written by the solver.
    is_valid: BoolProperty(name="Valid", default=True, options=set())
    message: StringProperty(name="Message", default="", options=set())
    iterations: IntProperty(name="Iterations", default=0, options=set())
    residual: FloatProperty(name="Residual", default=0.0, precision=6, unit="LENGTH", options=set())
    # Empties that chain_add created, so chain_remove can offer to delete exactly those.
    created_target: BoolProperty(default=False, options={"HIDDEN"})
    created_pole: BoolProperty(default=False, options={"HIDDEN"})
    # Control bones that chain_add created (in the same armature), for the same reason.
    created_target_bone: BoolProperty(default=False, options={"HIDDEN"})
    created_pole_bone: BoolProperty(default=False, options={"HIDDEN"})
    # Where the tip, target and pole bones were at rest, as JSON (rig/renames.py): lets a renamed bone be followed.
    # A property of ours rather than a custom property (`chain["..."]`), whose storage Blender 5.0 changed.
    bone_record: StringProperty(default="", options={"HIDDEN"}, override=OVERRIDE)


class ReachRigSettings(PropertyGroup):
    """Per-armature settings: `Object.reach_ik`."""

    live: BoolProperty(
        name="Live",
        description="Solve whenever a target, pole, the rig or a setting changes",
        default=True,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    tolerance: FloatProperty(
        name="Tolerance",
        description="Stop when the tip is this close to the target (world units)",
        default=0.001,
        min=1e-7,
        soft_max=0.1,
        precision=5,
        unit="LENGTH",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    max_iterations: IntProperty(
        name="Max Iterations",
        description="Iteration cap per solve",
        default=30,
        min=1,
        soft_max=500,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    roll_mode: EnumProperty(name="Roll", items=ROLL_ITEMS, default="KEEP", override=OVERRIDE, update=_mark_dirty)
    start_from: EnumProperty(
        name="Start From", items=START_ITEMS, default="CURRENT", override=OVERRIDE, update=_mark_dirty
    )
    full_body: BoolProperty(
        name="Full Body",
        description=(
            "Solve the chains together as one body: the body root (hips) moves and turns and the spine bends "
            "so that targets the limbs alone cannot reach are reached, pinned chains held"
        ),
        default=False,
        options=set(),
        override=OVERRIDE,
        update=_mark_dirty,
    )
    body_root: StringProperty(
        name="Body Root",
        description="Full Body: the bone that moves and turns the body (empty: the chains' lowest common ancestor)",
        default="",
        override=OVERRIDE,
        update=_mark_dirty,
    )
    chains: CollectionProperty(type=ReachChain, override={"LIBRARY_OVERRIDABLE", "USE_INSERTION"})
    active_chain_index: IntProperty(name="Active Chain", default=0, min=0, options=set())
    # Overlay switches: UI only, never keyed.
    show_chains: BoolProperty(name="Chains", default=True, options=set())
    show_limits: BoolProperty(name="Limits", default=True, options=set())
    show_targets: BoolProperty(name="Target Links", default=True, options=set())


def _angle(name: str, default: float, description: str) -> FloatProperty:
    return FloatProperty(
        name=name,
        description=description,
        subtype="ANGLE",
        default=default,
        min=0.0,
        max=math.radians(179.9),
        override=OVERRIDE,
        update=_mark_dirty,
    )


class ReachBoneLimits(PropertyGroup):
    """Per-bone joint limits: `PoseBone.reach_ik`, in the bone's rest frame carried by its parent."""

    use_cone: BoolProperty(name="Cone", default=False, override=OVERRIDE, update=_mark_dirty)
    cone_up: _angle("Up", math.radians(45.0), "Swing toward the bone's +Z")
    cone_down: _angle("Down", math.radians(45.0), "Swing toward the bone's -Z")
    cone_left: _angle("Left", math.radians(45.0), "Swing toward the bone's -X")
    cone_right: _angle("Right", math.radians(45.0), "Swing toward the bone's +X")
    use_twist: BoolProperty(name="Twist", default=False, override=OVERRIDE, update=_mark_dirty)
    twist_min: FloatProperty(
        name="Twist Min",
        subtype="ANGLE",
        default=math.radians(-45.0),
        min=-math.pi,
        max=math.pi,
        override=OVERRIDE,
        update=_mark_dirty,
    )
    twist_max: FloatProperty(
        name="Twist Max",
        subtype="ANGLE",
        default=math.radians(45.0),
        min=-math.pi,
        max=math.pi,
        override=OVERRIDE,
        update=_mark_dirty,
    )


classes = (ReachChain, ReachRigSettings, ReachBoneLimits)
_register_classes, _unregister_classes = classes_factory(classes)


def rig_settings(obj: Object) -> ReachRigSettings:
    """`obj.reach_ik`, typed (the attribute is registered at run time, so stubs cannot know it)."""
    return obj.reach_ik  # type: ignore[attr-defined, no-any-return]


def bone_limits(pose_bone: bpy.types.PoseBone) -> ReachBoneLimits:
    """`pose_bone.reach_ik`, typed."""
    return pose_bone.reach_ik  # type: ignore[attr-defined, no-any-return]


def register() -> None:
    _register_classes()
    bpy.types.Object.reach_ik = PointerProperty(type=ReachRigSettings, override=OVERRIDE)  # type: ignore[attr-defined]
    bpy.types.PoseBone.reach_ik = PointerProperty(type=ReachBoneLimits, override=OVERRIDE)  # type: ignore[attr-defined]


def unregister() -> None:
    del bpy.types.PoseBone.reach_ik  # type: ignore[attr-defined]
    del bpy.types.Object.reach_ik  # type: ignore[attr-defined]
    _unregister_classes()
