"""Set up the real Blender GUI for Reach IK's screenshots and the e2e GUI test.

Run inside a GUI Blender with Reach IK installed (see tests/e2e/test_gui.py):

    blender-shot OUT.png --size 1600x900 -- --python tools/gui_setup.py

It builds a small character in code, adds chains with the add-on's own operators (as a rigger would click
them), sets joint limits on the left arm and leg, poses the character by moving the Empties, and shows the
"Reach IK" sidebar tab in Pose Mode with the left forearm (a cone-limited elbow) active. Options come from
a dict set first with ``--python-expr "import builtins; builtins.REACH_GUI = {...}"``: ``"info": PATH``
writes the window and region rectangles and some checks as JSON to PATH (for the test to crop and inspect
the screenshot); ``"mode": "overlay"`` hides the sidebar and frames the rig closer (docs/overlay.png).
Full Body is on (body root the hips, the shins pinned) except in overlay mode; ``"full_body": False`` turns
it off. ``"armature": NAME`` uses the opened file instead of building a character (the demo's screenshot), with
``"bone"`` (the active pose bone), ``"frame"`` and ``"view"`` (``{"location": [x, y, z], "distance": d}``).
Switching the sidebar tab simulates clicks, so start Blender with ``--enable-event-simulate``.

``"shot": PATH`` (blender-shot's OUT.png) takes the screenshot as soon as the set-up is done and its info
written, the same way blender-shot does (``xwd -root | convert``), then quits: blender-shot's ``--wait`` is then
only a deadline. Without it blender-shot shoots after its fixed wait, which a slow or loaded machine can
outrun (the set-up runs from timers and its redraws use software OpenGL). ``"delay": SECONDS`` starts the UI
set-up that much later (the e2e test uses it to show that nothing depends on the set-up being quick).
"""

from __future__ import annotations

import builtins
import json
import math
import os
import shlex
import subprocess
import traceback

import bpy
from mathutils import Euler, Vector

OPTIONS: dict[str, object] = getattr(builtins, "REACH_GUI", {})
STATE: dict[str, object] = {"ok": False, "errors": []}

# name, parent, head, tail, connected (left side; the right side mirrors x)
SPINE = [
    ("hips", None, (0, 0.0, 0.98), (0, 0.0, 1.12), False),
    ("spine", "hips", (0, 0.0, 1.12), (0, 0.01, 1.33), True),
    ("chest", "spine", (0, 0.01, 1.33), (0, 0.0, 1.52), True),
    ("neck", "chest", (0, 0.0, 1.52), (0, -0.01, 1.62), True),
    ("head", "neck", (0, -0.01, 1.62), (0, -0.01, 1.84), True),
]
LIMB = [
    ("shoulder", "chest", (0.03, 0.0, 1.48), (0.17, 0.02, 1.49), False),
    ("upper_arm", "shoulder", (0.19, 0.02, 1.48), (0.42, 0.05, 1.26), False),
    ("forearm", "upper_arm", (0.42, 0.05, 1.26), (0.62, 0.0, 1.07), True),
    ("hand", "forearm", (0.62, 0.0, 1.07), (0.69, -0.01, 0.99), True),
    ("thigh", "hips", (0.1, 0.0, 0.96), (0.11, -0.03, 0.53), False),
    ("shin", "thigh", (0.11, -0.03, 0.53), (0.12, 0.01, 0.09), True),
    ("foot", "shin", (0.12, 0.01, 0.09), (0.13, -0.13, 0.02), True),
]


def build_character() -> bpy.types.Object:
    arm = bpy.data.armatures.new("Character")
    obj = bpy.data.objects.new("Character", arm)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    obj.select_set(True)
    arm.display_type = "OCTAHEDRAL"
    obj.show_in_front = True
    bpy.ops.object.mode_set(mode="EDIT")
    for name, parent, head, tail, connected in SPINE:
        eb = arm.edit_bones.new(name)
        eb.head, eb.tail = head, tail
        eb.align_roll((0.0, -1.0, 0.0))
        if parent:
            eb.parent = arm.edit_bones[parent]
            eb.use_connect = connected
    for side, sx in (("L", 1.0), ("R", -1.0)):
        for name, parent, head, tail, connected in LIMB:
            eb = arm.edit_bones.new(f"{name}.{side}")
            eb.head = (sx * head[0], head[1], head[2])
            eb.tail = (sx * tail[0], tail[1], tail[2])
            # Z toward the front (-Y): elbows and knees then bend about their X axis, as in Rigify.
            eb.align_roll((0.0, -1.0, 0.0))
            eb.parent = arm.edit_bones[parent if parent in {"chest", "hips"} else f"{parent}.{side}"]
            eb.use_connect = connected
    bpy.ops.object.mode_set(mode="POSE")
    return obj


def select_bones(obj: bpy.types.Object, active: str, others: tuple[str, ...] = ()) -> None:
    for pb in obj.pose.bones:
        sel = pb.name == active or pb.name in others
        if "select" in pb.bl_rna.properties:
            pb.select = sel
        else:
            pb.bone.select = sel
    obj.data.bones.active = obj.data.bones[active]


def rig_it(obj: bpy.types.Object) -> None:
    # Chains, clicked as a rigger would: tip bone active, the chain's first bone shift-selected, "+".
    for tip, first in (
        ("forearm.L", "upper_arm.L"),
        ("forearm.R", "upper_arm.R"),
        ("shin.L", "thigh.L"),
        ("shin.R", "thigh.R"),
    ):
        select_bones(obj, tip, (first,))
        bpy.ops.reach.chain_add()
    select_bones(obj, "head", ("neck", "chest"))
    bpy.ops.reach.chain_add()
    # Limits: a shoulder preset on the upper arm, a knee preset on the shin, a hand-tuned elbow cone.
    select_bones(obj, "upper_arm.L")
    bpy.ops.reach.limits_preset(preset="SHOULDER")
    select_bones(obj, "shin.L")
    bpy.ops.reach.limits_preset(preset="KNEE")
    elbow = obj.pose.bones["forearm.L"].reach_ik
    elbow.use_cone = True
    elbow.cone_up, elbow.cone_down = math.radians(125.0), math.radians(8.0)
    elbow.cone_left = elbow.cone_right = math.radians(28.0)
    elbow.use_twist = True
    elbow.twist_min, elbow.twist_max = math.radians(-20.0), math.radians(20.0)
    # Pose by moving the targets: left hand reaches forward and up, left foot steps forward.
    moves = {
        "forearm.L.target": (0.36, -0.33, 1.3),
        "forearm.R.target": (-0.52, -0.38, 0.86),  # out of reach: the arm points at it, a dashed link shows
        "shin.L.target": (0.13, -0.2, 0.22),
        "head.target": (0.04, -0.06, 1.83),
    }
    for name, loc in moves.items():
        bpy.data.objects[name].location = loc
    bpy.data.objects["forearm.L.pole"].location = (0.55, 0.35, 1.25)
    if OPTIONS.get("full_body", OPTIONS.get("mode") != "overlay"):
        # Full Body on (the panel's picture shows its rows: Body Root, and Pin / Pull on the active chain),
        # the feet pinned as Set Up Character pins them.
        obj.reach_ik.full_body = True
        obj.reach_ik.body_root = "hips"
        for chain in obj.reach_ik.chains:
            chain.pin = chain.tip_bone.startswith("shin.")
    chains = obj.reach_ik.chains
    obj.reach_ik.active_chain_index = next(i for i, c in enumerate(chains) if c.tip_bone == "forearm.L")
    select_bones(obj, "forearm.L")
    bpy.context.view_layer.update()


def view3d() -> tuple[bpy.types.Window, bpy.types.Area]:
    wm = bpy.context.window_manager
    for window in wm.windows:
        for area in window.screen.areas:
            if area.type == "VIEW_3D":
                return window, area
    raise RuntimeError("no 3D viewport in the startup screen")


def arrange_ui() -> None:
    """The 3D viewport fills the window; 'panel' mode opens the sidebar, 'overlay' mode frames the rig."""
    window, area = view3d()
    region = next(r for r in area.regions if r.type == "WINDOW")
    with bpy.context.temp_override(window=window, area=area, region=region):
        bpy.ops.screen.screen_full_area()
    window, area = view3d()
    space = area.spaces.active
    overlay_mode = OPTIONS.get("mode") == "overlay"
    # An opaque sidebar (no region overlap) reads better in a cropped picture.
    bpy.context.preferences.system.use_region_overlap = overlay_mode
    space.show_region_ui = not overlay_mode
    space.show_region_toolbar = False
    space.show_gizmo = not overlay_mode
    space.overlay.show_text = not overlay_mode
    space.overlay.show_floor = True
    space.overlay.show_relationship_lines = False
    space.shading.type = "SOLID"
    r3d = space.region_3d
    r3d.view_perspective = "PERSP"
    view = OPTIONS.get("view")
    if isinstance(view, dict):
        r3d.view_rotation = Euler((math.radians(72.0), 0.0, math.radians(-28.0))).to_quaternion()
        r3d.view_location = Vector(view["location"])
        r3d.view_distance = float(view["distance"])
    elif overlay_mode:
        r3d.view_rotation = Euler((math.radians(80.0), 0.0, math.radians(-38.0))).to_quaternion()
        r3d.view_location = Vector((0.1, 0.0, 1.0))
        r3d.view_distance = 2.35
    else:
        r3d.view_rotation = Euler((math.radians(78.0), 0.0, math.radians(-32.0))).to_quaternion()
        r3d.view_location = Vector((0.12, 0.0, 0.98))
        r3d.view_distance = 3.2
    area.tag_redraw()


def redraw() -> None:
    window, _area = view3d()
    with bpy.context.temp_override(window=window):
        bpy.ops.wm.redraw_timer(type="DRAW_WIN_SWAP", iterations=1)


def count_panel_draws() -> None:
    """Count draws of the Reach IK panel (Blender looks `draw` up on the class at every call)."""
    cls = bpy.types.VIEW3D_PT_reach_ik
    original = cls.draw
    STATE["panel_draws"] = 0

    def draw(self: bpy.types.Panel, context: bpy.types.Context) -> None:
        STATE["panel_draws"] = int(STATE["panel_draws"]) + 1  # type: ignore[call-overload]
        original(self, context)

    cls.draw = draw


_tab_tries = [0]


def show_reach_tab() -> float | None:
    """Click down the sidebar's tab strip until the Reach IK panel draws.

    Blender 4.3 cannot set `Region.active_panel_category` from Python, so this simulates the clicks a person
    would make (needs `--enable-event-simulate`). The tabs run down the region's right edge; each try clicks
    a little lower. Returns the timer's next interval, None when done.
    """
    window, area = view3d()
    ui = next(r for r in area.regions if r.type == "UI")
    before = int(STATE.get("panel_draws", 0))  # type: ignore[call-overload]
    redraw()
    if int(STATE.get("panel_draws", 0)) > before:  # type: ignore[call-overload]
        STATE["tab"] = "Reach IK"
        _after_tab()
        return None
    if _tab_tries[0] >= 20:
        STATE["errors"].append("could not switch the sidebar to the Reach IK tab")  # type: ignore[union-attr]
        _after_tab()
        return None
    _tab_tries[0] += 1
    scale = bpy.context.preferences.system.ui_scale
    x = ui.x + ui.width - int(10 * scale)
    y = ui.y + ui.height - int((15 + 22 * _tab_tries[0]) * scale)
    try:
        window.event_simulate("MOUSEMOVE", "NOTHING", x=x, y=y)
        window.event_simulate("LEFTMOUSE", "PRESS", x=x, y=y)
        window.event_simulate("LEFTMOUSE", "RELEASE", x=x, y=y)
    except Exception as exc:
        STATE["errors"].append(f"event_simulate: {exc} (start Blender with --enable-event-simulate)")  # type: ignore[union-attr]
        _after_tab()
        return None
    return 0.05


def _after_tab() -> None:
    # Leave the mouse over the viewport's corner (no hover highlight on the panel), then record.
    window, area = view3d()
    try:
        window.event_simulate("MOUSEMOVE", "NOTHING", x=area.x + 5, y=area.y + 60)
    except Exception as exc:
        STATE["errors"].append(f"event_simulate: {exc}")  # type: ignore[union-attr]
    bpy.app.timers.register(_later_info, first_interval=0.5)


def write_info() -> None:
    path = OPTIONS.get("info")
    if not path:
        return
    window, area = view3d()
    rects = {}
    for r in area.regions:
        rects[r.type] = {"x": r.x, "y": r.y, "width": r.width, "height": r.height}
    obj = bpy.context.active_object
    STATE.update(
        window={"x": window.x, "y": window.y, "width": window.width, "height": window.height},
        regions=rects,
        mode=bpy.context.mode,
        active_bone=obj.data.bones.active.name if obj and obj.type == "ARMATURE" and obj.data.bones.active else None,
        chains=[(c.name, c.is_valid, c.message) for c in obj.reach_ik.chains] if obj else [],
        version=bpy.app.version_string,
    )
    # Written whole, then renamed: whoever waits for the file never reads half of it.
    part = f"{path}.part"
    with open(part, "w") as fh:
        json.dump(STATE, fh)
    os.replace(part, str(path))


def take_shot() -> None:
    """With the "shot" option: the screenshot, now that the set-up is drawn, then quit (see the docstring)."""
    path = OPTIONS.get("shot")
    if not path:
        return
    redraw()
    # blender-shot's own capture, so the picture is the same: the whole virtual X screen.
    proc = subprocess.run(
        f"xwd -root -silent | convert xwd:- {shlex.quote(str(path))}", shell=True, capture_output=True, text=True
    )
    if proc.returncode != 0 or not os.path.isfile(str(path)) or os.path.getsize(str(path)) == 0:
        # Leave the picture to blender-shot's own timer (its --wait deadline) rather than quit without one.
        print(f"gui_setup: capture failed ({proc.returncode}): {proc.stderr.strip()}")
        return
    bpy.ops.wm.quit_blender()


def _later_ui() -> None:
    try:
        arrange_ui()
        count_panel_draws()
        redraw()
        if OPTIONS.get("mode") == "overlay":
            bpy.app.timers.register(_later_info, first_interval=0.3)
        else:
            bpy.app.timers.register(_later_tab, first_interval=0.2)
    except Exception:
        STATE["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
        traceback.print_exc()
        bpy.app.timers.register(_later_info, first_interval=0.2)


def _later_tab() -> float | None:
    try:
        return show_reach_tab()
    except Exception:
        STATE["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
        traceback.print_exc()
        bpy.app.timers.register(_later_info, first_interval=0.2)
        return None


def _later_info() -> None:
    try:
        redraw()
        write_info()
    except Exception:
        traceback.print_exc()
    try:
        take_shot()
    except Exception:
        traceback.print_exc()


def main() -> None:
    bpy.context.preferences.view.show_splash = False
    name = OPTIONS.get("armature")
    if isinstance(name, str):
        bpy.context.scene.frame_set(int(OPTIONS.get("frame", bpy.context.scene.frame_current)))  # type: ignore[call-overload]
        obj = bpy.data.objects[name]
        bpy.context.view_layer.objects.active = obj
        obj.select_set(True)
        bpy.ops.object.mode_set(mode="POSE")
        select_bones(obj, str(OPTIONS["bone"]))
    else:
        for ob in list(bpy.data.objects):
            bpy.data.objects.remove(ob)
        obj = build_character()
        rig_it(obj)
    STATE["ok"] = True
    # UI layout needs the window to exist and have drawn once: do it from timers.
    bpy.app.timers.register(_later_ui, first_interval=0.5 + float(OPTIONS.get("delay", 0.0)))  # type: ignore[arg-type]


try:
    main()
except Exception:
    STATE["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
    traceback.print_exc()
    bpy.app.timers.register(_later_info, first_interval=1.0)
