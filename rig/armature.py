"""Read an armature's hierarchy, rest pose and current pose into numpy arrays, and write rotations back.

All bulk access goes through `foreach_get`/`foreach_set` on float32 buffers (BLENDER_NOTES: float64 is
2.5-10x slower). Matrices come out of Blender column-major and are transposed here once. Bone indices are
those of `obj.pose.bones`; the rest data is permuted into that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import bpy
import numpy as np
from mathutils import Euler, Matrix
from numpy.typing import NDArray

from ..core import convert
from ..core.live import basis_matrix as basis_matrix  # re-exported: the rig layer builds matrix_basis with it
from ..core.model import FULL, INHERIT_SCALE, Skeleton
from ..core.model import rotation_channel as rotation_channel  # re-exported: the rig layer's channel of a mode
from . import cache

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Channels = dict[str, NDArray[np.float32]]


def _raw_matrices(collection: bpy.types.bpy_prop_collection, attr: str, n: int) -> NDArray[np.float32]:  # type: ignore[type-arg]
    buf = np.empty(n * 16, dtype=np.float32)
    collection.foreach_get(attr, buf)
    return buf


def _matrices(collection: bpy.types.bpy_prop_collection, attr: str, n: int) -> F64:  # type: ignore[type-arg]
    # foreach_get('matrix') is column-major: transpose once to numpy's row-major convention.
    return _raw_matrices(collection, attr, n).reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)


# Blender's enum values of Bone.inherit_scale (foreach_get reads enums as their integer values) -> our codes.
_SCALE_ITEMS = bpy.types.Bone.bl_rna.properties["inherit_scale"].enum_items  # type: ignore[attr-defined]
_FULL_SCALE = _SCALE_ITEMS["FULL"].value
_SCALE_CODE = {
    item.value: INHERIT_SCALE.index(item.identifier) for item in _SCALE_ITEMS if item.identifier in INHERIT_SCALE
}


def _structure(
    arm: bpy.types.Armature, n: int
) -> tuple[bytes, NDArray[np.float32], NDArray[np.int8], NDArray[np.int32]]:
    """Everything of the bones a solve depends on besides the pose, as one key, read in a few bulk calls.

    Names, rest matrices, lengths (a length change keeps matrix_local), connection and inheritance flags:
    any edit of these (a rename, Edit Mode, Bone > Relations) changes the key, and with it the skeleton,
    the cached plans and the live fingerprint, so the chain is validated and solved again.
    """
    bones = arm.bones
    raw = _raw_matrices(bones, "matrix_local", n)
    lengths = np.empty(n, dtype=np.float32)
    bones.foreach_get("length", lengths)
    flags = np.empty((3, n), dtype=np.int8)
    bones.foreach_get("use_connect", flags[0])
    bones.foreach_get("use_inherit_rotation", flags[1])
    scale_mode = np.empty(n, dtype=np.int32)
    bones.foreach_get("inherit_scale", scale_mode)
    flags[2] = scale_mode == _FULL_SCALE
    names = "\0".join(bones.keys()).encode()
    key = b"".join((names, raw.tobytes(), lengths.tobytes(), flags.tobytes(), scale_mode.tobytes()))
    return key, raw, flags, scale_mode


def _note_renames(ptr: int, before: Skeleton, bone_names: tuple[str, ...], rest: F64) -> None:
    """Record in `cache.renamed` the bones renamed since `before`: a rename keeps a bone's place in the bone
    list and its rest matrix (`bone_names`, `rest`: the armature's bones now, in that list's order)."""
    n = len(bone_names)
    old_names: list[str] = [""] * n
    old_rest = np.empty_like(rest)
    for i, d in enumerate(before.data_order.tolist()):
        old_names[d] = before.names[i]
        old_rest[d] = before.rest[i]
    pairs = [
        (old_names[d], bone_names[d])
        for d in range(n)
        if old_names[d] != bone_names[d] and np.allclose(old_rest[d], rest[d], rtol=1e-6, atol=1e-6)
    ]
    if not pairs:
        return
    table = cache.renamed.setdefault(ptr, {})
    for old, new in pairs:
        for k, v in list(table.items()):
            if v == old:
                table[k] = new  # renamed twice: the first name leads to the last
        table[old] = new


def skeleton(obj: bpy.types.Object) -> Skeleton:
    """The armature's hierarchy and rest data, cached (cache.skeletons) while its structure key holds."""
    arm = obj.data
    assert isinstance(arm, bpy.types.Armature)
    pose_bones = obj.pose.bones
    n = len(pose_bones)
    key, raw, flags, scale_mode = _structure(arm, n)
    ptr = arm.as_pointer()
    cached = cache.skeletons.get(ptr)
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[no-any-return]
    names = tuple(pose_bones.keys())
    rest_arm = raw.reshape(n, 4, 4).transpose(0, 2, 1).astype(np.float64)
    bone_names = tuple(arm.bones.keys())
    arm_index = {name: i for i, name in enumerate(bone_names)}
    perm = np.array([arm_index[name] for name in names], dtype=np.int64)
    rest = rest_arm[perm]
    index = {name: i for i, name in enumerate(names)}
    parent = np.full(n, -1, dtype=np.int64)
    for i, pb in enumerate(pose_bones):
        if pb.parent is not None:
            parent[i] = index[pb.parent.name]
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        d, p = 0, int(parent[i])
        while p >= 0:
            d, p = d + 1, int(parent[p])
        depth[i] = d
    rest3 = rest[:, :3, :3]
    rest_rel = rest3.copy()
    has_parent = parent >= 0
    rest_rel[has_parent] = np.transpose(rest3[parent[has_parent]], (0, 2, 1)) @ rest3[has_parent]
    rest_rel, _ = convert.rotation_parts(rest_rel)
    rest_rel4 = rest.copy()
    rest_rel4[has_parent] = np.linalg.inv(rest[parent[has_parent]]) @ rest[has_parent]
    if cached is not None and len(cached[1].names) == n:
        _note_renames(ptr, cached[1], bone_names, rest_arm)
    sk = Skeleton(
        names=names,
        index=index,
        parent=parent,
        depth=depth,
        rest=rest,
        rest_rel=rest_rel,
        rest_rel4=rest_rel4,
        data_order=perm,
        connected=flags[0][perm] != 0,
        inherits=(flags[1][perm] != 0) & (flags[2][perm] != 0),
        inherit_scale=np.array([_SCALE_CODE.get(int(v), 0) for v in scale_mode[perm].tolist()], dtype=np.int64),
        key=key,
    )
    cache.skeletons[ptr] = (key, sk)
    return sk


def bone_lengths(obj: bpy.types.Object, sk: Skeleton) -> F64:
    """(B,) rest lengths of the bones, pose-bone order (read every time: an edit can change only a length)."""
    bones = obj.data.bones
    buf = np.empty(len(bones), dtype=np.float32)
    bones.foreach_get("length", buf)
    return buf[sk.data_order].astype(np.float64)


def pose_matrices(obj: bpy.types.Object) -> F64:
    """(B,4,4) current pose matrices in armature space (as last evaluated)."""
    pose_bones = obj.pose.bones
    return _matrices(pose_bones, "matrix", len(pose_bones))


def basis_parts(obj: bpy.types.Object) -> tuple[F64, F64, F64]:
    """(B,4,4) matrix_basis, (B,3) location and (B,3) scale channels of every pose bone."""
    pose_bones = obj.pose.bones
    n = len(pose_bones)
    basis = _matrices(pose_bones, "matrix_basis", n)
    out = []
    for attr in ("location", "scale"):
        buf = np.empty(n * 3, dtype=np.float32)
        pose_bones.foreach_get(attr, buf)
        out.append(buf.reshape(n, 3).astype(np.float64))
    return basis, out[0], out[1]


def scale_locks(obj: bpy.types.Object) -> bytes:
    """Every pose bone's scale locks, as bytes (a stretching chain cannot stretch a bone locked in Y)."""
    pose_bones = obj.pose.bones
    buf = np.empty(len(pose_bones) * 3, dtype=np.bool_)
    pose_bones.foreach_get("lock_scale", buf)
    return buf.tobytes()


class WorldMatrices:
    """The world matrices of the objects a solve reads, as they are when first asked for (a snapshot).

    Converting Matrix objects one by one costs ~2-10 us each; a rig with 100 targets would spend a
    millisecond per update on that alone, so many objects are read for all of bpy.data.objects in one
    call, rows found by `session_uid` (unique in the session, also among linked objects that share a local
    object's name). A few (the armature alone, its control bones' rig) are read one by one: the bulk read
    costs ~10 us even for a handful of objects, and grows with the file.
    """

    _FEW = 4  # distinct objects read one by one at most

    def __init__(self) -> None:
        self._raw: NDArray[np.float32] | None = None
        self._uids = np.empty(0, dtype=np.int32)
        self._order = np.empty(0, dtype=np.int64)
        self._overrides: dict[int, F64] = {}
        # (armature uid, bone name) -> armature-space pose matrix of a bone where it will be once Blender
        # evaluates our writes (a control bone of a rig solved earlier in the same live update).
        self.bones: dict[tuple[int, str], F64] = {}

    def _read_all(self) -> NDArray[np.float32]:
        coll = bpy.data.objects
        total = len(coll)
        raw = np.empty(total * 16, dtype=np.float32)
        self._uids = np.empty(total, dtype=np.int32)
        if total:
            coll.foreach_get("matrix_world", raw)
            coll.foreach_get("session_uid", self._uids)
        self._order = np.argsort(self._uids, kind="stable")
        self._raw = raw
        return raw

    def override(self, ob: bpy.types.Object, matrix: F64) -> None:
        """Replace the snapshot's world matrix of `ob` (where it will be once Blender evaluates our writes)."""
        # Rounded to float32, as Blender will hold it.
        self._overrides[ob.session_uid] = np.asarray(matrix, dtype=np.float32).astype(np.float64)

    def of(self, objects: Sequence[bpy.types.Object], uids: Sequence[int] | None = None) -> F64:
        """(n,4,4) world matrices of `objects` (their `session_uid`s: `uids`, if read), as read when first asked
        for."""
        out = np.empty((len(objects), 4, 4))
        if not objects:
            return out
        if uids is None:
            uids = [ob.session_uid for ob in objects]
        if self._raw is None and len(set(uids)) <= self._FEW:
            # The same float32 values widened as the bulk read gives (bit for bit); each object read once, its
            # rows copied in one indexing (a rig's own control bones are a dozen entries of one object).
            first: dict[int, int] = {}
            rows_of: list[list[tuple[float, ...]]] = []
            for ob, uid in zip(objects, uids, strict=True):
                if uid not in first:
                    first[uid] = len(rows_of)
                    world = ob.matrix_world
                    rows_of.append([world[i][:] for i in range(4)])
            out[:] = np.array(rows_of, dtype=np.float64)[[first[uid] for uid in uids]]
        else:
            raw = self._read_all() if self._raw is None else self._raw
            total = self._uids.shape[0]
            missing: Sequence[int] = range(len(objects))
            if total:
                want = np.array(uids, dtype=np.int64)
                rows = self._order[np.minimum(np.searchsorted(self._uids, want, sorter=self._order), total - 1)]
                out[:] = raw.reshape(total, 4, 4)[rows].transpose(0, 2, 1)
                missing = np.flatnonzero(self._uids[rows] != want).tolist()
            for k in missing:  # not in bpy.data.objects (never expected): ask the object itself
                out[k] = np.array(objects[k].matrix_world, dtype=np.float64)
        if self._overrides:
            for k, uid in enumerate(uids):
                m = self._overrides.get(uid)
                if m is not None:
                    out[k] = m
        return out


def bone_matrix(ob: bpy.types.Object, bone: str) -> F64:
    """(4,4) armature-space pose matrix of one bone of armature `ob` (identity when it has no such bone)."""
    pose = ob.pose
    pb = pose.bones.get(bone) if pose is not None else None
    return np.array(pb.matrix, dtype=np.float64) if pb is not None else np.eye(4)


def target_matrices(
    rig: bpy.types.Object,
    entries: Sequence[tuple[bpy.types.Object, str]],
    world: WorldMatrices,
    sk: Skeleton | None = None,
    pose: F64 | None = None,
) -> F64:
    """(n,4,4) world matrices of targets and poles: (object, bone) -> the object's, or its bone's head.

    A bone target is where Blender's IK constraint aims: the armature's world matrix times the bone's pose
    matrix (its head, oriented like the bone). Bones of `rig` itself come from `pose` (read once) when given.
    """
    uids = [ob.session_uid for ob, _bone in entries]
    mats = world.of([ob for ob, _bone in entries], uids)
    # Bones of `rig` read from `pose`: one batched product (a bake reads a dozen per frame).
    rows: list[int] = []
    at: list[int] = []
    rig_uid = rig.session_uid
    index = sk.index if sk is not None and pose is not None else {}
    for k, ((ob, bone), uid) in enumerate(zip(entries, uids, strict=True)):
        if not bone:
            continue
        local = world.bones.get((uid, bone)) if world.bones else None
        if local is None:
            b = index.get(bone, -1) if uid == rig_uid else -1
            if b >= 0:
                rows.append(k)
                at.append(b)
                continue
            local = bone_matrix(ob, bone)
        mats[k] = mats[k] @ local
    if rows:
        assert pose is not None
        mats[rows] = mats[rows] @ pose[at]
    return mats


def object_matrices(objects: Sequence[bpy.types.Object]) -> F64:
    """(n,4,4) current world matrices of `objects` (see `WorldMatrices`)."""
    return WorldMatrices().of(objects)


def pose_tails(obj: bpy.types.Object) -> F64:
    pose_bones = obj.pose.bones
    buf = np.empty(len(pose_bones) * 3, dtype=np.float32)
    pose_bones.foreach_get("tail", buf)
    return buf.reshape(-1, 3).astype(np.float64)


ROTATION_CHANNELS = (("rotation_quaternion", 4), ("rotation_euler", 3), ("rotation_axis_angle", 4))
ALL_CHANNELS = (*ROTATION_CHANNELS, ("location", 3), ("scale", 3))
# The channels a solve writes: the rotation channels, and the scale (Y) of stretching chains.
WRITTEN_CHANNELS = (*ROTATION_CHANNELS, ("scale", 3))


def read_channels(obj: bpy.types.Object, which: tuple[tuple[str, int], ...] = ROTATION_CHANNELS) -> Channels:
    """Pose channels of every bone, as (B, width) float32 arrays (exact copies of Blender's values)."""
    pose_bones = obj.pose.bones
    n = len(pose_bones)
    out: Channels = {}
    for attr, width in which:
        buf = np.empty(n * width, dtype=np.float32)
        pose_bones.foreach_get(attr, buf)
        out[attr] = buf.reshape(n, width)
    return out


def write_channels(obj: bpy.types.Object, channels: Channels, changed: set[str]) -> None:
    """Write back only the channel arrays that changed; untouched rows are the exact float32 read."""
    if not changed:
        return  # nothing moved: no write, no re-evaluation
    pose_bones = obj.pose.bones
    for attr in sorted(changed):
        pose_bones.foreach_set(attr, channels[attr].ravel())
    # foreach_set does not tag the object for re-evaluation (BLENDER_NOTES). 'DATA' (ID_RECALC_GEOMETRY) is
    # the tag Blender itself sends when a pose channel is set (rna_Pose_update); a bare update_tag() tags
    # every component and the re-evaluation that follows costs ~10% more on a 1000-bone rig.
    obj.update_tag(refresh={"DATA"})


def channel_pose_problem(obj: bpy.types.Object, sk: Skeleton, bones: Iterable[int]) -> str | None:
    """Why Blender may pose one of `bones` otherwise than ``parent @ rest_rel @ basis`` of its channels (a
    constraint, an inheritance other than full rotation and scale, Local Location off on a bone that is not
    connected), or None: then forward kinematics of the channels gives the evaluated pose (`rig.fastread`,
    `rig.lookahead` predict it so)."""
    pose_bones = obj.pose.bones
    data = obj.data.bones
    for b in bones:
        pb = pose_bones[b]
        if len(pb.constraints):
            return f"bone '{pb.name}' has constraints"
        if not bool(sk.inherits[b]) or int(sk.inherit_scale[b]) != FULL:
            return f"bone '{pb.name}' does not inherit its parent's rotation and scale in full"
        if not data[pb.name].use_local_location and not bool(sk.connected[b]):
            return f"bone '{pb.name}' has Local Location off"
    return None


# bl_rna.properties[...] is typed as the base Property; rotation_mode is an EnumProperty.
_MODE_ITEMS = bpy.types.PoseBone.bl_rna.properties["rotation_mode"].enum_items  # type: ignore[attr-defined]
MODE_NAMES = {item.value: item.identifier for item in _MODE_ITEMS}


def rotation_mode_values(obj: bpy.types.Object) -> NDArray[np.int32]:
    """Every pose bone's rotation mode as its enum value, in one call (see `MODE_NAMES`)."""
    pose_bones = obj.pose.bones
    buf = np.empty(len(pose_bones), dtype=np.int32)
    pose_bones.foreach_get("rotation_mode", buf)
    return buf


def rotations_to_channels(
    obj: bpy.types.Object,
    bones: list[int],
    basis: F64,
    channels: Channels,
    modes: NDArray[np.int32] | None = None,
    written: dict[str, list[int]] | None = None,
) -> set[str]:
    """Put basis rotations of `bones` into `channels` in each bone's own rotation mode (`modes`: every bone's
    mode value, when already read).

    Quaternions keep sign continuity, Eulers stay compatible with the previous value (no flips), and
    axis-angle keeps its axis on the previous side. Returns the channel names that changed; `written`, if
    given, gets the bones whose row changed, by channel name.
    """
    idx = np.asarray(bones, dtype=np.int64)
    mode_values = (rotation_mode_values(obj) if modes is None else modes)[idx]
    if len(bones) <= _FEW:
        return _few_to_channels(idx.tolist(), mode_values.tolist(), basis, channels, written)
    changed: set[str] = set()
    # One vectorized conversion per rotation mode present (rows are independent, so converting a mode's
    # rows on their own gives exactly what converting every row would).
    for value in np.unique(mode_values).tolist():
        mode = MODE_NAMES[value]
        rows = np.flatnonzero(mode_values == value)
        b = idx[rows]
        if mode == "QUATERNION":
            attr = "rotation_quaternion"
            prev = channels[attr][b].astype(np.float64)
            new = convert.quaternion_continuous(convert.matrix_to_quaternion(basis[rows]), prev)
        elif mode == "AXIS_ANGLE":
            attr = "rotation_axis_angle"
            prev = channels[attr][b].astype(np.float64)
            new = convert.quaternion_to_axis_angle(convert.matrix_to_quaternion(basis[rows]), prev)
        else:
            attr = "rotation_euler"
            prev = channels[attr][b].astype(np.float64)
            new = convert.matrix_to_euler(basis[rows], mode, prev)
        moved = _moved(new, channels[attr][b])
        if moved.any():
            channels[attr][b[moved]] = new[moved]
            changed.add(attr)
            if written is not None:
                written.setdefault(attr, []).extend(b[moved].tolist())
    return changed


def scale_to_channels(bones: list[int], values: F64, channels: Channels) -> set[str]:
    """Put the Y scale `values` (n,) of `bones` into `channels['scale']`, X and Z untouched.

    Returns {'scale'} when a value moved by more than rounding (as rotations, see `_moved`), else nothing:
    a chain that does not stretch leaves the scale channels byte-identical.
    """
    if not bones:
        return set()
    idx = np.asarray(bones, dtype=np.int64)
    old = channels["scale"][idx, 1]
    moved = _moved(np.asarray(values, dtype=np.float64)[:, None], old[:, None])
    if not moved.any():
        return set()
    channels["scale"][idx[moved], 1] = np.asarray(values, dtype=np.float64)[moved]
    return {"scale"}


# Up to this many bones (a live update of a few chains) the conversion runs per bone in mathutils (Blender's own
# C conversions, ~1 us a bone) rather than in numpy (tens of us a call whatever the count).
_FEW = 64
_ULPS8 = 8.0 * 2.0**-23


def _few_to_channels(
    bones: list[int], modes: list[int], basis: F64, channels: Channels, written: dict[str, list[int]] | None = None
) -> set[str]:
    """`rotations_to_channels` for a few bones: the same rules, one bone at a time in mathutils.

    Matrix.to_euler(order, compat) is the rule `convert.matrix_to_euler` implements (tested equal);
    quaternions take the sign nearer the previous value. Axis-angle keeps the numpy rule (its own).
    """
    changed: set[str] = set()
    for r, (b, value) in enumerate(zip(bones, modes, strict=True)):
        mode = MODE_NAMES[value]
        m = basis[r]
        if mode == "AXIS_ANGLE":
            attr = "rotation_axis_angle"
            prev64 = channels[attr][b : b + 1].astype(np.float64)
            new = convert.quaternion_to_axis_angle(convert.matrix_to_quaternion(m[None]), prev64)[0].tolist()
        else:
            mat = Matrix(m.tolist())
            prev = channels["rotation_quaternion" if mode == "QUATERNION" else "rotation_euler"][b].tolist()
            if mode == "QUATERNION":
                attr = "rotation_quaternion"
                q = mat.to_quaternion()
                if q.w * prev[0] + q.x * prev[1] + q.y * prev[2] + q.z * prev[3] < 0.0:
                    q.negate()
                new = [q.w, q.x, q.y, q.z]
            else:
                attr = "rotation_euler"
                e = mat.to_euler(mode, Euler(prev, mode))
                new = [e.x, e.y, e.z]
        row = channels[attr][b]
        # As `_moved`: more than 1e-6 plus 8 float32 ulps (one ulp of x is at most |x| * 2^-23).
        if any(abs(n - o) > 1e-6 + _ULPS8 * abs(o) for n, o in zip(new, row.tolist(), strict=True)):
            row[:] = new
            changed.add(attr)
            if written is not None:
                written.setdefault(attr, []).append(b)
    return changed


def _moved(new: F64, old: NDArray[np.float32]) -> NDArray[np.bool_]:
    """Rows whose new values differ from the stored float32 ones by more than rounding (a few ulps).

    Re-solving a pose we wrote ourselves gives it back up to float32 rounding. Writing that difference
    would move every bone below by a last bit, which changes the evaluated pose a chain below reads, and
    the next unrelated update would solve again, and again: not writing it lets the rig settle.
    """
    tolerance = 1e-6 + 8.0 * np.spacing(np.abs(old)).astype(np.float64)
    # np.asarray: numpy 2.4's stubs type `any(axis=...)` as scalar-or-array.
    moved: NDArray[np.bool_] = np.asarray((np.abs(new - old) > tolerance).any(axis=-1))
    return moved
