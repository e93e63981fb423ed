"""What making renders follow live chains costs: the temporary bake at render_init against the render itself.

The demo character (two-bone limbs with poles, FABRIK spine, CCD tail) with targets keyed along reachable
paths (bench/bake.py), live. Prints, best of a few runs in one process:
- `prepare` + `restore` (rig/render.py: live playback recorded into a copy of the action, or the batched
  bake with method 'bake', and putting everything back), per render and per frame;
- design (a), estimated: live playback's own solve per frame change (`frame_set` through the range with
  live solving on), which (a) would pay on every rendered frame, writing from the render thread;
- a background Workbench render of the range at 32 x 32 (about the cheapest real render) with and without
  Reach IK's render handlers, so the overhead is seen against a render.

    .venv/bin/python bench/render.py [--frames 250] [--render-frames 48]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT), str(ROOT / "bench")]

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402

from demo import rigs  # noqa: E402


def _best(fn: object, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=250)
    ap.add_argument("--render-frames", type=int, default=48)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    bpy_session.enable_addon()
    try:
        import bake as bake_bench  # bench/bake.py: the animated character

        render = bpy_session.submodule("rig.render")
        rig = bake_bench.animated_character(args.frames)
        rigs.use_reach(rig)
        sc = bpy.context.scene
        sc.frame_set(1)
        bpy.context.view_layer.update()

        def prep() -> None:
            render.prepare(sc)
            render.restore()

        for method in ("playback", "bake"):
            render.method = method
            t_prep = _best(prep, args.runs)
            print(
                f"prepare + restore ({method}), {args.frames} frames: {t_prep * 1e3:.1f} ms"
                f" ({t_prep / args.frames * 1e3:.3f} ms/frame)"
            )
        render.method = "playback"

        def playback() -> None:
            for f in range(1, args.frames + 1):
                sc.frame_set(f)
            sc.frame_set(1)

        for ch in rig.obj.reach_ik.chains:
            ch.enabled = False
        t_off = _best(playback, max(2, args.runs // 2))
        for ch in rig.obj.reach_ik.chains:
            ch.enabled = True
        t_on = _best(playback, max(2, args.runs // 2))
        per = (t_on - t_off) / args.frames
        print(
            f"(a) estimate: live solving per frame change {per * 1e3:.3f} ms ({(t_on - t_off) * 1e3:.1f} ms per range)"
        )

        sc.frame_end = args.render_frames
        sc.render.engine = "BLENDER_WORKBENCH"
        sc.render.resolution_x = sc.render.resolution_y = 32
        cam = bpy.data.objects.new("Cam", bpy.data.cameras.new("Cam"))
        sc.collection.objects.link(cam)
        cam.location, cam.rotation_euler = (0, -12, 1.2), (1.5708, 0, 0)
        sc.camera = cam
        out = tempfile.mkdtemp(prefix="reach_render_")
        sc.render.filepath = out + "/f_"

        def render_anim() -> None:
            bpy.ops.render.render(animation=True)

        handlers = render._HANDLERS
        with_ = _best(render_anim, 2)
        for kind, fn in handlers:
            getattr(bpy.app.handlers, kind).remove(fn)
        try:
            without = _best(render_anim, 2)
        finally:
            for kind, fn in handlers:
                getattr(bpy.app.handlers, kind).append(fn)
        print(
            f"Workbench 32x32, {args.render_frames} frames: {with_:.2f} s with Reach IK's render handlers,"
            f" {without:.2f} s without (frozen chains): +{(with_ - without) / without * 100:.0f} %"
        )
    finally:
        bpy_session.finish(0)


if __name__ == "__main__":
    main()
