"""The demo's character: a Mixamo-named skeleton with a simple body, set up in one click, posed, baked, rendered.

`make demo` calls `run()` after the main scene: it builds the skeleton of `demo/humanoids.py` in Mixamo's
names with a bone-parented body (cylinders and a head), runs `reach.auto_setup` on it, keys its controls
(a squat with the feet planted and the hands circling), bakes, saves `demo/out/reach_ik_character.blend`
and renders four frames with Blender itself (Workbench, the real binary given by BLENDER) into
`demo/out/reach_ik_character.png`. Without BLENDER it draws the same frames with matplotlib.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import bpy
from mathutils import Matrix, Vector

from . import rigs

FRAMES = 48
SHOW = (1, 12, 24, 36)


def _body(obj: bpy.types.Object) -> None:
    """A cylinder per deforming bone and a sphere for the head, parented to their bones (no skinning)."""
    for bone in obj.data.bones:
        if not bone.use_deform or bone.name.endswith("_End"):
            continue
        head = "Head" in bone.name
        radius = 0.09 if head else (0.07 if "Spine" in bone.name or "Hips" in bone.name else 0.035)
        if head:
            bpy.ops.mesh.primitive_uv_sphere_add(radius=radius, segments=16, ring_count=8)
        else:
            bpy.ops.mesh.primitive_cylinder_add(radius=radius, depth=1.0, vertices=12)
        part = bpy.context.active_object
        part.name = f"body {bone.name}"
        length = bone.length
        if not head:
            part.scale = (1.0, 1.0, length)
        # Bone parenting starts at the bone's tail; the part sits at the bone's middle, along its Y axis.
        part.parent = obj
        part.parent_type = "BONE"
        part.parent_bone = bone.name
        along = Matrix.Rotation(-math.pi / 2, 4, "X")  # the cylinder's Z onto the bone's Y
        part.matrix_parent_inverse = Matrix.Identity(4)
        part.matrix_basis = Matrix.Translation((0.0, -length / 2, 0.0)) @ along
        if not head:
            part.matrix_basis = part.matrix_basis @ Matrix.Diagonal((1.0, 1.0, length, 1.0))


def _key_controls(obj: bpy.types.Object) -> None:
    """A squat (hips, chest and head controls down, feet planted) while the hands circle."""
    pose = obj.pose.bones
    movers = {"IK-hand.L": 1.0, "IK-hand.R": -1.0}
    scene = bpy.context.scene
    for f in range(1, FRAMES + 1, 4):
        t = (f - 1) / FRAMES
        drop = 0.18 * math.sin(math.pi * t) ** 2
        pose["mixamorig:Hips"].location = (0.0, -drop, 0.0)  # the hips' own Y is up the spine: down is -Y
        pose["mixamorig:Hips"].keyframe_insert("location", frame=f)
        for name in ("IK-chest", "IK-head"):
            pb = pose[name]
            pb.matrix = Matrix.Translation((0.0, 0.0, -drop)) @ _rest_pose(obj, name)
            pb.keyframe_insert("location", frame=f)
        for name, side in movers.items():
            a = 2.0 * math.pi * t
            pb = pose[name]
            # Inward, forward and up from the straight arm: always within the arm's reach.
            inward = 0.08 * (1.0 - math.cos(a))
            offset = Vector((-side * inward, -0.06 * (1.0 - math.cos(a)), 0.12 * math.sin(a) - drop))
            pb.matrix = Matrix.Translation(offset) @ _rest_pose(obj, name)
            pb.keyframe_insert("location", frame=f)
    scene.frame_start, scene.frame_end = 1, FRAMES


_REST: dict[str, Matrix] = {}


def _rest_pose(obj: bpy.types.Object, name: str) -> Matrix:
    if name not in _REST:
        _REST[name] = obj.pose.bones[name].matrix.copy()
    return _REST[name].copy()


def _stage(obj: bpy.types.Object) -> None:
    """A camera three-quarters in front, a floor, Workbench with a plain background."""
    scene = bpy.context.scene
    cam_data = bpy.data.cameras.new("Camera")
    cam = bpy.data.objects.new("Camera", cam_data)
    scene.collection.objects.link(cam)
    cam.location = (1.4, -4.2, 1.3)
    direction = Vector((0.0, 0.0, 0.85)) - cam.location
    cam.rotation_euler = direction.to_track_quat("-Z", "Y").to_euler()
    cam_data.lens = 40
    scene.camera = cam
    bpy.ops.mesh.primitive_plane_add(size=3.0)
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.render.resolution_x, scene.render.resolution_y = 360, 480
    scene.render.resolution_percentage = 100
    scene.display.shading.light = "STUDIO"
    scene.display.shading.color_type = "OBJECT"
    for ob in scene.objects:
        if ob.name.startswith("body"):
            ob.color = (0.85, 0.55, 0.35, 1.0)


def figure() -> bpy.types.Object:
    """The Mixamo-named skeleton with its bone-parented body, no IK yet, the armature active."""
    obj = rigs.humanoid("mixamo", name="Mixamo Character", bent=False)
    _body(obj)
    bpy.context.view_layer.objects.active = obj
    return obj


def build() -> tuple[bpy.types.Object, str]:
    """The character, set up by `reach.auto_setup` (its report returned), keyed and staged (not baked)."""
    obj = figure()
    bpy.context.view_layer.objects.active = obj
    for ob in bpy.context.selected_objects:
        ob.select_set(False)
    obj.select_set(True)
    result = bpy.ops.reach.auto_setup()
    if result != {"FINISHED"}:
        raise RuntimeError(f"the character set-up failed: {result}")
    chains = ", ".join(ch.name for ch in obj.reach_ik.chains)
    _REST.clear()
    _key_controls(obj)
    _stage(obj)
    return obj, chains


def render_frames(blend: Path, out_png: Path) -> str:
    """Render `SHOW` frames of `blend` with the real Blender (BLENDER) and tile them into `out_png`."""
    blender = os.environ.get("BLENDER")
    if not blender:
        return "skipped (BLENDER is not set)"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, BLENDER_USER_RESOURCES=str(Path(tmp) / "res"))
        frames = ",".join(str(f) for f in SHOW)
        args = [blender, "-b", str(blend), "-o", str(Path(tmp) / "f_####"), "-F", "PNG", "-f", frames]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        shots = [Path(tmp) / f"f_{f:04d}.png" for f in SHOW]
        if proc.returncode != 0 or not all(s.exists() for s in shots):
            return f"failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        _tile(shots, out_png)
    return str(out_png)


def _tile(shots: list[Path], out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(shots), figsize=(3 * len(shots), 4), dpi=100)
    for ax, shot, f in zip(axes, shots, SHOW, strict=True):
        ax.imshow(plt.imread(shot))
        ax.set_title(f"frame {f}")
        ax.axis("off")
    fig.suptitle("Mixamo-named skeleton, set up by Reach IK in one click, baked, rendered by Blender (Workbench)")
    fig.tight_layout()
    tmp = out_png.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    shutil.move(tmp, out_png)


def sketch(obj: bpy.types.Object, out_png: Path) -> str:
    """The fallback without BLENDER: the baked bones at `SHOW` frames, front view, drawn with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SHOW), figsize=(3 * len(SHOW), 4), dpi=100)
    for ax, f in zip(axes, SHOW, strict=True):
        bpy.context.scene.frame_set(f)
        for pb in obj.pose.bones:
            if not pb.bone.use_deform:
                continue
            h, t = obj.matrix_world @ pb.head, obj.matrix_world @ pb.tail
            ax.plot([h.x, t.x], [h.z, t.z], "-", color="#c8703c", lw=3)
        ax.set_title(f"frame {f}")
        ax.set_aspect("equal")
        ax.set_xlim(-1, 1)
        ax.set_ylim(-0.05, 1.95)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)
    return str(out_png)


def tip_residuals(obj: bpy.types.Object) -> dict[str, float]:
    """Largest distance, over the baked frames replayed, from each limb's tip to its control (when in reach)."""
    out: dict[str, float] = {}
    scene = bpy.context.scene
    for f in range(1, FRAMES + 1):
        scene.frame_set(f)
        for ch in obj.reach_ik.chains:
            if ch.name not in {"arm.L", "arm.R", "leg.L", "leg.R"}:
                continue
            tip_pb = obj.pose.bones[ch.tip_bone]
            root_pb = tip_pb.parent_recursive[ch.chain_length - 2]
            tip = obj.matrix_world @ tip_pb.tail
            goal = obj.matrix_world @ obj.pose.bones[ch.target_bone].head
            # Frames whose control lies beyond the limb's reach (the shoulder moved with the spine) are not
            # counted: there the limb points at the control, as it should, and cannot touch it.
            reach = sum(b.length for b in (tip_pb, *tip_pb.parent_recursive[: ch.chain_length - 1]))
            if ((obj.matrix_world @ root_pb.head) - goal).length > reach * obj.scale[0] * (1.0 - 1e-3):
                continue
            out[ch.name] = max(out.get(ch.name, 0.0), float((tip - goal).length))
    return out
