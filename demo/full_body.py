"""The demo's Full Body scene: a character reaches for an apple beyond its arm's length, feet planted.

`demo/run_demo.py` calls `demo()` after the other scenes: the Mixamo-named figure of `demo/character.py`, set
up in one click with Full Body (`reach.auto_setup(full_body=True)`: legs pinned, arms and head pulling, the
hips the body root), its left hand's control keyed from where the hand hangs to an apple 0.3 past the
straight arm, forward and up. Nothing else is keyed: the hips and spine move because the hand pulls them.
Baked, saved to `demo/out/reach_ik_full_body.blend` and rendered (or sketched) into
`demo/out/reach_ik_full_body.png`; the numbers it prints are measured on the baked animation replayed.
"""

from __future__ import annotations

import bpy
import numpy as np
from mathutils import Matrix, Vector

from . import character

FRAMES = 36
SHOW = (1, 12, 24, 36)
BEYOND = 0.3  # how far past the straight arm the apple hangs


def _world(obj: bpy.types.Object, p: Vector) -> np.ndarray:
    return np.array(obj.matrix_world @ p)


def build() -> tuple[bpy.types.Object, np.ndarray]:
    """The character set up with Full Body, its left hand keyed to the apple; returns it and the apple."""
    obj = character.figure()
    for ob in bpy.context.selected_objects:
        ob.select_set(False)
    obj.select_set(True)
    if bpy.ops.reach.auto_setup(full_body=True) != {"FINISHED"}:
        raise RuntimeError("the Full Body set-up failed")
    bpy.context.view_layer.update()
    pbs = obj.pose.bones
    hand = pbs["IK-hand.L"]
    shoulder = pbs["mixamorig:LeftArm"]
    reach = pbs["mixamorig:LeftArm"].length + pbs["mixamorig:LeftForeArm"].length
    # Forward (-Y), a little out and up from the shoulder, past the straight arm.
    way = Vector((0.35, -0.85, 0.25)).normalized()
    apple = shoulder.head + way * (reach + BEYOND)
    start = hand.matrix.copy()
    for frame, where in ((1, start.translation), (24, apple), (FRAMES, apple)):
        hand.matrix = Matrix.Translation(where - start.translation) @ start
        hand.keyframe_insert("location", frame=frame)
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.04, location=obj.matrix_world @ apple)
    fruit = bpy.context.active_object
    fruit.name = "body apple"  # `character._stage` colours objects named "body..."
    bpy.context.view_layer.objects.active = obj
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    character._stage(obj)
    fruit.color = (0.8, 0.1, 0.1, 1.0)
    return obj, _world(obj, apple)


def measure(obj: bpy.types.Object, apple: np.ndarray) -> dict[str, float]:
    """Replayed from the keys: how far the hand ends from the apple, the feet from their controls, how far
    the hips travelled."""
    scene = bpy.context.scene
    pbs = obj.pose.bones
    feet = 0.0
    hips = []
    for f in range(1, FRAMES + 1):
        scene.frame_set(f)
        for side in ("L", "R"):
            ch = next(c for c in obj.reach_ik.chains if c.name == f"leg.{side}")
            tip = _world(obj, pbs[ch.tip_bone].tail)
            feet = max(feet, float(np.linalg.norm(tip - _world(obj, pbs[ch.target_bone].head))))
        hips.append(_world(obj, pbs["mixamorig:Hips"].head))
    hand = _world(obj, pbs["mixamorig:LeftForeArm"].tail)
    return {
        "hand": float(np.linalg.norm(hand - apple)),
        "feet": feet,
        "hips": float(np.linalg.norm(hips[-1] - hips[0])),
    }


def demo(out: object, bake: object, tolerance: float) -> int:
    """Build, bake, save, render; print what was measured; 1 if the hand or a foot missed."""
    from pathlib import Path

    out_dir = Path(str(out))
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    obj, apple = build()
    result = bake.bake_rig(obj, bake.BakeOptions(frame_start=1, frame_end=FRAMES))  # type: ignore[attr-defined]
    got = measure(obj, apple)
    print()
    print(
        f"full body: the left hand reaches an apple {BEYOND} past its straight arm (baked {FRAMES} frames in "
        f"{result.seconds:.3f} s): hand to apple {got['hand']:.1e}, feet to their controls at most "
        f"{got['feet']:.1e}, the hips travelled {got['hips']:.3f}"
    )
    blend = out_dir / "reach_ik_full_body.blend"
    tmp = out_dir / ".reach_ik_full_body.tmp.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)
    tmp.replace(blend)
    print(f"wrote {blend}")
    png = out_dir / "reach_ik_full_body.png"
    saved = character.SHOW
    character.SHOW = SHOW
    try:
        rendered = character.render_frames(blend, png)
        if not rendered.endswith(".png"):
            print(f"full body render with Blender: {rendered}; drawing it with matplotlib instead")
            rendered = character.sketch(obj, png)
    finally:
        character.SHOW = saved
    print(f"wrote {rendered}")
    missed = got["hand"] > tolerance or got["feet"] > tolerance
    if missed:
        print(f"FAILED: the full-body character missed the apple or moved a foot by more than {tolerance}")
    return int(missed)
