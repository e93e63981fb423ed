"""IK <-> FK's building blocks (`rig/ikfk.py`): errors and outcomes, the controls a chain moves, and the
transaction that puts back everything an operation touched when it fails part-way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import bpy
from mathutils import Matrix

from . import anim, armature, fk
from .chains import target_bone_of
from .props import rig_settings

_TRANSFORM = ("location", "rotation_quaternion", "rotation_euler", "rotation_axis_angle", "scale")


class IkFkError(RuntimeError):
    """The operation could not run or failed part-way; nothing was changed."""


@dataclass
class Outcome:
    """What an operation did: the chains, and warnings for things that will not hold as they are."""

    chains: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def rotation_path(mode: str) -> str:
    """The rotation channel a rotation mode uses ('QUATERNION', 'AXIS_ANGLE' or an Euler order)."""
    return armature.rotation_channel(mode)[0]


def bone_path(bone: str, attr: str) -> str:
    return f'pose.bones["{bpy.utils.escape_identifier(bone)}"].{attr}'


def influence_path(index: int) -> str:
    return f"reach_ik.chains[{index}].influence"


# ---------------------------------------------------------------------------------------------------------
# Controls: a chain's target or pole, an object or an armature's bone
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """A chain's target or pole: an object, or a bone of an armature (`bone`), as the chain names it."""

    ob: bpy.types.Object
    bone: str  # "" = the object itself
    role: str  # 'target' or 'pole'
    chain: str  # the chain's name, for messages

    @property
    def owner(self) -> bpy.types.Object | bpy.types.PoseBone:
        """What holds the transform channels: the object, or its pose bone."""
        return self.ob.pose.bones[self.bone] if self.bone else self.ob

    def label(self) -> str:
        return f"{self.role} '{self.ob.name}' bone '{self.bone}'" if self.bone else f"{self.role} '{self.ob.name}'"

    def path(self, attr: str) -> str:
        return bone_path(self.bone, attr) if self.bone else attr

    def world(self) -> Matrix:
        """Its world matrix as Blender shows it (a bone: the armature's world matrix times its pose matrix)."""
        if self.bone:
            return self.ob.matrix_world @ self.ob.pose.bones[self.bone].matrix
        return self.ob.matrix_world.copy()

    def put(self, world: Matrix) -> None:
        """Give it the world matrix `world` (through its parents as Blender has them evaluated now).

        Quaternions keep the hemisphere and Euler angles the turn they had, so a key on the new value
        interpolates from the old one the short way.
        """
        owner = self.owner
        quat, euler = owner.rotation_quaternion.copy(), owner.rotation_euler.copy()
        if self.bone:
            self.ob.pose.bones[self.bone].matrix = self.ob.matrix_world.inverted() @ world
        else:
            self.ob.matrix_world = world
        if owner.rotation_mode == "QUATERNION":
            if owner.rotation_quaternion.dot(quat) < 0.0:
                owner.rotation_quaternion = owner.rotation_quaternion * -1.0
        elif owner.rotation_mode != "AXIS_ANGLE":
            turned = owner.rotation_euler.copy()
            turned.make_compatible(euler)
            owner.rotation_euler = turned

    def key_paths(self) -> list[str]:
        """Its location and the rotation channel of its rotation mode."""
        return [self.path("location"), self.path(rotation_path(self.owner.rotation_mode))]


def chain_controls(obj: bpy.types.Object, index: int) -> tuple[Control, Control | None]:
    ch = rig_settings(obj).chains[index]
    target = Control(ch.target, target_bone_of(ch.target, ch.target_bone), "target", ch.name)
    pole = Control(ch.pole, target_bone_of(ch.pole, ch.pole_bone), "pole", ch.name) if ch.pole is not None else None
    return target, pole


# ---------------------------------------------------------------------------------------------------------
# The transaction: what an operation touched, put back on failure
# ---------------------------------------------------------------------------------------------------------


@dataclass
class _Transaction:
    obj: bpy.types.Object
    transforms: dict[tuple[int, str], tuple[Control, list[tuple[float, ...]]]] = field(default_factory=dict)
    influences: dict[int, float] = field(default_factory=dict)
    store: fk.Store | None = None
    actions: dict[int, anim.ActionSnapshot] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)  # more to take back, newest last

    def save_transform(self, control: Control) -> None:
        key = (control.ob.session_uid, control.bone)
        if key not in self.transforms:
            owner = control.owner
            self.transforms[key] = (control, [tuple(getattr(owner, a)) for a in _TRANSFORM])

    def set_influence(self, index: int, value: float) -> None:
        ch = rig_settings(self.obj).chains[index]
        self.influences.setdefault(index, float(ch.influence))
        if ch.influence != value:
            ch.influence = value

    def save_fk(self) -> None:
        if self.store is None:
            self.store = fk.Store.read(self.obj)

    def key(self, ob: bpy.types.Object, path: str, group: str, index: int = -1) -> None:
        """Key `path` of `ob` at the current frame (its action is snapshot first, so `rollback` can undo it)."""
        snap = self.actions.get(ob.session_uid)
        if snap is None:
            snap = self.actions[ob.session_uid] = anim.ActionSnapshot.take(ob)
        ad = ob.animation_data
        action = ad.action if ad is not None else None
        value = ob.path_resolve(path)
        indices = range(len(value)) if index < 0 and hasattr(value, "__len__") else [max(index, 0)]
        what = f"'{ob.name}' {path}"
        if ad is not None and any(ad.drivers.find(path, index=j) is not None for j in indices):
            raise IkFkError(f"{what} is driven, so it cannot be keyed: remove the driver or turn off Key")
        if action is not None:
            if action.library is not None:
                raise IkFkError(
                    f"the action '{action.name}' of '{ob.name}' is linked from a library: make it local to key it"
                )
            snap.protect(action)
            for j in indices:
                fc = anim.find_fcurve(action, ob, path, j)
                if fc is not None and fc.lock:
                    raise IkFkError(f"the F-Curve of {what} is locked: unlock it in the Graph Editor or turn off Key")
                snap.remember((path, j), fc)
        else:
            for j in indices:
                snap.remember((path, j), None)
        done = ob.keyframe_insert(path, index=index, group=group)
        if snap.action is None and ob.animation_data is not None and ob.animation_data.action is not None:
            snap.created_action = ob.animation_data.action  # made by keyframe_insert: removed on rollback
        if not done:
            raise IkFkError(f"Blender refused a key on {what}")

    def rollback(self) -> None:
        for step in reversed(self.undo):
            step()
        for snap in self.actions.values():
            snap.restore()
        for control, values in self.transforms.values():
            owner = control.owner
            for attr, value in zip(_TRANSFORM, values, strict=True):
                setattr(owner, attr, value)
        chains = rig_settings(self.obj).chains
        for i, w in self.influences.items():
            chains[i].influence = w
        if self.store is not None:
            # Names and rows together: the store may have gained rows since it was read, and the old rows
            # under the new names would read as a damaged store (every kept FK pose lost).
            self.store.changed = True
            self.store.names_text = None
            self.store.write(self.obj)

    def commit(self) -> None:
        for snap in self.actions.values():
            snap.release()


@contextmanager
def _transaction(obj: bpy.types.Object) -> Iterator[_Transaction]:
    tx = _Transaction(obj)
    try:
        yield tx
    except BaseException:
        tx.rollback()
        raise
    tx.commit()
