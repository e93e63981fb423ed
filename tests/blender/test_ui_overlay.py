"""The overlay's geometry (numpy, rig/draw.py) and what ui/overlay.py reads from a real rig.

The gpu side cannot run on the headless wheel (no viewport); the e2e GUI test draws it in a real Blender.
"""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Euler

draw = bpy_session.submodule("rig.draw")
overlay = bpy_session.submodule("ui.overlay")
limits = bpy_session.submodule("solvers.limits")


def test_overlay_is_never_registered_in_background() -> None:
    assert bpy.app.background
    assert not overlay.is_registered(), "the draw handler must not be added in background mode"


# ---------------------------------------------------------------------------------------------------------
# numpy helpers
# ---------------------------------------------------------------------------------------------------------


def _random_frames(rng: np.random.Generator, m: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.normal(size=(m, 3, 3)))
    q[np.linalg.det(q) < 0, :, 0] *= -1.0
    return q


def test_cone_mesh_ring_lies_on_the_cone_boundary() -> None:
    rng = np.random.default_rng(7)
    m, n = 5, 48
    frames = _random_frames(rng, m)
    apexes = rng.normal(size=(m, 3))
    cones = rng.uniform(0.05, 2.5, size=(m, 4))
    cones[0] = (math.radians(150), 0.0, 0.0, 0.0)  # a one-way hinge: zero sides are allowed
    sizes = rng.uniform(0.2, 2.0, size=m)
    mesh = draw.cone_mesh(frames, apexes, cones, sizes, n=n)
    assert mesh.fans.shape == (m * n * 3, 3) and mesh.outlines.shape == (m * (n + 4) * 2, 3)
    tris = mesh.fans.reshape(m, n, 3, 3)
    assert np.allclose(tris[:, :, 0], apexes[:, None]), "every fan triangle starts at the apex (the bone's head)"
    ring = tris[:, :, 1] - apexes[:, None]
    assert np.allclose(np.linalg.norm(ring, axis=2), sizes[:, None]), "the ring sits `size` from the apex"
    local = np.einsum("mji,mnj->mni", frames, ring / sizes[:, None, None])
    for k in range(m):
        inside = limits.cone_contains(local[k], np.repeat(cones[k][None], n, axis=0), tol=1e-9)
        assert inside.all(), f"cone {k}: ring points must lie in the cone (on its boundary)"
        # Pushed 5% further out along its own azimuth, a boundary point leaves the cone.
        x, y, z = local[k].T
        theta, phi = np.arctan2(np.hypot(x, z), y), np.arctan2(z, x)
        th = theta * 1.05 + 1e-3
        pushed = np.stack((np.sin(th) * np.cos(phi), np.cos(th), np.sin(th) * np.sin(phi)), axis=1)
        outside = ~limits.cone_contains(pushed, np.repeat(cones[k][None], n, axis=0))
        assert outside[theta > 0.05].all(), f"cone {k}: ring points must be on the boundary, not inside it"


def test_cone_mesh_flags_directions_outside_the_cone() -> None:
    frames = np.repeat(np.eye(3)[None], 3, axis=0)
    cones = np.full((3, 4), math.radians(30.0))
    a = math.radians(20.0)
    b = math.radians(50.0)
    directions = np.array([[0, 1, 0], [math.sin(a), math.cos(a), 0], [0, math.cos(b), math.sin(b)]])
    mesh = draw.cone_mesh(frames, np.zeros((3, 3)), cones, np.ones(3), directions)
    assert mesh.violated.tolist() == [False, False, True]
    fans, lines = mesh.split(mesh.violated)
    assert len(fans) == 48 * 3 and len(lines) == 52 * 2


def test_dashed_segments_touch_both_ends() -> None:
    a = np.array([[0.0, 0, 0], [1, 1, 1]])
    b = np.array([[1.0, 0, 0], [1, 1, 1]])  # the second is zero-length: skipped
    segs = draw.dashed_segments(a, b, dash=0.1)
    assert len(segs) == 2 * 10
    assert np.allclose(segs[0], a[0]) and np.allclose(segs[-1], b[0])
    lengths = np.linalg.norm(segs[1::2] - segs[0::2], axis=1)
    assert np.allclose(lengths[:-1], 0.055), "dashes are 55% of their pitch"
    assert len(draw.dashed_segments(a[:0], b[:0], 0.1)) == 0


def test_polyline_segments() -> None:
    pts = np.arange(12, dtype=float).reshape(4, 3)
    segs = draw.polyline_segments([pts, pts[:1]])
    assert segs.shape == (6, 3) and np.allclose(segs[1], pts[1]) and np.allclose(segs[-1], pts[-1])


# ---------------------------------------------------------------------------------------------------------
# A real rig
# ---------------------------------------------------------------------------------------------------------


def _posed_arm() -> bpy.types.Object:
    rig = rigs.chain_rig(3)
    rig.rotation_euler = (0.4, 0.1, -0.3)
    rig.scale = (1.5, 1.5, 1.5)
    for pb in rig.pose.bones:
        pb.rotation_mode = "XYZ"
    rig.pose.bones["b0"].rotation_euler = Euler((0.3, -0.2, 0.5))
    rigs.update()
    return rig


def test_cone_lives_in_the_parent_carried_rest_frame() -> None:
    """Measured with Blender's pose: the cone axis is the bone's +Y when the bone itself is unrotated, and
    stays put when the bone rotates (the cone is fixed to the parent)."""
    rig = _posed_arm()
    lim = rig.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(40.0)
    rigs.update()

    def axis_and_apex() -> tuple[np.ndarray, np.ndarray]:
        geo = overlay.geometry(rig)
        tris = geo.cone_fans.reshape(-1, 3, 3)
        apex = tris[0, 0]
        center = tris[:, 1].mean(axis=0) - apex
        return center / np.linalg.norm(center), apex

    axis, apex = axis_and_apex()
    head = rigs.world_head(rig, "b1")
    y = rigs.world_tail(rig, "b1") - head
    assert np.allclose(apex, head, atol=1e-5), "the apex is the bone's posed head"
    assert np.allclose(axis, y / np.linalg.norm(y), atol=1e-5), "unrotated bone: the cone axis is its +Y"
    rig.pose.bones["b1"].rotation_euler = Euler((0.2, 0.0, 0.1))
    rigs.update()
    axis2, _ = axis_and_apex()
    assert np.allclose(axis, axis2, atol=1e-5), "rotating the bone itself must not move its cone"


def test_geometry_of_chains_targets_and_flags() -> None:
    rig = _posed_arm()
    target = rigs.empty("T", (0.5, 0.5, 2.0))
    pole = rigs.empty("P", (2.0, 0.0, 1.0))
    rigs.add_chain(rig, "b2", 2, target, solver="TWO_BONE", pole=pole)
    broken = rigs.add_chain(rig, "b0", 1, None, name="broken")  # no target: invalid
    rig.reach_ik.live = False
    broken.is_valid = False
    rigs.update()
    geo = overlay.geometry(rig)
    assert geo.chain_lines.shape == (2 * 2, 3), "a 2-bone chain: two segments"
    assert geo.bad_chain_lines.shape == (2, 3), "the invalid one-bone chain is drawn in its own colour"
    assert np.allclose(geo.chain_lines[-1], rigs.world_tail(rig, "b2"), atol=1e-5)
    assert np.allclose(geo.target_links[0], rigs.world_tail(rig, "b2"), atol=1e-5)
    assert np.allclose(geo.target_links[-1], target.location, atol=1e-5), "the dashed link ends at the target"
    assert np.allclose(geo.pole_links[0], rigs.world_head(rig, "b2"), atol=1e-5), "pole link from the middle joint"
    assert np.allclose(geo.pole_links[-1], pole.location, atol=1e-5)
    assert len(geo.cone_fans) == 0, "no limits set: no cones"
    rig.reach_ik.show_chains = rig.reach_ik.show_targets = False
    geo = overlay.geometry(rig)
    assert len(geo.chain_lines) == len(geo.target_links) == len(geo.pole_links) == 0
    rig.pose.bones["b1"].reach_ik.use_cone = True
    assert len(overlay.geometry(rig).cone_fans) > 0
    rig.reach_ik.show_limits = False
    assert overlay.geometry(rig).is_empty()


def test_a_violated_cone_is_flagged() -> None:
    rig = _posed_arm()
    lim = rig.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(10.0)
    rig.pose.bones["b1"].rotation_euler = Euler((math.radians(40.0), 0.0, 0.0))  # posed by hand, no IK
    rigs.update()
    geo = overlay.geometry(rig)
    assert len(geo.bad_cone_fans) > 0 and len(geo.cone_fans) == 0, "a pose outside the cone is drawn in red"


@pytest.mark.parametrize("bones", [50, 400])
def test_reading_the_overlay_is_cheap(bones: int) -> None:
    """The per-redraw read (without gpu) stays well under a frame for a big rig with many limits."""
    import time

    rig = rigs.chain_rig(bones, length=0.1)
    for i, pb in enumerate(rig.pose.bones):
        pb.reach_ik.use_cone = i % 2 == 0
    target = rigs.empty("T", (0, 0, 1))
    rig.reach_ik.live = False
    rigs.add_chain(rig, f"b{bones - 1}", 10, target)
    overlay.read_inputs(rig, True)
    start = time.perf_counter()
    for _ in range(5):
        inp = overlay.read_inputs(rig, True)
        overlay._digest(inp)
    per_read = (time.perf_counter() - start) / 5
    assert per_read < 0.02, f"reading the overlay of {bones} bones took {per_read * 1e3:.1f} ms"


def test_overlay_of_an_empty_armature_and_a_broken_chain() -> None:
    """Nothing to draw must not fail: no bones, a chain whose tip bone is gone, a deleted target."""
    empty_rig = rigs.armature("Empty")
    assert overlay.geometry(empty_rig).is_empty()
    rig = rigs.chain_rig(2)
    target = rigs.empty("T", (0, 0, 1))
    rig.reach_ik.live = False
    rigs.add_chain(rig, "gone", 2, target)
    rigs.add_chain(rig, "b1", 2, target)
    bpy.data.objects.remove(target)
    geo = overlay.geometry(rig)
    assert len(geo.target_links) == 0 and len(geo.chain_lines) == 4
