"""One-click fixes for chains refused for a bone setting the message names (`chains.Refusal`).

The panel offers a button under such a chain's message (from the last validation, `cache.fixes`: drawing
may not change data); `reach.fix_chain` validates the chain afresh and applies exactly the edits its message
describes, as one undo step.
"""

from __future__ import annotations

import bpy

from . import armature, cache
from .chains import Edit, Refusal, build_plan, rig_problem
from .props import rig_settings

_LABELS = {"FULL": "Full", "ALIGNED": "Aligned", "NONE": "None"}


def offer(obj: bpy.types.Object, index: int, message: str) -> Refusal | None:
    """The fix the last validation found for chain `index`, while the chain still shows that message."""
    found = cache.fixes.get(obj.session_uid, {}).get(index)
    return found if isinstance(found, Refusal) and str(found) == message else None


def find(obj: bpy.types.Object, index: int) -> Refusal | None:
    """Chain `index`'s fixable refusal as a fresh validation sees it, or None."""
    if obj.type != "ARMATURE" or obj.mode == "EDIT" or rig_problem(obj) is not None:
        return None
    err = build_plan(obj, armature.skeleton(obj)).errors.get(index)
    return err if isinstance(err, Refusal) and err.fix else None


def label(fix: tuple[Edit, ...]) -> str:
    """What the fix sets, for its button: "Inherit Scale 'Aligned' on b1, b2"."""
    parts: dict[str, list[str]] = {}
    for bone, attr, value in fix:
        if attr == "use_inherit_rotation":
            what = "Inherit Rotation on"
        else:
            what = f"Inherit Scale '{_LABELS.get(str(value), str(value))}'"
        parts.setdefault(what, []).append(bone)
    return "; ".join(f"{what} on {', '.join(bones)}" for what, bones in parts.items())


def apply(obj: bpy.types.Object, fix: tuple[Edit, ...]) -> tuple[Edit, ...]:
    """Set the bone settings of `fix` on `obj`'s bones (all bones checked first: all or nothing); returns
    the edits that put them back."""
    bones = obj.data.bones
    missing = [bone for bone, _attr, _value in fix if bone not in bones]
    if missing:
        raise KeyError(f"bone '{missing[0]}' is not in '{obj.name}'")
    undo = tuple((bone, attr, getattr(bones[bone], attr)) for bone, attr, _value in reversed(fix))
    for bone, attr, value in fix:
        setattr(bones[bone], attr, value)
    cache.mark_dirty(obj)
    obj.update_tag()
    return undo


def refused(obj: bpy.types.Object) -> dict[int, str]:
    """Chain index -> message, for the chains a fresh validation refuses (nothing when the rig is)."""
    if obj.type != "ARMATURE" or obj.mode == "EDIT" or rig_problem(obj) is not None:
        return {}
    return {i: str(msg) for i, msg in build_plan(obj, armature.skeleton(obj)).errors.items()}


def chain_name(obj: bpy.types.Object, index: int) -> str:
    chains = rig_settings(obj).chains
    return chains[index].name if 0 <= index < len(chains) else f"#{index}"
