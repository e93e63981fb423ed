"""Baking: keys reproduce the live solve, nothing else changes, failures change nothing, re-bakes are stable."""

from __future__ import annotations

import json
import math
from pathlib import Path

import bpy
import bpy_session
import numpy as np
import pytest
import rigs

TOL = 1e-3


def _anim_rig(
    modes: tuple[str, ...] = ("QUATERNION", "XYZ", "AXIS_ANGLE"),
) -> tuple[bpy.types.Object, bpy.types.Object]:
    rig = rigs.chain_rig(3)
    for pb, mode in zip(rig.pose.bones, modes, strict=True):
        pb.rotation_mode = mode
    target = rigs.empty("T", (0.8, 0.2, 2.0))
    for frame, loc in ((1, (0.8, 0.2, 2.0)), (10, (-0.5, 0.7, 2.3)), (20, (0.2, -0.9, 1.6))):
        target.location = loc
        target.keyframe_insert("location", frame=frame)
    rigs.add_chain(rig, "b2", 3, target)
    rig.reach_ik.start_from = "REST"
    return rig, target


def _fcurves(obj: bpy.types.Object) -> list[bpy.types.FCurve]:
    anim = bpy_session.submodule("rig.anim")
    ad = obj.animation_data
    return [] if ad is None or ad.action is None else anim.all_fcurves(ad.action, obj)


def _keys(obj: bpy.types.Object) -> dict[tuple[str, int], bytes]:
    anim = bpy_session.submodule("rig.anim")
    out = {}
    for fc in _fcurves(obj):
        data = anim.read_keys(fc)
        out[(fc.data_path, fc.array_index)] = b"".join(np.ascontiguousarray(v).tobytes() for v in data.values())
    return out


def _bake(rig: bpy.types.Object, start: int = 1, end: int = 20, **kw: object) -> set[str]:
    bpy.context.view_layer.objects.active = rig
    return bpy.ops.reach.bake(frame_start=start, frame_end=end, **kw)  # type: ignore[no-any-return]


def test_bake_reproduces_live_solve() -> None:
    rig, target = _anim_rig()
    assert _bake(rig) == {"FINISHED"}
    assert not rig.reach_ik.chains[0].enabled, "baked chains are disabled so the keys play back"
    paths = {fc.data_path for fc in _fcurves(rig)}
    assert paths == {
        'pose.bones["b0"].rotation_quaternion',
        'pose.bones["b1"].rotation_euler',
        'pose.bones["b2"].rotation_axis_angle',
    }, f"keys go in each bone's own rotation-mode channels: {paths}"
    for fc in _fcurves(rig):
        assert len(fc.keyframe_points) == 20, f"{fc.data_path}[{fc.array_index}] has {len(fc.keyframe_points)} keys"
    for frame in (1, 5, 10, 13, 20):
        bpy.context.scene.frame_set(frame)
        tip = rigs.world_tail(rig, "b2")
        goal = np.array(target.matrix_world.translation)
        assert np.linalg.norm(tip - goal) <= TOL, f"frame {frame}: replayed tip {tip} vs target {goal}"


def test_untouched_channels_and_outside_keys_identical() -> None:
    rig, _ = _anim_rig()
    b0 = rig.pose.bones["b0"]
    for frame in (-5, 0, 5, 15, 30):
        b0.rotation_quaternion = (1.0, 0.01 * frame, 0.0, 0.0)
        b0.keyframe_insert("rotation_quaternion", frame=frame)
        b0.location = (0.0, 0.001 * frame, 0.0)
        b0.keyframe_insert("location", frame=frame)
    rig.pose.bones["b1"].keyframe_insert("scale", frame=3)
    before = _keys(rig)
    anim = bpy_session.submodule("rig.anim")
    quat_before = {
        i: anim.read_keys(anim.find_fcurve(rig.animation_data.action, rig, b0.path_from_id("rotation_quaternion"), i))
        for i in range(4)
    }
    assert _bake(rig, 1, 20) == {"FINISHED"}
    after = _keys(rig)
    for key, data in before.items():
        if "rotation" not in key[0]:
            assert after[key] == data, f"untouched channel {key} must stay byte-identical"
    for i in range(4):
        fc = anim.find_fcurve(rig.animation_data.action, rig, b0.path_from_id("rotation_quaternion"), i)
        now = anim.read_keys(fc)
        old = quat_before[i]
        outside = (old["co"][:, 0] < 1) | (old["co"][:, 0] > 20)
        kept = (now["co"][:, 0] < 1) | (now["co"][:, 0] > 20)
        for field in ("co", "interpolation", "handle_left_type", "handle_right_type", "easing", "type"):
            assert np.array_equal(now[field][kept], old[field][outside]), f"outside key {field} changed on [{i}]"
        inside = now["co"][~kept, 0]
        assert np.array_equal(inside, np.arange(1, 21, dtype=np.float32)), "the range holds exactly the baked keys"


def test_failure_half_way_changes_nothing() -> None:
    rig, target = _anim_rig()
    anim = bpy_session.submodule("rig.anim")
    fc = anim.find_fcurve(target.animation_data.action, target, "location", 0)
    kp = fc.keyframe_points
    kp.add(1)
    kp[-1].co = (12.0, math.nan)
    fc.update()
    for k in kp:  # keep the NaN from leaking into neighbouring frames through Bezier handles
        k.interpolation = "CONSTANT"
    rig.pose.bones["b0"].keyframe_insert("location", frame=1)
    rig.pose.bones["b1"].rotation_euler = (0.1, 0.2, 0.3)  # an unkeyed tweak
    bpy.context.scene.frame_set(7)
    keys_before = _keys(rig)
    pose_before = rigs.pose_snapshot(rig)
    actions_before = sorted(a.name for a in bpy.data.actions)
    with pytest.raises(RuntimeError, match="frame 12"):
        _bake(rig, 1, 20)
    assert _keys(rig) == keys_before, "a failed bake leaves the action exactly as it was"
    assert rigs.pose_snapshot(rig) == pose_before, "a failed bake leaves the pose exactly as it was"
    assert bpy.context.scene.frame_current == 7
    assert sorted(a.name for a in bpy.data.actions) == actions_before
    assert rig.reach_ik.chains[0].enabled


def _groups(obj: bpy.types.Object) -> list[tuple[str, list[str]]]:
    anim = bpy_session.submodule("rig.anim")
    groups = anim._groups(obj.animation_data.action, obj)
    return sorted((g.name, sorted(f"{c.data_path}[{c.array_index}]" for c in g.channels)) for g in groups)


@pytest.mark.parametrize("fail_at", [1, 4, 9])
def test_failure_while_writing_changes_nothing(monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
    """A bake that fails after it has started writing keys puts every curve back from its copy.

    Curves are written b0 (4, existing), b1 (3, new, in b1's existing group), b2 (4, new, and a new group):
    the failure comes before anything is written, after existing curves changed, and after a group was made.
    """
    rig, _ = _anim_rig()
    b0 = rig.pose.bones["b0"]
    for frame in (-5, 5, 15, 30):  # keys inside the range (replaced) and outside it (merged around)
        b0.rotation_quaternion = (1.0, 0.01 * frame, 0.0, 0.0)
        b0.keyframe_insert("rotation_quaternion", frame=frame)
    rig.pose.bones["b1"].keyframe_insert("location", frame=3)  # b2 has no keys and no group yet
    bpy.context.scene.frame_set(7)  # the live solve poses the rig before the snapshot, as in the UI
    keys_before, groups_before = _keys(rig), _groups(rig)
    pose_before = rigs.pose_snapshot(rig)
    actions_before = sorted(a.name for a in bpy.data.actions)
    bake = bpy_session.submodule("rig.bake")
    merge, calls = bake._merge_keys, []

    def failing(*args: object, **kw: object) -> int:
        calls.append(1)
        if len(calls) == fail_at:
            raise RuntimeError("disk on fire")
        return merge(*args, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(bake, "_merge_keys", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        _bake(rig, 1, 20)
    assert len(calls) == fail_at, "the failure came where it was planted"
    assert _keys(rig) == keys_before, "every key of every curve is as it was, byte for byte"
    assert _groups(rig) == groups_before, "groups made for new curves are gone"
    assert rigs.pose_snapshot(rig) == pose_before, "the pose is as it was"
    assert bpy.context.scene.frame_current == 7
    assert sorted(a.name for a in bpy.data.actions) == actions_before, "the action's copy is removed"
    assert rig.reach_ik.chains[0].enabled


def test_failure_without_action_creates_none() -> None:
    rig, target = _anim_rig()
    anim = bpy_session.submodule("rig.anim")
    fc = anim.find_fcurve(target.animation_data.action, target, "location", 2)
    fc.keyframe_points.add(1)
    fc.keyframe_points[-1].co = (5.0, math.inf)
    fc.update()
    for k in fc.keyframe_points:
        k.interpolation = "CONSTANT"
    assert rig.animation_data is None
    with pytest.raises(RuntimeError, match="frame 5"):
        _bake(rig, 1, 20)
    assert rig.animation_data is None, "no action or animation data is left behind"


def test_rebake_is_idempotent() -> None:
    anim = bpy_session.submodule("rig.anim")
    rig, _ = _anim_rig()
    assert _bake(rig) == {"FINISHED"}
    first = _keys(rig)
    rig.reach_ik.chains[0].enabled = True
    assert _bake(rig) == {"FINISHED"}
    assert _keys(rig) == first, "re-baking with start_from='REST' gives bit-identical keys"
    actions = sorted(a.name for a in bpy.data.actions)
    rig.reach_ik.chains[0].enabled = True
    before = {(fc.data_path, fc.array_index): anim.read_keys(fc) for fc in _fcurves(rig)}
    assert _bake(rig, 5, 12) == {"FINISHED"}  # part of the range: the keys around it are merged
    assert sorted(a.name for a in bpy.data.actions) == actions, "no copy of the action is left behind"
    for fc in _fcurves(rig):
        old, now = before[(fc.data_path, fc.array_index)], anim.read_keys(fc)
        assert np.array_equal(now["co"][:, 0], old["co"][:, 0]), "the same frames keep one key each"
        outside = (old["co"][:, 0] < 5) | (old["co"][:, 0] > 12)
        assert np.array_equal(now["co"][outside], old["co"][outside]), "keys outside the re-baked range stay"
        # Inside, the same solve over fewer frames (uniform iterations per batch): the same pose to tolerance.
        assert np.allclose(now["co"][~outside, 1], old["co"][~outside, 1], atol=1e-3), fc.data_path


def _select_only(rig: bpy.types.Object, names: set[str]) -> None:
    """Pose Mode with exactly `names` selected, set through this Blender's own property (not our helper)."""
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode="POSE")
    for pb in rig.pose.bones:
        if "select" in pb.bl_rna.properties:  # PoseBone.select, Blender 5.0+
            pb.select = pb.name in names
        else:  # Bone.select, up to 4.5
            pb.bone.select = pb.name in names


@pytest.mark.parametrize("selected,baked", [("b3", {"b2", "b3"}), ("b1", {"b0", "b1"})])
def test_bake_selected_chains_keys_only_their_bones(selected: str, baked: set[str]) -> None:
    # Two chains on one rig, b0-b1 below b2-b3; only the chain whose tip bone is selected is baked.
    rig = rigs.chain_rig(4)
    low, high = rigs.empty("T.low", (0.6, 0.2, 1.9)), rigs.empty("T.high", (0.9, 0.4, 3.6))
    for frame, dz in ((1, 0.0), (10, -0.3)):
        for target in (low, high):
            target.location.z += dz
            target.keyframe_insert("location", frame=frame)
    rigs.add_chain(rig, "b1", 2, low, name="low")
    rigs.add_chain(rig, "b3", 2, high, name="high")
    _select_only(rig, {selected})
    # Blender's own view of the selection agrees with what the test set.
    assert [pb.name for pb in bpy.context.selected_pose_bones] == [selected]
    assert _bake(rig, 1, 10, chains="SELECTED") == {"FINISHED"}
    keyed = {fc.data_path.split('"')[1] for fc in _fcurves(rig) if len(fc.keyframe_points)}
    assert keyed == baked, f"tip {selected} selected: keys on {sorted(keyed)}, expected {sorted(baked)}"
    enabled = {ch.tip_bone for ch in rig.reach_ik.chains if ch.enabled}
    assert enabled == {"b1", "b3"} - {selected}, "only the baked chain is disabled after the bake"


def test_bake_with_step_and_reduction() -> None:
    rig, target = _anim_rig(("QUATERNION", "QUATERNION", "QUATERNION"))
    assert _bake(rig, 1, 20, step=3) == {"FINISHED"}
    frames = sorted({k.co[0] for fc in _fcurves(rig) for k in fc.keyframe_points})
    assert frames == [1, 4, 7, 10, 13, 16, 19, 20], f"step 3 keys every third frame and the last: {frames}"
    # A slow, straight motion: most keys are reproduced by straight lines between their neighbours.
    target.animation_data_clear()
    for frame, loc in ((1, (0.8, 0.2, 2.0)), (20, (0.6, 0.5, 2.1))):
        target.location = loc
        target.keyframe_insert("location", frame=frame)
    for fc in bpy_session.submodule("rig.anim").all_fcurves(target.animation_data.action, target):
        for k in fc.keyframe_points:
            k.interpolation = "LINEAR"
    rig.animation_data_clear()
    rig.reach_ik.chains[0].enabled = True
    assert _bake(rig, 1, 20, reduce=True, reduce_tolerance=1e-3) == {"FINISHED"}
    counts = [len(fc.keyframe_points) for fc in _fcurves(rig)]
    assert max(counts) < 20, f"key reduction removes keys a straight line reproduces: {counts}"
    for frame in range(1, 21):
        bpy.context.scene.frame_set(frame)
        d = np.linalg.norm(rigs.world_tail(rig, "b2") - np.array(target.matrix_world.translation))
        assert d <= 0.01, f"frame {frame}: reduced keys still follow the target ({d:.3g})"


def test_cli_bake_check_and_usage(tmp_path: Path) -> None:
    cli = bpy_session.submodule("operators.cli")
    rig, _target = _anim_rig()
    src = tmp_path / "shot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(src))
    out = tmp_path / "out" / "baked.blend"
    report = tmp_path / "r.json"
    code = cli.main(["bake", "--frames", "1-12", "--output", str(out), "--report", str(report)])
    assert code == 0 and out.exists(), "bake --output writes the baked file"
    data = json.loads(report.read_text())
    assert data["ok"] and data["rigs"][0]["frames_baked"] == 12, data
    chain = data["rigs"][0]["chains"][0]
    assert chain["frames"] == 12 and chain["max_residual"] <= TOL, chain
    assert not list(tmp_path.glob("**/.*tmp*")), "no temp files are left behind"
    assert cli.main(["bake", "--frames", "1-5", "--output", str(src)]) == 2, "refuses to overwrite the input"
    for report_at in (out, src):  # a report over the baked file or over the input is a usage error
        assert cli.main(["bake", "--frames", "1-5", "--output", str(out), "--report", str(report_at)]) == 2
    assert cli.main(["bake", "--bogus"]) == 2
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["--help"]) == 0
    assert cli.main(["check"]) == 0
    assert not rig.reach_ik.chains[0].enabled, "the CLI bake disables the baked chains"
    rig.reach_ik.chains[0].enabled = True
    rig.reach_ik.chains[0].tip_bone = "nope"
    assert cli.main(["check"]) == 1, "check exits 1 when a chain is invalid"
    assert cli.main(["bake", "--output", str(tmp_path / "x.blend")]) == 1, "invalid chains fail the bake"
    assert not (tmp_path / "x.blend").exists(), "a failed bake writes no output"
    assert cli.main(["bake", "--rig", "Nope", "--output", str(tmp_path / "y.blend")]) == 1


def test_cli_values_starting_with_a_dash() -> None:
    """`--frames -5--1` reaches --frames (negative frames are legal); nothing else changes meaning."""
    cli = bpy_session.submodule("operators.cli")
    argv = ["bake", "--frames", "-5--1", "--reduce", "-inf", "--step", "-2", "--rig", "-x", "--output", "o.blend"]
    assert cli._join_dash_values(argv) == [
        "bake",
        "--frames=-5--1",
        "--reduce=-inf",
        "--step=-2",
        *argv[7:],  # --rig takes no negative numbers: '-x' stays an (unknown) option for argparse to refuse
    ]
    assert cli._join_dash_values(["bake", "--frames", "--output", "o.blend"]) == [
        "bake",
        "--frames",
        "--output",
        "o.blend",
    ]
    assert cli._join_dash_values(["--", "--frames", "-1"]) == ["--", "--frames", "-1"]
    assert cli.main(["bake", "--frames", "--output", "o.blend"]) == 2, "a missing --frames value is still usage"
    assert cli.main(["bake", "--frames", "-5x", "--output", "o.blend"]) == 2, "a bad --frames value is usage"


def _rebaked_part(in_place: bool) -> dict[tuple[str, int], bytes]:
    """The keys after a re-bake of frames 5-12 of a rig keyed on every frame 1-30, whose keys were then given
    fields of their own (inside and outside the re-baked range), with the in-place merge on or off."""
    bake = bpy_session.submodule("rig.bake")
    anim = bpy_session.submodule("rig.anim")
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    rig, _ = _anim_rig()
    assert _bake(rig, 1, 30) == {"FINISHED"}
    for n, fc in enumerate(_fcurves(rig)):
        keys = anim.read_keys(fc)
        keys["interpolation"][n % 3 :: 3] = 0  # CONSTANT on every third key
        keys["handle_left_type"][1::4] = 2  # VECTOR
        keys["easing"][2::5] = 2  # EASE_OUT
        anim.write_keys(fc, keys, recalc=True)
    rig.reach_ik.chains[0].enabled = True
    was = bake.MERGE_IN_PLACE
    bake.MERGE_IN_PLACE = in_place
    try:
        assert _bake(rig, 5, 12) == {"FINISHED"}
    finally:
        bake.MERGE_IN_PLACE = was
    return _keys(rig)


def test_a_rebake_over_keys_on_every_frame_merges_in_place_as_it_adds() -> None:
    # The in-place merge (a curve keyed on exactly the baked frames) must write what adding and sorting does:
    # every field of every key, inside the range (new keys' defaults) and outside (kept as they were).
    added, in_place = _rebaked_part(False), _rebaked_part(True)
    assert added.keys() == in_place.keys()
    for path in added:
        assert added[path] == in_place[path], f"the in-place merge wrote other keys on {path}"
