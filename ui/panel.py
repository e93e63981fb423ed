"""The "Reach IK" sidebar tab of the 3D viewport: rig settings, the chain list, joint limits, overlay toggles."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import bpy
from bpy.types import Context, Object, Panel, UILayout, UIList

from ..core.presets import PRESET_ITEMS
from ..operators.chains import active_pose_bone
from ..rig import fixes, lookahead
from ..rig.compat import classes_factory
from ..rig.props import SOLVER_ITEMS, ReachChain, bone_limits, rig_settings

if TYPE_CHECKING:
    from bpy.stub_internal.rna_enums import RegionTypeItems, SpaceTypeItems

# Icon names as plain strings (`Any`: the stubs type icons as one long Literal).
SOLVER_ICONS: dict[str, Any] = {item[0]: item[3] for item in SOLVER_ITEMS}
SWITCH_ICONS: dict[str, Any] = {"IK": "CON_KINEMATIC", "FK": "BONE_DATA"}


def armature_in_reach(context: Context) -> Object | None:
    """The active armature when it can be set up here (Object or Pose Mode), else None."""
    obj = context.active_object
    if obj is None or obj.type != "ARMATURE" or context.mode not in {"OBJECT", "POSE"}:
        return None
    return obj


def _layout(panel: Panel) -> UILayout:
    layout = panel.layout
    assert layout is not None, "Blender sets Panel.layout before calling draw()"
    return layout


def wrapped(layout: UILayout, context: Context, text: str, icon: Any = "NONE") -> None:
    """Labels for `text`, wrapped to the region's width (a sidebar label does not wrap by itself)."""
    region = context.region
    width = region.width if region is not None else 300
    prefs = context.preferences
    scale = prefs.view.ui_scale if prefs is not None else 1.0
    chars = max(20, int(width / (7.0 * scale)) - 4)
    col = layout.column(align=True)
    for i, line in enumerate(textwrap.wrap(text, chars) or [""]):
        col.label(text=line, icon=icon if i == 0 else "BLANK1")


class PanelMixin:
    # Typed as Panel declares them, so the mixin and Panel agree (mypy checks multiple bases).
    bl_space_type: SpaceTypeItems = "VIEW_3D"
    bl_region_type: RegionTypeItems = "UI"
    bl_category = "Reach IK"


class VIEW3D_PT_reach_ik(PanelMixin, Panel):
    """Reach IK: rig settings, solve now, bake"""

    bl_label = "Reach IK"

    def draw(self, context: Context) -> None:
        layout = _layout(self)
        obj = armature_in_reach(context)
        if obj is None:
            active = context.active_object
            if active is not None and active.type == "ARMATURE":
                wrapped(layout, context, "Switch to Object or Pose Mode to set up IK", icon="INFO")
            else:
                wrapped(layout, context, "Select an armature to set up its IK chains", icon="INFO")
            return
        settings = rig_settings(obj)
        layout.use_property_split = True
        layout.use_property_decorate = False
        col = layout.column()
        col.prop(settings, "live")
        col.prop(settings, "tolerance")
        col.prop(settings, "max_iterations", text="Iterations")
        col.prop(settings, "roll_mode")
        col.prop(settings, "start_from")
        col.prop(settings, "full_body")
        if settings.full_body:
            col.prop_search(settings, "body_root", obj.data, "bones", text="Body Root", icon="BONE_DATA")
        row = layout.row(align=True)
        row.operator("reach.solve", text="Solve Now", icon="FILE_REFRESH")
        row.operator("reach.bake", text="Bake", icon="KEYFRAME_HLT")
        playback = lookahead.status(obj)
        if playback is not None:
            wrapped(layout, context, playback[0], icon=playback[1])


class REACH_UL_chains(UIList):
    """The chains of an armature: enabled, name, solver, a warning when invalid"""

    def draw_item(
        self,
        context: Context,
        layout: UILayout,
        data: object,
        item: ReachChain,
        icon: int,
        active_data: object,
        active_propname: str,
        index: int = 0,
        flt_flag: int = 0,
    ) -> None:
        row = layout.row(align=True)
        row.prop(item, "enabled", text="")
        sub = row.row(align=True)
        sub.active = item.enabled
        sub.prop(item, "name", text="", emboss=False, icon=SOLVER_ICONS.get(item.solver, "NONE"))
        if item.enabled and not item.is_valid:
            sub.label(text="", icon="ERROR")


def draw_status(context: Context, layout: UILayout, chain: ReachChain, index: int = -1) -> None:
    box = layout.box()
    if not chain.enabled:
        box.label(text="Disabled", icon="HIDE_ON")
        return
    if not chain.is_valid:
        col = box.column()
        col.alert = True
        wrapped(col, context, chain.message or "Invalid", icon="ERROR")
        owner = chain.id_data
        found = fixes.offer(owner, index, chain.message) if index >= 0 and isinstance(owner, Object) else None
        if found is not None:
            # The bone setting the message names, changed in one click (one undo step).
            op = box.operator("reach.fix_chain", text=f"Fix: {fixes.label(found.fix)}", icon="MODIFIER")
            op.index = index
        return
    scene = context.scene
    if scene is not None:
        unit = scene.unit_settings
        residual = bpy.utils.units.to_string(
            unit.system, "LENGTH", chain.residual * unit.scale_length, precision=4, split_unit=False
        )
    else:
        residual = f"{chain.residual:.4g}"
    row = box.row()
    row.label(text=f"Iterations: {chain.iterations}")
    row.label(text=f"Residual: {residual}")
    if chain.message:
        wrapped(box, context, chain.message, icon="INFO")
    else:
        box.label(text="Reached", icon="CHECKMARK")


def _bone_picker(layout: UILayout, chain: ReachChain, role: str, prop: str, text: str) -> None:
    """A bone search field for the target's or pole's bones, when it is an armature (a control bone)."""
    ob = getattr(chain, role)
    if ob is not None and ob.type == "ARMATURE":
        layout.prop_search(chain, prop, ob.data, "bones", text=text, icon="BONE_DATA")


def draw_ik_fk(layout: UILayout, chain: ReachChain) -> None:
    """The active chain's Influence (keyable: with its decorator) and the IK/FK buttons, on that chain."""
    col = layout.column()
    col.active = chain.enabled
    row = col.row()
    row.use_property_decorate = True
    row.prop(chain, "influence", slider=True)
    buttons = col.column(align=True)
    row = buttons.row(align=True)
    row.operator("reach.snap_to_pose", text="Snap IK to Pose", icon="SNAP_ON").chains = "ACTIVE"
    row.operator("reach.apply_to_fk", text="Apply IK to FK", icon="POSE_HLT").chains = "ACTIVE"
    row = buttons.row(align=True)
    for mode, icon in SWITCH_ICONS.items():
        op = row.operator("reach.switch", text=f"Switch to {mode}", icon=icon)
        op.mode, op.chains = mode, "ACTIVE"
    layout.separator()


class VIEW3D_PT_reach_ik_chains(PanelMixin, Panel):
    bl_label = "Chains"
    bl_parent_id = "VIEW3D_PT_reach_ik"

    @classmethod
    def poll(cls, context: Context) -> bool:
        return armature_in_reach(context) is not None

    def draw(self, context: Context) -> None:
        obj = armature_in_reach(context)
        if obj is None:
            return
        layout = _layout(self)
        settings = rig_settings(obj)
        if not len(settings.chains):
            # A rig with no IK yet: the one-click set-up first, large, before the manual tools.
            big = layout.row()
            big.scale_y = 1.6
            big.operator("reach.auto_setup", text="Set Up Character", icon="ARMATURE_DATA")
        row = layout.row()
        row.template_list("REACH_UL_chains", "", settings, "chains", settings, "active_chain_index", rows=4)
        side = row.column(align=True)
        side.operator("reach.chain_add", text="", icon="ADD")
        side.operator("reach.chain_remove", text="", icon="REMOVE")
        side.separator()
        side.operator("reach.chain_move", text="", icon="TRIA_UP").direction = "UP"
        side.operator("reach.chain_move", text="", icon="TRIA_DOWN").direction = "DOWN"
        side.separator()
        side.operator("reach.chains_from_hierarchy", text="", icon="OUTLINER_DATA_ARMATURE")
        side.separator()
        side.operator("reach.symmetrize", text="", icon="MOD_MIRROR")
        if any(con.type == "IK" for pb in obj.pose.bones for con in pb.constraints):
            layout.operator("reach.convert_constraints", icon="CON_KINEMATIC")
        if not len(settings.chains):
            wrapped(
                layout,
                context,
                "A humanoid (Mixamo, Unreal, VRM, Rigify, CC, Daz...): Set Up Character. Any rig: in Pose "
                "Mode click the tip bone (shift-click up to the chain's first bone), then +.",
                icon="INFO",
            )
            return
        i = settings.active_chain_index
        if not 0 <= i < len(settings.chains):
            return
        chain: ReachChain = settings.chains[i]
        layout.use_property_split = True
        layout.use_property_decorate = False
        draw_ik_fk(layout, chain)
        col = layout.column()
        col.active = chain.enabled
        col.prop(chain, "solver")
        if chain.solver == "CCD":
            col.prop(chain, "ccd_max_step")
        col.prop_search(chain, "tip_bone", obj.data, "bones", text="Tip Bone", icon="BONE_DATA")
        col.prop(chain, "chain_length", text="Length")
        col.prop(chain, "target")
        _bone_picker(col, chain, "target", "target_bone", "Target Bone")
        col.prop(chain, "pole")
        _bone_picker(col, chain, "pole", "pole_bone", "Pole Bone")
        if chain.pole is not None:
            col.prop(chain, "pole_angle")
        col.prop(chain, "weight")
        col.prop(chain, "use_target_rotation", text="Target Rotation")
        if settings.full_body:
            col.prop(chain, "pin")
            sub = col.row()
            sub.active = not chain.pin
            sub.prop(chain, "pull", slider=True)
        # Soft and Stretch are keyable: their rows carry the keyframe decorator.
        keyed = col.column()
        keyed.use_property_decorate = True
        keyed.prop(chain, "soft")
        keyed.prop(chain, "stretch")
        draw_status(context, layout, chain, i)
        if len(settings.chains):
            layout.operator("reach.auto_setup", text="Set Up Character", icon="ARMATURE_DATA")


class VIEW3D_PT_reach_ik_limits(PanelMixin, Panel):
    bl_label = "Joint Limits"
    bl_parent_id = "VIEW3D_PT_reach_ik"

    @classmethod
    def poll(cls, context: Context) -> bool:
        obj = armature_in_reach(context)
        return obj is not None

    def draw_header_preset(self, context: Context) -> None:
        # The bone whose limits these are, at the header's right.
        obj = armature_in_reach(context)
        pb = active_pose_bone(context, obj) if obj is not None else None
        if pb is not None:
            _layout(self).label(text=pb.name, icon="BONE_DATA")

    def draw(self, context: Context) -> None:
        layout = _layout(self)
        obj = armature_in_reach(context)
        pb = active_pose_bone(context, obj) if obj is not None else None
        if pb is None:
            wrapped(layout, context, "Click a bone to edit its joint limits", icon="INFO")
            return
        limits = bone_limits(pb)
        layout.use_property_split = True
        layout.use_property_decorate = False
        col = layout.column()
        col.prop(limits, "use_cone", text="Cone")
        sub = col.column(align=True)
        sub.active = limits.use_cone
        sub.prop(limits, "cone_up", text="Up")
        sub.prop(limits, "cone_down", text="Down")
        sub.prop(limits, "cone_left", text="Left")
        sub.prop(limits, "cone_right", text="Right")
        col.separator()
        col.prop(limits, "use_twist", text="Twist")
        sub = col.column(align=True)
        sub.active = limits.use_twist
        sub.prop(limits, "twist_min", text="Min")
        sub.prop(limits, "twist_max", text="Max")
        layout.label(text="Presets")
        grid = layout.grid_flow(row_major=True, columns=3, even_columns=True, align=True)
        for ident, name, _desc in PRESET_ITEMS:
            grid.operator("reach.limits_preset", text=name).preset = ident


class VIEW3D_PT_reach_ik_overlay(PanelMixin, Panel):
    bl_label = "Overlay"
    bl_parent_id = "VIEW3D_PT_reach_ik"

    @classmethod
    def poll(cls, context: Context) -> bool:
        return armature_in_reach(context) is not None

    def draw(self, context: Context) -> None:
        obj = armature_in_reach(context)
        if obj is None:
            return
        settings = rig_settings(obj)
        row = _layout(self).row(align=True)
        row.prop(settings, "show_chains", toggle=True)
        row.prop(settings, "show_limits", toggle=True)
        row.prop(settings, "show_targets", toggle=True)


def draw_pose_menu(menu: bpy.types.Menu, context: Context) -> None:
    """Pose ▸ Reach IK entries: the one-click set-up and Symmetrize."""
    layout = menu.layout
    if layout is None:
        return
    layout.separator()
    layout.operator("reach.auto_setup", text="Reach IK: Set Up Character", icon="ARMATURE_DATA")
    layout.operator("reach.symmetrize", text="Reach IK: Symmetrize", icon="MOD_MIRROR")


classes = (
    REACH_UL_chains,
    VIEW3D_PT_reach_ik,
    VIEW3D_PT_reach_ik_chains,
    VIEW3D_PT_reach_ik_limits,
    VIEW3D_PT_reach_ik_overlay,
)
_register, _unregister = classes_factory(classes)


def register() -> None:
    _register()
    bpy.types.VIEW3D_MT_pose.append(draw_pose_menu)


def unregister() -> None:
    bpy.types.VIEW3D_MT_pose.remove(draw_pose_menu)
    _unregister()
