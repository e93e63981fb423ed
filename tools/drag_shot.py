"""docs/drag.gif: a hand control dragged live on the demo's character, rendered frame by frame by Blender.

    .venv/bin/python tools/drag_shot.py                 # the left hand of the set-up character
    .venv/bin/python tools/drag_shot.py --full-body --scale 2   # full-body IK (once it exists), a longer drag
    .venv/bin/python tools/drag_shot.py --control IK-foot.R --frames 30 --out /tmp/foot.gif
    .venv/bin/python tools/drag_shot.py --full-body --scale 2 --out /tmp/drag.gif --still docs/full_body_drag.png


In the bpy wheel, with Reach IK loaded as an extension: builds the Mixamo-named character of `make demo`
(demo/character.py), sets it up with Set Up Character (`reach.auto_setup`, with `full_body=True` when
asked), then moves the hand's control bone along a path in small steps, as a mouse drag does: each step is
one depsgraph update, which Reach IK's live handler answers by solving the chains the control drives. Each
step is rendered by Blender (Workbench, the character's own camera) with a red ball where the control is,
and the frames are joined into an animated GIF. Nothing is keyed or baked: what is rendered is live solving.
Each step prints what Blender's evaluated pose shows: how far the hand (the dragged chain's tip) is from the
control, how far the hips have moved, how far the farthest foot is from its control. `--still PNG` also
writes three of the steps side by side, captioned with those numbers (docs/full_body_drag.png).
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
    parser.add_argument("--still", type=Path, help="also write three steps side by side to this PNG")
    parser.add_argument(
        "--still-steps",
        default="0,8,16",
        help="the steps --still shows (default 0,8,16: at rest, past the arm's reach, farther still)",
    )
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
    chain = next((c for c in obj.reach_ik.chains if c.target_bone == args.control), None)
    feet = [(c.tip_bone, c.target_bone) for c in obj.reach_ik.chains if c.pin]
    root = obj.reach_ik.body_root or None
    hips0 = _head(obj, root) if root else None
    frames = []
    measured: list[dict[str, float]] = []
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
            measured.append(_measure(obj, chain, feet, root, hips0))
            print(f"step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in measured[-1].items()))
        _gif(frames, args.out)
        if args.still:
            steps = [int(v) for v in args.still_steps.split(",")]
            _strip([frames[i] for i in steps], [_caption(measured[i]) for i in steps], args.still)
            print(args.still)
    print(args.out)
    status = [
        f"{ch.name}: {'reached' if ch.residual <= obj.reach_ik.tolerance else ch.message}" for ch in obj.reach_ik.chains
    ]
    print("\n".join(status))
    bpy_session.finish(0)
    return 0


def _head(obj: bpy.types.Object, bone: str) -> Vector:
    return obj.matrix_world @ obj.pose.bones[bone].head


def _tail(obj: bpy.types.Object, bone: str) -> Vector:
    return obj.matrix_world @ obj.pose.bones[bone].tail


def _measure(
    obj: bpy.types.Object,
    chain: object,
    feet: list[tuple[str, str]],
    root: str | None,
    hips0: Vector | None,
) -> dict[str, float]:
    """World distances from the evaluated pose (what Blender shows), not the solver's numbers."""
    got: dict[str, float] = {}
    if chain is not None:
        got["hand gap"] = (_tail(obj, chain.tip_bone) - _head(obj, chain.target_bone)).length  # type: ignore[attr-defined]
    if root and hips0 is not None:
        got["hips moved"] = (_head(obj, root) - hips0).length
    if feet:
        got["feet off"] = max((_tail(obj, tip) - _head(obj, ctl)).length for tip, ctl in feet)
    return got


def _caption(got: dict[str, float]) -> str:
    gap = got.get("hand gap", 0.0)
    hand = "the hand on the ball" if gap < 0.005 else f"the hand {100 * gap:.0f} cm short"
    lines = [hand]
    if "hips moved" in got:
        lines.append(f"hips moved {100 * got['hips moved']:.0f} cm")
    if "feet off" in got:
        lines.append("feet on their controls" if got["feet off"] < 0.005 else f"a foot {got['feet off']:.3f} off")
    return "\n".join(lines)


def _strip(frames: list[Path], captions: list[str], out: Path) -> None:
    """The frames side by side, each with its caption under it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = [plt.imread(str(p)) for p in frames]
    h, w = images[0].shape[:2]
    dpi = 100
    fig, axes = plt.subplots(1, len(images), figsize=(w * len(images) / dpi, (h + 86) / dpi), dpi=dpi)
    fig.subplots_adjust(left=0, right=1, top=1, bottom=86 / (h + 86), wspace=0.02)
    for ax, image, caption in zip(axes, images, captions, strict=True):
        ax.imshow(image)
        ax.set_axis_off()
        ax.text(0.5, -0.02, caption, transform=ax.transAxes, ha="center", va="top", fontsize=14, linespacing=1.25)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, facecolor="white")
    plt.close(fig)


def _gif(frames: list[Path], out: Path) -> None:
    from PIL import Image

    images = [Image.open(p).convert("RGB") for p in frames]
    palette = images[0].quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    quantized = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in images]
    out.parent.mkdir(parents=True, exist_ok=True)
    quantized[0].save(out, save_all=True, append_images=quantized[1:], duration=90, loop=0, optimize=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
