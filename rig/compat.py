"""Small, typed adapters over Blender APIs whose stubs or behaviour differ between versions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

import bpy


def classes_factory(classes: Sequence[type]) -> tuple[Callable[[], None], Callable[[], None]]:
    """`bpy.utils.register_classes_factory`, typed (fake-bpy-module declares it as returning None)."""
    factory: Callable[[Sequence[type]], tuple[Callable[[], None], Callable[[], None]]]
    factory = bpy.utils.register_classes_factory  # type: ignore[assignment]
    return factory(classes)


class _SelectablePoseBone(Protocol):
    """`PoseBone` as Blender 5.0+ has it (the 4.5 stubs we type against do not know `select`)."""

    select: bool


def _pose_bone_has_select(pb: bpy.types.PoseBone) -> bool:
    # A feature test, not a version number: selection moved from `Bone.select` (up to 4.5) to
    # `PoseBone.select` (from 5.0), and the RNA property list says which one this Blender has.
    return "select" in pb.bl_rna.properties


def is_bone_selected(pb: bpy.types.PoseBone) -> bool:
    """Whether pose bone `pb` is selected, on every supported Blender."""
    if _pose_bone_has_select(pb):
        return bool(cast(_SelectablePoseBone, pb).select)
    return bool(pb.bone.select)


def select_bone(pb: bpy.types.PoseBone, state: bool = True) -> None:
    """Select (or with `state=False` deselect) pose bone `pb`, on every supported Blender."""
    if _pose_bone_has_select(pb):
        cast(_SelectablePoseBone, pb).select = state
    else:
        pb.bone.select = state
