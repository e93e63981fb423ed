"""File ▸ Export ▸ FBX / Alembic / USD with live IK (`reach.export`): the exporter inside the temporary bake.

glTF and FBX's scene stack follow live chains by themselves (see `rig/export.py`). Alembic and USD evaluate
their own depsgraph, and FBX's default mode (one stack per action) exports an armature without an action
still: for those the menu offers the same exporter run inside `rig.export.baked`, which bakes every live
rig of the scene's range into temporary copies and puts everything back afterwards, also when the export
fails. The exporter's own options are its defaults (animation on); from a script, wrap any exporter call in
`baked()` for other options.
"""

from __future__ import annotations

from pathlib import Path

import bpy
from bpy.props import EnumProperty, StringProperty
from bpy.types import Context, Menu, Operator

from ..rig.compat import classes_factory
from ..rig.export import baked

#: Format -> (label, file extension, the exporter's operator).
FORMATS = {
    "FBX": ("FBX", ".fbx", "export_scene.fbx"),
    "ALEMBIC": ("Alembic", ".abc", "wm.alembic_export"),
    "USD": ("USD", ".usdc", "wm.usd_export"),
}


def available(fmt: str) -> bool:
    """Whether this Blender has the exporter (builds without Alembic or USD exist, as FBX can be disabled)."""
    module, name = FORMATS[fmt][2].split(".")
    try:
        getattr(getattr(bpy.ops, module), name).get_rna_type()
    except (KeyError, AttributeError):
        return False
    return True


def _export(fmt: str, path: str, scene: bpy.types.Scene) -> set[str]:
    if fmt == "FBX":
        result = bpy.ops.export_scene.fbx(filepath=path, bake_anim=True)
    elif fmt == "ALEMBIC":
        result = bpy.ops.wm.alembic_export(
            filepath=path, start=scene.frame_start, end=scene.frame_end, as_background_job=False
        )
    else:
        result = bpy.ops.wm.usd_export(filepath=path, export_animation=True)
    done: set[str] = {str(r) for r in result} if result else set()
    return done


class REACH_OT_export(Operator):
    """Export with the live IK chains' pose on every frame (a temporary bake, removed afterwards)"""

    bl_idname = "reach.export"
    bl_label = "Export with Live IK"
    bl_options = {"REGISTER"}

    format: EnumProperty(
        name="Format",
        items=[(key, v[0], f"{v[0]} with live chains baked for the export") for key, v in FORMATS.items()],
        default="FBX",
    )
    filepath: StringProperty(name="File Path", subtype="FILE_PATH")
    filter_glob: StringProperty(default="*.fbx;*.abc;*.usd;*.usdc;*.usda", options={"HIDDEN"})

    @classmethod
    def poll(cls, context: Context) -> bool:
        if context.scene is None:
            cls.poll_message_set("Reach IK: no scene to export")
            return False
        return True

    def invoke(self, context: Context, event: bpy.types.Event) -> set[str]:
        if not self.filepath:
            blend = bpy.data.filepath
            stem = Path(blend).stem if blend else "untitled"
            self.filepath = stem + FORMATS[self.format][1]
        wm = context.window_manager
        assert wm is not None
        wm.fileselect_add(self)
        return {"RUNNING_MODAL"}

    def execute(self, context: Context) -> set[str]:
        scene = context.scene
        assert scene is not None
        label, ext, _op = FORMATS[self.format]
        if not available(self.format):
            self.report({"ERROR"}, f"Reach IK: this Blender has no {label} exporter (enable it, or use another format)")
            return {"CANCELLED"}
        if not self.filepath:
            self.report({"ERROR"}, f"Reach IK: give a file path for the {label} export")
            return {"CANCELLED"}
        path = bpy.path.ensure_ext(bpy.path.abspath(self.filepath), ext)
        try:
            with baked(scene) as rigs:
                result = _export(self.format, path, scene)
        except Exception as exc:  # the exporter's own error; baked() has put everything back
            self.report({"ERROR"}, f"Reach IK: the {label} export failed, nothing was changed: {exc}")
            return {"CANCELLED"}
        if "FINISHED" not in result:
            self.report({"ERROR"}, f"Reach IK: the {label} exporter did not finish ({', '.join(result)})")
            return {"CANCELLED"}
        which = ", ".join(f"'{n}'" for n in rigs) if rigs else "none (no live chains)"
        self.report({"INFO"}, f"Reach IK: exported {path} with the live pose of: {which}")
        return {"FINISHED"}


def draw_export_menu(menu: Menu, context: Context) -> None:
    """File ▸ Export entries: each exporter that does not follow live chains by itself, inside the bake."""
    layout = menu.layout
    if layout is None:
        return
    layout.separator()
    for key, (label, _ext, _op) in FORMATS.items():
        if available(key):
            layout.operator(REACH_OT_export.bl_idname, text=f"{label} with Live IK (Reach IK)").format = key


classes = (REACH_OT_export,)
_register, _unregister = classes_factory(classes)


def register() -> None:
    _register()
    bpy.types.TOPBAR_MT_file_export.append(draw_export_menu)


def unregister() -> None:
    bpy.types.TOPBAR_MT_file_export.remove(draw_export_menu)
    _unregister()
