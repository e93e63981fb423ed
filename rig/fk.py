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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import convert
from ..core.model import Inputs, Plan
from . import armature

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


def raw_rotations(channels: Channels, bones: Sequence[int], modes: Sequence[int]) -> F32:
    """(n, 4) each bone's rotation as its own mode's channel holds it (Euler padded with a 0)."""
    out = np.zeros((len(bones), 4), dtype=np.float32)
    for r, (b, m) in enumerate(zip(bones, modes, strict=True)):
        if m == _QUAT:
            out[r] = channels["rotation_quaternion"][b]
        elif m == _AXIS:
            out[r] = channels["rotation_axis_angle"][b]
        else:
            out[r, :3] = channels["rotation_euler"][b]
    return out


def put_raw_rotations(channels: Channels, bones: Sequence[int], modes: Sequence[int], values: F32) -> set[str]:
    """Set rows of `channels` to raw rotations `values` (n, 4); returns the channel names that changed."""
    changed: set[str] = set()
    for r, (b, m) in enumerate(zip(bones, modes, strict=True)):
        if m == _QUAT:
            attr, new = "rotation_quaternion", values[r]
        elif m == _AXIS:
            attr, new = "rotation_axis_angle", values[r]
        else:
            attr, new = "rotation_euler", values[r, :3]
        row = channels[attr][b]
        if row.tobytes() != new.tobytes():
            row[:] = new
            changed.add(attr)
    return changed


def basis_rotations(raw: F32, modes: Sequence[int]) -> F64:
    """(n, 3, 3) rotation matrices of raw rotations (n, 4) in their modes (as Blender builds matrix_basis)."""
    out = np.empty((len(modes), 3, 3))
    values = raw.astype(np.float64)
    for r, m in enumerate(modes):
        if m == _QUAT:
            q = values[r]
        elif m == _AXIS:
            angle, axis = values[r, 0], values[r, 1:]
            norm = float(np.linalg.norm(axis))
            # Blender's axis-angle with a zero axis is no rotation.
            axis = axis / norm if norm > 0.0 else np.array([0.0, 1.0, 0.0])
            q = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
        else:
            out[r] = convert.euler_to_matrix(values[r : r + 1, :3], armature.MODE_NAMES[m])[0]
            continue
        out[r] = convert.quaternion_to_matrix(q[None] / max(float(np.linalg.norm(q)), 1e-300))[0]
    return out


def has_store(obj: bpy.types.Object) -> bool:
    """Whether `obj` holds FK values (a cheap test: one ID property lookup)."""
    return obj.get(ROWS_KEY) is not None


@dataclass
class Store:
    """An armature's stored FK and written values, by bone name (see the module docstring)."""

    names: list[str] = field(default_factory=list)
    rows: F32 = field(default_factory=lambda: np.zeros((0, WIDTH), dtype=np.float32))
    changed: bool = False

    def __post_init__(self) -> None:
        self.index = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def read(cls, obj: bpy.types.Object) -> Store:
        try:
            names = json.loads(obj.get(NAMES_KEY, "[]"))
            rows = np.array(memoryview(obj[ROWS_KEY]), dtype=np.float32).reshape(-1, WIDTH) if names else None
        except (KeyError, TypeError, ValueError):
            return cls()  # none stored yet (or not ours): every channel is FK
        if rows is None or len(rows) != len(names) or not all(isinstance(n, str) for n in names):
            return cls()
        return cls(list(names), rows)

    def write(self, obj: bpy.types.Object) -> None:
        """Store the rows in `obj` if they changed (an ID property write: no depsgraph update, no undo step)."""
        if not self.changed:
            return
        if not self.names:
            for key in (ROWS_KEY, NAMES_KEY):
                if obj.get(key) is not None:
                    del obj[key]
        else:
            names = json.dumps(self.names)
            if obj.get(NAMES_KEY) != names:
                obj[NAMES_KEY] = names
            flat = np.ascontiguousarray(self.rows).ravel()
            old = obj.get(ROWS_KEY)
            if old is not None and len(old) != flat.size:
                # Assigning an array of another length to an existing array property keeps its old length
                # (bpy 4.5, measured): replace it instead.
                del obj[ROWS_KEY]
            obj[ROWS_KEY] = flat
        self.changed = False

    def _row(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = len(self.names)
            self.names.append(name)
            self.index[name] = i
            self.rows = np.concatenate([self.rows, np.zeros((1, WIDTH), dtype=np.float32)])
        return i

    def fk(self, names: Sequence[str], modes: Sequence[int], rot: F32, sy: F32) -> tuple[F32, F32]:
        """The FK rotations (n, 4) and Y scales (n,) of bones whose channels now hold `rot` and `sy`.

        Where a channel is not what was last written (or nothing was), the channel is the FK value, and the
        store takes it; otherwise the stored FK value stands.
        """
        fk_rot, fk_sy = rot.copy(), sy.copy()
        for r, (name, mode) in enumerate(zip(names, modes, strict=True)):
            i = self.index.get(name)
            row = self.rows[i] if i is not None else None
            if (
                row is not None
                and row[MODE] == mode
                and row[WRITTEN].tobytes() == rot[r].tobytes()
                and row[WRITTEN_SY : WRITTEN_SY + 1].tobytes() == sy[r : r + 1].tobytes()
            ):
                fk_rot[r], fk_sy[r] = row[FK], row[FK_SY]
                continue
            self.set_fk(name, mode, rot[r], sy[r])
        return fk_rot, fk_sy

    def set_fk(self, name: str, mode: int, rot: F32, sy: float | np.float32) -> None:
        """The FK value of `name` is `rot`, `sy`, which its channels hold now (written = FK)."""
        i = self._row(name)
        row = self.rows[i]
        row[MODE] = mode
        row[FK] = rot
        row[WRITTEN] = rot
        row[FK_SY] = row[WRITTEN_SY] = sy
        self.changed = True

    def wrote(self, names: Sequence[str], rot: F32, sy: F32) -> None:
        """What the channels of `names` (already in the store) hold after Reach IK wrote them."""
        for r, name in enumerate(names):
            row = self.rows[self.index[name]]
            if row[WRITTEN].tobytes() != rot[r].tobytes() or row[WRITTEN_SY] != sy[r]:
                row[WRITTEN] = rot[r]
                row[WRITTEN_SY] = sy[r]
                self.changed = True

    def drop(self, names: Iterable[str]) -> None:
        gone = set(names) & set(self.index)
        if not gone:
            return
        keep = [i for i, n in enumerate(self.names) if n not in gone]
        self.names = [self.names[i] for i in keep]
        self.rows = self.rows[keep]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.changed = True


def restore(
    store: Store, index: dict[str, int], modes: NDArray[np.int32], channels: Channels, keep: set[str]
) -> set[str]:
    """Give the stored bones not in `keep` (bones of no enabled chain) their FK values back, and forget them.

    A bone whose channels no longer hold what Reach IK wrote already shows its FK value (set since), and
    keeps it. `index`: bone name -> row of `channels` and `modes` (every bone's rotation mode value).
    Returns the channel names changed in `channels` (the caller writes them).
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
        changed |= put_raw_rotations(channels, [b], [mode], row[FK][None])
        if channels["scale"][b, 1] == row[WRITTEN_SY] and channels["scale"][b, 1] != row[FK_SY]:
            channels["scale"][b, 1] = row[FK_SY]
            changed.add("scale")
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
    from .props import rig_settings

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
    pbs = obj.pose.bones
    channels = armature.read_channels(obj, (*armature.ROTATION_CHANNELS, ("scale", 3)))
    modes = armature.rotation_mode_values(obj)
    index = {pb.name: i for i, pb in enumerate(pbs)}
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


def influences(obj: bpy.types.Object, plan: Plan) -> dict[int, float]:
    """Each planned chain's Influence as set now (a script can store NaN: read as 1, pure IK)."""
    from .props import rig_settings

    settings = rig_settings(obj).chains
    out = {}
    for g in plan.groups:
        for c in g.chains:
            w = float(settings[c.index].influence)
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
    row = {b: r for r, b in enumerate(bones)}
    blended = {b for g in plan.groups for c in g.chains if every or weights.get(c.index, 1.0) < 1.0 for b in c.bones}
    if blended:
        rows = [row[b] for b in bones if b in blended]
        basis = basis_rotations(fk_rot[rows], [bone_modes[r] for r in rows])
        for k, r in enumerate(rows):
            inputs.fk[bones[r]] = basis[k][None]
        for g in plan.groups:
            for c in g.chains:
                w = weights.get(c.index, 1.0)
                if every or w < 1.0:
                    inputs.influence[c.index] = np.array([w])
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


def release(obj: bpy.types.Object) -> None:
    """Give back the FK values of stored bones no enabled chain drives (a rig with Live off, or no chains)."""
    if not has_store(obj):
        return
    store = Store.read(obj)
    keep = enabled_chain_bones(obj)
    if keep is None or all(n in keep for n in store.names):
        return
    channels = armature.read_channels(obj, (*armature.ROTATION_CHANNELS, ("scale", 3)))
    index = {pb.name: i for i, pb in enumerate(obj.pose.bones)}
    changed = restore(store, index, armature.rotation_mode_values(obj), channels, keep)
    armature.write_channels(obj, channels, changed)
    store.write(obj)
