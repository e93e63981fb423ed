"""Soft and Stretch on the bpy wheel: every number measured from Blender's evaluated pose.

Soft: no knee pop as the target crosses full extension (live, each solver). Stretch: the tip reaches targets
up to Stretch x L, the bones' Y scale is the same along the chain and X/Z stay as they were, beyond that the
chain lies straight at full stretch and reports the gap, and the scale channels are byte-identical when the
chain does not stretch. Both together reach with no pop; the bake plays back what live solving showed.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import bpy
import bpy_session
import numpy as np
import numpy.typing as npt
import pytest
import rigs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit"))

F64 = npt.NDArray[np.float64]
TOL = 1e-3
POP_LIMIT = 3.0
STEPS = 200
SOLVERS = ("TWO_BONE", "FABRIK", "CCD")


# --------------------------------------------------------------------------------------------------------
# Rigs and measurements
# --------------------------------------------------------------------------------------------------------


def leg(shin: str = "ALIGNED", foot: str = "NONE") -> bpy.types.Object:
    """root -> thigh (1.0) -> shin (1.0) -> foot, along +Z with the knee bent forward (+Y)."""
    rig = rigs.armature(
        "Rig",
        [
            ("root", None, (0.0, 0.0, -0.3), (0.0, 0.0, 0.0), False),
            ("thigh", "root", (0.0, 0.0, 0.0), (0.0, 0.1, 0.995), True),
            ("shin", "thigh", (0.0, 0.1, 0.995), (0.0, 0.0, 1.99), True),
            ("foot", "shin", (0.0, 0.0, 1.99), (0.0, 0.3, 2.1), True),
        ],
    )
    rig.data.bones["shin"].inherit_scale = shin
    rig.data.bones["foot"].inherit_scale = foot
    return rig


def chain(n: int = 3, mode: str = "ALIGNED") -> bpy.types.Object:
    """rigs.chain_rig with Inherit Scale `mode` on every bone below the first."""
    rig = rigs.chain_rig(n)
    for bone in list(rig.data.bones)[1:]:
        bone.inherit_scale = mode
    return rig


def evaluated(rig: bpy.types.Object, bone: str) -> F64:
    """The bone's evaluated world matrix (4x4)."""
    deps = bpy.context.evaluated_depsgraph_get()
    ev = rig.evaluated_get(deps)
    return np.array(ev.matrix_world @ ev.pose.bones[bone].matrix)


def axis_scales(rig: bpy.types.Object, bone: str) -> F64:
    """Lengths of the bone's evaluated X, Y, Z axes (its scale in world units, the armature's scale 1)."""
    return np.asarray(np.linalg.norm(evaluated(rig, bone)[:3, :3], axis=0), dtype=np.float64)


def bend(rig: bpy.types.Object, upper: str, lower: str) -> float:
    """The angle between two bones' evaluated Y axes (0 = straight)."""
    a, b = evaluated(rig, upper)[:3, 1], evaluated(rig, lower)[:3, 1]
    return math.acos(max(-1.0, min(1.0, float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))))


def scales(rig: bpy.types.Object) -> bytes:
    buf = np.empty(len(rig.pose.bones) * 3, dtype=np.float32)
    rig.pose.bones.foreach_get("scale", buf)
    return buf.tobytes()


def miss(rig: bpy.types.Object, tip: str, target: bpy.types.Object) -> float:
    return float(np.linalg.norm(rigs.world_tail(rig, tip) - np.array(target.matrix_world.translation)))


def pop_ratio(angles: list[float]) -> float:
    steps = np.abs(np.diff(np.array(angles)))
    return float(steps.max() / np.median(steps))


def chain_length(rig: bpy.types.Object, bones: list[str]) -> float:
    return sum(rig.data.bones[b].length for b in bones)


# --------------------------------------------------------------------------------------------------------
# Soft: the knee pop
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
def test_soft_removes_the_knee_pop(solver: str) -> None:
    """The target moves from 0.9 L to 1.1 L in 200 equal steps along a fixed line; the knee angle comes from
    the evaluated pose. Soft 0.1: the largest per-step change is at most 3x the median one. Soft 0: the pop."""
    rig = leg()
    root = np.array(rigs.world_head(rig, "thigh"))
    length = chain_length(rig, ["thigh", "shin"])
    target = rigs.empty("T", (0.0, 0.3, 1.5))
    pole = rigs.empty("P", (0.0, 2.0, 1.0))
    ch = rigs.add_chain(rig, "shin", 2, target, solver=solver, pole=pole)
    rig.reach_ik.tolerance = 1e-5
    rig.reach_ik.max_iterations = 100
    direction = np.array([0.0, 0.25, 1.0]) / np.linalg.norm([0.0, 0.25, 1.0])
    ratios = {}
    for soft in (0.0, 0.1):
        ch.soft = soft
        angles = []
        for d in np.linspace(0.9 * length, 1.1 * length, STEPS + 1):
            target.location = root + d * direction
            rigs.update()
            assert ch.is_valid, ch.message
            angles.append(bend(rig, "thigh", "shin"))
        ratios[soft] = pop_ratio(angles)
    assert ratios[0.0] > 10.0, f"soft 0 is the hard solve: it pops (max/median {ratios[0.0]:.3g})"
    assert ratios[0.1] <= POP_LIMIT, f"soft 0.1: max/median per-step knee change {ratios[0.1]:.3g}"


def test_soft_chain_trails_and_says_so() -> None:
    rig = leg()
    root = np.array(rigs.world_head(rig, "thigh"))
    length = chain_length(rig, ["thigh", "shin"])
    target = rigs.empty("T", tuple(root + np.array([0.0, 0.0, 0.97 * length])))
    ch = rigs.add_chain(rig, "shin", 2, target, solver="TWO_BONE")
    ch.soft = 0.1
    rigs.update()
    gap = miss(rig, "shin", target)
    assert 1e-3 < gap < 0.1 * length / math.e + 1e-6, f"the tip trails the target by at most s/e: {gap:.4g}"
    assert ch.is_valid and "softened" in ch.message and "Soft" in ch.message, ch.message
    assert abs(ch.residual - gap) < 1e-5, "the reported residual is the measured one"
    target.location = tuple(root + np.array([0.0, 0.3, 0.8 * length]))  # below (1 - soft) L: exact
    rigs.update()
    assert miss(rig, "shin", target) <= TOL and ch.message == "", ch.message


# --------------------------------------------------------------------------------------------------------
# Stretch
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("mode", ["ALIGNED", "NONE"])
def test_stretch_reaches_up_to_stretch_times_the_length(solver: str, mode: str) -> None:
    n = 2 if solver == "TWO_BONE" else 3
    rig = chain(n, mode)
    names = [f"b{i}" for i in range(n)]
    root = np.array(rigs.world_head(rig, "b0"))
    length = chain_length(rig, names)
    target = rigs.empty("T", (0.0, 0.0, 0.5))
    ch = rigs.add_chain(rig, f"b{n - 1}", n, target, solver=solver)
    ch.stretch = 1.5
    rigs.update()
    before = np.array(rig.pose.bones["b0"].scale)
    direction = np.array([0.3, -0.2, 1.0]) / np.linalg.norm([0.3, -0.2, 1.0])
    for ratio in (0.6, 0.99, 1.01, 1.2, 1.45, 1.499):
        target.location = tuple(root + ratio * length * direction)
        rigs.update()
        assert ch.is_valid, ch.message
        assert miss(rig, names[-1], target) <= TOL, f"{ratio} L: the tip misses by {miss(rig, names[-1], target):.3g}"
        ys = [axis_scales(rig, b)[1] for b in names]
        assert max(ys) - min(ys) < 1e-5 and min(ys) >= 1.0 - 1e-6, f"Y scales along the chain: {ys}"
        if ratio > 1.0:
            assert abs(ys[0] - ratio) < 2e-3, f"the chain stretches by just enough: {ys[0]:.5g} at {ratio} L"
        for b in names:
            xz = axis_scales(rig, b)[[0, 2]]
            assert np.abs(xz - 1.0).max() < 1e-5, f"{b}: X/Z scale unchanged, got {xz}"
            assert tuple(rig.pose.bones[b].scale)[::2] == tuple(before)[::2], "X/Z scale channels untouched"


def test_beyond_stretch_the_chain_is_straight_at_full_stretch_and_reports_the_gap() -> None:
    rig = chain(3)
    names = ["b0", "b1", "b2"]
    root = np.array(rigs.world_head(rig, "b0"))
    length = chain_length(rig, names)
    direction = np.array([0.0, 0.6, 0.8])
    target = rigs.empty("T", tuple(root + 2.0 * length * direction))
    ch = rigs.add_chain(rig, "b2", 3, target)
    ch.stretch = 1.5
    rigs.update()
    gap = miss(rig, "b2", target)
    assert abs(gap - 0.5 * length) < 1e-4, f"the tip stops at 1.5 L: gap {gap:.5g}, L {length:.5g}"
    for b in names:
        assert abs(axis_scales(rig, b)[1] - 1.5) < 1e-5
        # In float64: under numpy 2 a float divided by a float32 norm stays float32 (NEP 50).
        y = np.asarray(evaluated(rig, b)[:3, 1], dtype=np.float64)
        assert float(y @ direction) / float(np.linalg.norm(y)) > 1.0 - 1e-6, f"{b} lies along the root-target line"
    assert ch.is_valid and "out of reach" in ch.message and "Stretch" in ch.message, ch.message
    assert abs(ch.residual - gap) < 1e-5


@pytest.mark.parametrize("solver", SOLVERS)
def test_scale_channels_byte_identical_when_not_stretching(solver: str) -> None:
    n = 2 if solver == "TWO_BONE" else 3
    rig = chain(n)
    target = rigs.empty("T", (0.4, 0.2, 0.8 * n))  # within reach
    rig.pose.bones["b1"].scale = (1.25, 1.0, 0.75)  # X/Z scale set by hand, Y at 1
    ch = rigs.add_chain(rig, f"b{n - 1}", n, target, solver=solver)
    before = scales(rig)
    ch.stretch = 1.5
    rigs.update()
    assert ch.is_valid and miss(rig, f"b{n - 1}", target) <= TOL, ch.message
    assert scales(rig) == before, "a chain that does not stretch never writes the scale channels"
    ch.stretch = 1.0
    target.location = (0.0, 0.0, 5.0 * n)  # far out of reach, stretch off: no scale either
    rigs.update()
    assert scales(rig) == before


def test_stretch_ends_when_the_target_comes_back() -> None:
    rig = chain(3)
    target = rigs.empty("T", (0.0, 0.0, 3.6))
    ch = rigs.add_chain(rig, "b2", 3, target)
    ch.stretch = 1.4
    rigs.update()
    assert rig.pose.bones["b0"].scale[1] > 1.1
    target.location = (0.5, 0.3, 2.0)
    rigs.update()
    assert miss(rig, "b2", target) <= TOL
    assert [tuple(pb.scale) for pb in rig.pose.bones] == [(1.0, 1.0, 1.0)] * 3, "back to the modelled length"
    # A stretch left when Stretch goes back to 1 is undone (it is ours); one set by hand is not.
    target.location = (0.0, 0.0, 3.6)
    rigs.update()
    ch.stretch = 1.0
    rigs.update()
    assert [tuple(pb.scale) for pb in rig.pose.bones] == [(1.0, 1.0, 1.0)] * 3
    rig.pose.bones["b0"].scale = (1.0, 1.2, 1.0)
    rigs.update()
    assert tuple(rig.pose.bones["b0"].scale) == (1.0, np.float32(1.2), 1.0), (
        "a Y scale set by hand with Stretch 1 stays"
    )


def test_soft_and_stretch_reach_without_pop() -> None:
    rig = leg()
    root = np.array(rigs.world_head(rig, "thigh"))
    length = chain_length(rig, ["thigh", "shin"])
    target = rigs.empty("T", (0.0, 0.3, 1.5))
    pole = rigs.empty("P", (0.0, 2.0, 1.0))
    ch = rigs.add_chain(rig, "shin", 2, target, solver="TWO_BONE", pole=pole)
    ch.soft, ch.stretch = 0.1, 1.5
    direction = np.array([0.0, 0.25, 1.0]) / np.linalg.norm([0.0, 0.25, 1.0])
    angles, worst = [], 0.0
    for d in np.linspace(0.9 * length, 1.3 * length, STEPS + 1):
        target.location = root + d * direction
        rigs.update()
        assert ch.is_valid, ch.message
        worst = max(worst, miss(rig, "shin", target))
        angles.append(bend(rig, "thigh", "shin"))
    assert worst <= TOL, f"soft + stretch reach the target: worst miss {worst:.3g}"
    assert pop_ratio(angles) <= POP_LIMIT, f"max/median per-step knee change {pop_ratio(angles):.3g}"
    assert angles[-1] > 1e-3, "the knee follows the soft curve: still bent while the bones stretch"


@pytest.mark.parametrize("start", ["CURRENT", "REST"])
def test_stretch_with_pole_roll_mode_and_limits(start: str) -> None:
    rig = chain(3)
    target = rigs.empty("T", (0.0, 0.0, 3.9))
    pole = rigs.empty("P", (2.0, 0.0, 1.5))
    ch = rigs.add_chain(rig, "b2", 3, target, pole=pole)
    ch.stretch, ch.soft = 1.5, 0.05
    rig.reach_ik.roll_mode = "REST"
    rig.reach_ik.start_from = start
    lim = rig.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(40.0)
    for loc in ((0.0, 0.0, 3.9), (0.8, 0.0, 3.6), (-0.6, 0.0, 3.0), (0.0, 0.0, 3.9), (0.4, 0.0, 2.6)):
        target.location = loc
        rigs.update()
        assert ch.is_valid and miss(rig, "b2", target) <= TOL, (loc, ch.message)
        ys = [axis_scales(rig, b)[1] for b in ("b0", "b1", "b2")]
        assert max(ys) - min(ys) < 1e-5
        # The chain bends toward the pole (+X): the interior joints' offsets from the root-target line.
        line = np.array(loc) / np.linalg.norm(loc)
        side = sum(evaluated(rig, b)[:3, 3] - (evaluated(rig, b)[:3, 3] @ line) * line for b in ("b1", "b2"))
        assert side[0] > 0.0, (loc, side)
    assert abs(ys[0] - 1.0) < 1e-6 and rig.pose.bones["b0"].scale[1] == 1.0, "in reach again: no stretch left"


# --------------------------------------------------------------------------------------------------------
# Children that inherit the stretch, and chains below a stretching chain
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, keeps_size",
    [("NONE", True), ("NONE_LEGACY", True), ("FULL", False), ("ALIGNED", False), ("AVERAGE", False)],
)
def test_what_a_child_of_the_tip_inherits(mode: str, keeps_size: bool) -> None:
    """The README's table: which Inherit Scale keeps a foot (the tip's child) its size."""
    rig = leg(foot=mode)
    target = rigs.empty("T", (0.0, 0.2, 2.6))
    ch = rigs.add_chain(rig, "shin", 2, target, solver="TWO_BONE")
    ch.stretch = 1.5
    rigs.update()
    assert miss(rig, "shin", target) <= TOL
    foot = axis_scales(rig, "foot")
    assert np.abs(foot - 1.0).max() < 1e-5 if keeps_size else np.abs(foot - 1.0).max() > 0.05, foot
    assert np.linalg.norm(rigs.world_head(rig, "foot") - rigs.world_tail(rig, "shin")) < 1e-5, "it stays attached"


def test_chain_below_a_stretching_chain() -> None:
    rig = rigs.armature(
        "Rig",
        [
            ("b0", None, (0.0, 0.0, 0.0), (0.0, 0.1, 1.0), False),
            ("b1", "b0", (0.0, 0.1, 1.0), (0.0, 0.0, 2.0), True),
            ("hand", "b1", (0.0, 0.0, 2.0), (0.0, 0.0, 2.3), True),
            ("f0", "hand", (0.0, 0.0, 2.3), (0.0, 0.05, 2.6), True),
            ("f1", "f0", (0.0, 0.05, 2.6), (0.0, 0.0, 2.9), True),
        ],
    )
    rig.data.bones["b1"].inherit_scale = "ALIGNED"
    arm_t = rigs.empty("TA", (0.0, 0.3, 2.6))
    finger_t = rigs.empty("TF", (0.2, 0.5, 3.2))
    arm = rigs.add_chain(rig, "b1", 2, arm_t, solver="TWO_BONE")
    fingers = rigs.add_chain(rig, "f1", 2, finger_t)
    arm.stretch = 1.5
    rigs.update()
    assert not fingers.is_valid and "'hand'" in fingers.message and "None" in fingers.message, fingers.message
    rig.data.bones["hand"].inherit_scale = "NONE"
    rigs.update()
    assert arm.is_valid and fingers.is_valid, (arm.message, fingers.message)
    assert rig.pose.bones["b0"].scale[1] > 1.01, "the arm stretches"
    assert miss(rig, "b1", arm_t) <= TOL and miss(rig, "f1", finger_t) <= TOL
    assert np.abs(axis_scales(rig, "f0") - 1.0).max() < 1e-5, "the fingers keep their size"


# --------------------------------------------------------------------------------------------------------
# What cannot stretch says so
# --------------------------------------------------------------------------------------------------------


def test_chains_that_cannot_stretch_report_it() -> None:
    rig = chain(3, "FULL")
    target = rigs.empty("T", (0.0, 0.0, 4.0))
    ch = rigs.add_chain(rig, "b2", 3, target)
    before = rigs.pose_snapshot(rig)
    ch.stretch = 1.2
    rigs.update()
    assert not ch.is_valid and "'b1'" in ch.message and "Aligned" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before, "a refused chain writes nothing"
    for bone in ("b1", "b2"):
        rig.data.bones[bone].inherit_scale = "ALIGNED"
    rig.pose.bones["b0"].lock_scale[1] = True
    ch.stretch = 1.3  # a setting change re-checks the chain
    rigs.update()
    assert not ch.is_valid and "'b0'" in ch.message and "locked" in ch.message, ch.message
    rig.pose.bones["b0"].lock_scale[1] = False
    ch.stretch = 1.25
    rigs.update()
    assert ch.is_valid and rig.pose.bones["b0"].scale[1] > 1.0, ch.message
    ch.stretch = 1.0
    rig.data.bones["b1"].inherit_scale = "AVERAGE"
    rigs.update()
    assert not ch.is_valid and "Average" in ch.message, ch.message


def test_trees_take_soft_and_stretch_per_chain() -> None:
    # Each chain of a tree eases and stretches its own branch (tests/blender/test_tree_features.py measures
    # both); a branch whose bones cannot stretch refuses its tree, and changes nothing.
    rig = rigs.armature(
        "Rig",
        [
            ("body", None, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), False),
            ("l0", "body", (0.0, 0.0, 1.0), (-0.5, 0.0, 1.5), True),
            ("l1", "l0", (-0.5, 0.0, 1.5), (-1.0, 0.0, 1.4), True),
            ("r0", "body", (0.0, 0.0, 1.0), (0.5, 0.0, 1.5), True),
            ("r1", "r0", (0.5, 0.0, 1.5), (1.0, 0.0, 1.4), True),
        ],
    )
    left = rigs.add_chain(rig, "l1", 3, rigs.empty("TL", (-0.9, 0.2, 1.5)))
    right = rigs.add_chain(rig, "r1", 3, rigs.empty("TR", (0.9, 0.2, 1.5)))
    rigs.update()
    assert left.is_valid and right.is_valid
    left.soft = 0.1
    rigs.update()
    assert left.is_valid and right.is_valid, (left.message, right.message)
    before = rigs.pose_snapshot(rig)
    left.stretch = 1.5  # 'l1' inherits the scale of 'l0' in full: the branch cannot stretch
    rigs.update()
    for ch in (left, right):
        assert not ch.is_valid and "tree" in ch.message and "'l1'" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before
    rig.data.bones["l1"].inherit_scale = "NONE"
    rigs.update()
    assert left.is_valid and right.is_valid, (left.message, right.message)


def test_stretch_with_target_rotation() -> None:
    rig = chain(3)
    target = rigs.empty("T", (0.0, 0.0, 3.7))
    target.rotation_euler = (math.pi / 2, 0.0, 0.2)  # the tip bone's Y (along it) about +Z
    ch = rigs.add_chain(rig, "b2", 3, target)
    ch.use_target_rotation = True
    ch.stretch = 1.5
    rigs.update()
    assert not ch.is_valid and "'b2'" in ch.message and "keeps its length" in ch.message, ch.message
    rig.data.bones["b2"].inherit_scale = "NONE"
    rigs.update()
    assert ch.is_valid and miss(rig, "b2", target) <= TOL, ch.message
    assert abs(axis_scales(rig, "b2")[1] - 1.0) < 1e-5, "the tip keeps its length"
    assert axis_scales(rig, "b0")[1] > 1.05 and abs(axis_scales(rig, "b0")[1] - axis_scales(rig, "b1")[1]) < 1e-5


# --------------------------------------------------------------------------------------------------------
# Baking
# --------------------------------------------------------------------------------------------------------


def _fcurves(obj: bpy.types.Object) -> list[bpy.types.FCurve]:
    anim = bpy_session.submodule("rig.anim")
    ad = obj.animation_data
    return [] if ad is None or ad.action is None else anim.all_fcurves(ad.action, obj)


def _tails(rig: bpy.types.Object, names: list[str]) -> F64:
    return np.array([rigs.world_tail(rig, b) for b in names])


@pytest.mark.parametrize("start", ["CURRENT", "REST"])
def test_bake_matches_live_and_keys_only_stretched_bones(start: str) -> None:
    rig = leg()
    names = ["thigh", "shin", "foot"]
    target = rigs.empty("T", (0.0, 0.3, 1.5))
    for frame, loc in ((1, (0.0, 0.3, 1.5)), (12, (0.0, 0.4, 2.5)), (24, (0.3, 0.2, 2.6)), (30, (0.0, 0.5, 1.4))):
        target.location = loc
        target.keyframe_insert("location", frame=frame)
    # A second chain that never stretches: it gets no scale keys.
    rig2 = leg()
    rig2.location = (3.0, 0.0, 0.0)
    still = rigs.add_chain(rig2, "shin", 2, rigs.empty("T2", (3.0, 0.3, 1.2)), solver="TWO_BONE")
    still.stretch = 1.5
    # A pole fixes the bend plane: without one, a 'Current' start takes it from the pose it starts from,
    # which differs between live solving (the frame before) and a bake (the pose at the bake's start).
    ch = rigs.add_chain(rig, "shin", 2, target, solver="TWO_BONE", pole=rigs.empty("P", (0.0, 2.0, 1.0)))
    ch.soft, ch.stretch = 0.1, 1.4
    rig.reach_ik.start_from = start
    live, misses = {}, []
    for frame in range(1, 31):
        bpy.context.scene.frame_set(frame)
        live[frame] = _tails(rig, names)
        misses.append(miss(rig, "shin", target))
    assert max(misses) <= TOL
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.bake(frame_start=1, frame_end=30) == {"FINISHED"}
    scale_curves = {(fc.data_path, fc.array_index) for fc in _fcurves(rig) if fc.data_path.endswith(".scale")}
    assert scale_curves == {('pose.bones["thigh"].scale', 1)}, f"Y scale keys of the carrier only: {scale_curves}"
    # 'Current' keeps each bone's twist from the pose it starts from (live: the frame before; the bake: the
    # pose when it starts), which turns the foot about the shin: compare the joints there, everything at 'Rest'.
    cols = slice(None) if start == "REST" else slice(0, 2)
    worst = 0.0
    for frame in range(1, 31):
        bpy.context.scene.frame_set(frame)
        worst = max(worst, float(np.abs(_tails(rig, names)[cols] - live[frame][cols]).max()))
    assert worst <= 1e-4, f"baked playback vs live: {worst:.3g}"
    bpy.context.view_layer.objects.active = rig2
    assert bpy.ops.reach.bake(frame_start=1, frame_end=30) == {"FINISHED"}
    assert not any(fc.data_path.endswith(".scale") for fc in _fcurves(rig2)), "no stretch, no scale keys"


# --------------------------------------------------------------------------------------------------------
# The scalar kernels agree with the batched solvers on soft chains
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["two_bone", "fabrik", "ccd"])
def test_scalar_kernels_soften_like_the_batched_solvers(kind: str) -> None:
    from solver_fixtures import make_rig

    from solvers import SOFT, ChainProblem, solve_ccd, solve_fabrik, solve_two_bone
    from solvers.scalar import solve_ccd_scalar, solve_fabrik_scalar, solve_two_bone_scalar

    pairs = {
        "two_bone": (solve_two_bone, solve_two_bone_scalar),
        "fabrik": (solve_fabrik, solve_fabrik_scalar),
        "ccd": (solve_ccd, solve_ccd_scalar),
    }
    batched, scalar = pairs[kind]
    rng = np.random.default_rng(11)
    n = 2 if kind == "two_bone" else 4
    k = 12
    rig = make_rig(rng, k, n)
    root = rig.positions[:, 0]
    length = rig.lengths.sum(axis=1)
    direction = rng.normal(size=(k, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    targets = root + (length * np.linspace(0.85, 1.2, k))[:, None] * direction
    problem: ChainProblem = rig.problem(targets, soft=np.full(k, 0.15), tolerance=1e-4, max_iterations=60)
    a, b = batched(problem), scalar(problem)
    assert np.array_equal(a.status, b.status) and (a.status == SOFT).any()
    assert np.abs(a.positions[:, -1] - b.positions[:, -1]).max() <= 1e-4 + 1e-5 * length.max()
    assert np.allclose(a.residual, b.residual, atol=1e-4)


def test_animated_soft_and_stretch_bake_like_live() -> None:
    """Soft and Stretch are keyable: the bake reads them at every frame, as live solving does."""
    rig = leg()
    names = ["thigh", "shin", "foot"]
    target = rigs.empty("T", (0.0, 0.6, 2.6))
    ch = rigs.add_chain(rig, "shin", 2, target, solver="TWO_BONE", pole=rigs.empty("P", (0.0, 2.0, 1.0)))
    rig.reach_ik.start_from = "REST"
    for frame, soft, stretch in ((1, 0.0, 1.0), (10, 0.2, 1.1), (20, 0.05, 1.5)):
        ch.soft, ch.stretch = soft, stretch
        rig.keyframe_insert("reach_ik.chains[0].soft", frame=frame)
        rig.keyframe_insert("reach_ik.chains[0].stretch", frame=frame)
    live, stretched = {}, []
    for frame in range(1, 21):
        bpy.context.scene.frame_set(frame)
        assert ch.is_valid, ch.message
        live[frame] = _tails(rig, names)
        stretched.append(rig.pose.bones["thigh"].scale[1])
    assert stretched[0] == 1.0 and stretched[-1] > 1.25, stretched
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.bake(frame_start=1, frame_end=20) == {"FINISHED"}
    worst = 0.0
    for frame in range(1, 21):
        bpy.context.scene.frame_set(frame)
        worst = max(worst, float(np.abs(_tails(rig, names) - live[frame]).max()))
    assert worst <= 1e-4, f"baked playback vs live: {worst:.3g}"
