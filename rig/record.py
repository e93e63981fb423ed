"""Live playback recorded into keys: what a render plays so that each frame shows what playback shows.

The scene steps through the frames in order on the main thread with live solving on, exactly as playback
does (the same handlers, the same warm starts from the previous frame, rigs that follow rigs solved in the
same update), and the channels live solving wrote are read after each step: every chain bone's rotation
channel in its own mode, and the Y scale of chain bones whose stretch differs from the channel's value
before. They are then written as keys (`bake._merge_keys`: the range replaced, keys outside kept) into the
action the rig plays for the render (`rig/render.py`: a copy of the user's action, or a new one).
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np
from numpy.typing import NDArray

from . import anim, armature, bake, fk
from . import body as rig_body
from .props import rig_settings

F32 = NDArray[np.float32]


@dataclass
class Recording:
    obj: bpy.types.Object
    bones: list[int]  # pose bone indices of the chain bones
    rotation: F32  # (F, B, 4): each bone's raw rotation channel (its mode's width, zero padded)
    scale_y: F32  # (F, B)
    location: F32 | None = None  # (F, B, 3): Full Body moves the body root's location


def chain_bones(obj: bpy.types.Object, chains: set[int]) -> list[int]:
    """Pose bone indices of the bones of chains `chains` (each once, in the armature's order)."""
    index = {pb.name: i for i, pb in enumerate(obj.pose.bones)}
    names: set[str] = set()
    settings = rig_settings(obj)
    for i in chains:
        ch = settings.chains[i]
        names.update(fk.chain_bone_names(obj, ch.tip_bone, ch.chain_length))
    if settings.full_body:  # the body root moves too (its name as set, else as the last solve stored it)
        root = settings.body_root or obj.get(rig_body.BONE_KEY)
        if isinstance(root, str):
            names.add(root)
    return sorted(index[n] for n in names if n in index)


def _width(mode: str) -> tuple[str, int]:
    return armature.rotation_channel(mode)


def record(
    scene: bpy.types.Scene, rigs: list[tuple[bpy.types.Object, list[int]]], frames: list[int]
) -> list[Recording]:
    """Step `scene` through `frames` (live solving on) and read what was written on each rig's chain bones."""
    out = []
    for obj, bones in rigs:
        n = len(bones)
        out.append(
            Recording(obj, bones, np.zeros((len(frames), n, 4), np.float32), np.zeros((len(frames), n), np.float32))
        )
    for k, f in enumerate(frames):
        scene.frame_set(f)
        for rec in out:
            channels = armature.read_channels(rec.obj, armature.ALL_CHANNELS)
            for j, b in enumerate(rec.bones):
                attr, width = _width(rec.obj.pose.bones[b].rotation_mode)
                rec.rotation[k, j, :width] = channels[attr][b]
            rec.scale_y[k] = channels["scale"][rec.bones, 1]
            if rec.location is None:
                rec.location = np.zeros((len(frames), len(rec.bones), 3), np.float32)
            rec.location[k] = channels["location"][rec.bones]
    return out


def write(rec: Recording, frames: list[int], channels_before: dict[str, F32], action: bpy.types.Action) -> int:
    """Write `rec` as keys into `action` (the rig's current action); returns the number of keys."""
    obj = rec.obj
    pbs = obj.pose.bones
    times = np.asarray(frames, dtype=np.float64)
    opts = bake.BakeOptions(frames[0], frames[-1])
    curves = anim.fcurve_map(action, obj)
    count = 0
    defaults: anim.Keys = {}  # the fields of a new key, learnt from the first merge (`bake._merge_keys`)
    for j, b in enumerate(rec.bones):
        pb = pbs[b]
        attr, width = _width(pb.rotation_mode)
        columns = [(attr, index, rec.rotation[:, j, index]) for index in range(width)]
        # Y scale only where live solving stretched (or gave back a stretch): elsewhere the channel stays as is.
        if (rec.scale_y[:, j] != channels_before["scale"][b, 1]).any():
            columns.append(("scale", 1, rec.scale_y[:, j]))
        # Location only where live solving moved it (Full Body's root), likewise.
        if rec.location is not None and "location" in channels_before:
            if (rec.location[:, j] != channels_before["location"][b]).any():
                columns += [("location", index, rec.location[:, j, index]) for index in range(3)]
        for channel, index, values in columns:
            path = pb.path_from_id(channel)
            fc = curves.get((path, index))
            if fc is None:
                fc = anim.new_fcurve(action, obj, path, index, pb.name)
            count += bake._merge_keys(fc, times, values.astype(np.float64), opts, False, defaults)
    return count
