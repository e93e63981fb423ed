"""Render Animation in the real Blender GUI (run by tests/e2e/test_render_gui.py through blender-shot).

Builds the e2e render shot in the running GUI (a live two-bone arm, a sphere on the hand, an orthographic
camera, Workbench at 64 x 64 on a transparent background), presses Render Animation the way the menu does
(`render.render('INVOKE_DEFAULT', animation=True)`: a render job on its own thread) with Render > Lock
Interface on or off, waits for `render_complete`, measures the sphere in every frame written and what the
render left behind, writes `info` (JSON), takes the screenshot and quits.

Options come in `builtins.REACH_RENDER`: {"info": path, "shot": path, "frames": folder, "lock": bool,
"still": bool}; with "still", F12 instead (`render.render('INVOKE_DEFAULT', write_still=True)`) on frame 3.
"""

from __future__ import annotations

import builtins
import json
import math
import subprocess
import sys
import time
import traceback

import bpy
import numpy as np
from bpy_extras.object_utils import world_to_camera_view

OPTS = builtins.REACH_RENDER  # type: ignore[attr-defined]
RES = 64
STILL_FRAME = 3
info: dict[str, object] = {"ok": False, "errors": []}
state: dict[str, object] = {"end": None, "t0": time.monotonic()}


def build() -> tuple[bpy.types.Object, bpy.types.Object]:
    sc = bpy.context.scene
    for ob in list(sc.objects):
        bpy.data.objects.remove(ob)
    arm = bpy.data.armatures.new("Arm")
    rig = bpy.data.objects.new("Rig", arm)
    sc.collection.objects.link(rig)
    bpy.context.view_layer.objects.active = rig
    with bpy.context.temp_override(active_object=rig, object=rig):
        bpy.ops.object.mode_set(mode="EDIT")
        up = arm.edit_bones.new("upper")
        up.head, up.tail = (0, 0, 0), (0, 0, 1)
        fo = arm.edit_bones.new("fore")
        fo.head, fo.tail = (0, 0, 1), (0.05, 0, 2)
        fo.parent, fo.use_connect = up, True
        bpy.ops.object.mode_set(mode="OBJECT")
    target = bpy.data.objects.new("Target", None)
    sc.collection.objects.link(target)
    for frame, loc in ((1, (0.5, 0.0, 1.5)), (4, (1.2, 0.3, 0.8))):
        target.location = loc
        target.keyframe_insert("location", frame=frame)
    ch = rig.reach_ik.chains.add()
    ch.name, ch.tip_bone, ch.chain_length, ch.solver, ch.target = "arm", "fore", 2, "TWO_BONE", target
    mesh = bpy.data.meshes.new("Ball")
    import bmesh

    bm = bmesh.new()
    bmesh.ops.create_uvsphere(bm, u_segments=16, v_segments=8, radius=0.12)
    bm.to_mesh(mesh)
    bm.free()
    ball = bpy.data.objects.new("Ball", mesh)
    sc.collection.objects.link(ball)
    ball.parent, ball.parent_type, ball.parent_bone = rig, "BONE", "fore"
    cam = bpy.data.objects.new("Cam", bpy.data.cameras.new("Cam"))
    sc.collection.objects.link(cam)
    cam.data.type, cam.data.ortho_scale = "ORTHO", 4.0
    cam.location, cam.rotation_euler = (0.2, -10.0, 1.0), (math.pi / 2, 0, 0)
    sc.camera = cam
    r = sc.render
    r.engine = "BLENDER_WORKBENCH"
    r.resolution_x = r.resolution_y = RES
    r.resolution_percentage = 100
    r.film_transparent = True
    r.image_settings.file_format, r.image_settings.color_mode = "PNG", "RGBA"
    r.filepath = OPTS["frames"].rstrip("/") + "/f_"
    r.use_lock_interface = bool(OPTS["lock"])
    sc.display.shading.light, sc.display.shading.color_type = "FLAT", "SINGLE"
    sc.frame_start, sc.frame_end = 1, 4
    return rig, target


def centroid(path: str) -> list[float]:
    img = bpy.data.images.load(path)
    try:
        w, h = img.size
        px = np.empty(w * h * 4, dtype=np.float32)
        img.pixels.foreach_get(px)
    finally:
        bpy.data.images.remove(img)
    alpha = px.reshape(h, w, 4)[..., 3]
    ys, xs = np.mgrid[0:h, 0:w]
    total = float(alpha.sum())
    return [float(((xs + 0.5) * alpha).sum()) / total, float(((ys + 0.5) * alpha).sum()) / total] if total else []


def pose_bytes(rig: bpy.types.Object) -> str:
    buf = np.empty(len(rig.pose.bones) * 4, dtype=np.float32)
    rig.pose.bones.foreach_get("rotation_quaternion", buf)
    return buf.tobytes().hex()


def on_init(*_a: object) -> None:
    # Where Blender runs render_init (and so Reach IK's temporary bake): the main thread or the render job's.
    import threading

    info["init_on_main_thread"] = threading.current_thread() is threading.main_thread()
    state["init"] = time.perf_counter()


def on_pre(*_a: object) -> None:
    if "pre" not in state:
        state["pre"] = time.perf_counter()
        info["init_to_first_frame_s"] = state["pre"] - state["init"]  # type: ignore[operator]
        render = sys.modules[next(m for m in sys.modules if m.endswith("reach_ik.rig.render"))]
        info["baked"] = render.baked()
        info["prepared_on_main_thread"] = render.prepared_on_main_thread()


def on_complete(*_a: object) -> None:
    state["end"] = "complete"


def on_cancel(*_a: object) -> None:
    state["end"] = "cancel"


def finish() -> None:
    try:
        sc = bpy.context.scene
        rig = bpy.data.objects["Rig"]
        info["end"] = state["end"]
        if OPTS.get("still"):  # a still is saved under the output path as it is, no frame number
            info["frames"] = {STILL_FRAME: centroid(f"{OPTS['frames']}/f_.png")}
        else:
            info["frames"] = {f: centroid(f"{OPTS['frames']}/f_{f:04d}.png") for f in range(1, 5)}
        info["after"] = {
            "pose": pose_bytes(rig),
            "actions": sorted(a.name for a in bpy.data.actions),
            "rig_animation_data": rig.animation_data is not None,
            "frame": sc.frame_current,
        }
        info["ok"] = True
    except Exception:
        info["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
    with open(OPTS["info"], "w") as fh:
        json.dump(info, fh)
    try:
        subprocess.run(f"xwd -root -silent | convert xwd:- '{OPTS['shot']}'", shell=True, check=True)
    except Exception as exc:
        print("gui_render: screenshot failed:", exc)
    bpy.ops.wm.quit_blender()


def wait() -> float | None:
    if state["end"] is None and time.monotonic() - state["t0"] < 240:
        return 0.25
    # The render job reports its end before its last clean-up on the main thread: give it a moment.
    bpy.app.timers.register(finish, first_interval=1.0)
    return None


def start() -> float | None:
    try:
        sc = bpy.context.scene
        rig, target = build()
        expect = {}
        for f in range(1, 5):
            sc.frame_set(f)
            uv = world_to_camera_view(sc, sc.camera, target.matrix_world.translation)
            expect[f] = [uv.x * RES, uv.y * RES]
        sc.frame_set(STILL_FRAME if OPTS.get("still") else 2)  # where the user stands when pressing the key
        bpy.context.view_layer.update()
        info["expect"] = expect
        info["before"] = {
            "pose": pose_bytes(rig),
            "actions": sorted(a.name for a in bpy.data.actions),
            "rig_animation_data": rig.animation_data is not None,
            "frame": sc.frame_current,
        }
        bpy.app.handlers.render_init.append(on_init)
        bpy.app.handlers.render_pre.append(on_pre)
        bpy.app.handlers.render_complete.append(on_complete)
        bpy.app.handlers.render_cancel.append(on_cancel)
        bpy.context.preferences.view.render_display_type = "NONE"
        win = bpy.context.window_manager.windows[0]
        area = max(win.screen.areas, key=lambda a: a.width * a.height)
        with bpy.context.temp_override(window=win, screen=win.screen, area=area):
            if OPTS.get("still"):
                result = bpy.ops.render.render("INVOKE_DEFAULT", write_still=True)
            else:
                result = bpy.ops.render.render("INVOKE_DEFAULT", animation=True)
        info["invoke"] = sorted(result)
        state["t0"] = time.monotonic()
        bpy.app.timers.register(wait, first_interval=0.25)
    except Exception:
        info["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
        bpy.app.timers.register(finish, first_interval=0.1)
    return None


bpy.app.timers.register(start, first_interval=1.0)
