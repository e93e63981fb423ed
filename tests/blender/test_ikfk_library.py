"""IK <-> FK across append and library override: the FK store (rig/fk.py) travels with the rig, so an IK
result is never taken for FK.

A library file holds the demo character in an FK pose driven by Reach IK (Influence 1: the IK result is in
its channels), in a collection with its targets and poles. Everything is measured from what Blender holds:
the channels byte for byte (`rigs.pose_snapshot`) and the evaluated tails.
"""

from __future__ import annotations

from pathlib import Path

import bpy
import numpy as np
import pytest
import rigs
from mathutils import Quaternion, Vector
from test_ikfk import _chain, _quaternion_bytes, _settle, _setup

COLLECTION = "Character.rig"
RIG = "Character"
KEYS = ('["_reach_ik_fk"]', '["_reach_ik_fk_bones"]')
POSED = Quaternion((0.9, 0.1, 0.3, -0.2)).normalized()


def _library(tmp_path: Path, flags: bool = True) -> tuple[str, bytes, bytes]:
    """Save the library file; returns its path, the FK pose and the IK pose it holds (pose snapshots).

    `flags=False` clears the library-overridable flag of the FK store, as a file saved before Reach IK set it.
    """
    rig, fk = _setup()
    scene = bpy.context.scene
    coll = bpy.data.collections.new(COLLECTION)
    scene.collection.children.link(coll)
    for ob in (rig.obj, *(s.target for s in rig.chains), *(s.pole for s in rig.chains if s.pole is not None)):
        coll.objects.link(ob)
        scene.collection.objects.unlink(ob)
    _settle()
    ik = rigs.pose_snapshot(rig.obj)
    assert ik != fk
    for key in KEYS:
        assert rig.obj.get(key.strip('["]')) is not None, key
        if not flags:
            rig.obj.property_overridable_library_set(key, False)
        assert rig.obj.is_property_overridable_library(key) == flags, key
    path = str(tmp_path / "library.blend")
    bpy.ops.wm.save_as_mainfile(filepath=path, copy=True)
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    return path, fk, ik


def _rig() -> bpy.types.Object:
    """The one armature named RIG that is not linked data (appended, or the override)."""
    (obj,) = (ob for ob in bpy.data.objects if ob.name == RIG and ob.library is None)
    return obj


def _all_influences(obj: bpy.types.Object, value: float) -> None:
    for ch in obj.reach_ik.chains:
        ch.influence = value
    _settle()


def _override(path: str, fully_editable: bool) -> bpy.types.Object:
    """Link the library's collection and override it (the rig, its targets and poles); returns the rig."""
    with bpy.data.libraries.load(path, link=True) as (_src, dst):
        dst.collections = [COLLECTION]
    (linked,) = dst.collections
    linked.override_hierarchy_create(bpy.context.scene, bpy.context.view_layer, do_fully_editable=fully_editable)
    obj = _rig()
    assert obj.override_library is not None and obj.override_library.reference.library is not None
    assert obj.override_library.is_system_override != fully_editable
    for ch in obj.reach_ik.chains:
        assert ch.target.override_library is not None, ch.name  # the override's own targets
    return obj


def _reaches(obj: bpy.types.Object) -> None:
    for ch in obj.reach_ik.chains:
        tip = rigs.world_tail(obj, ch.tip_bone)
        far = np.linalg.norm(tip - np.array(ch.target.matrix_world.translation))
        assert far <= 2e-3, (ch.name, ch.message)


def _move_targets(obj: bpy.types.Object) -> None:
    """Move every chain's target on the override (so every chain solves and writes anew there)."""
    for ch in obj.reach_ik.chains:
        ch.target.location += Vector((0.01, 0.01, -0.01))
    _settle()


def _with_posed_upper_arm(fk: bytes, obj: bpy.types.Object) -> bytes:
    """The FK snapshot with upper_arm.L's quaternion set to POSED (quaternions come first in a snapshot)."""
    values = np.frombuffer(fk, dtype=np.float32).copy()
    b = obj.pose.bones.find("upper_arm.L")
    values[4 * b : 4 * b + 4] = np.array(POSED, dtype=np.float32)
    return values.tobytes()


def _save_and_reload(tmp_path: Path) -> bpy.types.Object:
    main = str(tmp_path / "shot.blend")
    bpy.ops.wm.save_as_mainfile(filepath=main)
    bpy.ops.wm.open_mainfile(filepath=main)
    obj = _rig()
    assert obj.override_library is not None
    return obj


@pytest.mark.parametrize("how", ["libraries.load", "wm.append"])
def test_appended_rig_keeps_its_fk_pose(tmp_path: Path, how: str) -> None:
    path, fk, _ik = _library(tmp_path)
    if how == "libraries.load":
        with bpy.data.libraries.load(path, link=False) as (_src, dst):
            dst.collections = [COLLECTION]
        bpy.context.scene.collection.children.link(dst.collections[0])
    else:
        bpy.ops.wm.append(directory=f"{path}/Collection/", filename=COLLECTION)
    obj = _rig()
    assert obj.override_library is None
    _settle()
    assert rigs.pose_snapshot(obj) != fk, "the appended rig shows the IK result"
    _all_influences(obj, 0.0)
    assert rigs.pose_snapshot(obj) == fk


def test_override_solves_live_and_influence_zero_shows_the_fk_pose(tmp_path: Path) -> None:
    path, fk, ik = _library(tmp_path)
    obj = _override(path, fully_editable=True)
    _move_targets(obj)
    _reaches(obj)
    assert rigs.pose_snapshot(obj) not in (fk, ik), "the override solved for its own targets"
    _all_influences(obj, 0.0)
    assert rigs.pose_snapshot(obj) == fk


@pytest.mark.parametrize("flags", [True, False], ids=["library-flags", "old-library"])
def test_override_hand_pose_survives_save_and_reload(tmp_path: Path, flags: bool) -> None:
    """Posed by hand at Influence 0.5 on the override, saved, reloaded: at Influence 0 the hand-posed value
    is the FK pose and every other bone shows its original FK value. The override's IK results all differ
    from the library's (its targets moved), so had the store been reverted to the library's on reload, each
    would be taken for FK."""
    path, fk, _ik = _library(tmp_path, flags)
    obj = _override(path, fully_editable=True)
    _move_targets(obj)
    _reaches(obj)
    _chain(obj, "arm.L").influence = 0.5
    _settle()
    obj.pose.bones["upper_arm.L"].rotation_quaternion = POSED
    _settle()
    posed = np.array(POSED, dtype=np.float32).tobytes()
    assert _quaternion_bytes(obj, "upper_arm.L") != posed, "the blend of the hand pose with IK is shown"
    obj = _save_and_reload(tmp_path)
    _settle()
    _all_influences(obj, 0.0)
    assert _quaternion_bytes(obj, "upper_arm.L") == posed
    assert rigs.pose_snapshot(obj) == _with_posed_upper_arm(fk, obj)


def test_override_whose_store_the_library_cannot_hold_takes_the_saved_channels_for_fk(tmp_path: Path) -> None:
    """The documented limit (rig/fk.py, "Library overrides"): a chain added on the override gives the store a
    row the library's lacks, so the rows cannot be saved with the override. After reload the stale library
    rows are not paired with the override's names: every channel as saved is the FK value, nothing else."""
    path, fk, _ik = _library(tmp_path)
    obj = _override(path, fully_editable=True)
    head = obj.reach_ik.chains.add()
    head.name, head.tip_bone, head.chain_length = "head", "head", 1
    head.target = _chain(obj, "spine").target
    _move_targets(obj)
    saved = rigs.pose_snapshot(obj)
    assert saved != fk
    obj = _save_and_reload(tmp_path)
    assert [ch.name for ch in obj.reach_ik.chains][-1] == "head", "the added chain is kept with the override"
    assert rigs.pose_snapshot(obj) == saved
    _all_influences(obj, 0.0)
    assert rigs.pose_snapshot(obj) == saved


def test_system_override_is_refused_until_made_editable(tmp_path: Path) -> None:
    """Blender ignores writes through foreach_set to a system override's channels: solving there would note
    as written what never reached them, and the library's IK result would be taken for FK once the override
    is made editable. Reach IK refuses it with a message; made editable, it solves, and Influence 0 shows the
    FK pose exactly."""
    path, fk, ik = _library(tmp_path)
    obj = _override(path, fully_editable=False)
    _move_targets(obj)
    assert rigs.pose_snapshot(obj) == ik
    for ch in obj.reach_ik.chains:
        assert "system library override" in ch.message, ch.message
    for ob in bpy.context.view_layer.objects:
        ob.select_set(ob == obj)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.object.make_override_library() == {"FINISHED"}
    assert not obj.override_library.is_system_override
    _settle()
    _reaches(obj)
    for ch in obj.reach_ik.chains:
        assert "override" not in ch.message, ch.message
    _all_influences(obj, 0.0)
    assert rigs.pose_snapshot(obj) == fk
