"""`make demo`: build a demo scene in code, solve it live, bake frames 1-120, save a .blend and pictures.

The scene: a character (two-bone arms and legs with poles, FABRIK spine, CCD tail), a tentacle with
elliptical cone and twist limits (FABRIK), and a spider whose 8 legs share the body (one multi-effector
FABRIK tree). Targets follow paths that are reachable by construction (forward kinematics of a moving pose
within the limits), except for marked stretches where they are pushed out of range on purpose.

Prints a table per chain, the bake time and the output paths. Exits 1 if any reachable target was missed
by more than the tolerance, measured independently on the baked result replayed with live solving off.
With BLENDER set to a real Blender binary, also opens the result in the real GUI and saves a screenshot.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "demo" / "out"
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402
import numpy as np  # noqa: E402

from demo import character, mocap, rigs  # noqa: E402

FRAMES = 120
TOLERANCE = 1e-3


@dataclass
class Track:
    """One chain's target path and which frames are meant to be reachable."""

    spec: rigs.ChainSpec
    rig: rigs.Rig
    reachable: np.ndarray  # (FRAMES,) bool
    root: str  # the chain's root bone (reach is measured from its head)
    length: float  # sum of the chain's segment lengths (rest)
    residual: np.ndarray = field(default_factory=lambda: np.zeros(FRAMES))
    root_dist: np.ndarray = field(default_factory=lambda: np.zeros(FRAMES))


def chain_bones(rig: rigs.Rig, spec: rigs.ChainSpec) -> list[str]:
    out, pb = [], rig.obj.pose.bones[spec.tip]
    for _ in range(spec.length):
        out.append(pb.name)
        pb = pb.parent
    return out[::-1]


def wave(frame: int, i: int, speed: float = 1.0) -> tuple[float, float, float]:
    t = 2 * math.pi * frame / FRAMES * speed
    return (math.sin(t + 0.9 * i), math.sin(2 * t + 0.4 * i), math.cos(t + 1.3 * i))


def pose_character(rig: rigs.Rig, frame: int) -> None:
    for i, pb in enumerate(rig.obj.pose.bones):
        a, b, c = wave(frame, i)
        pb.rotation_mode = "XYZ"
        name = pb.name
        if name.startswith(("upper_arm", "thigh")):
            pb.rotation_euler = (0.5 * a, 0.2 * b, 0.4 * c)
        elif name.startswith(("forearm", "shin")):
            pb.rotation_euler = (0.6 + 0.4 * a, 0.0, 0.0)  # always bent: elbows and knees never straight
        elif name.startswith(("spine", "chest")):
            pb.rotation_euler = (0.15 * a, 0.1 * b, 0.12 * c)
        elif name.startswith("tail"):
            pb.rotation_euler = (0.25 * a, 0.1 * b, 0.3 * c)
        else:
            pb.rotation_euler = (0.0, 0.0, 0.0)


def pose_tentacle(rig: rigs.Rig, frame: int) -> None:
    for i, pb in enumerate(rig.obj.pose.bones):
        a, _b, c = wave(frame, i, speed=1.5)
        lim = pb.reach_ik  # type: ignore[attr-defined]
        pb.rotation_mode = "XYZ"
        if not lim.use_cone:
            pb.rotation_euler = (0.5 * a, 0.0, 0.5 * c)
            continue
        # Inside the elliptical cone: 60% of each half-angle on both axes ((0.6)^2 + (0.6)^2 < 1).
        up_down = 0.6 * (lim.cone_up if a > 0 else lim.cone_down) * a
        left_right = 0.6 * (lim.cone_left if c > 0 else lim.cone_right) * c
        pb.rotation_euler = (up_down, 0.0, left_right)


def pose_spider(rig: rigs.Rig, frame: int) -> None:
    for i, pb in enumerate(rig.obj.pose.bones):
        a, b, c = wave(frame, i, speed=2.0)
        pb.rotation_mode = "XYZ"
        if pb.name == "body":
            pb.rotation_euler = (0.1 * a, 0.1 * b, 0.15 * c)
        else:
            pb.rotation_euler = (0.25 * a, 0.0, 0.2 * c)


def record_paths(rig: rigs.Rig, pose_fn: object, out_of_range: dict[str, tuple[int, int, float]]) -> list[Track]:
    """Key each chain's target along where its tip goes under the moving pose; then reset the pose."""
    pbs = rig.obj.pose.bones
    paths = {spec.name: np.zeros((FRAMES, 3)) for spec in rig.chains}
    for f in range(FRAMES):
        pose_fn(rig, f + 1)  # type: ignore[operator]
        bpy.context.view_layer.update()
        for spec in rig.chains:
            paths[spec.name][f] = np.array(rig.obj.matrix_world @ pbs[spec.tip].tail)
    for pb in pbs:
        pb.rotation_euler = (0.0, 0.0, 0.0)
    bpy.context.view_layer.update()
    tracks = []
    for spec in rig.chains:
        bones = chain_bones(rig, spec)
        root_head = np.array(rig.obj.matrix_world @ pbs[bones[0]].head)
        length = sum(rig.obj.data.bones[b].length for b in bones)
        reachable = np.ones(FRAMES, dtype=bool)
        path = paths[spec.name]
        if spec.name in out_of_range:
            # Push the target beyond the chain's reach for a while, easing out and back in.
            start, end, stretch = out_of_range[spec.name]
            for f in range(start, end):
                w = math.sin(math.pi * (f - start) / (end - start))
                d = path[f] - root_head
                far = root_head + d / np.linalg.norm(d) * length * stretch
                path[f] = (1 - w) * path[f] + w * far
                reachable[f] = False
        target = spec.target
        for f in range(FRAMES):
            target.location = path[f]
            target.keyframe_insert("location", frame=f + 1)
        for fc in bpy_session.submodule("rig.anim").all_fcurves(target.animation_data.action, target):
            for k in fc.keyframe_points:
                k.interpolation = "LINEAR"
        tracks.append(Track(spec, rig, reachable, bones[0], length))
    return tracks


def build_scene() -> tuple[list[rigs.Rig], list[Track]]:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, FRAMES
    character = rigs.character(location=(0, 0, 0))
    tentacle = rigs.tentacle(location=(2.2, 0, 0))
    spider = rigs.spider(location=(-2.6, 0, 0))
    tracks = record_paths(character, pose_character, {"arm.L": (40, 62, 1.3), "leg.R": (80, 100, 1.25)})
    tracks += record_paths(tentacle, pose_tentacle, {"tentacle": (70, 95, 1.2)})
    tracks += record_paths(spider, pose_spider, {})
    for rig in (character, tentacle, spider):
        rigs.use_reach(rig, tolerance=TOLERANCE, max_iterations=100)
    return [character, tentacle, spider], tracks


def measure(rig_list: list[rigs.Rig], tracks: list[Track]) -> None:
    """Replay the baked animation (live off) and measure each tip against its target, from Blender's pose."""
    for rig in rig_list:
        rig.obj.reach_ik.live = False  # type: ignore[attr-defined]
    for f in range(FRAMES):
        bpy.context.scene.frame_set(f + 1)
        deps = bpy.context.evaluated_depsgraph_get()
        for tr in tracks:
            ev = tr.rig.obj.evaluated_get(deps)
            tip = np.array(ev.matrix_world @ ev.pose.bones[tr.spec.tip].tail)
            root = np.array(ev.matrix_world @ ev.pose.bones[tr.root].head)
            goal = np.array(tr.spec.target.matrix_world.translation)
            tr.residual[f] = np.linalg.norm(tip - goal)
            tr.root_dist[f] = np.linalg.norm(goal - root)


def reachable_mask(tr: Track) -> np.ndarray:
    """Frames where the target is reachable: by construction, and for two-bone chains by the exact test."""
    mask = tr.reachable.copy()
    if tr.spec.solver == "TWO_BONE":
        # The root moves with the chain above it (arms hang from the spine): judge from the replayed root.
        mask &= tr.root_dist <= tr.length * (1 - 1e-3)
    return mask


def contact_sheet(rig_list: list[rigs.Rig], tracks: list[Track], path: Path) -> None:
    """Several baked frames from two views of the whole scene, and a close-up of the tentacle's cones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    limits = bpy_session.submodule("solvers.limits")
    frames = [1, 40, 75, 110]
    wide = {"xlim": (-4.0, 3.8), "ylim": (-1.5, 1.5), "zlim": (-0.05, 2.3), "aspect": (7.8, 3.0, 2.35), "zoom": 1.3}
    tentacle = next(r for r in rig_list if r.obj.name == "Tentacle")
    tx = float(tentacle.obj.location.x)
    close = {"xlim": (tx - 1.0, tx + 1.0), "ylim": (-1.0, 1.0), "zlim": (-0.05, 2.0), "aspect": (2, 2, 2), "zoom": 1.2}
    rows = [
        ("front", 6, -90, wide, rig_list, 0.55),
        ("three-quarter", 22, -58, wide, rig_list, 0.55),
        ("tentacle cones", 12, -35, close, [tentacle], 1.0),
    ]
    fig = plt.figure(figsize=(4.2 * len(frames), 3.4 * len(rows)), dpi=110)
    for row, (label, elev, azim, box, shown, cone_scale) in enumerate(rows):
        for col, frame in enumerate(frames):
            bpy.context.scene.frame_set(frame)
            deps = bpy.context.evaluated_depsgraph_get()
            ax = fig.add_subplot(len(rows), len(frames), row * len(frames) + col + 1, projection="3d")
            for rig in shown:
                ev = rig.obj.evaluated_get(deps)
                mw = np.array(ev.matrix_world)
                for pb in ev.pose.bones:
                    h = mw @ np.append(np.array(pb.head), 1.0)
                    t = mw @ np.append(np.array(pb.tail), 1.0)
                    ax.plot(*zip(h[:3], t[:3], strict=True), color="#2b4c7e", lw=2.4, solid_capstyle="round")
                    ax.scatter(*h[:3], s=5, color="#1b2a44")
                    lim = pb.reach_ik  # type: ignore[attr-defined]
                    if lim.use_cone and pb.parent is not None:
                        # The cone lives in the bone's rest frame carried by its parent's pose.
                        rest = np.array(pb.bone.matrix_local)[:3, :3]
                        prest = np.array(pb.parent.bone.matrix_local)[:3, :3]
                        ref = mw[:3, :3] @ np.array(pb.parent.matrix)[:3, :3] @ prest.T @ rest
                        ring = limits.cone_ring([lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right], 48)
                        pts = h[:3] + cone_scale * pb.bone.length * (ring @ ref.T)
                        tris = [[h[:3], pts[i], pts[(i + 1) % len(pts)]] for i in range(len(pts))]
                        ax.add_collection3d(Poly3DCollection(tris, facecolor="#f2a541", alpha=0.22, lw=0))
                        ax.plot(*pts.T, color="#d9822b", lw=0.9)
            for tr in tracks:
                if tr.rig not in shown:
                    continue
                goal = np.array(tr.spec.target.matrix_world.translation)
                ev = tr.rig.obj.evaluated_get(deps)
                tip = np.array(ev.matrix_world @ ev.pose.bones[tr.spec.tip].tail)
                ok = tr.reachable[frame - 1]
                ax.scatter(*goal, marker="x", s=26, color="#2e9e44" if ok else "#d1342f", linewidths=1.6)
                ax.plot(*zip(tip, goal, strict=True), color="#777777", lw=0.8, ls="--")
            ax.view_init(elev=elev, azim=azim)
            ax.set_xlim(*box["xlim"])
            ax.set_ylim(*box["ylim"])
            ax.set_zlim(*box["zlim"])
            ax.set_box_aspect(box["aspect"], zoom=box["zoom"])
            ax.set_axis_off()
            ax.set_title(f"frame {frame}, {label}", fontsize=10, pad=-4)
    fig.suptitle(
        "Reach IK demo (baked):  spider, 8 legs as one tree  |  character: two-bone limbs with poles, "
        "FABRIK spine, CCD tail  |  tentacle: elliptical cones\n"
        "x = target (green reachable, red pushed out of reach), dashed = tip to target",
        fontsize=11,
    )
    fig.subplots_adjust(left=0.0, right=1.0, bottom=0.0, top=0.91, wspace=0.0, hspace=0.02)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def gui_screenshot(blend: Path, out_png: Path, options: dict[str, object] | None = None) -> str:
    """Open the demo in the real Blender GUI (BLENDER) with the add-on installed, and screenshot it."""
    blender = os.environ.get("BLENDER")
    if not blender:
        return "skipped (BLENDER is not set)"
    shot = Path(blender).with_name("blender-shot")
    if not shot.exists():
        return f"skipped (no {shot.name} beside {blender})"
    sys.path.insert(0, str(ROOT / "tools"))
    import build as build_tool

    with tempfile.TemporaryDirectory(prefix="reach_demo_gui_", dir="/tmp") as tmp:
        env = dict(os.environ, BLENDER_USER_RESOURCES=str(Path(tmp) / "res"), REAL_BLENDER_QUIET="1")
        zip_path = build_tool.build(Path(tmp) / "dist")
        subprocess.run(
            [blender, "-c", "extension", "install-file", "-r", "user_default", "-e", str(zip_path)],
            env=env,
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        # tools/gui_setup.py (shared with the e2e GUI test) opens the Reach IK tab on the tentacle in Pose Mode.
        options = dict(
            options
            or {
                "armature": "Tentacle",
                "bone": "seg.004",
                "frame": 50,
                "view": {"location": [-0.2, 0.0, 1.0], "distance": 7.5},
            }
        )
        tmp_png = Path(tmp) / "shot.png"
        options["shot"] = str(tmp_png)
        args = [
            str(shot),
            str(tmp_png),
            "--size",
            "1600x900",
            "--wait",
            "180",  # a deadline only: gui_setup.py takes the picture itself once it is drawn ("shot")
            "--",
            str(blend),
            "--enable-event-simulate",
            "--python-expr",
            f"import builtins; builtins.REACH_GUI = {options!r}",
            "--python",
            str(ROOT / "tools" / "gui_setup.py"),
        ]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0 or not tmp_png.exists():
            return f"failed: {proc.stderr[-500:]}"
        shutil.copyfile(tmp_png, out_png)
    return str(out_png)


def character_demo() -> int:
    """A Mixamo-named humanoid set up in one click, keyed, baked and rendered; 1 if a limb missed its control."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    obj, chains = character.build()
    print()
    print(f"character: set up in one click (reach.auto_setup): {chains}")
    bake = bpy_session.submodule("rig.bake")
    result = bake.bake_rig(obj, bake.BakeOptions(frame_start=1, frame_end=character.FRAMES))
    residuals = character.tip_residuals(obj)
    print(
        f"character: baked {character.FRAMES} frames in {result.seconds:.3f} s; largest limb tip to control "
        f"distance, baked and replayed: " + ", ".join(f"{k} {v:.1e}" for k, v in residuals.items())
    )
    blend = OUT / "reach_ik_character.blend"
    tmp = OUT / ".reach_ik_character.tmp.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)
    tmp.replace(blend)
    print(f"wrote {blend}")
    png = OUT / "reach_ik_character.png"
    rendered = character.render_frames(blend, png)
    if not rendered.endswith(".png"):
        print(f"character render with Blender: {rendered}; drawing it with matplotlib instead")
        rendered = character.sketch(obj, png)
    print(f"wrote {rendered}")
    missed = [k for k, v in residuals.items() if v > TOLERANCE]
    if missed:
        print(f"FAILED: the character's {', '.join(missed)} missed their controls by more than {TOLERANCE}")
    return len(missed)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    bpy_session.enable_addon()
    print(f"Reach IK demo on bpy {bpy.app.version_string}: building the scene")
    rig_list, tracks = build_scene()

    # Live: play a few frames with live solving, as an animator would scrub.
    live = bpy_session.submodule("rig.live")
    start = time.perf_counter()
    for f in range(1, 31):
        bpy.context.scene.frame_set(f)
    live_ms = 1e3 * (time.perf_counter() - start) / 30
    solves = sum(live.solve_count(r.obj) for r in rig_list)

    bake = bpy_session.submodule("rig.bake")
    results = {}
    total = 0.0
    for rig in rig_list:
        result = bake.bake_rig(rig.obj, bake.BakeOptions(frame_start=1, frame_end=FRAMES))
        results[rig.obj.name] = result
        total += result.seconds
    measure(rig_list, tracks)

    blend = OUT / "reach_ik_demo.blend"
    tmp = OUT / ".reach_ik_demo.tmp.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)
    tmp.replace(blend)
    png = OUT / "reach_ik_demo.png"
    contact_sheet(rig_list, tracks, png)

    print()
    print(
        f"{'rig / chain':24} {'solver':8} {'frames':>6} {'reachable':>9} {'missed':>6} {'max res':>9} "
        f"{'mean res':>9} {'mean it':>7} {'ms/frame':>8}"
    )
    missed_total = 0
    for tr in tracks:
        result = results[tr.rig.obj.name]
        stats = next(c for c in result.chains if c.name == tr.spec.name)
        mask = reachable_mask(tr)
        res = tr.residual[mask] if mask.any() else np.zeros(1)
        missed = int((tr.residual[mask] > TOLERANCE).sum())
        missed_total += missed
        per_frame = 1e3 * result.seconds / FRAMES / len(result.chains)
        print(
            f"{tr.rig.obj.name + ' / ' + tr.spec.name:24} {tr.spec.solver:8} {FRAMES:6d} {int(mask.sum()):9d} "
            f"{missed:6d} {res.max():9.2e} {res.mean():9.2e} {stats.mean_iterations:7.1f} {per_frame:8.3f}"
        )
    print()
    print(f"live solving while scrubbing: {live_ms:.2f} ms per frame for 3 rigs ({solves} live solves)")
    print(
        f"bake: {total:.3f} s for {len(tracks)} chains x {FRAMES} frames "
        f"({', '.join(f'{n} {r.seconds:.3f} s' for n, r in results.items())})"
    )
    print("residuals are measured on the baked animation replayed with live solving off (Blender's own pose)")
    print(f"wrote {blend}")
    print(f"wrote {png}")
    gui = gui_screenshot(blend, OUT / "reach_ik_demo_gui.png")
    print(f"GUI screenshot: {gui}")
    missed_total += character_demo()
    missed_total += mocap.run(OUT, bpy_session.submodule)
    if missed_total:
        print(f"FAILED: {missed_total} reachable target frame(s) missed by more than {TOLERANCE}")
        return 1
    print(f"every reachable target was reached within {TOLERANCE}")
    return 0


if __name__ == "__main__":
    bpy_session.finish(main())
