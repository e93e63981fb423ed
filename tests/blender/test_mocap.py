"""Set Up Character on real motion capture: CMU clips imported with Blender's own BVH importer.

`../shared/data/mocap/cmu_131_01.bvh` (a walk) and `cmu_131_03.bvh` (a hop): joint-named bones, a rest pose
with arms down and legs splayed, unconnected bones and end stubs as the importer makes them. Everything is
measured on Blender's evaluated pose; limits are checked with the solver's own containment test on the
rotations Blender's channels hold (`matrix_basis`, the rotation the limits are measured on).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import bpy
import numpy as np
import pytest
from conftest import ADDON

# `../shared` beside the repository (the work folder's, and CI's copy).
MOCAP = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mocap"
CLIPS = ("cmu_131_01", "cmu_131_03")

limits_mod = sys.modules.get(f"{ADDON}.solvers.limits") or __import__(f"{ADDON}.solvers.limits", fromlist=["x"])


def fcurves(obj: bpy.types.Object) -> list[bpy.types.FCurve]:
    """The armature's F-Curves (`Action.fcurves` is gone from Blender 5.0: through the add-on's adapter)."""
    anim = __import__("bpy_session").submodule("rig.anim")
    return list(anim.all_fcurves(obj.animation_data.action, obj))


def import_clip(name: str) -> bpy.types.Object:
    path = MOCAP / f"{name}.bvh"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    bpy.ops.import_anim.bvh(filepath=str(path))
    obj = bpy.context.object
    assert obj is not None and obj.type == "ARMATURE"
    return obj


def evaluated(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    """World heads and tails of every bone, as Blender evaluates them now."""
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    mw = ev.matrix_world
    out = {}
    for pb in ev.pose.bones:
        out[pb.name] = np.array(mw @ pb.head)
        out[pb.name + " tail"] = np.array(mw @ pb.tail)
    return out


def moved(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> tuple[float, str]:
    return max((float(np.linalg.norm(after[k] - before[k])), k) for k in before)


def set_up(obj: bpy.types.Object, **kw: object) -> set[str]:
    bpy.context.view_layer.objects.active = obj
    return bpy.ops.reach.auto_setup(**kw)


def basis_rotations(obj: bpy.types.Object, names: list[str]) -> np.ndarray:
    """(n,3,3) the rotation part of each bone's matrix_basis (what its channels hold now)."""
    out = []
    for n in names:
        m = np.array(obj.pose.bones[n].matrix_basis)[:3, :3]
        out.append(m / np.linalg.norm(m, axis=0))
    return np.array(out)


def limit_rows(obj: bpy.types.Object, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(cone (n,4) in up/down/left/right order, twist min, twist max, which use a cone) of bones `names`."""
    cone, tmin, tmax, use = [], [], [], []
    for n in names:
        lim = obj.pose.bones[n].reach_ik
        cone.append([lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right])
        tw = lim.use_twist
        tmin.append(lim.twist_min if tw else -math.pi)
        tmax.append(lim.twist_max if tw else math.pi)
        use.append(lim.use_cone)
    return np.array(cone), np.array(tmin), np.array(tmax), np.array(use)


@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize("frame", [1, 137, 420, 800])
def test_a_cmu_clip_is_set_up_and_nothing_moves(clip: str, frame: int) -> None:
    obj = import_clip(clip)
    scene = bpy.context.scene
    scene.frame_set(frame)
    before = evaluated(obj)
    assert set_up(obj) == {"FINISHED"}
    scene.frame_set(frame)
    after = evaluated(obj)
    dist, where = moved(before, after)
    assert dist <= 1e-4, f"{clip} frame {frame}: the set-up moved {where} by {dist:.4f}"
    chains = {ch.name: ch for ch in obj.reach_ik.chains}
    assert set(chains) == {"arm.L", "arm.R", "leg.L", "leg.R", "spine", "neck"}
    assert chains["leg.L"].tip_bone == "LeftKnee" and chains["arm.R"].tip_bone == "RightElbow"
    assert all(ch.is_valid for ch in chains.values()), [ch.message for ch in chains.values()]


@pytest.mark.parametrize("frame", [60, 500])
def test_nothing_moves_without_fitting_limits_to_the_animation(frame: int) -> None:
    # Limits from the body alone, widened only where this frame's pose lies outside them.
    obj = import_clip("cmu_131_03")
    scene = bpy.context.scene
    scene.frame_set(frame)
    before = evaluated(obj)
    assert set_up(obj, fit_animation=False) == {"FINISHED"}
    scene.frame_set(frame)
    dist, where = moved(before, evaluated(obj))
    assert dist <= 1e-4, f"frame {frame}: the set-up moved {where} by {dist:.4f}"


@pytest.mark.parametrize("clip", CLIPS)
def test_limits_fitted_to_the_animation_hold_every_frame(clip: str) -> None:
    obj = import_clip(clip)
    scene = bpy.context.scene
    start, end = (int(v) for v in obj.animation_data.action.frame_range)
    frames = list(range(start, end + 1, 7))
    names = [pb.name for pb in obj.pose.bones]
    rel = []
    for f in frames:
        scene.frame_set(f)
        rel.append(basis_rotations(obj, names))
    scene.frame_set(start)
    assert set_up(obj) == {"FINISHED"}
    limited = [n for n in names if obj.pose.bones[n].reach_ik.use_cone or obj.pose.bones[n].reach_ik.use_twist]
    assert {"LeftHip", "LeftKnee", "RightShoulder", "RightElbow", "Chest"} <= set(limited)
    idx = [names.index(n) for n in limited]
    cone, tmin, tmax, use = limit_rows(obj, limited)
    for f, r in zip(frames, rel, strict=True):
        r = r[idx]
        inside = limits_mod.cone_contains(r[:, :, 1], cone)
        twist = limits_mod.twist_angle(r)
        ok = (inside | ~use) & (twist >= tmin - 1e-6) & (twist <= tmax + 1e-6)
        bad = [limited[k] for k in np.flatnonzero(~ok)]
        assert not bad, f"{clip} frame {f}: the motion lies outside the limits of {bad}"


@pytest.mark.parametrize("at", ["frame", "rest"])
def test_knees_bend_forward_and_elbows_back_on_the_cmu_skeleton(at: str) -> None:
    # Without the animation: the bend side comes from the pose (frame 1: knees bent) or, at the rest pose
    # (limbs straight), from the body's frame.
    obj = import_clip("cmu_131_01")
    bpy.context.scene.frame_set(1)
    if at == "rest":
        obj.animation_data.action = None
        for pb in obj.pose.bones:
            pb.matrix_basis.identity()
            pb.location = (0.0, 0.0, 0.0)
            pb.rotation_euler = (0.0, 0.0, 0.0)
        bpy.context.view_layer.update()
    assert set_up(obj, fit_animation=False) == {"FINISHED"}
    # A hinge's bend side (its widest cone side) points toward the back of the body at the knee and toward the
    # front at the elbow. Directions in each bone's reference frame (armature space is world space here).
    pb = obj.pose.bones
    back_world = np.array([0.0, 1.0, 0.0])  # the CMU clips face -Y after Blender's importer
    axes = {"up": np.array([0.0, 0.0, 1.0]), "down": np.array([0.0, 0.0, -1.0])}
    axes |= {"left": np.array([-1.0, 0.0, 0.0]), "right": np.array([1.0, 0.0, 0.0])}
    for side in ("Left", "Right"):
        for bone, sign in ((f"{side}Knee", 1.0), (f"{side}Elbow", -1.0)):
            b = pb[bone]
            ref = np.array((b.parent.matrix @ b.parent.bone.matrix_local.inverted() @ b.bone.matrix_local).to_3x3())
            ref /= np.linalg.norm(ref, axis=0)
            back = ref.T @ back_world
            back[1] = 0.0
            back /= np.linalg.norm(back)
            lim = b.reach_ik
            widest = max(axes, key=lambda k: getattr(lim, f"cone_{k}"))
            assert math.degrees(getattr(lim, f"cone_{widest}")) >= 90.0, f"{bone}: a hinge bends far"
            assert sign * float(axes[widest] @ back) > 0.3, f"{bone} bends toward {widest}, the back is {back}"


# Where the clip puts hands, feet and head (tips of the chains: tails of the forearm, shin and head bones), and
# elbows and knees (tails of the upper arm and thigh bones).
ENDS = ("LeftElbow", "RightElbow", "LeftKnee", "RightKnee", "Head")
MIDDLES = ("LeftShoulder", "RightShoulder", "LeftHip", "RightHip")


def play(obj: bpy.types.Object, start: int, end: int) -> np.ndarray:
    """(frames, bones, 3) world tails of ENDS then MIDDLES on every frame, played in order."""
    scene = bpy.context.scene
    out = []
    for f in range(start, end + 1):
        scene.frame_set(f)
        ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        out.append([np.array(ev.matrix_world @ ev.pose.bones[n].tail) for n in (*ENDS, *MIDDLES)])
    return np.array(out)


@pytest.mark.parametrize("clip", CLIPS)
def test_snapped_over_its_range_the_ik_plays_and_bakes_the_clip(clip: str) -> None:
    obj = import_clip(clip)
    start, end = (int(v) for v in obj.animation_data.action.frame_range)
    mocap = play(obj, start, end)
    bpy.context.scene.frame_set(start)
    assert set_up(obj) == {"FINISHED"}
    done = bpy.ops.reach.snap_to_pose(chains="ALL", use_range=True, frame_start=start, frame_end=end)
    assert done == {"FINISHED"}
    # Every target and pole is keyed on every frame of the range.
    for ch in obj.reach_ik.chains:
        bone = obj.pose.bones[ch.target_bone]
        path = f'pose.bones["{bone.name}"].location'
        curves = [fc for fc in fcurves(obj) if fc.data_path == path]
        assert curves and len(curves[0].keyframe_points) == end - start + 1, ch.name
    tol = obj.reach_ik.tolerance
    n = len(ENDS)
    for what in ("live playback", "the bake"):
        if what == "the bake":
            assert bpy.ops.reach.bake(frame_start=start, frame_end=end) == {"FINISHED"}
        got = play(obj, start, end)
        ends = np.linalg.norm(got[:, :n] - mocap[:, :n], axis=2)
        middles = np.linalg.norm(got[:, n:] - mocap[:, n:], axis=2)
        f, k = np.unravel_index(int(np.argmax(ends)), ends.shape)
        assert ends.max() <= tol, f"{clip}, {what}: {ENDS[k]} is {ends.max():.2e} off at frame {start + f}"
        f, k = np.unravel_index(int(np.argmax(middles)), middles.shape)
        # 0.01 here is 0.7 mm on this skeleton (its units are about 7 cm): stricter than 1 cm.
        assert middles.max() <= 0.01, f"{clip}, {what}: {MIDDLES[k]} is {middles.max():.2e} off at frame {start + f}"


def test_a_range_snap_with_an_empty_range_changes_nothing() -> None:
    obj = import_clip("cmu_131_01")
    bpy.context.scene.frame_set(5)
    assert set_up(obj) == {"FINISHED"}
    keys_before = sum(len(fc.keyframe_points) for fc in fcurves(obj))
    with pytest.raises(RuntimeError, match="empty"):
        bpy.ops.reach.snap_to_pose(chains="ALL", use_range=True, frame_start=10, frame_end=3)
    assert sum(len(fc.keyframe_points) for fc in fcurves(obj)) == keys_before
    assert bpy.context.scene.frame_current == 5


# ---------------------------------------------------------------------------------------------------------
# Other datasets' shapes: small BVH files written from the format's docs (tests/blender/bvh_files.py)
# ---------------------------------------------------------------------------------------------------------

SHAPE_LABELS = {"lying": "generic", "apose": "Mixamo", "unreal_cm": "Unreal mannequin"}


def import_shape(shape: str, tmp_path: Path) -> bpy.types.Object:
    import bvh_files

    path = bvh_files.write(tmp_path / f"{shape}.bvh", shape)
    bpy.ops.import_anim.bvh(filepath=str(path))
    obj = bpy.context.object
    assert obj is not None and obj.type == "ARMATURE"
    return obj


@pytest.mark.parametrize("shape", sorted(SHAPE_LABELS))
def test_other_shapes_are_set_up_truthfully_nothing_moves_and_the_motion_fits(shape: str, tmp_path: Path) -> None:
    obj = import_shape(shape, tmp_path)
    scene = bpy.context.scene
    names = [pb.name for pb in obj.pose.bones]
    start, end = (int(v) for v in obj.animation_data.action.frame_range)
    rel = []
    for f in range(start, end + 1):
        scene.frame_set(f)
        rel.append(basis_rotations(obj, names))
    scene.frame_set(17)
    before = evaluated(obj)
    character = __import__("bpy_session").submodule("rig.character")
    humanoid = __import__("bpy_session").submodule("core.humanoid")
    found = humanoid.recognise(character.read_skeleton(obj).info)
    assert found.by == SHAPE_LABELS[shape], f"{shape}: read as {found.by}"
    assert set_up(obj) == {"FINISHED"}
    scene.frame_set(17)
    dist, where = moved(before, evaluated(obj))
    assert dist <= 1e-4 * (100.0 if shape != "lying" else 1.0), f"{shape}: the set-up moved {where} by {dist}"
    limited = [n for n in names if obj.pose.bones[n].reach_ik.use_cone or obj.pose.bones[n].reach_ik.use_twist]
    idx = [names.index(n) for n in limited]
    cone, tmin, tmax, use = limit_rows(obj, limited)
    for f, r in enumerate(rel, start):
        r = r[idx]
        ok = (limits_mod.cone_contains(r[:, :, 1], cone) | ~use) & (limits_mod.twist_angle(r) >= tmin - 1e-6)
        ok &= limits_mod.twist_angle(r) <= tmax + 1e-6
        assert ok.all(), f"{shape} frame {f}: outside the limits of {[limited[k] for k in np.flatnonzero(~ok)]}"


def test_a_skeleton_lying_along_one_axis_gets_no_limit_it_cannot_justify(tmp_path: Path) -> None:
    # At its rest pose, with no animation, nothing tells which way the body faces or the knees bend: the
    # set-up makes no hip cone and no knee hinge, and says so.
    obj = import_shape("lying", tmp_path)
    obj.animation_data.action = None
    for pb in obj.pose.bones:
        pb.rotation_euler = (0.0, 0.0, 0.0)
        pb.location = (0.0, 0.0, 0.0)
    bpy.context.view_layer.update()
    bs = __import__("bpy_session")
    sk = bs.submodule("rig.character").read_skeleton(obj)
    h = bs.submodule("core.humanoid").recognise(sk.info)
    core = bs.submodule("core.character")
    plan = core.plan(h, sk.info.names, sk.info.parent, sk.rest, sk.length, sk.pose, core.SetupOptions())
    unlimited = {sk.info.names[b] for b in plan.unlimited}
    assert {"UpperLeg_L", "UpperLeg_R", "LowerLeg_L", "LowerLeg_R"} <= unlimited, unlimited
    assert all(sk.info.names[b] not in unlimited for b in plan.limits)
    text = bs.submodule("operators.setup").limits_summary(plan, list(plan.chains), sk.info.names, sk.info.parent, None)
    assert "no limit on" in text and "LowerLeg_L (straight" in text
    before = evaluated(obj)
    assert set_up(obj) == {"FINISHED"}
    dist, where = moved(before, evaluated(obj))
    assert dist <= 1e-4, f"the set-up moved {where} by {dist}"
    assert not obj.pose.bones["LowerLeg_L"].reach_ik.use_cone, "no knee hinge it cannot justify"


def test_a_set_up_whose_chains_miss_their_controls_warns(capfd: pytest.CaptureFixture[str]) -> None:
    # A knee limit the user set before (kept by the set-up) holds the shin straight where the clip bends it:
    # the leg cannot reach its control, and the set-up says so as a warning naming the chain.
    obj = import_clip("cmu_131_01")
    bpy.context.scene.frame_set(200)
    lim = obj.pose.bones["LeftKnee"].reach_ik
    lim.use_cone = True
    lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(1.0)
    capfd.readouterr()
    assert set_up(obj) == {"FINISHED"}
    out = capfd.readouterr().out
    assert "Warning: Reach IK:" in out and "chain 'leg.L' misses its control by" in out, out[-600:]
    assert "chain 'leg.R'" not in out
