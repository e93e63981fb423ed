"""Follow renamed bones, as Blender's constraints follow a renamed subtarget.

Blender keeps no bone identity but its name, and a rename tells no handler which name became which (the
depsgraph lists the Armature data, nothing more). So each chain remembers, for its tip bone and its target
and pole bones, where the bone was (its rest head and tail, armature space) and which other bones were
exactly there too ("twins": Rigify's ORG-, DEF- and MCH- bones share their geometry). When a remembered
name is no longer in its armature, the one bone now at the same place that was not one of the twins is the
renamed bone, and the chain takes its name. None, or more than one: the bone is treated as deleted and the
chain is refused as before ("renamed or deleted?").

The record is a hidden string property of the chain (`bone_record`, JSON), written when a plan is built and
only when it changed (writing it tags the armature once, which then finds nothing new to solve). It is saved
with the file and restored by undo with the chain, so a rename made with Live off, saved and reloaded is
still followed when the chain is next checked. Limited bones need nothing: `PoseBone.reach_ik` lives on the
pose bone, which Blender renames. The FK store, kept by bone name, follows renames seen in this session
(`armature._note_renames`, `fk.follow_renames`).
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

import bpy
import numpy as np
from numpy.typing import NDArray

from .props import ReachChain, rig_settings

_ROLES = (("tip", "tip_bone"), ("target", "target_bone"), ("pole", "pole_bone"))


def _armature_of(obj: bpy.types.Object, ch: ReachChain, role: str) -> bpy.types.Armature | None:
    """The armature data a chain's `role` bone belongs to (None: the role names no bone)."""
    if role == "tip":
        data = obj.data
    else:
        ob = ch.target if role == "target" else ch.pole
        if ob is None or ob.type != "ARMATURE" or not getattr(ch, f"{role}_bone"):
            return None
        data = ob.data
    return data if isinstance(data, bpy.types.Armature) else None


def _geometry(arm: bpy.types.Armature) -> tuple[list[str], NDArray[np.float32]]:
    """Every bone's name and rest (head, tail) in armature space, (n, 6)."""
    bones = arm.bones
    n = len(bones)
    out = np.empty((n, 6), dtype=np.float32)
    buf = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("head_local", buf)
    out[:, :3] = buf.reshape(n, 3)
    bones.foreach_get("tail_local", buf)
    out[:, 3:] = buf.reshape(n, 3)
    return list(bones.keys()), out


def _cached(
    cache: dict[int, tuple[list[str], NDArray[np.float32]]], arm: bpy.types.Armature
) -> tuple[list[str], NDArray[np.float32]]:
    hit = cache.get(arm.as_pointer())
    if hit is None:
        hit = cache[arm.as_pointer()] = _geometry(arm)
    return hit


def _at(geometry: NDArray[np.float32], where: NDArray[np.float32]) -> NDArray[np.bool_]:
    """Which bones sit where `where` (head, tail) says, to float32 rounding."""
    scale = max(1.0, float(np.abs(where).max()))
    near: NDArray[np.bool_] = np.all(np.abs(geometry - where) <= 1e-5 * scale, axis=1)
    return near


def _record_of(ch: ReachChain) -> dict[str, Any]:
    text = ch.bone_record
    if not text:
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _sound(held: object, name: str) -> TypeGuard[list[Any]]:
    """Whether `held` is a record of bone `name`: [name, [head, tail] (6 numbers), [twin names]]."""
    return (
        isinstance(held, list)
        and len(held) == 3
        and held[0] == name
        and isinstance(held[1], list)
        and len(held[1]) == 6
        and all(isinstance(v, (int, float)) for v in held[1])
    )


def follow(obj: bpy.types.Object) -> list[str]:
    """Give each chain of `obj` whose tip, target or pole bone is gone the name its bone has now, when the
    record says unambiguously which bone that is. Returns what was followed ("chain 'arm': tip 'a' -> 'b'")."""
    done: list[str] = []
    cache: dict[int, tuple[list[str], NDArray[np.float32]]] = {}
    for ch in rig_settings(obj).chains:
        record = None
        for role, attr in _ROLES:
            name = getattr(ch, attr)
            arm = _armature_of(obj, ch, role)
            if arm is None or not name or name in arm.bones:
                continue
            if record is None:
                record = _record_of(ch)
            held = record.get(role)
            if not _sound(held, name):
                continue  # nothing remembered of this bone: deleted as far as we know
            names, geometry = _cached(cache, arm)
            twins = set(held[2]) if isinstance(held[2], list) else set()
            found = [names[k] for k in np.flatnonzero(_at(geometry, np.array(held[1], dtype=np.float32)))]
            found = [n for n in found if n not in twins]
            if len(found) == 1:
                setattr(ch, attr, found[0])
                done.append(f"chain '{ch.name}': {role} bone '{name}' -> '{found[0]}'")
    return done


def remember(obj: bpy.types.Object, valid: set[int]) -> None:
    """Record the tip, target and pole bones of the chains in `valid` (indices) as they are now."""
    cache: dict[int, tuple[list[str], NDArray[np.float32]]] = {}
    chains = rig_settings(obj).chains
    for i in sorted(valid):
        ch = chains[i]
        old = _record_of(ch)
        record: dict[str, Any] = {}
        for role, attr in _ROLES:
            name = getattr(ch, attr)
            arm = _armature_of(obj, ch, role)
            if arm is None or not name or name not in arm.bones:
                continue
            held = old.get(role)
            bone = arm.bones[name]
            where = np.concatenate([np.array(bone.head_local), np.array(bone.tail_local)]).astype(np.float32)
            if _sound(held, name):
                if bool(_at(where[None], np.array(held[1], dtype=np.float32))[0]):
                    record[role] = held  # unchanged (the twins are only looked at again when it moves)
                    continue
            names, geometry = _cached(cache, arm)
            twins = [names[k] for k in np.flatnonzero(_at(geometry, where)) if names[k] != name]
            record[role] = [name, [round(float(v), 7) for v in where], twins]
        if record != old:
            try:
                ch.bone_record = json.dumps(record)
            except (AttributeError, TypeError, RuntimeError):
                pass  # linked data: its bones cannot be renamed here either
