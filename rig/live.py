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

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import bpy
from bpy.app.handlers import persistent

from . import armature
from .props import rig_settings
from .solve import ChainState, LiveReads, chain_state, solve_rig, store_status

_versions: dict[int, int] = {}  # session_uid -> settings version (cached plans compare it)
_fingerprints: dict[int, _Seen] = {}  # session_uid -> inputs after the last solve
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


@dataclass
class _Seen:
    """The inputs of an armature's last solve. Bytes compare exactly (NaN too); settings compare as values."""

    data: bytes  # world, target and pole matrices, outside parents' evaluated pose
    channels: bytes  # every bone's rotation, location and scale channels, raw
    settings: tuple[object, ...]

    def same(self, other: _Seen) -> bool:
        # repr() only when the values differ: a NaN setting is unequal to itself but has an equal repr.
        return (
            self.data == other.data
            and self.channels == other.channels
            and (self.settings == other.settings or repr(self.settings) == repr(other.settings))
        )


def _channel_bytes(channels: armature.Channels) -> bytes:
    return b"".join(a.tobytes() for a in channels.values())


# session_uid -> (skeleton, (tip, length) of each chain, outside parents), see _outside_parents
_roots: dict[int, tuple[armature.Skeleton, tuple[tuple[str, int], ...], list[int]]] = {}


def _outside_parents(uid: int, sk: armature.Skeleton, state: ChainState) -> list[int]:
    """The parent of each chain's root bone (chains as set, valid or not), cached while tips and lengths hold."""
    key = tuple((row.tip_bone, row.chain_length) for row in state)
    hit = _roots.get(uid)
    if hit is not None and hit[0] is sk and hit[1] == key:
        return hit[2]
    roots: set[int] = set()
    for tip, length in key:
        b = sk.index.get(tip, -1)
        for _ in range(max(int(length) - 1, 0)):
            if b < 0:
                break
            b = int(sk.parent[b])
        if b >= 0 and sk.parent[b] >= 0:
            roots.add(int(sk.parent[b]))
    out = sorted(roots)
    _roots[uid] = (sk, key, out)
    return out


def _read(obj: bpy.types.Object) -> tuple[_Seen, LiveReads]:
    """Everything a solve of `obj` reads, once: what the change test compares and what the solve reuses."""
    s = rig_settings(obj)
    sk = armature.skeleton(obj, trust_cache=True)
    state, objects = chain_state(obj)
    # The armature's own matrix comes from the same one-call read as the targets and poles.
    world = armature.WorldMatrices()
    data = [world.of([obj, *objects]).tobytes()]
    pose = None
    roots = _outside_parents(obj.session_uid, sk, state)
    if roots:
        # Constraints above the chain (Child Of, Copy Transforms...) move a chain's parent without
        # changing any channel: include the evaluated matrices of those outside parents.
        pose = armature.pose_matrices(obj)
        data.append(pose[roots].tobytes())
    channels = armature.read_channels(obj, armature.ALL_CHANNELS)
    settings = (s.tolerance, s.max_iterations, s.roll_mode, s.start_from, settings_version(obj), state)
    seen = _Seen(b"".join(data), _channel_bytes(channels), settings)
    return seen, LiveReads(sk=sk, state=state, channels=channels, world=world, pose=pose)


def _solve_live(obj: bpy.types.Object) -> None:
    uid = obj.session_uid
    seen, reads = _read(obj)
    last = _fingerprints.get(uid)
    if last is not None and last.same(seen):
        return
    report = solve_rig(obj, write=True, cached=True, reads=reads)
    _stats[uid] = _stats.get(uid, 0) + 1
    store_status(obj, report)
    # Our write changed only rotation channels, and `reads.channels` now holds exactly the float32 values
    # written (foreach_set stores them as given), so it stands for a re-read: the write is no change.
    seen.channels = _channel_bytes(reads.channels)
    _fingerprints[uid] = seen


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
    _roots.clear()
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
