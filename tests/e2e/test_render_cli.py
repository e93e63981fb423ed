"""A farm renders a shot with live chains and no bake job: `blender -b shot.blend -a` (and `-f N`).

The shot: a two-bone arm reaching for a keyed Empty, a small sphere hanging from the hand bone, an
orthographic camera, Workbench on a transparent background at 64 x 64. The sphere's centroid is measured in
each rendered PNG (decoded here, without Blender) and compared with where the target projects, which the
process that built the shot worked out with `world_to_camera_view`.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from conftest import Blender

RES = 64
FRAMES = (1, 2, 3, 4)

MAKE_SHOT = r"""
import bpy, json, math, sys
from bpy_extras.object_utils import world_to_camera_view
out = sys.argv[sys.argv.index("--") + 1]
bpy.ops.wm.read_homefile(use_empty=True)
sc = bpy.context.scene
arm = bpy.data.armatures.new("Arm")
rig = bpy.data.objects.new("Rig", arm)
sc.collection.objects.link(rig)
bpy.context.view_layer.objects.active = rig
bpy.ops.object.mode_set(mode="EDIT")
up = arm.edit_bones.new("upper"); up.head, up.tail = (0, 0, 0), (0, 0, 1)
fo = arm.edit_bones.new("fore"); fo.head, fo.tail = (0, 0, 1), (0.05, 0, 2); fo.parent, fo.use_connect = up, True
bpy.ops.object.mode_set(mode="OBJECT")
target = bpy.data.objects.new("Target", None)
sc.collection.objects.link(target)
for frame, loc in ((1, (0.5, 0.0, 1.5)), (4, (1.2, 0.3, 0.8))):
    target.location = loc
    target.keyframe_insert("location", frame=frame)
ch = rig.reach_ik.chains.add()
ch.name, ch.tip_bone, ch.chain_length, ch.solver, ch.target = "arm", "fore", 2, "TWO_BONE", target
bpy.ops.mesh.primitive_uv_sphere_add(radius=0.12, segments=16, ring_count=8)
ball = bpy.context.active_object
ball.parent, ball.parent_type, ball.parent_bone = rig, "BONE", "fore"
ball.location = (0, 0, 0)
cam = bpy.data.objects.new("Cam", bpy.data.cameras.new("Cam"))
sc.collection.objects.link(cam)
cam.data.type, cam.data.ortho_scale = "ORTHO", 4.0
cam.location, cam.rotation_euler = (0.2, -10.0, 1.0), (math.pi / 2, 0, 0)
sc.camera = cam
r = sc.render
r.engine = "BLENDER_WORKBENCH"
r.resolution_x = r.resolution_y = 64
r.resolution_percentage = 100
r.film_transparent = True
r.image_settings.file_format, r.image_settings.color_mode = "PNG", "RGBA"
r.filepath = "//frames/f_"
sc.display.shading.light, sc.display.shading.color_type = "FLAT", "SINGLE"
sc.frame_start, sc.frame_end = 1, 4
expect = {}
for f in range(1, 5):
    sc.frame_set(f)
    uv = world_to_camera_view(sc, cam, target.matrix_world.translation)
    expect[f] = [uv.x * 64, uv.y * 64]
sc.frame_set(1)
bpy.ops.wm.save_as_mainfile(filepath=out)
print("RESULT " + json.dumps(expect))
"""


def read_png_rgba(path: Path) -> np.ndarray:
    """An 8-bit RGBA, non-interlaced PNG (what Blender writes here) as an (h, w, 4) array, top row first."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _c, _f, interlace = struct.unpack(">IIBBBBB", body)
            assert (depth, color, interlace) == (8, 6, 0), f"{path}: expected 8-bit RGBA, not interlaced"
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride, bpp = width * 4, 4
    out = np.zeros((height, stride), dtype=np.int32)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], np.frombuffer(raw[start + 1 : start + 1 + stride], dtype=np.uint8).astype(np.int32)
        row = np.zeros(stride, dtype=np.int32)
        for x in range(stride):
            a = row[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if kind == 0:
                pred = 0
            elif kind == 1:
                pred = a
            elif kind == 2:
                pred = b
            elif kind == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            row[x] = (line[x] + pred) & 0xFF
        out[y], prev = row, row
    return out.reshape(height, width, 4)


def alpha_centroid(path: Path) -> np.ndarray:
    """The visible sphere's centre in pixels from the bottom-left corner (as world_to_camera_view's u, v)."""
    alpha = read_png_rgba(path)[::-1, :, 3].astype(np.float64)  # bottom row first
    assert alpha.sum() > 0, f"nothing visible in {path.name}"
    ys, xs = np.mgrid[0 : alpha.shape[0], 0 : alpha.shape[1]]
    return np.array([((xs + 0.5) * alpha).sum(), ((ys + 0.5) * alpha).sum()]) / alpha.sum()


def test_farm_renders_live_chains_without_a_bake(installed: Blender, tmp_path: Path) -> None:
    shot = tmp_path / "shot.blend"
    expect = {int(k): np.array(v) for k, v in installed.python(MAKE_SHOT, str(shot)).items()}
    before = shot.read_bytes()
    proc = installed.run(["-b", str(shot), "-a"])
    assert "rendering without a bake" not in proc.stdout, proc.stdout[-2000:]
    for f in FRAMES:
        seen = alpha_centroid(tmp_path / "frames" / f"f_{f:04d}.png")
        assert np.linalg.norm(seen - expect[f]) < 1.0, f"frame {f}: hand at {seen}, target at {expect[f]} px"
    assert np.linalg.norm(expect[4] - expect[1]) > 10, "the target moves across the image (a frozen arm would fail)"
    assert shot.read_bytes() == before, "rendering does not touch the shot"

    # One frame, as a farm task that renders frame by frame: `-f 3` (the output path from the command line).
    installed.run(["-b", str(shot), "-o", str(tmp_path / "still_####"), "-f", "3"])
    seen = alpha_centroid(tmp_path / "still_0003.png")
    assert np.linalg.norm(seen - expect[3]) < 1.0, f"-f 3: the hand renders at {seen}, target at {expect[3]} px"
