"""The viewport overlay: limit cones, chain lines and dashed target links, drawn with the gpu module.

The shapes come from numpy (`rig/draw.py`); this module only reads Blender data into arrays and hands vertex
lists to gpu batches. Batches are cached per armature and rebuilt only when what they show changed, so an
idle viewport redraw costs a few array reads. The draw handler is never added in background mode (there is
no viewport, and the gpu module is unavailable there) and is removed by reference in `unregister()`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import bpy
import numpy as np

from ..operators.chains import pose_bones
from ..rig import armature
from ..rig.draw import ChainLine, OverlayGeometry, OverlayInputs, build_overlay
from ..rig.props import bone_limits, rig_settings

# Colours (linear RGBA) chosen to read on the default theme's grey viewport and next to its blue bones.
COLORS: dict[str, tuple[float, float, float, float]] = {
    "cone_fans": (1.0, 0.55, 0.1, 0.16),  # orange, translucent
    "cone_lines": (1.0, 0.6, 0.15, 0.9),
    "bad_cone_fans": (1.0, 0.12, 0.1, 0.22),  # red: the pose lies outside the cone
    "bad_cone_lines": (1.0, 0.2, 0.15, 1.0),
    "chain_lines": (0.3, 1.0, 0.45, 0.95),  # green
    "bad_chain_lines": (1.0, 0.2, 0.15, 0.95),  # red: the chain is invalid
    "target_links": (1.0, 0.85, 0.2, 0.95),  # yellow dashes
    "pole_links": (0.75, 0.55, 1.0, 0.9),  # violet dashes
}
LINE_WIDTHS = {
    "cone_lines": 1.5,
    "bad_cone_lines": 2.0,
    "chain_lines": 3.0,
    "bad_chain_lines": 3.0,
    "target_links": 1.5,
    "pole_links": 1.5,
}

_handle: Any = None
_cache: dict[int, tuple[bytes, list[tuple[str, Any]]]] = {}  # session_uid -> (inputs digest, batches)


def read_inputs(obj: bpy.types.Object, with_limits: bool) -> OverlayInputs:
    """What the overlay of armature `obj` shows, read from its evaluated pose and settings."""
    settings = rig_settings(obj)
    sk = armature.skeleton(obj)
    pose = armature.pose_matrices(obj)
    tails = armature.pose_tails(obj)
    limited: list[int] = []
    cones: list[tuple[float, float, float, float]] = []
    if with_limits and settings.show_limits:
        for i, pb in enumerate(pose_bones(obj)):
            lim = bone_limits(pb)
            if lim.use_cone:
                limited.append(i)
                cones.append((lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right))
    chains: list[ChainLine] = []
    for ch in settings.chains:
        b = sk.index.get(ch.tip_bone)
        if not ch.enabled or b is None:
            continue
        line = [b, *sk.ancestors(b)]
        if int(ch.chain_length) > 0:  # 0: up to the root bone
            line = line[: int(ch.chain_length)]
        target = _link_point(ch.target, ch.target_bone)
        pole = _link_point(ch.pole, ch.pole_bone)
        chains.append(ChainLine(tuple(reversed(line)), bool(ch.is_valid), target, pole))
    return OverlayInputs(
        world=np.array(obj.matrix_world, dtype=np.float64),
        pose=pose,
        tails=tails,
        parent=sk.parent,
        rest_rel=sk.rest_rel,
        limited=np.array(limited, dtype=np.int64),
        cones=np.array(cones).reshape(-1, 4),
        chains=tuple(chains),
        show_chains=bool(settings.show_chains),
        show_limits=bool(settings.show_limits),
        show_targets=bool(settings.show_targets),
    )


def _link_point(ob: bpy.types.Object | None, bone: str) -> tuple[float, float, float] | None:
    """Where a target or pole link ends: the object's origin, or its control bone's head (world space)."""
    if ob is None:
        return None
    p = ob.matrix_world.translation
    if bone and ob.type == "ARMATURE":
        pb = ob.pose.bones.get(bone) if ob.pose is not None else None
        if pb is not None:
            p = ob.matrix_world @ pb.head
    return (float(p.x), float(p.y), float(p.z))


def geometry(obj: bpy.types.Object, with_limits: bool = True) -> OverlayGeometry:
    """The world-space overlay geometry of armature `obj` (what `draw` sends to the GPU)."""
    return build_overlay(read_inputs(obj, with_limits))


def _digest(inp: OverlayInputs) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for arr in (inp.world, inp.pose, inp.tails, inp.limited, inp.cones):
        h.update(np.ascontiguousarray(arr).tobytes())
    h.update(repr((inp.chains, inp.show_chains, inp.show_limits, inp.show_targets)).encode())
    return h.digest()


def _batches(geo: OverlayGeometry) -> list[tuple[str, Any]]:
    import gpu
    from gpu_extras.batch import batch_for_shader

    flat = gpu.shader.from_builtin("UNIFORM_COLOR")
    poly = gpu.shader.from_builtin("POLYLINE_UNIFORM_COLOR")
    out: list[tuple[str, Any]] = []
    # Fans first (under the lines), then lines.
    for name in ("cone_fans", "bad_cone_fans"):
        verts = getattr(geo, name)
        if len(verts):
            out.append((name, batch_for_shader(flat, "TRIS", {"pos": verts.astype(np.float32)})))
    for name in ("cone_lines", "bad_cone_lines", "chain_lines", "bad_chain_lines", "target_links", "pole_links"):
        verts = getattr(geo, name)
        if len(verts):
            out.append((name, batch_for_shader(poly, "LINES", {"pos": verts.astype(np.float32)})))
    return out


def _armatures(context: bpy.types.Context) -> list[tuple[bpy.types.Object, bool]]:
    """Visible armatures with something to draw, and whether to draw their limits (active or posed only)."""
    active = context.active_object
    out = []
    for obj in context.visible_objects:
        if obj.type != "ARMATURE":
            continue
        with_limits = obj == active or obj.mode == "POSE"
        if len(rig_settings(obj).chains) or with_limits:
            out.append((obj, with_limits))
    return out


def draw() -> None:
    """POST_VIEW callback of every 3D viewport."""
    import gpu

    context = bpy.context
    space = context.space_data
    if not isinstance(space, bpy.types.SpaceView3D) or not space.overlay.show_overlays:
        return
    seen: set[int] = set()
    todo: list[list[tuple[str, Any]]] = []
    for obj, with_limits in _armatures(context):
        inp = read_inputs(obj, with_limits)
        key = _digest(inp)
        uid = obj.session_uid
        seen.add(uid)
        cached = _cache.get(uid)
        if cached is None or cached[0] != key:
            cached = (key, _batches(build_overlay(inp)))
            _cache[uid] = cached
        todo.append(cached[1])
    if len(_cache) > 4 * max(len(seen), 16):
        for uid in set(_cache) - seen:
            del _cache[uid]
    if not any(todo):
        return
    flat = gpu.shader.from_builtin("UNIFORM_COLOR")
    poly = gpu.shader.from_builtin("POLYLINE_UNIFORM_COLOR")
    # The gpu stubs declare both getters as returning None; they return (x, y, w, h) and the mode name.
    viewport: Any = gpu.state.viewport_get()
    depth: Any = gpu.state.depth_test_get()
    gpu.state.blend_set("ALPHA")
    # Always on top, like bones drawn In Front: a cone hidden inside a mesh would be no help.
    gpu.state.depth_test_set("NONE")
    try:
        for batches in todo:
            for name, batch in batches:
                color = COLORS[name]
                if name in LINE_WIDTHS:
                    poly.bind()
                    poly.uniform_float("viewportSize", (float(viewport[2]), float(viewport[3])))
                    poly.uniform_float("lineWidth", LINE_WIDTHS[name])
                    poly.uniform_float("color", color)
                    batch.draw(poly)
                else:
                    flat.bind()
                    flat.uniform_float("color", color)
                    batch.draw(flat)
    finally:
        gpu.state.blend_set("NONE")
        gpu.state.depth_test_set(depth)


def is_registered() -> bool:
    return _handle is not None


def register() -> None:
    global _handle
    # Background mode has no viewport to draw in (and no GPU): never add the handler there.
    if bpy.app.background or _handle is not None:
        return
    _handle = bpy.types.SpaceView3D.draw_handler_add(draw, (), "WINDOW", "POST_VIEW")


def unregister() -> None:
    global _handle
    if _handle is not None:
        # Removed by the handle draw_handler_add returned (by reference), never by name.
        bpy.types.SpaceView3D.draw_handler_remove(_handle, "WINDOW")
        _handle = None
    _cache.clear()
