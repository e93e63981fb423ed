"""One-click character set-up and Symmetrize, measured from Blender's evaluated pose.

Rigs: Rigify's human metarig (ships with Blender; nobody here wrote it) and skeletons built from
`demo/humanoids.py` in each naming convention (Mixamo, Unreal, VRM, Character Creator, Daz, generic, and
names that say nothing), at metre and centimetre scale, in different facings.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import addon_utils
import bpy
import numpy as np
import pytest
import rigs
from conftest import ADDON
from mathutils import Matrix, Quaternion, Vector

from demo import rigs as demo_rigs


def _pose(obj: bpy.types.Object) -> dict[str, np.ndarray]:
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    return {pb.name: np.array(ev.matrix_world @ pb.matrix) for pb in ev.pose.bones}


def _control_world(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> np.ndarray:
    if ch.target_bone:
        return rigs.world_head(ch.target, ch.target_bone)
    return np.array(ch.target.matrix_world.translation)


def _move_control_toward_root(obj: bpy.types.Object, ch: bpy.types.PropertyGroup, t: float) -> np.ndarray:
    """Move the chain's control a fraction `t` of the way to the chain's root joint (reachable); where to."""
    root = obj.pose.bones[ch.tip_bone]
    for _ in range(ch.chain_length - 1):
        root = root.parent
    goal_world = Vector(rigs.world_head(obj, root.name))
    start = Vector(_control_world(obj, ch))
    want = start.lerp(goal_world, t)
    if ch.target_bone:
        pb = obj.pose.bones[ch.target_bone]
        # Move the control bone in world space: through its own pose matrix.
        m = obj.matrix_world @ pb.matrix
        m.translation = want
        pb.matrix = obj.matrix_world.inverted() @ m
    else:
        ch.target.matrix_world.translation = want
    rigs.update()
    return np.array(want)


def _setup(obj: bpy.types.Object, **kw: object) -> set[str]:
    bpy.context.view_layer.objects.active = obj
    return bpy.ops.reach.auto_setup(**kw)


@pytest.fixture
def rigify() -> Iterator[None]:
    mod = addon_utils.enable("rigify", default_set=True, handle_error=None)
    if mod is None:
        pytest.skip("the bundled rigify add-on cannot be enabled in this bpy build")
    try:
        yield
    finally:
        addon_utils.disable("rigify", default_set=True, handle_error=None)


def _check_limbs(obj: bpy.types.Object, tol: float) -> None:
    """Each limb's tip lands on its control moved toward the chain's root; knees forward, elbows back."""
    chains = {ch.name: ch for ch in obj.reach_ik.chains}
    for name in ("arm.L", "arm.R", "leg.L", "leg.R"):
        ch = chains[name]
        want = _move_control_toward_root(obj, ch, 0.35)
        tip = rigs.world_tail(obj, ch.tip_bone)
        assert ch.is_valid, f"{name}: {ch.message}"
        assert np.linalg.norm(tip - want) < tol, f"{name}: tip {tip} is {np.linalg.norm(tip - want)} from {want}"


def _bend_side(obj: bpy.types.Object, ch: bpy.types.PropertyGroup, forward: np.ndarray) -> float:
    """How far the middle joint sits in front (+) of the line from the limb's root to its tip."""
    tip = obj.pose.bones[ch.tip_bone]
    middle = rigs.world_head(obj, tip.name)
    root = rigs.world_head(obj, tip.parent.name)
    end = rigs.world_tail(obj, tip.name)
    axis = (end - root) / np.linalg.norm(end - root)
    off = (middle - root) - axis * ((middle - root) @ axis)
    return float(off @ forward)


def test_rigify_metarig_is_set_up_in_one_click(rigify: None) -> None:
    bpy.ops.object.armature_human_metarig_add()
    obj = bpy.context.active_object
    rigs.update()
    bones_before = {b.name for b in obj.data.bones}
    before = _pose(obj)
    assert _setup(obj) == {"FINISHED"}
    rigs.update()
    after = _pose(obj)
    assert max(np.abs(after[n] - before[n]).max() for n in before) < 1e-5, "the set-up moved the pose"
    chains = {ch.name: ch for ch in obj.reach_ik.chains}
    assert set(chains) == {"arm.L", "arm.R", "leg.L", "leg.R", "spine", "neck"}
    assert chains["arm.L"].tip_bone == "forearm.L" and chains["leg.R"].tip_bone == "shin.R"
    assert chains["spine"].tip_bone == "spine.003" and chains["spine"].chain_length == 3
    assert chains["arm.L"].solver == "TWO_BONE" and chains["arm.L"].pole_bone == "Pole-arm.L"
    assert chains["leg.L"].target_bone == "IK-foot.L"
    new = {b.name for b in obj.data.bones} - bones_before
    assert {"IK-hand.L", "IK-foot.R", "Pole-leg.R", "IK-chest", "IK-head"} <= new
    assert all(not obj.data.bones[n].use_deform for n in new), "controls do not deform"
    # Limits: hinges on the shins and forearms, cones on thighs, upper arms and spine.
    for bone in ("shin.L", "forearm.R", "thigh.L", "upper_arm.R", "spine.002"):
        assert obj.pose.bones[bone].reach_ik.use_cone, bone
    # Move the feet up toward the hips: knees bend forward (-Y is the metarig's front), elbows back.
    _check_limbs(obj, 2e-3)
    forward = np.array(obj.matrix_world.to_3x3() @ Vector((0.0, -1.0, 0.0)))
    for side in ("L", "R"):
        assert _bend_side(obj, chains[f"leg.{side}"], forward) > 0.05, f"knee {side} bends forward"
        assert _bend_side(obj, chains[f"arm.{side}"], forward) < -0.02, f"elbow {side} bends back"
    # The foot takes its control's rotation (it stays as the control turns it, whatever the knee does).
    control = obj.pose.bones["IK-foot.L"]
    control.rotation_quaternion = Quaternion((0.3, 0.2, -0.4), 0.6) @ control.rotation_quaternion
    rigs.update()
    pose = _pose(obj)
    turn = (
        Matrix(pose["foot.L"].tolist())
        .to_quaternion()
        .rotation_difference(Matrix(pose["IK-foot.L"].tolist()).to_quaternion())
    )
    assert turn.angle < 1e-3, f"the foot is {math.degrees(turn.angle):.2f} degrees off its control's rotation"


CONVENTIONS = ["mixamo", "unreal", "vrm", "cc", "daz", "generic_lr", "generic_words", "generic_dot", "anonymous"]


@pytest.mark.parametrize("convention", CONVENTIONS)
def test_each_convention_is_set_up_and_its_limbs_follow(convention: str) -> None:
    # Unreal rigs come in centimetres under a 0.01 object scale; VRM faces +Y after import here; Daz has
    # its twist bones in line (FABRIK limbs).
    scale = 0.01 if convention in {"unreal", "cc"} else 1.0
    obj = demo_rigs.humanoid(convention, bent=convention not in {"mixamo", "vrm"}, scale=scale)
    if convention == "vrm":
        obj.rotation_euler = (0.0, 0.0, math.pi)
    if convention == "generic_words":
        obj.rotation_euler = (math.pi / 2, 0.0, math.radians(30.0))  # a Y-up import, turned
    rigs.update()
    before = _pose(obj)
    controls = "EMPTY" if convention in {"generic_lr", "cc"} else "BONE"
    assert _setup(obj, controls=controls) == {"FINISHED"}
    rigs.update()
    after = _pose(obj)
    assert max(np.abs(after[n][:3, 3] - before[n][:3, 3]).max() for n in before) < 1e-4
    names = {ch.name for ch in obj.reach_ik.chains}
    assert {"arm.L", "arm.R", "leg.L", "leg.R", "spine"} <= names
    if controls == "EMPTY":
        assert all(ch.target is not None and ch.target.type == "EMPTY" for ch in obj.reach_ik.chains)
    _check_limbs(obj, 2e-3)
    forward = np.array(obj.matrix_world.to_3x3().normalized() @ Vector((0.0, -1.0, 0.0)))
    for side in ("L", "R"):
        ch = next(c for c in obj.reach_ik.chains if c.name == f"leg.{side}")
        assert _bend_side(obj, ch, forward) > 0.02, f"{convention}: knee {side} bends forward"


def test_rerun_adds_nothing_and_undo_restores_everything() -> None:
    obj = demo_rigs.humanoid("mixamo")
    rigs.update()
    bpy.ops.ed.undo_push(message="before")
    bones_before = len(obj.data.bones)
    snapshot = rigs.pose_snapshot(obj)
    assert _setup(obj) == {"FINISHED"}
    chains = len(obj.reach_ik.chains)
    bones = len(obj.data.bones)
    assert _setup(obj) == {"CANCELLED"}, "a second run adds nothing"
    assert len(obj.reach_ik.chains) == chains and len(obj.data.bones) == bones
    bpy.ops.ed.undo_push(message="set up")
    bpy.ops.ed.undo()
    obj = bpy.data.objects["Character"]
    assert len(obj.reach_ik.chains) == 0 and len(obj.data.bones) == bones_before, "undo removes everything"
    assert rigs.pose_snapshot(obj) == snapshot


def test_a_skeleton_that_is_not_a_humanoid_changes_nothing() -> None:
    obj = rigs.chain_rig(4)
    rigs.update()
    snapshot = rigs.pose_snapshot(obj)
    bones = len(obj.data.bones)
    with pytest.raises(RuntimeError, match="not a humanoid"):
        _setup(obj)
    assert len(obj.reach_ik.chains) == 0 and len(obj.data.bones) == bones
    assert rigs.pose_snapshot(obj) == snapshot


def test_symmetrize_mirrors_limits_and_chains() -> None:
    obj = demo_rigs.humanoid("generic_dot")
    rigs.update()
    assert _setup(obj) == {"FINISHED"}
    lim = obj.pose.bones["forearm.L"].reach_ik
    lim.cone_left, lim.cone_right, lim.cone_up, lim.cone_down = 0.3, 0.4, 0.5, 0.6
    lim.use_twist, lim.twist_min, lim.twist_max = True, -0.2, 0.1
    # Remove the right arm's chain; Symmetrize brings it back from the left one, with a changed setting.
    chains = obj.reach_ik.chains
    chains.remove(next(i for i, c in enumerate(chains) if c.name == "arm.R"))
    left = next(c for c in chains if c.name == "arm.L")
    left.weight = 2.5
    bpy.ops.object.mode_set(mode="POSE")
    compat = sys.modules[ADDON + ".rig.compat"]
    for pb in obj.pose.bones:
        compat.select_bone(pb, pb.name == "forearm.L")
    obj.data.bones.active = obj.data.bones["forearm.L"]
    assert bpy.ops.reach.symmetrize() == {"FINISHED"}
    bpy.ops.object.mode_set(mode="OBJECT")
    r = obj.pose.bones["forearm.R"].reach_ik
    assert (r.cone_left, r.cone_right) == pytest.approx((0.4, 0.3)), "left and right swap"
    assert (r.cone_up, r.cone_down) == pytest.approx((0.5, 0.6)), "up and down stay"
    assert (r.twist_min, r.twist_max) == pytest.approx((-0.1, 0.2)), "the twist range is negated"
    right = next(c for c in obj.reach_ik.chains if c.tip_bone == "forearm.R")
    assert right.name == "arm.R" and right.weight == pytest.approx(2.5)
    assert right.target_bone == "IK-hand.R" and right.pole_bone == "Pole-arm.R", "the mirrored controls"
    # The test's narrow elbow cones would stop the arms short: off, the mirrored chain reaches as the left.
    for side in ("L", "R"):
        obj.pose.bones[f"forearm.{side}"].reach_ik.use_cone = False
    rigs.update()
    _check_limbs(obj, 2e-3)


def test_symmetrize_makes_mirrored_empties_for_a_chain_with_empties() -> None:
    obj = demo_rigs.humanoid("unreal")
    rigs.update()
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="POSE")
    obj.data.bones.active = obj.data.bones["lowerarm_l"]
    assert bpy.ops.reach.chain_add() == {"FINISHED"}
    assert bpy.ops.reach.symmetrize() == {"FINISHED"}
    bpy.ops.object.mode_set(mode="OBJECT")
    right = next(c for c in obj.reach_ik.chains if c.tip_bone == "lowerarm_r")
    left = next(c for c in obj.reach_ik.chains if c.tip_bone == "lowerarm_l")
    assert right.target is not None and right.target != left.target
    lt, rt = Vector(left.target.matrix_world.translation), Vector(right.target.matrix_world.translation)
    assert (rt - Vector((-lt.x, lt.y, lt.z))).length < 1e-5, "the new target is the left one's mirror image"
    rigs.update()
    assert np.linalg.norm(rigs.world_tail(obj, "lowerarm_r") - np.array(rt)) < 1e-3


def test_the_set_up_keeps_limits_a_bone_has_and_a_rerun_touches_only_the_chains_it_adds() -> None:
    obj = demo_rigs.humanoid("unreal")
    rigs.update()
    mine = obj.pose.bones["lowerarm_l"].reach_ik
    mine.use_cone, mine.cone_up, mine.cone_down, mine.cone_left, mine.cone_right = True, 0.9, 0.1, 0.2, 0.3
    assert _setup(obj) == {"FINISHED"}
    assert (mine.cone_up, mine.cone_down, mine.cone_left, mine.cone_right) == pytest.approx((0.9, 0.1, 0.2, 0.3))
    # The user tunes a knee the set-up limited, removes the spine chain and sets up again: only the spine
    # chain (and its bones' limits) comes back; the tuned knee stays as tuned.
    knee = obj.pose.bones["calf_r"].reach_ik
    knee.cone_up = 0.42
    chains = obj.reach_ik.chains
    chains.remove(next(i for i, c in enumerate(chains) if c.name == "spine"))
    for b in ("spine_01", "spine_02", "spine_03"):
        obj.pose.bones[b].reach_ik.use_cone = obj.pose.bones[b].reach_ik.use_twist = False
    assert _setup(obj) == {"FINISHED"}
    assert [c.name for c in obj.reach_ik.chains].count("spine") == 1
    assert knee.cone_up == pytest.approx(0.42), "a re-run leaves the limits of the chains it keeps alone"
    assert obj.pose.bones["spine_02"].reach_ik.use_cone, "the re-added spine gets its limits"


_SYMMETRIZE_MANY = """
import json, sys
sys.path[:0] = ["tools", "."]
import bpy_session
import bpy, addon_utils
bpy_session.enable_addon()
compat = bpy_session.submodule("rig.compat")
addon_utils.enable("rigify", default_set=True)
bpy.ops.object.armature_human_metarig_add()
obj = bpy.context.active_object
bpy.context.view_layer.update()
assert bpy.ops.reach.auto_setup(fingers=True) == {"FINISHED"}
chains = obj.reach_ik.chains
for name in [c.name for c in chains if c.tip_bone.endswith(".R")]:
    chains.remove(next(i for i, c in enumerate(chains) if c.name == name))
bpy.ops.object.mode_set(mode="EDIT")
for eb in [b for b in obj.data.edit_bones if b.name.endswith(".R") and b.name.startswith(("IK-", "Pole-"))]:
    obj.data.edit_bones.remove(eb)
bpy.ops.object.mode_set(mode="OBJECT")
# Saved and read back: a read collection holds exactly its items, so Symmetrize's adds must reallocate it
# (removing items never shrinks a collection's storage).
path = sys.argv[-1]
bpy.ops.wm.save_as_mainfile(filepath=path)
bpy.ops.wm.open_mainfile(filepath=path)
obj = bpy.data.objects["metarig"]
bpy.context.view_layer.objects.active = obj
chains = obj.reach_ik.chains
left = {c.tip_bone: i for i, c in enumerate(chains) if c.tip_bone.endswith(".L")}
for k, (tip, i) in enumerate(sorted(left.items())):
    chains[i].weight, chains[i].soft = 1.0 + 0.25 * k, 0.01 * k
want = {tip[:-2] + ".R": [chains[i].weight, chains[i].soft, chains[i].solver] for tip, i in left.items()}
bpy.ops.object.mode_set(mode="POSE")
for pb in obj.pose.bones:
    compat.select_bone(pb, pb.name in left)
result = sorted(bpy.ops.reach.symmetrize())
bpy.ops.object.mode_set(mode="OBJECT")
right = [c for c in obj.reach_ik.chains if c.tip_bone.endswith(".R")]
got = {c.tip_bone: [c.weight, c.soft, c.solver, c.target_bone] for c in right}
print("RESULT " + json.dumps({"result": result, "want": want, "got": got, "bones": [b.name for b in obj.data.bones]}))
sys.stdout.flush()
bpy_session.finish(0)
"""


def test_symmetrize_with_many_chain_tips_selected_mirrors_each_chain(tmp_path: Path) -> None:
    """Issue #35.1: Symmetrize held a chain across `chains.add()`, which may reallocate the collection, so
    the held item pointed into freed memory (a segfault or a hang with several tips selected). Run in a
    process whose freed memory glibc poisons (MALLOC_PERTURB_), so a dangling read fails every time instead
    of by chance: every left chain of Rigify's metarig (fingers included), mirrored at once, lands on the
    right with its own settings and a mirrored control bone."""
    cwd = Path(__file__).resolve().parents[2]
    env = dict(os.environ, MALLOC_PERTURB_="165")
    try:
        # The bound is a hang guard far above the ~10 s the run takes, not a speed check (the old code hung).
        run = subprocess.run(
            [sys.executable, "-c", _SYMMETRIZE_MANY, str(tmp_path / "sym.blend")],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired as hang:
        pytest.fail(f"Symmetrize hung (no result in {hang.timeout} s)")
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, f"the Symmetrize run died (exit {run.returncode}): {run.stderr[-2000:]}"
    out = json.loads(line[len("RESULT ") :])
    assert out["result"] == ["FINISHED"]
    want, got = out["want"], out["got"]
    assert len(want) >= 6, f"the set-up made few left-side chains: {sorted(want)}"
    assert set(got) == set(want), f"mirrored chains {sorted(got)}, expected {sorted(want)}"
    for tip, (weight, soft, solver) in want.items():
        assert got[tip][:2] == pytest.approx([weight, soft]) and got[tip][2] == solver, (tip, got[tip])
        assert got[tip][3].endswith(".R") and got[tip][3] in out["bones"], f"{tip}: control {got[tip][3]!r}"


def test_a_pose_past_the_presets_moves_nothing_and_the_report_says_which_limit_grew() -> None:
    # A kick: the Mixamo demo skeleton's left thigh raised 130 degrees forward (the hip preset allows 110).
    obj = demo_rigs.humanoid("mixamo", bent=False)
    rigs.update()
    pb = obj.pose.bones["mixamorig:LeftUpLeg"]
    world = obj.matrix_world @ pb.matrix
    head = world.translation.copy()
    kick = Matrix.Translation(head) @ Matrix.Rotation(math.radians(-130.0), 4, "X") @ Matrix.Translation(-head)
    pb.matrix = obj.matrix_world.inverted() @ kick @ world
    rigs.update()
    assert rigs.world_tail(obj, "mixamorig:LeftLeg")[2] > rigs.world_head(obj, "mixamorig:LeftUpLeg")[2], "kicked"
    before = _pose(obj)
    assert _setup(obj) == {"FINISHED"}
    rigs.update()
    after = _pose(obj)
    worst = max(np.abs(after[n][:3, 3] - before[n][:3, 3]).max() for n in before)
    assert worst < 1e-4, f"the set-up moved the kicked leg by {worst:.4f}"
    tail_before = before["mixamorig:LeftLeg"] @ np.array([0.0, obj.data.bones["mixamorig:LeftLeg"].length, 0.0, 1.0])
    tail_after = after["mixamorig:LeftLeg"] @ np.array([0.0, obj.data.bones["mixamorig:LeftLeg"].length, 0.0, 1.0])
    assert np.linalg.norm(tail_after - tail_before) < 1e-4


def test_the_report_names_the_limits_widened_for_the_pose() -> None:
    from importlib import import_module

    setup = import_module(f"{ADDON}.operators.setup")
    character = import_module(f"{ADDON}.core.character")
    limit_fit = import_module(f"{ADDON}.core.limit_fit")
    chain = character.ChainSpec("leg.L", 2, 2, "TWO_BONE", "IK-foot.L", np.eye(4))
    the_plan = character.SetupPlan((chain,), {}, widened={1: limit_fit.Widened(math.radians(21.0), 0.0)})
    text = setup.limits_summary(the_plan, [chain], ("hips", "thigh", "shin"), (-1, 0, 1), None)
    assert "thigh cone +21.0°" in text and "current pose" in text
