"""The hands' and feet's follow constraint under IK and FK (`rig/ikfk.py`).

Set Up Character gives each hand and foot a Copy Rotation to its chain's IK control ("Reach IK: follow
control", `FOLLOW_CONSTRAINT`). In FK the hand must show its own rotation, in IK the control's, and
in between a blend as the chain's: the constraint's Influence is driven by the chain's Influence (a driver
of type Average on one property: no Python runs, so it works with scripts disabled, in renders and bakes).
Switching keeps the hand where it is: to FK its shown rotation becomes its own channels (`apply_visual`), to
IK the control takes the hand's shown orientation (`rig/ikfk.py`, `_initial`).
"""

from __future__ import annotations

from typing import Any

import bpy

from .chains import target_bone_of
from .props import rig_settings

#: The name of the constraint that makes a hand or foot follow its control's rotation (Set Up Character).
FOLLOW_CONSTRAINT = "Reach IK: follow control"


def follower(obj: bpy.types.Object, index: int) -> str:
    """The bone that takes chain `index`'s control rotation through the follow constraint (a child of the
    chain's tip whose constraint points at the chain's target), or ""."""
    ch = rig_settings(obj).chains[index]
    tip = obj.pose.bones.get(ch.tip_bone) if ch.tip_bone else None
    if tip is None or ch.target is None:
        return ""
    sub = target_bone_of(ch.target, ch.target_bone)
    for child in tip.children:
        con = child.constraints.get(FOLLOW_CONSTRAINT)
        if con is not None and getattr(con, "target", None) == ch.target and getattr(con, "subtarget", "") == sub:
            return str(child.name)
    return ""


def _path(bone: str) -> str:
    esc = bpy.utils.escape_identifier
    return f'pose.bones["{esc(bone)}"].constraints["{esc(FOLLOW_CONSTRAINT)}"].influence'


def drive(obj: bpy.types.Object, bone: str, chain: str) -> bool:
    """Drive the follow constraint's Influence of `bone` by chain `chain`'s Influence; whether a driver was
    made (one there already is pointed at the chain by its name again)."""
    ad = obj.animation_data
    fc = ad.drivers.find(_path(bone)) if ad is not None else None
    made = fc is None
    if fc is None:
        con = obj.pose.bones[bone].constraints[FOLLOW_CONSTRAINT]
        added = con.driver_add("influence")  # one F-Curve: influence is a single value
        assert isinstance(added, bpy.types.FCurve)
        fc = added
    for mod in list(fc.modifiers):
        fc.modifiers.remove(mod)
    driver = fc.driver
    driver.type = "AVERAGE"
    while len(driver.variables) > 1:
        driver.variables.remove(driver.variables[-1])
    var = driver.variables[0] if len(driver.variables) else driver.variables.new()
    var.name = "influence"
    var.type = "SINGLE_PROP"
    target = var.targets[0]
    target.id_type = "OBJECT"
    target.id = obj
    target.data_path = f'reach_ik.chains["{bpy.utils.escape_identifier(chain)}"].influence'
    return made


def undrive(obj: bpy.types.Object, bone: str) -> None:
    """Remove the driver `drive` made (the constraint's Influence keeps its last value)."""
    pb = obj.pose.bones.get(bone)
    con = pb.constraints.get(FOLLOW_CONSTRAINT) if pb is not None else None
    if con is not None:
        con.driver_remove("influence")


def drive_all(obj: bpy.types.Object, indices: list[int]) -> list[str]:
    """`drive` the followers of chains `indices`; the bones whose driver was made now."""
    chains = rig_settings(obj).chains
    made = []
    for i in indices:
        bone = follower(obj, i)
        if bone and drive(obj, bone, chains[i].name):
            made.append(bone)
    return made


def apply_visual(obj: bpy.types.Object, bone: str) -> None:
    """Give `bone` the rotation it shows now (its constraints included) as its own channels, its location
    and scale channels kept: with the follow constraint off it then shows the same."""
    pb = obj.pose.bones[bone]
    shown = pb.matrix.copy()
    location, scale = pb.location.copy(), pb.scale.copy()
    pb.matrix = shown
    pb.location, pb.scale = location, scale


#: On a hand or foot whose follow constraint `guard` muted while its control was missing: what to give
#: back when the control is there again ({"subtarget": the bone it followed, "muted": whether it was muted}).
MUTED_KEY = "reach_ik_follow_muted"


def forget_muted(pb: bpy.types.PoseBone) -> None:
    """Drop what `guard` kept to give back (its constraint is removed)."""
    if pb.get(MUTED_KEY) is not None:
        del pb[MUTED_KEY]


def owned(obj: bpy.types.Object, index: int) -> str:
    """The bone with a follow constraint among the children of chain `index`'s tip (whatever it points at
    now: a deleted control leaves it pointing nowhere), or ""."""
    ch = rig_settings(obj).chains[index]
    tip = obj.pose.bones.get(ch.tip_bone) if ch.tip_bone else None
    if tip is None:
        return ""
    for child in tip.children:
        if child.constraints.get(FOLLOW_CONSTRAINT) is not None:
            return str(child.name)
    return ""


def _control_missing(obj: bpy.types.Object, ch: Any) -> bool:
    target = ch.target
    if target is None or not target.users_scene:
        return True
    bone = target_bone_of(target, ch.target_bone)
    if target.type == "ARMATURE" and bone:
        return bone not in target.data.bones
    return bool(target == obj)  # the armature itself, no bone: the chain is refused, nothing to follow


def guard(obj: bpy.types.Object) -> list[str]:
    """Mute the follow constraint of each chain whose control is gone (deleted, unlinked, a bone removed), so
    the hand keeps its own rotation instead of the armature's (a constraint left on the armature with no bone,
    or on a bone that is not there, copies the armature's rotation and makes Blender print depsgraph
    warnings); give it back, on the chain's control, once the chain has a control again. The bones changed."""
    changed = []
    chains = rig_settings(obj).chains
    for i, ch in enumerate(chains):
        # Disabled chains too: the constraint follows the control whatever the chain does.
        bone = owned(obj, i)
        if not bone:
            continue
        try:
            if _guard_one(obj, ch, bone):
                changed.append(bone)
        except (AttributeError, TypeError, RuntimeError):
            continue  # a linked bone or constraint that cannot be edited here: left as it is
    return changed


def _guard_one(obj: bpy.types.Object, ch: Any, bone: str) -> bool:
    """`guard` for one chain and its follower `bone`: whether it muted or gave back the constraint."""
    pb = obj.pose.bones[bone]
    con = pb.constraints[FOLLOW_CONSTRAINT]
    c = con  # a Copy Rotation: target and subtarget
    held = pb.get(MUTED_KEY)
    if _control_missing(obj, ch):
        sub = str(getattr(c, "subtarget", "") or "")
        made = held is None
        if made:
            pb[MUTED_KEY] = {"subtarget": sub or target_bone_of(ch.target, ch.target_bone), "muted": int(con.mute)}
            con.mute = True
        arm = getattr(c, "target", None)
        if sub and arm is not None and arm.type == "ARMATURE" and sub not in arm.data.bones:
            c.subtarget = ""  # kept in MUTED_KEY (and the chain's Target Bone)
        return made
    if held is None:
        return False
    # Written only where they differ: each write makes Blender rebuild the constraint's relations.
    sub = target_bone_of(ch.target, ch.target_bone)
    if c.target != ch.target:
        c.target = ch.target
    if c.subtarget != sub:
        c.subtarget = sub
    mute = bool(held.get("muted", 0))
    if con.mute != mute:
        con.mute = mute
    forget_muted(pb)
    return True
