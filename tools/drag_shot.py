"""docs/drag.gif: a hand control dragged live on the demo's character, rendered frame by frame by Blender.

    .venv/bin/python tools/drag_shot.py                 # the left hand of the set-up character
    .venv/bin/python tools/drag_shot.py --full-body --scale 2   # full-body IK (once it exists), a longer drag
    .venv/bin/python tools/drag_shot.py --control IK-foot.R --frames 30 --out /tmp/foot.gif

In the bpy wheel, with Reach IK loaded as an extension: builds the Mixamo-named character of `make demo`
(demo/character.py), sets it up with Set Up Character (`reach.auto_setup`, with `full_body=True` when
asked), then moves the hand's control bone along a path in small steps, as a mouse drag does: each step is
one depsgraph update, which Reach IK's live handler answers by solving the chains the control drives. Each
step is rendered by Blender (Workbench, the character's own camera) with a red ball where the control is,
and the frames are joined into an animated GIF. Nothing is keyed or baked: what is rendered is live solving.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402
from mathutils import Vector  # noqa: E402

from demo import character  # noqa: E402


def _setup(full_body: bool) -> bpy.types.Object:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    obj = character.figure()
    for ob in bpy.context.selected_objects:
        ob.select_set(False)
    obj.select_set(True)
    bpy.context.view_layer.objects.active = obj
    options = {"full_body": True} if full_body else {}
    result = bpy.ops.reach.auto_setup(**options)
    if result != {"FINISHED"}:
        raise RuntimeError(f"Set Up Character failed: {result}")
    character._stage(obj)
    scene = bpy.context.scene
    # A still render plays the scene's range up to the current frame first (renders show live playback):
    # one frame is all there is to play here.
    scene.frame_start = scene.frame_end = scene.frame_current = 1
    scene.render.resolution_x, scene.render.resolution_y = 360, 400
    scene.camera.data.lens = 50
    world = bpy.data.worlds.new("Backdrop")
    world.color = (0.82, 0.84, 0.87)
    scene.world = world
    return obj


def _path(start: Vector, step: int, steps: int, scale: float = 1.0) -> Vector:
    """The drag: forward and up over the shoulder, back behind it and down, ending where it began."""
    t = 2.0 * math.pi * step / steps
    return start + scale * Vector((-0.25 * (1 - math.cos(t)) / 2, -0.25 * math.sin(t), 0.55 * (1 - math.cos(t)) / 2))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full-body", action="store_true", help="set up with auto_setup(full_body=True)")
    parser.add_argument("--control", default="IK-hand.L", help="the control bone to drag (default IK-hand.L)")
    parser.add_argument("--frames", type=int, default=24, help="steps of the drag, one GIF frame each")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="size of the drag's path (2: far beyond the arm's reach, for full-body)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "drag.gif")
    args = parser.parse_args(argv)

    bpy_session.enable_addon()
    obj = _setup(args.full_body)
    scene = bpy.context.scene
    if args.control not in obj.pose.bones:
        controls = [b.name for b in obj.pose.bones if b.name.startswith(("IK-", "Pole-"))]
        raise SystemExit(f"no control bone {args.control!r}; the set-up made {', '.join(controls)}")
    control = obj.pose.bones[args.control]
    if obj.mode != "OBJECT":
        bpy.ops.object.mode_set(mode="OBJECT")
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.06)
    marker = bpy.context.active_object
    marker.color = (1.0, 0.05, 0.02, 1.0)
    bpy.context.view_layer.objects.active = obj
    start = control.matrix.translation.copy()
    frames = []
    with tempfile.TemporaryDirectory(prefix="reach_drag_") as tmp:
        for step in range(args.frames):
            m = control.matrix.copy()
            m.translation = _path(start, step, args.frames, args.scale)
            control.matrix = m
            bpy.context.view_layer.update()  # one update: the live handler solves what the control drives
            marker.location = obj.matrix_world @ control.matrix.translation
            bpy.context.view_layer.update()
            scene.render.filepath = str(Path(tmp) / f"f_{step:03d}.png")
            bpy.ops.render.render(write_still=True)
            frames.append(Path(scene.render.filepath))
        _gif(frames, args.out)
    print(args.out)
    status = [
        f"{ch.name}: {'reached' if ch.residual <= obj.reach_ik.tolerance else ch.message}" for ch in obj.reach_ik.chains
    ]
    print("\n".join(status))
    bpy_session.finish(0)
    return 0


def _gif(frames: list[Path], out: Path) -> None:
    from PIL import Image

    images = [Image.open(p).convert("RGB") for p in frames]
    palette = images[0].quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    quantized = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in images]
    out.parent.mkdir(parents=True, exist_ok=True)
    quantized[0].save(out, save_all=True, append_images=quantized[1:], duration=90, loop=0, optimize=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
