"""The demo's motion capture: the CMU walk set up in one click, snapped over its range, one step moved, baked.

`make demo` calls `run()` last. It imports `../shared/data/mocap/cmu_131_01.bvh` with Blender's own BVH
importer (scaled to metres), runs `reach.auto_setup` on its first frame (limits fitted to the clip), snaps
the IK over the whole clip (`reach.snap_to_pose(use_range=True)`: targets and poles keyed on every frame),
checks that live playback reproduces the clip, moves one planted step of the left foot sideways (its
control's keys on the frames the foot stands still, eased in and out), bakes, saves
`demo/out/reach_ik_mocap.blend` and renders frames of the moved step with Blender itself (Workbench, the real
binary given by BLENDER) into `demo/out/reach_ik_mocap.png`; without BLENDER it draws them with matplotlib.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import bpy
import numpy as np
from mathutils import Matrix, Vector

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT.parent / "shared" / "data" / "mocap" / "cmu_131_01.bvh"
SCALE = 0.07  # CMU's units are about 7 cm: a 1.75 m figure
STEP = 0.15  # metres the moved step lands beside where the actor put it
EASE = 12  # frames over which the foot's control eases to the moved step and back
TOLERANCE = 1e-3
POINTS = ("LeftElbow", "RightElbow", "LeftKnee", "RightKnee", "Head")  # tails: hands, feet, head


def _tails(obj: bpy.types.Object, frames: range, names: tuple[str, ...] = POINTS) -> np.ndarray:
    scene = bpy.context.scene
    out = []
    for f in frames:
        scene.frame_set(f)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        out.append([np.array(ev.matrix_world @ ev.pose.bones[n].tail) for n in names])
    return np.array(out)


def _planted(feet: np.ndarray, first: int) -> tuple[int, int]:
    """The longest stretch of frames where a foot (world positions, one per frame) stands still, low."""
    speed = np.r_[np.linalg.norm(np.diff(feet, axis=0), axis=1), np.inf]
    low = feet[:, 2] < feet[:, 2].min() + 0.03
    still = (speed < 0.004) & low
    best, start = (0, 0), None
    for i, s in enumerate([*still.tolist(), False]):
        if s and start is None:
            start = i
        elif not s and start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    return first + best[0], first + best[1] - 1


def _move_step(obj: bpy.types.Object, window: tuple[int, int], offset: Vector) -> list[int]:
    """Key the left foot's control `offset` (world) away on `window`, eased in and out; the frames keyed."""
    scene = bpy.context.scene
    pb = obj.pose.bones["IK-foot.L"]
    a, b = window
    keyed = []
    for f in range(a - EASE, b + EASE + 1):
        w = 1.0 if a <= f <= b else 0.5 - 0.5 * math.cos(math.pi * (1.0 - (a - f if f < a else f - b) / EASE))
        scene.frame_set(f)
        world = obj.matrix_world @ pb.matrix
        world.translation += offset * w
        pb.matrix = obj.matrix_world.inverted() @ world
        pb.keyframe_insert("location", frame=f, group=pb.name)
        keyed.append(f)
    return keyed


def _body(obj: bpy.types.Object) -> None:
    """A cylinder per bone of the skeleton (a sphere for the head), parented to its bone."""
    for bone in obj.data.bones:
        if not bone.use_deform or bone.length < 0.02 or bone.name.startswith(("IK-", "Pole-")):
            continue
        head = bone.name == "Head"
        if head:
            bpy.ops.mesh.primitive_uv_sphere_add(radius=0.1, segments=16, ring_count=8)
        else:
            radius = 0.06 if bone.name in {"lowerback", "Chest", "LHipJoint", "RHipJoint"} else 0.035
            bpy.ops.mesh.primitive_cylinder_add(radius=radius, depth=1.0, vertices=12)
        part = bpy.context.active_object
        part.name = f"body {bone.name}"
        part.color = (0.35, 0.55, 0.85, 1.0)
        part.parent, part.parent_type, part.parent_bone = obj, "BONE", bone.name
        part.matrix_parent_inverse = Matrix.Identity(4)
        # Bone parenting starts at the bone's tail: the part sits at the bone's middle, along its Y axis.
        m = Matrix.Translation((0.0, -bone.length / 2, 0.0)) @ Matrix.Rotation(-math.pi / 2, 4, "X")
        part.matrix_basis = m if head else m @ Matrix.Diagonal((1.0, 1.0, bone.length, 1.0))


def _stage(obj: bpy.types.Object, centre: Vector, frames: tuple[int, int]) -> None:
    scene = bpy.context.scene
    cam_data = bpy.data.cameras.new("Camera")
    cam = bpy.data.objects.new("Camera", cam_data)
    scene.collection.objects.link(cam)
    cam.location = centre + Vector((3.2, -1.9, 0.5))
    cam.rotation_euler = (centre + Vector((0.0, 0.0, 0.9)) - cam.location).to_track_quat("-Z", "Y").to_euler()
    cam_data.lens = 45
    scene.camera = cam
    bpy.ops.mesh.primitive_plane_add(size=12.0, location=(centre.x, centre.y, 0.0))
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.render.resolution_x, scene.render.resolution_y = 480, 360
    scene.render.resolution_percentage = 100
    scene.display.shading.light = "STUDIO"
    scene.display.shading.color_type = "OBJECT"
    scene.frame_start, scene.frame_end = frames


def _render(blend: Path, out_png: Path, show: list[int]) -> str:
    blender = os.environ.get("BLENDER")
    if not blender:
        return "skipped (BLENDER is not set)"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BLENDER_USER_RESOURCES=str(Path(tmp) / "res"))
        args = [blender, "-b", str(blend), "-o", str(Path(tmp) / "f_####"), "-F", "PNG"]
        args += ["-f", ",".join(str(f) for f in show)]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        shots = [Path(tmp) / f"f_{f:04d}.png" for f in show]
        if proc.returncode != 0 or not all(s.exists() for s in shots):
            return f"failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        _tile([str(s) for s in shots], show, out_png, images=True)
    return str(out_png)


def _tile(items: list[str], show: list[int], out_png: Path, images: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(show), figsize=(3.2 * len(show), 3.0), dpi=100)
    for ax, item, f in zip(axes, items, show, strict=True):
        if images:
            ax.imshow(plt.imread(item))
        ax.set_title(f"frame {f}")
        ax.axis("off")
    fig.suptitle(
        f"CMU 131_01 walk: set up in one click, snapped over its range, a left step moved {STEP * 100:.0f} cm, "
        "baked, rendered"
    )
    fig.tight_layout()
    tmp = out_png.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    shutil.move(tmp, out_png)


def _sketch(obj: bpy.types.Object, show: list[int], out_png: Path, moved: np.ndarray) -> str:
    """Without BLENDER: the baked skeleton at `show` frames, seen from the side, the moved foot's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(show), figsize=(3.2 * len(show), 3.0), dpi=100)
    for ax, f in zip(axes, show, strict=True):
        bpy.context.scene.frame_set(f)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        for pb in ev.pose.bones:
            if pb.bone.use_deform:
                h, t = ev.matrix_world @ pb.head, ev.matrix_world @ pb.tail
                ax.plot([h.x, t.x], [h.y, t.y], "-", color="#3c70c8", lw=2)
        ax.plot(moved[:, 0], moved[:, 1], ":", color="#c8703c")
        ax.set_title(f"frame {f} (top view)")
        ax.set_aspect("equal")
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)
    return str(out_png)


def run(out: Path, submodule: object) -> int:
    """The mocap demo; 1 when the IK did not reproduce the clip or the moved foot missed its control."""
    if not CLIP.exists():
        print(f"mocap: {CLIP} is not here, skipped")
        return 0
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    bpy.ops.import_anim.bvh(filepath=str(CLIP), global_scale=SCALE)
    obj = bpy.context.object
    start, end = (round(v) for v in obj.animation_data.action.frame_range)
    frames = range(start, end + 1)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = start, end
    clip = _tails(obj, frames)
    scene.frame_set(start)
    t0 = time.perf_counter()
    if bpy.ops.reach.auto_setup() != {"FINISHED"}:
        print("FAILED: the CMU walk was not set up")
        return 1
    t1 = time.perf_counter()
    done = bpy.ops.reach.snap_to_pose(chains="ALL", use_range=True, frame_start=start, frame_end=end)
    t2 = time.perf_counter()
    if done != {"FINISHED"}:
        print("FAILED: snapping over the clip's range")
        return 1
    live = _tails(obj, frames)
    off = float(np.linalg.norm(live - clip, axis=2).max())
    print()
    print(
        f"mocap: CMU 131_01 ({end - start + 1} frames) set up in one click ({t1 - t0:.2f} s: "
        f"{', '.join(ch.name for ch in obj.reach_ik.chains)}), snapped over its range ({t2 - t1:.1f} s); live "
        f"playback reproduces hands, feet and head within {off:.1e} m"
    )
    window = _planted(clip[:, 2], start)
    offset = Vector((STEP, 0.0, 0.0))  # the actor walks along -Y: +X is to their left, outward for the left foot
    keyed = _move_step(obj, window, offset)
    edited = _tails(obj, range(window[0], window[1] + 1), ("LeftKnee",))[:, 0]
    wanted = clip[window[0] - start : window[1] - start + 1, 2] + np.array(offset)
    step_miss = float(np.linalg.norm(edited - wanted, axis=1).max())
    t3 = time.perf_counter()
    bake = submodule("rig.bake")  # type: ignore[operator]
    result = bake.bake_rig(obj, bake.BakeOptions(frame_start=start, frame_end=end))
    t4 = time.perf_counter()
    baked = _tails(obj, frames)
    moved_frames = np.zeros(len(frames), dtype=bool)
    moved_frames[keyed[0] - start : keyed[-1] - start + 1] = True
    kept = float(np.linalg.norm(baked[~moved_frames] - clip[~moved_frames], axis=2).max())
    print(
        f"mocap: left step on frames {window[0]}-{window[1]} moved {STEP:.2f} m outward (its control keyed on "
        f"{len(keyed)} frames, eased); the foot lands within {step_miss:.1e} m of it; baked in {t4 - t3:.2f} s "
        f"({result.keys_written} keys); frames not edited stay within {kept:.1e} m of the clip"
    )
    foot = wanted.mean(axis=0)
    centre = Vector((float(foot[0]), float(foot[1]), 0.0))
    _body(obj)
    _stage(obj, centre, (start, end))
    blend = out / "reach_ik_mocap.blend"
    tmp = out / ".reach_ik_mocap.tmp.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False)
    tmp.replace(blend)
    print(f"wrote {blend}")
    show = [window[0] - EASE, (window[0] + window[1]) // 2, window[1] + EASE]
    png = out / "reach_ik_mocap.png"
    rendered = _render(blend, png, show)
    if not rendered.endswith(".png"):
        print(f"mocap render with Blender: {rendered}; drawing it with matplotlib instead")
        rendered = _sketch(obj, show, png, wanted)
    print(f"wrote {rendered}")
    failed = []
    if off > TOLERANCE:
        failed.append(f"live playback is {off:.2e} m off the clip")
    if step_miss > TOLERANCE:
        failed.append(f"the moved foot is {step_miss:.2e} m off its control")
    if kept > TOLERANCE:
        failed.append(f"the bake is {kept:.2e} m off the clip on frames not edited")
    for text in failed:
        print(f"FAILED: mocap: {text}")
    return len(failed)
