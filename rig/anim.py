"""F-Curves across Blender's three animation APIs, chosen by capability (never by version number).

- 4.2/4.3: legacy actions: `action.fcurves.find/new`.
- 4.4/4.5: slotted actions; `action.fcurves` is a legacy proxy for the first slot, and
  `action.fcurve_ensure_for_datablock(obj, path, index=)` creates the slot, layer and channelbag as needed.
- 5.0: `action.fcurves` is gone: F-Curves live in the channelbag of the object's slot
  (`bpy_extras.anim_utils.action_get_channelbag_for_slot`); `fcurve_ensure_for_datablock` takes `group_name`.

Keys are written in bulk: `keyframe_points.add(n)` + `foreach_set` (BLENDER_NOTES: ~20x faster than
`keyframe_insert`). The action is copied before a bake writes to it, so a failed write can be undone exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import bpy
import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
Keys = dict[str, NDArray[np.generic]]

# RNA functions are not Python class attributes: ask the RNA description, not hasattr().
SLOTTED = "fcurve_ensure_for_datablock" in bpy.types.Action.bl_rna.functions  # type: ignore[attr-defined]


def _channelbag(action: bpy.types.Action, obj: bpy.types.Object) -> bpy.types.ActionChannelbag | None:
    from bpy_extras import anim_utils

    ad = obj.animation_data
    slot = ad.action_slot if ad is not None else None
    if slot is None:
        return None
    return anim_utils.action_get_channelbag_for_slot(action, slot)


def find_fcurve(action: bpy.types.Action, obj: bpy.types.Object, path: str, index: int) -> bpy.types.FCurve | None:
    if not SLOTTED:
        return action.fcurves.find(path, index=index)
    bag = _channelbag(action, obj)
    return None if bag is None else bag.fcurves.find(path, index=index)


def all_fcurves(action: bpy.types.Action, obj: bpy.types.Object) -> list[bpy.types.FCurve]:
    if not SLOTTED:
        return list(action.fcurves)
    bag = _channelbag(action, obj)
    return [] if bag is None else list(bag.fcurves)


def slot_fcurves(action: bpy.types.Action, handle: int | None) -> list[bpy.types.FCurve]:
    """The F-Curves of the slot with `handle` in `action` (legacy actions: all of them).

    For an action the object does not use (a copy), where `all_fcurves`' lookup through the object's slot
    does not apply: a copy keeps its slots' handles.
    """
    if not SLOTTED:
        return list(action.fcurves)
    for layer in action.layers:
        for strip in layer.strips:
            for bag in getattr(strip, "channelbags", ()):  # keyframe strips (the only kind so far)
                if bag.slot_handle == handle:
                    return list(bag.fcurves)
    return []


def fcurve_map(action: bpy.types.Action, obj: bpy.types.Object) -> dict[tuple[str, int], bpy.types.FCurve]:
    """Every F-Curve of `obj` in `action` by (data path, index): one lookup for a whole bake."""
    return {(fc.data_path, fc.array_index): fc for fc in all_fcurves(action, obj)}


# 5.0 takes the group's name when it creates a curve; 4.4/4.5 do not (asked once, from the RNA description).
_ENSURE_TAKES_GROUP = SLOTTED and "group_name" in (
    bpy.types.Action.bl_rna.functions["fcurve_ensure_for_datablock"].parameters  # type: ignore[attr-defined]
)


def new_fcurve(action: bpy.types.Action, obj: bpy.types.Object, path: str, index: int, group: str) -> bpy.types.FCurve:
    """Create the F-Curve for `path`/`index` (which must not exist yet) in the bone's group `group`."""
    if not SLOTTED:
        return action.fcurves.new(path, index=index, action_group=group)
    if _ENSURE_TAKES_GROUP:
        return action.fcurve_ensure_for_datablock(obj, path, index=index, group_name=group)  # type: ignore[call-arg]
    # 4.4/4.5: group the curve through its channelbag so it still shows per bone.
    fc = action.fcurve_ensure_for_datablock(obj, path, index=index)
    bag = _channelbag(action, obj)
    if bag is not None:
        groups = bag.groups
        fc.group = groups.get(group) or groups.new(group)
    return fc


def remove_fcurve(action: bpy.types.Action, obj: bpy.types.Object, fc: bpy.types.FCurve) -> None:
    if not SLOTTED:
        action.fcurves.remove(fc)
        return
    bag = _channelbag(action, obj)
    if bag is not None:
        bag.fcurves.remove(fc)


# Everything a keyframe stores that foreach can reach; a snapshot restores a curve exactly.
_KEY_FIELDS: tuple[tuple[str, int, type], ...] = (
    ("co", 2, np.float32),
    ("handle_left", 2, np.float32),
    ("handle_right", 2, np.float32),
    ("interpolation", 1, np.int32),
    ("handle_left_type", 1, np.int32),
    ("handle_right_type", 1, np.int32),
    ("easing", 1, np.int32),
    ("type", 1, np.int32),
    ("back", 1, np.float32),
    ("amplitude", 1, np.float32),
    ("period", 1, np.float32),
    ("select_control_point", 1, np.int32),
)


def read_keys(fc: bpy.types.FCurve) -> Keys:
    kp = fc.keyframe_points
    n = len(kp)
    out = {}
    for name, width, dtype in _KEY_FIELDS:
        buf: NDArray[np.generic] = np.empty(n * width, dtype=dtype)
        kp.foreach_get(name, buf)
        out[name] = buf.reshape(n, width) if width > 1 else buf
    return out


def update_keys(fc: bpy.types.FCurve, keys: Keys, before: Keys) -> None:
    """Write the fields of `keys` that differ from `before` (both as `read_keys` returns them, the same keys
    in the same order) onto `fc`'s keys, and recalculate its handles."""
    kp = fc.keyframe_points
    for name, _width, _dtype in _KEY_FIELDS:
        if not np.array_equal(keys[name], before[name]):
            kp.foreach_set(name, np.ascontiguousarray(keys[name]).ravel())
    fc.update()


def write_keys(fc: bpy.types.FCurve, keys: Keys, recalc: bool) -> None:
    """Replace all keyframes of `fc` with `keys` (as returned by `read_keys`)."""
    kp = fc.keyframe_points
    kp.clear()
    n = len(keys["co"])
    kp.add(n)
    for name, _width, _dtype in _KEY_FIELDS:
        kp.foreach_set(name, np.ascontiguousarray(keys[name]).ravel())
    if recalc:
        fc.update()


def _groups(
    action: bpy.types.Action, obj: bpy.types.Object
) -> bpy.types.ActionGroups | bpy.types.ActionChannelbagGroups | None:
    """The F-Curve groups `obj`'s curves in `action` can be in (legacy: the action's; slotted: the slot's)."""
    if not SLOTTED:
        return action.groups
    bag = _channelbag(action, obj)
    return None if bag is None else bag.groups


@dataclass
class ActionSnapshot:
    """Enough to put an object's animation back exactly as it was before a bake.

    The existing action is copied once (one C call, ~0.1 ms for 50 curves of 250 keys) before the bake
    writes to it, instead of reading every field of every curve it touches (~4 ms for the same). A failed
    bake writes the touched curves back from the copy; either way the copy is removed (`release`).
    """

    obj: bpy.types.Object
    had_animation_data: bool
    action: bpy.types.Action | None
    slot_handle: int | None
    backup: bpy.types.Action | None = None
    groups_before: set[str] | None = None
    touched: list[tuple[str, int]] = field(default_factory=list)
    created: list[tuple[str, int]] = field(default_factory=list)
    created_action: bpy.types.Action | None = None
    new_key_fields: dict[str, NDArray[np.generic]] = field(default_factory=dict)
    """The fields Blender gave the first key a bake added (other than its values), reused by later merges."""

    @classmethod
    def take(cls, obj: bpy.types.Object) -> ActionSnapshot:
        ad = obj.animation_data
        action = ad.action if ad is not None else None
        handle = getattr(ad, "action_slot_handle", None) if ad is not None else None
        return cls(obj, ad is not None, action, handle)

    def protect(self, action: bpy.types.Action) -> None:
        """Copy `action` (the one the object had) before anything is written to it; once."""
        if self.backup is None and action == self.action:
            self.backup = action.copy()
            groups = _groups(action, self.obj)
            self.groups_before = set() if groups is None else {g.name for g in groups}

    def remember(self, key: tuple[str, int], fc: bpy.types.FCurve | None) -> None:
        """Note that the bake writes to the curve `key` (`fc`, or None: it does not exist yet)."""
        if key in self.touched or key in self.created:
            return
        (self.created if fc is None else self.touched).append(key)

    def restore(self) -> None:
        obj = self.obj
        ad = obj.animation_data
        action = ad.action if ad is not None else None
        if action is not None:
            for path, index in self.created:
                fc = find_fcurve(action, obj, path, index)
                if fc is not None:
                    remove_fcurve(action, obj, fc)
            if self.backup is not None and self.touched:
                saved = {(fc.data_path, fc.array_index): fc for fc in slot_fcurves(self.backup, self.slot_handle)}
                for key in self.touched:
                    fc = find_fcurve(action, obj, *key)
                    if fc is not None and key in saved:
                        write_keys(fc, read_keys(saved[key]), recalc=False)
            # Groups made for the new curves (a bone that had no group yet) go too, once empty. Legacy actions
            # (4.2/4.3) keep an emptied group; channelbags (4.4+) drop it with its last curve themselves.
            groups = _groups(action, obj) if self.groups_before is not None else None
            if groups is not None and self.groups_before is not None:
                for g in [g for g in groups if g.name not in self.groups_before and not len(g.channels)]:
                    groups.remove(g)
        if self.created_action is not None:
            if ad is not None:
                ad.action = self.action
            bpy.data.actions.remove(self.created_action)
            self.created_action = None
        if not self.had_animation_data and obj.animation_data is not None:
            obj.animation_data_clear()
        self.release()

    def release(self) -> None:
        """Remove the copy (after a bake that went through, or after `restore`)."""
        if self.backup is not None:
            bpy.data.actions.remove(self.backup)
            self.backup = None


def ensure_action(obj: bpy.types.Object, snapshot: ActionSnapshot) -> bpy.types.Action:
    ad = obj.animation_data or obj.animation_data_create()
    if ad.action is None:
        action = bpy.data.actions.new(f"{obj.name}Action")
        ad.action = action
        snapshot.created_action = action
    else:
        snapshot.protect(ad.action)
    return ad.action


_POSE_PATH = re.compile(
    r'^pose\.bones\["((?:[^"\\]|\\.)*)"\]\.(location|rotation_quaternion|rotation_euler|rotation_axis_angle|scale)$'
)
_CONSTRAINT_PATH = re.compile(r'^pose\.bones\["(?:[^"\\]|\\.)*"\]\.constraints\[')


def rotation_bone(path: str) -> str | None:
    """The bone whose rotation channel `path` names ('pose.bones["name"].rotation_euler'), else None."""
    m = _POSE_PATH.match(path)
    if m is None or not m.group(2).startswith("rotation_"):
        return None
    return _unescape(m.group(1))


def sets_channel(path: str) -> bool:
    """Whether `path` names a pose bone's transform channel ('pose.bones["name"].location', ...)."""
    return _POSE_PATH.match(path) is not None


def _unescape(name: str) -> str:
    return name.replace('\\"', '"').replace("\\\\", "\\")


def pose_curves(obj: bpy.types.Object) -> list[tuple[str, int, int, bpy.types.FCurve]] | str:
    """The F-Curves Blender applies to `obj`'s pose channels, as (channel, bone index, component, F-Curve), or
    why its animation is more than that: another data path, NLA strips, a blend, drivers of anything but
    bone constraints, an animated armature data (`rig.lookahead`, `rig.fastread` predict the pose from them).
    `all_fcurves` reads the action's F-Curves; muted and empty ones are left out, as Blender leaves them."""
    ad = obj.animation_data
    if ad is None or ad.action is None:
        return "no action"
    if any(not t.mute for t in ad.nla_tracks) or ad.use_tweak_mode:
        return "NLA strips"
    # Drivers of constraint settings (the hands' and feet's follow constraints of Set Up Character) drive bones
    # the solve does not read (the callers check that the bones it reads have no constraints). Any other
    # driver may set what the solve reads.
    if any(not _CONSTRAINT_PATH.match(d.data_path) for d in ad.drivers):
        return "drivers of other than bone constraints"
    if ad.action_blend_type != "REPLACE" or ad.action_influence != 1.0:
        return "the action blends"
    data_ad = obj.data.animation_data
    if data_ad is not None and (data_ad.action is not None or len(data_ad.drivers)):
        return "the armature data is animated"
    index = {name: i for i, name in enumerate(obj.pose.bones.keys())}
    out = []
    for fc in all_fcurves(ad.action, obj):
        if fc.mute or (fc.group is not None and fc.group.mute):
            continue  # Blender does not apply it
        if not len(fc.keyframe_points) and not len(fc.modifiers):
            continue  # an empty F-Curve: not applied either
        m = _POSE_PATH.match(fc.data_path)
        if m is None:
            return f"an F-Curve on '{fc.data_path}' (only bone transforms are predicted)"
        b = index.get(_unescape(m.group(1)), -1)
        if b < 0:
            return f"an F-Curve on a bone that does not exist ('{fc.data_path}')"
        out.append((m.group(2), b, fc.array_index, fc))
    return out


def animated_rotations(obj: bpy.types.Object) -> set[str]:
    """Names of the bones whose rotation channels the armature's animation sets (action, NLA, drivers)."""
    ad = obj.animation_data
    if ad is None:
        return set()
    paths: list[str] = [d.data_path for d in ad.drivers]
    actions = [ad.action] if ad.action is not None else []
    actions += [s.action for t in ad.nla_tracks if not t.mute for s in t.strips if s.action is not None]
    for action in actions:
        paths += [fc.data_path for fc in all_fcurves(action, obj)]
    found = (rotation_bone(path) for path in paths)
    return {name for name in found if name is not None}
