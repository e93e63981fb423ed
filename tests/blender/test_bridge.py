"""The Blender bridge, measured from Blender's evaluated pose: tips reach, lengths hold, others untouched."""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Euler, Matrix, Quaternion

TOL = 1e-3
ROTATION_MODES = ["QUATERNION", "XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX", "AXIS_ANGLE"]


def _dist(a: np.ndarray, b: object) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)))


def _bone_lengths(rig: bpy.types.Object) -> dict[str, float]:
    """Posed head->tail lengths in world space, from the evaluated pose."""
    return {pb.name: _dist(rigs.world_tail(rig, pb.name), rigs.world_head(rig, pb.name)) for pb in rig.pose.bones}


def _reachable_target(rig: bpy.types.Object, tip: str, seed: int, spread: float = 0.6) -> np.ndarray:
    """A target the chain can reach: where the tip goes under a random pose (then the pose is reset)."""
    rng = np.random.default_rng(seed)
    for pb in rig.pose.bones:
        pb.rotation_mode = "QUATERNION"
        axis = rng.normal(size=3)
        pb.rotation_quaternion = Quaternion(axis / np.linalg.norm(axis), rng.uniform(-spread, spread))
    rigs.update()
    target = rigs.world_tail(rig, tip)
    for pb in rig.pose.bones:
        pb.rotation_quaternion = (1, 0, 0, 0)
    rigs.update()
    return target


@pytest.mark.parametrize("solver,n", [("FABRIK", 4), ("CCD", 4), ("TWO_BONE", 2)])
@pytest.mark.parametrize("mode", ROTATION_MODES)
def test_solvers_and_rotation_modes(solver: str, n: int, mode: str) -> None:
    rig = rigs.chain_rig(n)
    goal = _reachable_target(rig, f"b{n - 1}", seed=n + len(mode))
    for pb in rig.pose.bones:
        pb.rotation_mode = mode
    target = rigs.empty("T", goal)
    rigs.add_chain(rig, f"b{n - 1}", n, target, solver=solver)
    # CCD crawls near full extension (a property of the algorithm, see the README): give it room.
    rig.reach_ik.max_iterations = 300 if solver == "CCD" else 30
    lengths = _bone_lengths(rig)
    rigs.update()
    tip = rigs.world_tail(rig, f"b{n - 1}")
    assert _dist(tip, goal) <= TOL, f"{solver}/{mode}: tip {tip} is {_dist(tip, goal):.2e} from {goal}"
    for name, length in _bone_lengths(rig).items():
        assert abs(length - lengths[name]) < 1e-5, f"{solver}/{mode}: bone {name} changed length"
    assert rig.reach_ik.chains[0].is_valid and rig.reach_ik.chains[0].message == ""


@pytest.mark.parametrize("solver", ["FABRIK", "CCD", "TWO_BONE"])
def test_transformed_armature(solver: str) -> None:
    n = 2 if solver == "TWO_BONE" else 3
    rig = rigs.chain_rig(n)
    rig.location = (2.0, -1.0, 0.5)
    rig.rotation_euler = (0.3, -0.5, 1.1)
    rig.scale = (2.5, 2.5, 2.5)
    rigs.update()
    goal = _reachable_target(rig, f"b{n - 1}", seed=3)
    target = rigs.empty("T", goal)
    rigs.add_chain(rig, f"b{n - 1}", n, target, solver=solver)
    rig.reach_ik.max_iterations = 300 if solver == "CCD" else 30
    rigs.update()
    ch = rig.reach_ik.chains[0]
    d = _dist(rigs.world_tail(rig, f"b{n - 1}"), goal)
    assert d <= TOL, f"tolerance is in world units on a scaled rig: {d:.2e} ({ch.iterations} it, {ch.message})"


def test_linked_target_with_a_local_namesake(tmp_path: object) -> None:
    """A target linked from a library can share its name with a local object: the chain follows its own."""
    from pathlib import Path

    rig = rigs.chain_rig(3)
    goal = _reachable_target(rig, "b2", seed=7)
    lib = Path(str(tmp_path)) / "targets.blend"
    source = rigs.empty("T", goal)
    bpy.data.libraries.write(str(lib), {source})
    bpy.data.objects.remove(source)
    local = rigs.empty("T", (goal[0] + 0.5, goal[1], goal[2]))  # same name, half a unit away
    with bpy.data.libraries.load(str(lib), link=True) as (_src, dst):
        dst.objects = ["T"]
    linked = next(ob for ob in bpy.data.objects if ob.name == "T" and ob.library is not None)
    bpy.context.scene.collection.objects.link(linked)
    rigs.add_chain(rig, "b2", 3, linked)
    rigs.update()
    d = _dist(rigs.world_tail(rig, "b2"), goal)
    assert d <= TOL, f"the tip should reach the linked target, not its namesake at {tuple(local.location)}: {d:.2e}"


def test_disconnected_bones() -> None:
    rig = rigs.chain_rig(4, gap=0.3)
    assert not rig.data.bones["b1"].use_connect
    goal = _reachable_target(rig, "b3", seed=5)
    lengths = _bone_lengths(rig)
    gaps = [_dist(rigs.world_head(rig, f"b{i + 1}"), rigs.world_tail(rig, f"b{i}")) for i in range(3)]
    target = rigs.empty("T", goal)
    rigs.add_chain(rig, "b3", 4, target)
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b3"), goal) <= TOL
    new_gaps = [_dist(rigs.world_head(rig, f"b{i + 1}"), rigs.world_tail(rig, f"b{i}")) for i in range(3)]
    assert np.allclose(gaps, new_gaps, atol=1e-5), f"offset heads must stay rigidly attached: {gaps} -> {new_gaps}"
    assert all(abs(v - lengths[k]) < 1e-5 for k, v in _bone_lengths(rig).items())


def test_parented_and_animated_target() -> None:
    rig = rigs.chain_rig(3)
    holder = rigs.empty("Holder", (0.5, 0.0, 0.0))
    target = rigs.empty("T", (0.5, 0.5, 2.0), parent=holder)
    rigs.add_chain(rig, "b2", 3, target)
    holder.location = (0.0, 0.0, 0.0)
    holder.keyframe_insert("location", frame=1)
    holder.location = (0.3, -0.8, -0.6)
    holder.keyframe_insert("location", frame=10)
    for frame in (1, 4, 10, 6):
        bpy.context.scene.frame_set(frame)
        goal = np.array(target.matrix_world.translation)
        tip = rigs.world_tail(rig, "b2")
        assert _dist(tip, goal) <= TOL, f"frame {frame}: tip {tip} vs animated target {goal}"


def test_bones_outside_chains_untouched() -> None:
    rig = rigs.armature(
        "Rig",
        [
            ("root", None, (0, 0, 0), (0, 0, 0.5), False),
            ("b0", "root", (0, 0, 0.5), (0, 0.1, 1.5), True),
            ("b1", "b0", (0, 0.1, 1.5), (0, 0, 2.5), True),
            ("child", "b1", (0, 0, 2.5), (0, 0, 3.0), True),
            ("side", "root", (0.5, 0, 0.5), (1.0, 0, 0.5), False),
        ],
    )
    rig.pose.bones["root"].rotation_quaternion = Quaternion((0, 0, 1), 0.4)
    rig.pose.bones["child"].rotation_mode = "XYZ"
    rig.pose.bones["child"].rotation_euler = (0.2, 0.1, 0.0)
    rig.pose.bones["side"].location = (0.1, 0.2, 0.3)
    before = {
        n: (
            tuple(rig.pose.bones[n].rotation_quaternion),
            tuple(rig.pose.bones[n].rotation_euler),
            tuple(rig.pose.bones[n].location),
        )
        for n in ("root", "child", "side")
    }
    target = rigs.empty("T", (0.8, 0.5, 1.8))
    rigs.add_chain(rig, "b1", 2, target)
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b1"), target.location) <= TOL
    after = {
        n: (
            tuple(rig.pose.bones[n].rotation_quaternion),
            tuple(rig.pose.bones[n].rotation_euler),
            tuple(rig.pose.bones[n].location),
        )
        for n in ("root", "child", "side")
    }
    assert before == after, "bones outside the chain must keep their exact channels"


def test_chain_below_chain_uses_solved_parent() -> None:
    """A chain hanging from another chain's tip is solved on its parent's *solved* pose (one update)."""
    rig = rigs.chain_rig(5)
    goal_upper = _reachable_target(rig, "b2", seed=11, spread=0.4)
    t1 = rigs.empty("T1", goal_upper)
    rigs.add_chain(rig, "b2", 3, t1, name="spine")
    t2 = rigs.empty("T2", (1.0, 0.8, 3.8))
    rigs.add_chain(rig, "b4", 2, t2, solver="TWO_BONE", name="arm")
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b2"), goal_upper) <= TOL
    assert _dist(rigs.world_tail(rig, "b4"), t2.location) <= TOL, "the lower chain must reach in the same update"


def test_euler_conversion_matches_mathutils() -> None:
    """Our batched Euler conversion agrees with Blender's own `to_euler(order, compat)`."""
    import sys

    import conftest

    convert = sys.modules[conftest.ADDON + ".core.convert"]
    rng = np.random.default_rng(7)
    for order in ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"):
        prev = rng.uniform(-7, 7, size=(200, 3))
        mats = []
        for p in prev:
            jitter = Euler(rng.normal(scale=0.3, size=3), order).to_matrix()
            mats.append(np.array(Euler(p, order).to_matrix() @ jitter))
        mats_np = np.array(mats)
        ours = convert.matrix_to_euler(mats_np, order, prev)
        for m, p, e in zip(mats, prev, ours, strict=True):
            ref = Matrix(m.tolist()).to_euler(order, Euler(p, order))
            got = Euler(e, order).to_matrix()
            assert np.allclose(np.array(got), m, atol=1e-6), f"{order}: wrong rotation"
            assert np.allclose(e, ref[:], atol=1e-4), f"{order}: {e} vs Blender's compatible {ref[:]} (prev {p})"


def test_euler_sequence_matches_frame_by_frame() -> None:
    """The bake's vectorized walk over frames equals Blender's compatible rule applied frame after frame.

    Bit for bit against our frame-by-frame rule over walks with half-turn jumps and arbitrary previous
    values, and against `mathutils` (`to_euler(order, compat)` chained through the frames) to rounding.
    """
    import sys

    import conftest

    convert = sys.modules[conftest.ADDON + ".core.convert"]
    rng = np.random.default_rng(11)
    for order in ("XYZ", "XZY", "YXZ", "YZX", "ZXY", "ZYX"):
        for step in (0.3, 2.5):  # smooth motion, and jumps past the half turn
            walk = np.cumsum(rng.normal(scale=step, size=(60, 4, 3)), axis=0)
            mats = convert.euler_to_matrix(walk.reshape(-1, 3), order)
            e1, e2 = (e.reshape(60, 4, 3) for e in convert.euler_pair(mats, order))
            previous = rng.uniform(-9.0, 9.0, size=(4, 3))
            ours = convert.compatible_sequence(e1, e2, previous)
            prev = previous
            for i in range(60):
                prev = convert.choose_compatible(e1[i], e2[i], prev)
                assert np.array_equal(ours[i], prev), f"{order} frame {i}: {ours[i]} vs {prev}"
            for b in range(4):
                ref = Euler(previous[b], order)
                for i in range(60):
                    ref = Matrix(mats.reshape(60, 4, 3, 3)[i, b].tolist()).to_euler(order, ref)
                    assert np.allclose(ours[i, b], ref[:], atol=1e-4), f"{order} frame {i} bone {b}"


def test_quaternion_sign_continuity() -> None:
    rig = rigs.chain_rig(2)
    pb = rig.pose.bones["b0"]
    pb.rotation_quaternion = (-1.0, 0.0, 0.0, 0.0)  # identity, negative hemisphere
    target = rigs.empty("T", (0.2, 0.3, 1.9))
    rigs.add_chain(rig, "b1", 2, target, solver="TWO_BONE")
    rigs.update()
    assert pb.rotation_quaternion[0] < 0.0, "the written quaternion keeps the sign of the previous value"


def test_unchanged_inputs_are_not_solved() -> None:
    import sys

    import conftest

    live = sys.modules[conftest.ADDON + ".rig.live"]
    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.5, 0.5, 2.0))
    other = rigs.empty("Unrelated", (5, 5, 5))
    rigs.add_chain(rig, "b2", 3, target)
    rigs.update()
    first = live.solve_count(rig)
    assert first >= 1
    for _ in range(3):
        other.location.x += 1.0  # an unrelated change triggers depsgraph updates
        rigs.update()
        bpy.context.scene.frame_set(bpy.context.scene.frame_current)
    assert live.solve_count(rig) == first, "unchanged inputs must not be solved again"
    target.location.x += 0.1
    rigs.update()
    assert live.solve_count(rig) == first + 1, "a moved target is solved exactly once"
    rig.reach_ik.tolerance = 0.0005
    rigs.update()
    assert live.solve_count(rig) == first + 2, "a changed setting is solved once"
    rig.pose.bones["b0"].rotation_quaternion = Quaternion((1, 0, 0), 0.5)  # the user poses a chain bone
    rigs.update()
    assert live.solve_count(rig) == first + 3
    assert _dist(rigs.world_tail(rig, "b2"), target.location) <= TOL, "posing a chain bone re-solves to the target"


def test_chain_below_a_chain_settles() -> None:
    """A chain whose root hangs below another chain's bones must not be re-solved by unrelated updates.

    Our own write moves the lower chain's parents (it is what the upper chain solves), so the lower chain's
    inputs after a solve are our outputs: re-solving them must not write again (a last-bit difference in
    the channels would move those parents once more and start another solve on the next update).
    """
    import sys

    import conftest

    live = sys.modules[conftest.ADDON + ".rig.live"]
    rig = rigs.chain_rig(6)
    rigs.add_chain(rig, "b2", 3, rigs.empty("T1", _reachable_target(rig, "b2", seed=3, spread=0.4)), name="spine")
    rigs.add_chain(rig, "b5", 2, rigs.empty("T2", (0.6, 0.5, 4.6)), solver="TWO_BONE", name="arm")
    other = rigs.empty("Unrelated", (5, 5, 5))
    rigs.update()
    rigs.update()
    settled = live.solve_count(rig)
    for _ in range(6):
        other.location.x += 1.0
        rigs.update()
    assert live.solve_count(rig) <= settled + 1, (  # one solve may still see our last write
        f"{live.solve_count(rig) - settled} solves for 6 unrelated updates: the rig keeps re-solving its own output"
    )


def test_live_off_and_solve_operator() -> None:
    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.6, 0.2, 2.2))
    rigs.add_chain(rig, "b2", 3, target)
    rig.reach_ik.live = False
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b2"), target.location) > 0.1, "live off: nothing moves"
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.solve() == {"FINISHED"}
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b2"), target.location) <= TOL


def test_spider_tree() -> None:
    """8 legs share the body: one multi-effector tree; every foot reaches its reachable target."""
    bones = [("body", None, (0, 0, 0), (0, 0.6, 0), False)]
    for i in range(8):
        a = 2 * math.pi * i / 8
        d = np.array([math.cos(a), 0.0, math.sin(a)])
        hip = np.array([0, 0.3, 0]) + 0.25 * d  # offset heads: a rigid fork
        knee = hip + 0.6 * d + np.array([0, 0.3, 0])
        foot = knee + 0.7 * d + np.array([0, -0.5, 0])
        bones.append((f"leg{i}_a", "body", tuple(hip), tuple(knee), False))
        bones.append((f"leg{i}_b", f"leg{i}_a", tuple(knee), tuple(foot), True))
    rig = rigs.armature("Spider", bones)
    # Reachable: where the feet go when the legs and body are posed.
    rng = np.random.default_rng(2)
    for pb in rig.pose.bones:
        pb.rotation_quaternion = Quaternion(rng.normal(size=3), rng.uniform(0.0, 0.35))
    rigs.update()
    goals = [rigs.world_tail(rig, f"leg{i}_b") for i in range(8)]
    for pb in rig.pose.bones:
        pb.rotation_quaternion = (1, 0, 0, 0)
    rigs.update()
    for i in range(8):
        rigs.add_chain(rig, f"leg{i}_b", 3, rigs.empty(f"foot{i}", goals[i]))
    rig.reach_ik.max_iterations = 200
    lengths = _bone_lengths(rig)
    rigs.update()
    for i, ch in enumerate(rig.reach_ik.chains):
        assert ch.is_valid, ch.message
        d = _dist(rigs.world_tail(rig, f"leg{i}_b"), goals[i])
        assert d <= TOL, f"foot {i} is {d:.2e} from its target ({ch.message})"
    for k, v in _bone_lengths(rig).items():
        assert abs(v - lengths[k]) < 1e-5, f"bone {k} changed length"


def test_live_survives_file_load(tmp_path: object) -> None:
    """Handlers are persistent and caches keyed to the old file are dropped on load."""
    from pathlib import Path

    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.6, 0.3, 2.1))
    rigs.add_chain(rig, "b2", 3, target)
    rigs.update()
    path = Path(str(tmp_path)) / "live.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(path))
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    bpy.ops.wm.open_mainfile(filepath=str(path))
    rig, target = bpy.data.objects["Rig"], bpy.data.objects["T"]
    target.location = (-0.4, 0.5, 2.2)
    rigs.update()
    assert _dist(rigs.world_tail(rig, "b2"), target.location) <= TOL, "live solving goes on after loading a file"


@pytest.mark.parametrize("solver,n", [("FABRIK", 4), ("CCD", 4)])
def test_rest_start_ignores_the_current_pose(solver: str, n: int) -> None:
    """Start From 'Rest': the result depends on the targets only, not on how the chain is posed now."""
    solve = bpy_session.submodule("rig.solve")
    results = []
    for angle in (0.0, 0.8):
        bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
        rig = rigs.chain_rig(n)
        rig.reach_ik.live = False
        rig.reach_ik.start_from = "REST"
        for pb in rig.pose.bones:
            pb.rotation_quaternion = Quaternion((0.3, 1.0, 0.2), angle)
        rigs.add_chain(rig, f"b{n - 1}", n, rigs.empty("T", (1.2, 0.4, 2.6)), solver=solver)
        rigs.update()
        solve.solve_rig(rig)
        results.append([tuple(pb.rotation_quaternion) for pb in rig.pose.bones])
    assert results[0] == results[1], "a REST start must not depend on the pose the chain had"
