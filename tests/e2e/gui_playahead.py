"""Run inside the real Blender GUI (tests/e2e/test_gui_playahead.py): the one-click humanoid with every bone's
rotation and location keyed on two frames (its controls moved between them), shown at frame 1 (a frame
change), left alone until Reach IK's idle timer has solved the playback range ahead (`rig.lookahead`), then
played with Blender's own Play (`screen.animation_play`) until it has stepped `STEPS` frames (however long
that takes on a busy machine) and stopped. Records the frames
solved ahead, the frame changes during playback and how many of them took a frame solved ahead, what the
last one that did not failed on, and the left arm's status against the pose Blender shows at the end.
Writes JSON to the path in ``builtins.REACH_PLAY`` and quits.

With "controls" in that path's name: only the hands' controls keyed (the chain bones not: each frame starts
them from the frame before), a short range played in loops; records also the frame changes after the first
arrival at the range's first frame (a loop), from where every frame follows on from the frames solved
ahead."""

from __future__ import annotations

import builtins
import sys
import time
import traceback
from pathlib import Path

import bpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gui_script import finish, guarded, module, set_up_humanoid, view3d

OUT = builtins.REACH_PLAY  # type: ignore[attr-defined]
CONTROLS = "controls" in Path(OUT).name
FRAMES = 12 if CONTROLS else 48
STEPS = 40 if CONTROLS else 24  # frame changes to play: over three loops, or half the range
DEADLINE = 120.0  # seconds the script may wait for the timer and for the steps (a test deadline, not a measure)
result: dict[str, object] = {"ok": False, "errors": []}
state = {"phase": "wait", "since": time.monotonic(), "changes": 0, "taken": 0, "hits": 0, "looped": 0}
state.update(after_loop=0, taken_after_loop=0)


def _counted(scene: bpy.types.Scene, *_args: object) -> None:
    # Appended after Reach IK's own frame_change_post handler: it runs after it, and sees whether it took a
    # frame solved ahead.
    if state["phase"] == "play":
        hits = module("lookahead").hits(bpy.data.objects["Character"])
        state["changes"] += 1
        state["taken"] += hits > state["hits"]
        if scene.frame_current == scene.frame_start:
            state["looped"] += 1
        if state["looped"]:
            state["after_loop"] += 1
            state["taken_after_loop"] += hits > state["hits"]
        state["hits"] = hits


def _updates(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    # What Blender lists as updated during playback (when Play starts: the scene, the armature, its action).
    if state["phase"] == "play" and len(result.setdefault("updates", [])) < 10:
        obj = bpy.data.objects["Character"]
        result["updates"].append(  # type: ignore[union-attr]
            [type(u.id).__name__ + ":" + u.id.name for u in depsgraph.updates] + [module("lookahead").ready(obj)]
        )


@guarded(result, OUT)
def _step() -> float | None:
    obj = bpy.data.objects["Character"]
    la = module("lookahead")
    now = time.monotonic()
    if state["phase"] == "wait":
        if la.ready(obj) < FRAMES and now - state["since"] < DEADLINE:
            return 0.25
        result["ready"] = la.ready(obj)
        result["why_not"] = la.why_not(obj)
        state["phase"], state["since"] = "play", now
        state["hits"] = la.hits(obj)
        window, area, region = view3d()
        with bpy.context.temp_override(window=window, area=area, region=region):
            bpy.ops.screen.animation_play()
        return 0.25
    if state["phase"] == "play":
        if state["changes"] < STEPS and now - state["since"] < DEADLINE:
            return 0.25
        window, area, region = view3d()
        with bpy.context.temp_override(window=window, area=area, region=region):
            bpy.ops.screen.animation_cancel(restore_frame=False)
        state["phase"] = "stopped"
        result["changes"] = state["changes"]
        result["taken"] = state["taken"]
        result["loops"] = state["looped"]
        result["after_loop"] = state["after_loop"]
        result["taken_after_loop"] = state["taken_after_loop"]
        result["missed"] = la.missed.get(obj.session_uid)
        result["ready_after"] = la.ready(obj)
        return 0.5
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    ch = next(c for c in obj.reach_ik.chains if c.name == "arm.L")
    tip = ev.matrix_world @ ev.pose.bones[ch.tip_bone].tail
    goal = ev.matrix_world @ ev.pose.bones[ch.target_bone].head
    result.update(
        frame=bpy.context.scene.frame_current,
        miss=(tip - goal).length,
        valid=ch.is_valid,
        message=ch.message,
        residual=ch.residual,
        tolerance=obj.reach_ik.tolerance,
        ok=True,
    )
    return finish(result, OUT)


try:
    obj = set_up_humanoid()
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    scene.render.fps = 24
    # Keys: every bone's rotation (its own mode's channel) and location on frames 1 and FRAMES, the controls
    # moved in between (a keyed FK pose under the chains, keyed IK controls: what Snap to Pose makes).
    for f, offset in ((1, 0.0), (FRAMES, 0.06)):
        for pb in obj.pose.bones:
            control = pb.name.startswith("IK-") and "hand" in pb.name
            if control:
                pb.location = (offset, 0.0, -offset) if f > 1 else (0.0, 0.0, 0.0)
            elif CONTROLS:
                continue  # an animator's keys: the controls alone
            channel = {"QUATERNION": "rotation_quaternion", "AXIS_ANGLE": "rotation_axis_angle"}.get(
                pb.rotation_mode, "rotation_euler"
            )
            pb.keyframe_insert(channel, frame=f)
            pb.keyframe_insert("location", frame=f)
    scene.frame_set(1)
    bpy.app.handlers.frame_change_post.append(_counted)
    bpy.app.handlers.depsgraph_update_post.append(_updates)
    bpy.app.timers.register(_step, first_interval=1.0)
except Exception:
    result["errors"].append(traceback.format_exc())  # type: ignore[union-attr]
    finish(result, OUT)
