"""Full Body on the Blender side: the settings a solve reads, and the body root's home and written channels.

The body root's *home* is where it stands when nothing pulls. A full-body solve writes the root's location
and rotation channels, so the next solve cannot take them for the home. The rule is the FK store's
(`rig/fk.py`): the home is the root's channels whenever they differ from what Reach IK last wrote there
(animation, posing by hand, a script set them); while they still hold exactly what was written, it is the
home stored when it wrote. Both live in the armature object (`_reach_ik_body`: home location, home rotation,
written location, written rotation, float32, the rotation raw as its mode's channel holds it; and
`_reach_ik_body_bone`, the root's name), so undo, save and reload carry them with the channels.
"""

from __future__ import annotations

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core.body import body_root
from ..core.model import BodySettings, Plan, Skeleton, Solved
from . import anim, armature, fk
from .props import ReachRigSettings, rig_settings

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]
KEY = "_reach_ik_body"
BONE_KEY = "_reach_ik_body_bone"
HOME_LOC, HOME_ROT, WRITTEN_LOC, WRITTEN_ROT = slice(0, 3), slice(3, 7), slice(7, 10), slice(10, 14)
WIDTH = 14

# The home each rig's last snapshot used (session uid -> bone name, raw home values (7,)): the write
# stores it with what it wrote.
_homes: dict[int, tuple[str, F32]] = {}


def _stored(obj: bpy.types.Object, name: str) -> F32 | None:
    if obj.get(BONE_KEY) != name:
        return None
    view = fk.array_of(obj.get(KEY))
    return None if view is None or view.shape[0] != WIDTH else np.array(view, dtype=np.float32)


def _raw(channels: armature.Channels, b: int, mode: int) -> F32:
    """(7,) the bone's location and raw rotation (its mode's channel, Euler padded) as the channels hold them."""
    out = np.zeros(7, dtype=np.float32)
    out[:3] = channels["location"][b]
    out[3:] = fk.raw_rotations(channels, [b], [mode])[0]
    return out


_keyed: dict[tuple[int, str], tuple[tuple[int, int], tuple[bool, bool]]] = {}


def _animated(obj: bpy.types.Object, name: str) -> tuple[bool, bool]:
    """Whether the bone's location, and its rotation, are keyed. Asked on every update: the answer is kept
    while the action and its number of curves stay the same."""
    ad = obj.animation_data
    if ad is None or ad.action is None:
        return False, False
    curves = anim.all_fcurves(ad.action, obj)
    stamp = (ad.action.as_pointer(), len(curves))
    hit = _keyed.get((obj.session_uid, name))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    prefix = f'pose.bones["{bpy.utils.escape_identifier(name)}"].'
    paths = {fc.data_path[len(prefix) :] for fc in curves if fc.data_path.startswith(prefix)}
    keyed = ("location" in paths, any(p.startswith("rotation") for p in paths))
    _keyed[(obj.session_uid, name)] = (stamp, keyed)
    return keyed


def settings(
    obj: bpy.types.Object,
    sk: Skeleton,
    plan: Plan,
    channels: armature.Channels | None = None,
    modes: NDArray[np.int32] | None = None,
    bake: bool = False,
    settings: ReachRigSettings | None = None,
) -> BodySettings | None:
    """Full Body as a solve of `obj` reads it (None when off). `bake`: the solve covers other frames than the
    current one (a bake), where a keyed location or rotation of the body root is each frame's own. `settings`:
    the rig's settings (`props.rig_settings(obj)`), when already read."""
    s = rig_settings(obj) if settings is None else settings
    if not s.full_body:
        return None
    requested = sk.index.get(s.body_root, -1) if s.body_root else -1
    missing = s.body_root if s.body_root and requested < 0 else ""
    chains = s.chains
    pins = {i: bool(ch.pin) for i, ch in enumerate(chains)}
    pulls = {i: float(ch.pull) for i, ch in enumerate(chains)}
    root = body_root(sk, plan.groups, requested)
    location: F64 | None = None
    rotation: F64 | None = None
    if root >= 0:
        name = sk.names[root]
        if channels is None:
            channels = armature.read_channels(obj, armature.ALL_CHANNELS)
        elif "location" not in channels:
            # The location channel alone, kept with the others: `write` needs it too (one read, not two).
            channels["location"] = armature.read_channels(obj, (("location", 3),))["location"]
        mode = int((armature.rotation_mode_values(obj) if modes is None else modes)[root])
        now = _raw(channels, root, mode)
        stored = _stored(obj, name)
        # Location and rotation each: the stored home while the channel holds what was written, else the
        # channel itself (the FK store's rule, per channel: a keyed location under a rotation only solves set).
        raw = now.copy()
        held = [False, False]
        if stored is not None:
            for k, (home, written, part) in enumerate(
                ((HOME_LOC, WRITTEN_LOC, slice(0, 3)), (HOME_ROT, WRITTEN_ROT, slice(3, 7)))
            ):
                if stored[written].tobytes() == now[part].tobytes():
                    raw[part] = stored[home]
                    held[k] = True
        _homes[obj.session_uid] = (name, raw)
        keyed = _animated(obj, name)
        # A bake takes a keyed channel from each frame's pose (None); live, a channel held since a solve wrote
        # it (a drag on one frame) keeps its stored home.
        if not (keyed[0] and (bake or not held[0])):
            location = raw[:3].astype(np.float64)
        if not (keyed[1] and (bake or not held[1])):
            rotation = fk.basis_rotations(raw[None, 3:], [mode])[0]
    return BodySettings(
        root=requested, pins=pins, pulls=pulls, home_location=location, home_rotation=rotation, missing=missing
    )


def write(
    obj: bpy.types.Object, sk: Skeleton, solved: Solved, channels: armature.Channels, modes: NDArray[np.int32]
) -> set[str]:
    """Put the body root's solved location into `channels` (its rotation is written with the chain bones'
    rotations, before this) and store its home with what the channels now hold. Returns the channel names
    that changed."""
    if not solved.location_bones:
        return set()
    root = solved.location_bones[0]
    if "location" not in channels:
        channels["location"] = armature.read_channels(obj, (("location", 3),))["location"]
    new = solved.location[0, 0]
    old = channels["location"][root]
    changed: set[str] = set()
    if (np.abs(new - old) > 1e-6 + 8.0 * np.spacing(np.abs(old)).astype(np.float64)).any():
        channels["location"][root] = new
        changed.add("location")
    name = sk.names[root]
    home = _homes.get(obj.session_uid)
    if home is None or home[0] != name:
        return changed
    row = np.zeros(WIDTH, dtype=np.float32)
    row[HOME_LOC], row[HOME_ROT] = home[1][:3], home[1][3:]
    written = _raw(channels, root, int(modes[root]))
    row[WRITTEN_LOC], row[WRITTEN_ROT] = written[:3], written[3:]
    stored = fk.array_of(obj.get(KEY))
    if obj.get(BONE_KEY) != name:
        obj[BONE_KEY] = name
    if stored is not None and stored.shape[0] == WIDTH:
        if stored.tobytes() != row.tobytes():
            stored[:] = row
    else:
        obj[KEY] = row
    return changed


def note_written(obj: bpy.types.Object, name: str, root: int, channels: armature.Channels, mode: int) -> bool:
    """A live update of the limbs (`rig/live.py`, `core/body_live.py`) wrote the body root's channels: the store
    takes what they hold now as written (its home stands). False when there is no store for `name`."""
    stored = fk.array_of(obj.get(KEY))
    if obj.get(BONE_KEY) != name or stored is None or stored.shape[0] != WIDTH:
        return False
    written = _raw(channels, root, mode)
    if stored[WRITTEN_LOC].tobytes() + stored[WRITTEN_ROT].tobytes() != written.tobytes():
        stored[WRITTEN_LOC], stored[WRITTEN_ROT] = written[:3], written[3:]
    return True


def release(obj: bpy.types.Object, channels: armature.Channels | None = None) -> set[str]:
    """Full Body turned off: a body root still holding what a solve wrote goes back home; the store goes.
    Returns the channel names changed in `channels` (the caller writes them)."""
    name = obj.get(BONE_KEY)
    if not isinstance(name, str):
        return set()
    stored = _stored(obj, name)
    for key in (KEY, BONE_KEY):
        if obj.get(key) is not None:
            del obj[key]
    _homes.pop(obj.session_uid, None)
    pbs = obj.pose.bones
    if stored is None or name not in pbs or channels is None:
        return set()
    b = pbs.find(name)
    mode = int(armature.rotation_mode_values(obj)[b])
    if "location" not in channels:
        channels["location"] = armature.read_channels(obj, (("location", 3),))["location"]
    now = _raw(channels, b, mode)
    if stored[WRITTEN_LOC].tobytes() + stored[WRITTEN_ROT].tobytes() != now.tobytes():
        return set()  # posed or keyed since: that is its pose now
    channels["location"][b] = stored[HOME_LOC]
    return {"location"} | fk.put_raw_rotations(channels, [b], [mode], stored[HOME_ROT][None])


def forget(obj: bpy.types.Object) -> None:
    """Drop the stored home (a bake keyed the body root: its keys are its pose now)."""
    for key in (KEY, BONE_KEY):
        if obj.get(key) is not None:
            del obj[key]
    _homes.pop(obj.session_uid, None)


def set_up_body(obj: bpy.types.Object, hips: str, made: list[tuple[str, str]]) -> str:
    """Full Body for a character the set-up just made chains for (`made`: (tip bone, planned name) of each):
    legs pinned, every other chain pulling, the hips as the body root. Nothing moves: every control sits on
    its chain's tip. Returns the report's words."""
    s = rig_settings(obj)
    s.body_root = hips
    pinned = {tip for tip, name in made if name.startswith("leg.")}
    for ch in s.chains:
        if ch.tip_bone in pinned:
            ch.pin = True
    s.full_body = True
    return f"Full Body: legs pinned, '{hips}' the body root"


def carrier_bones(sk: Skeleton, plan: Plan) -> list[int]:
    """Bones of the chains that carry other chains (the spine): the body bends them (`core/body.py`)."""
    roots = [c.bones[0] for g in plan.groups for c in g.chains]
    above = {a for r in roots for a in sk.ancestors(r)}
    return list(dict.fromkeys(b for g in plan.groups if any(x in above for x in g.bones) for b in g.bones))


def fk_start(frame: fk.Frame, bones: list[int]) -> dict[int, F64]:
    """The FK pose of `bones` (those of `frame`, the FK pose worked out for this update) as presets: with
    Start From 'Current' a full-body solve starts the spine from it every update, as it starts the root from
    its home, so what the body does is a function of the targets and the animation alone (bake = live)."""
    rows = {b: k for k, b in enumerate(frame.bones)}
    use = [b for b in bones if b in rows]
    if not use:
        return {}
    basis = fk.basis_rotations(frame.fk_rot[[rows[b] for b in use]], [frame.modes[rows[b]] for b in use])
    return {b: basis[k][None] for k, b in enumerate(use)}


def bake_fk_start(
    obj: bpy.types.Object, sk: Skeleton, plan: Plan, channels: armature.Channels, frames: int
) -> dict[int, F64]:
    """`fk_start` for a bake of `frames` frames: the spine's FK pose as the channels hold it now (the stored
    FK value where they still hold what was written), in every frame; bones whose rotation is keyed start
    from each frame's own pose (their keys are their FK pose there)."""
    bones = carrier_bones(sk, plan)
    ad = obj.animation_data
    keyed: set[str] = set()
    if ad is not None and ad.action is not None:
        keyed = {fc.data_path for fc in anim.all_fcurves(ad.action, obj) if ".rotation_" in fc.data_path}
    pbs = obj.pose.bones
    bones = [
        b
        for b in bones
        if not any(p.startswith(f'pose.bones["{bpy.utils.escape_identifier(pbs[b].name)}"].') for p in keyed)
    ]
    if not bones:
        return {}
    modes = armature.rotation_mode_values(obj)
    names = [sk.names[b] for b in bones]
    bone_modes = modes[bones].tolist()
    rot = fk.raw_rotations(channels, bones, bone_modes)
    fk_rot, _sy = fk.Store.read(obj).fk(names, bone_modes, rot, channels["scale"][bones, 1].copy())
    basis = fk.basis_rotations(fk_rot, bone_modes)
    return {b: np.repeat(basis[k][None], frames, axis=0) for k, b in enumerate(bones)}
