"""Live solving: persistent depsgraph/frame handlers that re-solve armatures whose inputs changed.

`depsgraph_update_post` catches interactive edits (a moved Empty, a changed setting) and
`frame_change_post` catches playback and scrubbing (BLENDER_NOTES: `frame_set` fires only the latter).
Each armature is solved only when a fingerprint of its inputs differs from the one taken right after its
last solve: its transform, every bone's channels (so posing a parent or a chain bone re-solves, while our
own write does not), the evaluated pose of each chain root's outside parent, its targets and poles, and its
settings. Writing the pose from the handler never re-enters it (a busy flag), and we never ask Blender to
re-evaluate from inside a handler (that crashed bpy 4.5 in our experiments).
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import bpy
import numpy as np
from bpy.app.handlers import persistent

from . import armature
from .props import rig_settings

_dirty: set[int] = set()  # session_uid of armatures whose settings changed
_fingerprints: dict[int, bytes] = {}  # session_uid -> inputs after the last solve
_stats: dict[int, int] = {}  # session_uid -> number of solves (tests prove unchanged inputs cost nothing)
_reported: dict[int, str] = {}  # session_uid -> last unexpected error printed (print each error once)
_busy = False
_suspended: set[int] = set()  # session_uid of armatures being baked: the bake solves them itself


def mark_dirty(obj: bpy.types.Object) -> None:
    _dirty.add(obj.session_uid)


@contextmanager
def suspended(obj: bpy.types.Object) -> Iterator[None]:
    """Keep live solving off `obj` (a bake steps through frames and solves them itself)."""
    uid = obj.session_uid
    _suspended.add(uid)
    try:
        yield
    finally:
        _suspended.discard(uid)
        _fingerprints.pop(uid, None)


def solve_count(obj: bpy.types.Object) -> int:
    """How many times the live handlers have solved `obj` in this session."""
    return _stats.get(obj.session_uid, 0)


def _matrix_bytes(ob: bpy.types.Object | None) -> bytes:
    if ob is None:
        return b"-"
    return np.array(ob.matrix_world, dtype=np.float32).tobytes()


def fingerprint(obj: bpy.types.Object) -> bytes:
    """A digest of everything a solve of `obj` reads (see the module docstring)."""
    h = hashlib.blake2b(digest_size=20)
    s = rig_settings(obj)
    h.update(_matrix_bytes(obj))
    h.update(repr((s.tolerance, s.max_iterations, s.roll_mode, s.start_from)).encode())
    pose_bones = obj.pose.bones
    n = len(pose_bones)
    for attr, width in (
        ("rotation_quaternion", 4), ("rotation_euler", 3), ("rotation_axis_angle", 4), ("location", 3),
        ("scale", 3),
    ):
        buf = np.empty(n * width, dtype=np.float32)
        pose_bones.foreach_get(attr, buf)
        h.update(buf.tobytes())
    roots: list[str] = []
    for ch in s.chains:
        h.update(repr((ch.enabled, ch.solver, ch.tip_bone, ch.chain_length, ch.weight,
                       ch.use_target_rotation)).encode())
        h.update(_matrix_bytes(ch.target))
        h.update(_matrix_bytes(ch.pole))
        pb = pose_bones.get(ch.tip_bone)
        for _ in range(max(int(ch.chain_length) - 1, 0)):
            if pb is None:
                break
            pb = pb.parent
        if pb is not None and pb.parent is not None:
            roots.append(pb.parent.name)
    if roots:
        # Constraints above the chain (Child Of, Copy Transforms...) move a chain's parent without
        # changing any channel: include the evaluated matrices of those outside parents.
        mats = armature.pose_matrices(obj)
        idx = [pose_bones.find(name) for name in sorted(set(roots))]
        h.update(mats[idx].astype(np.float32).tobytes())
    return h.digest()


def _solve_live(obj: bpy.types.Object) -> None:
    from .solve import solve_rig, store_status

    uid = obj.session_uid
    fp = fingerprint(obj)
    if uid not in _dirty and _fingerprints.get(uid) == fp:
        return
    _dirty.discard(uid)
    report = solve_rig(obj, write=True)
    _stats[uid] = _stats.get(uid, 0) + 1
    store_status(obj, report)
    # Taken after our own write, so our write does not count as a change next time.
    _fingerprints[uid] = fingerprint(obj)


def _run(scene: bpy.types.Scene) -> None:
    global _busy
    if _busy:
        return
    _busy = True
    try:
        for obj in scene.objects:
            if obj.type != "ARMATURE":
                continue
            settings = rig_settings(obj)
            if not settings.live or not len(settings.chains) or obj.session_uid in _suspended:
                continue
            try:
                _solve_live(obj)
            except Exception:
                # One rig's failure never stops the others; print each distinct failure once.
                text = traceback.format_exc()
                if _reported.get(obj.session_uid) != text:
                    _reported[obj.session_uid] = text
                    print(f"Reach IK: solving '{obj.name}' failed (other rigs go on):\n{text}")
    finally:
        _busy = False
_suspended: set[int] = set()  # session_uid of armatures being baked: the bake solves them itself


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    _run(scene)


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    _run(scene)


@persistent
def on_load(*_args: object) -> None:
    # Session uids and cached skeletons belong to the previous file.
    _fingerprints.clear()
    _dirty.clear()
    _reported.clear()
    armature.forget_cache()


_HANDLERS = (
    ("depsgraph_update_post", on_depsgraph_update),
    ("frame_change_post", on_frame_change),
    ("load_post", on_load),
)


def register() -> None:
    for kind, fn in _HANDLERS:
        getattr(bpy.app.handlers, kind).append(fn)


def unregister() -> None:
    # Removed by reference, never by name: another add-on may use the same function names.
    for kind, fn in reversed(_HANDLERS):
        handlers = getattr(bpy.app.handlers, kind)
        while fn in handlers:
            handlers.remove(fn)
    on_load()
    _stats.clear()
