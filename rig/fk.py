"""The FK pose of chain bones: what their rotation channels (and a stretching chain's Y scale) would hold
without Reach IK, kept so that Influence can blend with it and turning a chain off gives it back exactly.

The rule (README, "IK and FK"): a chain bone's FK value is its channel's value whenever that value is not
the one Reach IK last wrote there; while the channel still holds exactly what Reach IK wrote, the FK value is
the one stored when it wrote. Animation (F-Curves, NLA, drivers, as Blender evaluates them on a frame change),
posing by hand, typing a value, a pose asset or a script all set the channel itself, so any of them makes it
differ from what was written, and that value becomes the FK value. An IK result is only ever written, never
taken for FK: the store compares exact float32 bytes.

What was written is stored with the FK value in the armature object itself (`_reach_ik_fk`, an ID property
hidden from the Custom Properties panel by its leading underscore, and `_reach_ik_fk_bones`, the bone names
as JSON), so undo, redo, save, reload, append and duplicate carry both together, in step with the channels.

Library overrides (bpy 4.5.4 and 5.2.3, measured; tests/blender/test_ikfk_library.py). An override starts
with the library's store (ID properties are copied with the object) and Reach IK keeps it up to date there as
on a local object. What a save keeps of it is Blender's choice: on reload the override is rebuilt from the
library and only the differences recorded as override operations are applied again, and Blender records one
for an ID property only when the property is library-overridable, exists in the library's object, and (an
array) has the same length there. So:
- Every write marks both properties library-overridable (`_overridable`; also on a local object, so a
  library saved from it carries the flag) and updates the rows in place while their count stays the same.
  The override's store is then saved and reloaded with it, as its channels are. Without the flag the reload
  brings back the library's store, and the override's IK results in its saved channels, no longer what the
  store says was written, would be taken for FK. A library saved before this flag existed works too: the
  override sets the flag on its copy before writing.
- The store cannot be kept when the library's object has none (none of its chains had solved, or all were
  disabled, when the library was saved) or when its row count differs from the library's (chains added,
  removed, disabled or lengthened on the override cover other bones). The reload then brings back the
  library's rows, or no store at all; with the override's names (a string is kept at any length) they are
  out of step, `Store.read` reads no store, and every chain bone's channel as saved becomes its FK value: at
  Influence 1, the IK result shown when the file was saved. That is the worst case; the library's stored
  values are never paired with the override's names or channels.
- Bones whose channels the override left equal to the library's get no override operation, so they follow
  the library file: if it is later saved with a new pose that Reach IK solved there, the override shows that
  pose's values after reload, and since its store says it wrote something else, they are taken for FK.
- A system override (one Blender made for the hierarchy, not made editable) is not solved at all
  (`chains.rig_problem`): Blender ignores writes to its channels through `foreach_set`, so a solve would note as
  written what never reached them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import convert
from ..core.model import Inputs, Plan
from . import anim, armature, cache
from .props import rig_settings

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]
Channels = dict[str, F32]

ROWS_KEY = "_reach_ik_fk"
NAMES_KEY = "_reach_ik_fk_bones"
# One row per bone: rotation mode (its enum value), FK rotation (4), FK Y scale, written rotation (4),
# written Y scale. A rotation is stored raw, as its mode's channel holds it: quaternion w x y z, Euler x y z
# (and a 0), axis-angle angle x y z. Float32, as the channels themselves: comparisons are exact.
MODE, FK, FK_SY, WRITTEN, WRITTEN_SY = 0, slice(1, 5), 5, slice(6, 10), 10
WIDTH = 11

_QUAT = next(v for v, m in armature.MODE_NAMES.items() if m == "QUATERNION")
_AXIS = next(v for v, m in armature.MODE_NAMES.items() if m == "AXIS_ANGLE")


def _by_channel(modes: NDArray[np.int64]) -> list[tuple[str, NDArray[np.bool_], int]]:
    """(channel name, rows in that channel's mode, width) for the rotation channels present in `modes`."""
    quat, axis = modes == _QUAT, modes == _AXIS
    out = [("rotation_quaternion", quat, 4), ("rotation_axis_angle", axis, 4), ("rotation_euler", ~(quat | axis), 3)]
    return [(attr, rows, width) for attr, rows, width in out if rows.any()]


def raw_rotations(channels: Channels, bones: Sequence[int], modes: Sequence[int]) -> F32:
    """(n, 4) each bone's rotation as its own mode's channel holds it (Euler padded with a 0)."""
    idx = np.asarray(bones, dtype=np.int64)
    out = np.zeros((len(idx), 4), dtype=np.float32)
    for attr, rows, width in _by_channel(np.asarray(modes, dtype=np.int64)):
        out[rows, :width] = channels[attr][idx[rows]]
    return out


def put_raw_rotations(channels: Channels, bones: Sequence[int], modes: Sequence[int], values: F32) -> set[str]:
    """Set rows of `channels` to raw rotations `values` (n, 4); returns the channel names that changed."""
    idx = np.asarray(bones, dtype=np.int64)
    changed: set[str] = set()
    for attr, rows, width in _by_channel(np.asarray(modes, dtype=np.int64)):
        new = values[rows, :width]
        if channels[attr][idx[rows]].tobytes() != new.tobytes():
            channels[attr][idx[rows]] = new
            changed.add(attr)
    return changed


def basis_rotations(raw: F32, modes: Sequence[int]) -> F64:
    """(n, 3, 3) rotation matrices of raw rotations (n, 4) in their modes (as Blender builds matrix_basis)."""
    out = np.empty((len(modes), 3, 3))
    values = raw.astype(np.float64)
    mode_array = np.asarray(modes, dtype=np.int64)
    quat, axis = mode_array == _QUAT, mode_array == _AXIS
    if quat.any():
        q = values[quat]
        out[quat] = convert.quaternion_to_matrix(q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-300))
    if axis.any():
        angle, vec = values[axis, 0], values[axis, 1:]
        norm = np.linalg.norm(vec, axis=1, keepdims=True)
        # Blender's axis-angle with a zero axis is no rotation (`axis_angle_to_mat3`), whatever the angle, as
        # `armature.basis_matrix` takes it.
        unit = vec / np.maximum(norm, 1e-300)
        half = 0.5 * angle * (norm[:, 0] > 0.0)
        q = np.concatenate([np.cos(half)[:, None], np.sin(half)[:, None] * unit], axis=1)
        out[axis] = convert.quaternion_to_matrix(q)
    for m in np.unique(mode_array[~(quat | axis)]).tolist():
        rows = mode_array == m
        out[rows] = convert.euler_to_matrix(values[rows, :3], armature.MODE_NAMES[m])
    return out


def has_store(obj: bpy.types.Object) -> bool:
    """Whether `obj` holds FK values (a cheap test: one ID property lookup)."""
    return obj.get(ROWS_KEY) is not None


def bits(a: F32) -> NDArray[np.uint32]:
    """Float32 values as their bit patterns: equal exactly when the bytes are (NaN, -0.0 included)."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def array_of(prop: object) -> F32 | None:
    """A float32 array property's values as a writable view of its own buffer; None when it is not one."""
    if prop is None:
        return None
    try:
        view: NDArray[Any] = np.asarray(memoryview(prop))  # type: ignore[arg-type]
    except TypeError:
        return None
    if view.dtype != np.float32 or view.ndim != 1:
        return None
    out: F32 = view
    return out


def _overridable(obj: bpy.types.Object, key: str) -> None:
    """Mark the ID property `key` of `obj` library-overridable (see the module docstring, "Library overrides").

    Without the flag a library override saves no change to it: on reload the override gets the library's
    value back (bpy 4.5.4 and 5.2.3, measured), and an IK result the override wrote would be taken for FK.
    """
    path = f'["{key}"]'
    if not obj.is_property_overridable_library(path):
        obj.property_overridable_library_set(path, True)


@dataclass
class Store:
    """An armature's stored FK and written values, by bone name (see the module docstring)."""

    names: list[str] = field(default_factory=list)
    rows: F32 = field(default_factory=lambda: np.zeros((0, WIDTH), dtype=np.float32))
    changed: bool = False
    names_text: str | None = None  # the names as stored (JSON), or None when they changed since
    index: dict[str, int] = field(default_factory=dict)  # name -> row (built from `names` when not given)

    def __post_init__(self) -> None:
        if len(self.index) != len(self.names):
            self.index = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def read(cls, obj: bpy.types.Object) -> Store:
        text = obj.get(NAMES_KEY)
        if not isinstance(text, str):
            return cls()  # none stored yet: every channel is FK
        try:
            parsed = cache.fk_names.get(obj.session_uid)
            if parsed is not None and parsed[0] == text:
                names, index = parsed[1], parsed[2]  # the same names as last time: no JSON parse
            else:
                names = json.loads(text)
                index = None
            rows = np.array(memoryview(obj[ROWS_KEY]), dtype=np.float32).reshape(-1, WIDTH)
        except (KeyError, TypeError, ValueError):
            return cls()  # not ours, or damaged: every channel is FK
        if len(rows) != len(names) or (index is None and not all(isinstance(n, str) for n in names)):
            return cls()
        if index is not None:
            # The cached list and index themselves (checked when parsed): `_rows_of` copies them before it
            # adds a name, and `drop` builds new ones, so the cache never changes under a store.
            return cls(names, rows, names_text=text, index=index)
        store = cls(list(names), rows, names_text=text)
        cache.fk_names[obj.session_uid] = (text, list(names), dict(store.index))
        return store

    def write(self, obj: bpy.types.Object) -> None:
        """Store the rows in `obj` if they changed (an ID property write: no depsgraph update, no undo step)."""
        if not self.changed:
            return
        if not self.names:
            for key in (ROWS_KEY, NAMES_KEY):
                if obj.get(key) is not None:
                    del obj[key]
        else:
            if self.names_text is None:
                self.names_text = json.dumps(self.names)
                if not isinstance(obj.get(NAMES_KEY), str):
                    obj.pop(NAMES_KEY, None)  # damaged: a flagged property keeps its type on assignment
                obj[NAMES_KEY] = self.names_text
            flat = np.ascontiguousarray(self.rows, dtype=np.float32).ravel()
            held = array_of(obj.get(ROWS_KEY))
            if held is not None and held.shape == flat.shape:
                # In place, through the property's own buffer: assigning a numpy array to an existing property
                # that is library-overridable raises TypeError, and assigning one of another length to any
                # existing array property keeps its old length (bpy 4.5.4 and 5.2.3, measured).
                held[:] = flat
            else:
                obj.pop(ROWS_KEY, None)
                obj[ROWS_KEY] = flat
            for key in (ROWS_KEY, NAMES_KEY):
                _overridable(obj, key)
        self.changed = False

    def _rows_of(self, names: Sequence[str]) -> NDArray[np.int64]:
        """Each name's row, new rows added (zeroed) for names not stored yet."""
        get = self.index.get
        found = [get(n, -1) for n in names]
        if -1 in found:
            # New lists: the ones read may be shared with the session cache (`read`).
            self.names, self.index = list(self.names), dict(self.index)
            start = len(self.names)
            for r, n in enumerate(names):
                if found[r] == -1 and n not in self.index:
                    self.index[n] = len(self.names)
                    self.names.append(n)
                found[r] = self.index[n]
            self.rows = np.concatenate([self.rows, np.zeros((len(self.names) - start, WIDTH), dtype=np.float32)])
            self.names_text = None
        return np.asarray(found, dtype=np.int64)

    def fk(self, names: Sequence[str], modes: Sequence[int], rot: F32, sy: F32) -> tuple[F32, F32]:
        """The FK rotations (n, 4) and Y scales (n,) of bones whose channels now hold `rot` and `sy`.

        Where a channel is not what was last written (or nothing was), the channel is the FK value, and the
        store takes it; otherwise the stored FK value stands.
        """
        known = len(self.names)
        idx = self._rows_of(names)
        rows = self.rows[idx]
        ours = (
            (idx < known)
            & (rows[:, MODE] == np.asarray(modes, dtype=np.float32))
            & (bits(rows[:, WRITTEN]) == bits(rot)).all(axis=1)
            & (bits(rows[:, WRITTEN_SY]) == bits(sy))
        )
        if not ours.all():
            self._take(idx[~ours], np.asarray(modes, dtype=np.float32)[~ours], rot[~ours], sy[~ours])
        return self.rows[idx, FK].copy(), self.rows[idx, FK_SY].copy()

    def set_fk(self, name: str, mode: int, rot: F32, sy: float | np.float32) -> None:
        """The FK value of `name` is `rot`, `sy`, which its channels hold now (written = FK)."""
        self._take(self._rows_of([name]), np.float32(mode), rot, np.float32(sy))

    def _take(self, idx: NDArray[np.int64], modes: F32 | np.float32, rot: F32, sy: F32 | np.float32) -> None:
        """Rows `idx` hold channel values that are the FK values: FK = written = those values."""
        self.rows[idx, MODE] = modes
        self.rows[idx, FK] = self.rows[idx, WRITTEN] = rot
        self.rows[idx, FK_SY] = self.rows[idx, WRITTEN_SY] = sy
        self.changed = True

    def wrote(self, names: Sequence[str], rot: F32, sy: F32) -> None:
        """What the channels of `names` (already in the store) hold after Reach IK wrote them."""
        idx = self._rows_of(names)
        same = (bits(self.rows[idx, WRITTEN]) == bits(rot)).all(axis=1) & (bits(self.rows[idx, WRITTEN_SY]) == bits(sy))
        if not same.all():
            self.rows[idx, WRITTEN] = rot
            self.rows[idx, WRITTEN_SY] = sy
            self.changed = True

    def drop(self, names: Iterable[str]) -> None:
        gone = set(names) & set(self.index)
        if not gone:
            return
        keep = [i for i, n in enumerate(self.names) if n not in gone]
        self.names = [self.names[i] for i in keep]
        self.rows = self.rows[keep]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.names_text = None
        self.changed = True


def restore(
    store: Store,
    index: dict[str, int],
    modes: NDArray[np.int32],
    channels: Channels,
    keep: set[str],
    given: list[int] | None = None,
) -> set[str]:
    """Give the stored bones not in `keep` (bones of no enabled chain) their FK values back, and forget them.

    A bone whose channels no longer hold what Reach IK wrote already shows its FK value (set since), and
    keeps it. `index`: bone name -> row of `channels` and `modes` (every bone's rotation mode value).
    Returns the channel names changed in `channels` (the caller writes them); `given` collects the bones
    whose channels changed.
    """
    gone = [n for n in store.names if n not in keep]
    if not gone:
        return set()
    changed: set[str] = set()
    for name in gone:
        b = index.get(name)
        row = store.rows[store.index[name]]
        if b is None:
            continue  # the bone is gone (renamed or deleted): nothing to give back
        mode = int(modes[b])
        now = raw_rotations(channels, [b], [mode])
        if int(row[MODE]) != mode or now[0].tobytes() != row[WRITTEN].tobytes():
            continue  # set by something else since Reach IK wrote: that is the FK value now
        moved = put_raw_rotations(channels, [b], [mode], row[FK][None])
        if channels["scale"][b, 1] == row[WRITTEN_SY] and channels["scale"][b, 1] != row[FK_SY]:
            channels["scale"][b, 1] = row[FK_SY]
            moved.add("scale")
        if moved and given is not None:
            given.append(b)
        changed |= moved
    store.drop(gone)
    return changed


def chain_bone_names(obj: bpy.types.Object, tip: str, length: int) -> list[str]:
    """The bones of a chain (root first) as its tip and length name them; [] when they name none."""
    pbs = obj.pose.bones
    pb = pbs.get(tip) if tip else None
    line: list[str] = []
    while pb is not None:
        line.append(pb.name)
        pb = pb.parent
    n = len(line) if int(length) == 0 else int(length)
    if not line or n > len(line):
        return []
    return list(reversed(line[:n]))


def enabled_chain_bones(obj: bpy.types.Object) -> set[str] | None:
    """Bones of every enabled chain of `obj`; None when an enabled chain names no bones (its tip is missing):
    then nobody can tell which stored bones are free, and none is given back."""

    out: set[str] = set()
    for ch in rig_settings(obj).chains:
        if not ch.enabled:
            continue
        names = chain_bone_names(obj, ch.tip_bone, ch.chain_length)
        if not names:
            return None
        out.update(names)
    return out


def apply_current(obj: bpy.types.Object, names: Iterable[str]) -> None:
    """The pose the bones `names` show now becomes their FK pose ("Apply IK to FK")."""
    store = Store.read(obj)
    channels = armature.read_channels(obj, armature.WRITTEN_CHANNELS)
    modes = armature.rotation_mode_values(obj)
    index = armature.skeleton(obj).index
    for name in names:
        b = index.get(name)
        if b is None:
            continue
        mode = int(modes[b])
        store.set_fk(name, mode, raw_rotations(channels, [b], [mode])[0], channels["scale"][b, 1])
    store.write(obj)


@dataclass
class Frame:
    """The FK pose of the planned chains' bones in one frame, and what a write must do with it."""

    names: list[str]
    bones: list[int]
    modes: list[int]
    fk_rot: F32  # (n, 4) raw FK rotations
    fk_sy: F32  # (n,) FK Y scales
    exact: list[int] = field(default_factory=list)  # rows of bones shown at Influence 0: written as FK, exactly


def influences(obj: bpy.types.Object, plan: Plan, read: Sequence[float] | None = None) -> dict[int, float]:
    """Each planned chain's Influence as set now (`read`: every chain's, already read in chain order; a
    script can store NaN: read as 1, pure IK)."""

    if read is None:
        read = [ch.influence for ch in rig_settings(obj).chains]
    out = {}
    for g in plan.groups:
        for c in g.chains:
            w = float(read[c.index])
            out[c.index] = min(max(w, 0.0), 1.0) if w == w else 1.0
    return out


def fill(
    plan: Plan,
    sk_names: Sequence[str],
    modes: NDArray[np.int32],
    channels: Channels,
    store: Store,
    weights: dict[int, float],
    inputs: Inputs,
    every: bool = False,
) -> Frame:
    """Work out the FK pose of the planned bones from `channels` (updating `store`, see `Store.fk`), and put
    the Influence and FK basis of the blended chains into `inputs` (one frame; `every`: every chain, even at
    Influence 1, so frames read one by one stack alike: a bake)."""
    bones = list(dict.fromkeys(b for g in plan.groups for b in g.bones))
    names = [sk_names[b] for b in bones]
    bone_modes = modes[bones].tolist()
    rot = raw_rotations(channels, bones, bone_modes)
    sy = channels["scale"][bones, 1].copy()
    fk_rot, fk_sy = store.fk(names, bone_modes, rot, sy)
    frame = Frame(names, bones, bone_modes, fk_rot, fk_sy)
    chains = [c for g in plan.groups for c in g.chains if every or weights.get(c.index, 1.0) < 1.0]
    if not chains:
        return frame  # pure IK everywhere (the common case): nothing to blend
    row = {b: r for r, b in enumerate(bones)}
    blended = list(dict.fromkeys(b for c in chains for b in c.bones))
    rows = [row[b] for b in blended]
    basis = basis_rotations(fk_rot[rows], [bone_modes[r] for r in rows])
    for k, b in enumerate(blended):
        inputs.fk[b] = basis[k][None]
        inputs.fk_scale[b] = fk_sy[rows[k] : rows[k] + 1].astype(np.float64)
    for c in chains:
        inputs.influence[c.index] = np.array([weights.get(c.index, 1.0)])
    # Bones every chain through which is at Influence 0 show their FK values themselves.
    most: dict[int, float] = {}
    for g in plan.groups:
        for c in g.chains:
            for b in c.bones:
                most[b] = max(most.get(b, 0.0), weights.get(c.index, 1.0))
    frame.exact = [row[b] for b in bones if most.get(b, 1.0) <= 0.0]
    return frame


def written(frame: Frame, store: Store, channels: Channels, solved: set[int]) -> set[str]:
    """After a solve put its rotations into `channels`: give Influence-0 bones of chains it solved (`solved`:
    their bones) their exact FK values, and note in `store` what the channels of the planned bones hold.
    Returns the channel names changed."""
    changed: set[str] = set()
    rows = [r for r in frame.exact if frame.bones[r] in solved]
    if rows:
        bones = [frame.bones[r] for r in rows]
        changed |= put_raw_rotations(channels, bones, [frame.modes[r] for r in rows], frame.fk_rot[rows])
        scale = channels["scale"]
        for r, b in zip(rows, bones, strict=True):
            if scale[b, 1].tobytes() != frame.fk_sy[r].tobytes():
                scale[b, 1] = frame.fk_sy[r]
                changed.add("scale")
    store.wrote(
        frame.names, raw_rotations(channels, frame.bones, frame.modes), channels["scale"][frame.bones, 1].copy()
    )
    return changed


def follow_renames(obj: bpy.types.Object, names: dict[str, int]) -> None:
    """Give the stored rows of bones renamed in this session (`cache.renamed`) their new names, so turning a
    chain off after renaming one of its bones still gives its FK pose back. `names`: the bones now."""
    table = cache.renamed.get(obj.data.as_pointer())
    if not table or not has_store(obj):
        return
    store = Store.read(obj)
    moved = {}
    for old in store.names:
        new = table.get(old)
        if old not in names and new is not None and new in names and new not in store.index:
            moved[old] = new
    if moved:
        store.names = [moved.get(n, n) for n in store.names]
        store.index = {n: i for i, n in enumerate(store.names)}
        store.names_text = None
        store.changed = True
        store.write(obj)
    stretched = cache.stretched.get(obj.session_uid)
    if stretched:
        for old, new in table.items():
            if old in stretched and old not in names and new in names:
                stretched[new] = stretched.pop(old)


def release(obj: bpy.types.Object) -> None:
    """Give back the FK values of stored bones no enabled chain drives (a rig with Live off, or no chains)."""
    if not has_store(obj):
        return
    store = Store.read(obj)
    keep = enabled_chain_bones(obj)
    if keep is None or all(n in keep for n in store.names):
        return
    index = armature.skeleton(obj).index
    if any(n not in index for n in store.names):
        follow_renames(obj, index)
        store = Store.read(obj)
    channels = armature.read_channels(obj, armature.WRITTEN_CHANNELS)
    changed = restore(store, index, armature.rotation_mode_values(obj), channels, keep)
    armature.write_channels(obj, channels, changed)
    store.write(obj)


def fk_values(obj: bpy.types.Object, names: Sequence[str], bones: Sequence[int], channels: Channels) -> tuple[F32, F32]:
    """The FK rotations (n, 4), raw in each bone's mode, and Y scales (n,) of `bones` whose channels hold
    `channels`, by the store's rule (`Store.fk`; nothing is written)."""
    modes = armature.rotation_mode_values(obj)[list(bones)].tolist()
    raw = raw_rotations(channels, bones, modes)
    return Store.read(obj).fk([names[b] for b in bones], modes, raw, channels["scale"][list(bones), 1].copy())


def start_over(obj: bpy.types.Object) -> bool:
    """Put the FK values back into the rotation channels of the enabled chains' bones that no animation sets,
    before the playback range's first frame is evaluated (`rig.live.on_frame_change_pre`); whether any
    channel changed.

    Such a bone starts each frame from the result of the frame shown before it (Start From 'Current'). From
    its first frame, playback therefore starts where the bake starts it (`rig.bake_order`: the FK pose there),
    on every loop, whatever frame was shown before: playback, renders and bakes show the same poses, and the
    frames solved ahead (`rig.lookahead`) follow on from it. The FK values stay what they were (the channels
    now hold them, which the store's rule reads as FK).
    """
    if not has_store(obj):
        return False  # Reach IK never wrote a channel: every channel holds its FK value
    chain_names = enabled_chain_bones(obj)
    if not chain_names:
        return False
    store = Store.read(obj)
    animated = anim.animated_rotations(obj)
    sk = armature.skeleton(obj)
    # Bones the store knows (a bone Reach IK never wrote holds its FK value already).
    bones = sorted(sk.index[n] for n in chain_names if n not in animated and n in sk.index and n in store.index)
    if not bones:
        return False
    channels = armature.read_channels(obj, armature.WRITTEN_CHANNELS)
    fk_rot, fk_sy = fk_values(obj, sk.names, bones, channels)
    changed = put_raw_rotations(channels, bones, armature.rotation_mode_values(obj)[bones].tolist(), fk_rot)
    # And a stretching chain's Y scale: the pair is one FK value (a rotation put back beside a stretched
    # scale would make the store take that scale for FK).
    idx = np.asarray(bones, dtype=np.int64)
    if channels["scale"][idx, 1].tobytes() != fk_sy.tobytes():
        channels["scale"][idx, 1] = fk_sy
        changed.add("scale")
    armature.write_channels(obj, channels, changed)
    return bool(changed)
