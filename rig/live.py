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

_versions: dict[int, int] = {}  # session_uid -> settings version (cached plans compare it)
_fingerprints: dict[int, bytes] = {}  # session_uid -> inputs after the last solve
_stats: dict[int, int] = {}  # session_uid -> number of solves (tests prove unchanged inputs cost nothing)
_reported: dict[int, str] = {}  # session_uid -> last unexpected error printed (print each error once)
_busy = False
_suspended: set[int] = set()  # session_uid of armatures being baked: the bake solves them itself


def mark_dirty(obj: bpy.types.Object) -> None:
    # The version is part of the fingerprint, so the next update re-solves (and cached plans are rebuilt).
    _versions[obj.session_uid] = _versions.get(obj.session_uid, 0) + 1


def settings_version(obj: bpy.types.Object) -> int:
    """Bumped by every Reach IK setting change on `obj` (and its bones' limits)."""
    return _versions.get(obj.session_uid, 0)


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


def _channel_bytes(obj: bpy.types.Object) -> bytes:
    """Every bone's rotation, location and scale channels, raw (the only inputs our own write changes)."""
    return b"".join(a.tobytes() for a in armature.read_channels(obj, armature.ALL_CHANNELS).values())


def _other_inputs(obj: bpy.types.Object) -> bytes:
    """A digest of every input except the bone channels: transforms, settings, targets, outside parents."""
    h = hashlib.blake2b(digest_size=20)
    s = rig_settings(obj)
    h.update(np.array(obj.matrix_world, dtype=np.float32).tobytes())
    h.update(repr((s.tolerance, s.max_iterations, s.roll_mode, s.start_from, settings_version(obj))).encode())
    objects: list[bpy.types.Object] = []
    roots: set[int] = set()
    sk = armature.skeleton(obj, trust_cache=True)
    index, parent_of = sk.index, sk.parent
    for ch in s.chains:
        h.update(
            repr((ch.enabled, ch.solver, ch.tip_bone, ch.chain_length, ch.weight, ch.use_target_rotation)).encode()
        )
        for ob in (ch.target, ch.pole):
            if ob is not None:
                objects.append(ob)
            else:
                h.update(b"-")
        b = index.get(ch.tip_bone, -1)
        for _ in range(max(int(ch.chain_length) - 1, 0)):
            if b < 0:
                break
            b = int(parent_of[b])
        if b >= 0 and parent_of[b] >= 0:
            roots.add(int(parent_of[b]))
    if objects:
        h.update(armature.object_matrices(objects).astype(np.float32).tobytes())
    if roots:
        # Constraints above the chain (Child Of, Copy Transforms...) move a chain's parent without
        # changing any channel: include the evaluated matrices of those outside parents.
        mats = armature.pose_matrices(obj)
        h.update(mats[sorted(roots)].astype(np.float32).tobytes())
    return h.digest()


def _combine(other: bytes, channels: bytes) -> bytes:
    """The fingerprint of everything a solve reads (see the module docstring)."""
    return hashlib.blake2b(other + channels, digest_size=20).digest()


def _solve_live(obj: bpy.types.Object) -> None:
    from .solve import solve_rig, store_status

    uid = obj.session_uid
    other = _other_inputs(obj)
    if _fingerprints.get(uid) == _combine(other, _channel_bytes(obj)):
        return
    report = solve_rig(obj, write=True, cached=True)
    _stats[uid] = _stats.get(uid, 0) + 1
    store_status(obj, report)
    # Our write changes only the bone channels: re-read those, not every input, so it does not count as a
    # change next time.
    _fingerprints[uid] = _combine(other, _channel_bytes(obj))


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


_STRUCTURE_TYPES = (bpy.types.Collection, bpy.types.Scene, bpy.types.Armature)


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    if not _busy and any(isinstance(u.id, _STRUCTURE_TYPES) for u in depsgraph.updates):
        # Objects linked/unlinked, bones renamed or edited: cached plans and skeletons may be stale.
        _invalidate()
    _run(scene)


def _invalidate() -> None:
    from .solve import forget_plans

    armature.forget_cache()
    forget_plans()


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    _run(scene)


@persistent
def on_load(*_args: object) -> None:
    # Session uids and cached skeletons belong to the previous file.
    _fingerprints.clear()
    _reported.clear()
    armature.forget_cache()
    from .solve import forget_plans

    forget_plans()


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
