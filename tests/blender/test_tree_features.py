"""Trees (FABRIK chains that share bones) do what single chains do, per chain: poles and Pole Angle, the
natural roll, Use Target Rotation and Soft. Measured on Blender's evaluated pose (world heads and tails)."""

from __future__ import annotations

import math

import bpy
import numpy as np
import pytest
import rigs
from mathutils import Euler, Quaternion

TOL = 1e-3
LEGS = ("l", "r")


def _tree() -> bpy.types.Object:
    """A body with two 3-bone legs whose knees bend forward (+Y) at rest; chains of 4 bones share the body."""
    bones = [("body", None, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), False)]
    for side, sx in (("l", -1.0), ("r", 1.0)):
        hip, knee, ankle, foot = (0, 0, 1), (0.5 * sx, 0, 1), (0.8 * sx, 0.4, 0.6), (1.0 * sx, 0.0, 0.0)
        bones += [
            (f"{side}0", "body", hip, knee, True),
            (f"{side}1", f"{side}0", knee, ankle, True),
            (f"{side}2", f"{side}1", ankle, foot, True),
        ]
    return rigs.armature("Rig", bones)


def _chains(rig: bpy.types.Object, goals: dict[str, tuple[float, float, float]]) -> dict[str, object]:
    rig.reach_ik.max_iterations = 200
    return {side: rigs.add_chain(rig, f"{side}2", 4, rigs.empty(f"T{side}", goals[side])) for side in LEGS}


GOALS = {"l": (-1.0, 0.2, 0.3), "r": (1.0, 0.2, 0.3)}


def _miss(rig: bpy.types.Object, bone: str, goal: object) -> float:
    return float(np.linalg.norm(rigs.world_tail(rig, bone) - np.array(goal)))


def _bend(rig: bpy.types.Object, side: str) -> np.ndarray:
    """The leg's bend: its interior joints' offsets from the hip -> foot line, summed, as a unit vector."""
    hip, foot = rigs.world_head(rig, f"{side}0"), rigs.world_tail(rig, f"{side}2")
    axis = (foot - hip) / np.linalg.norm(foot - hip)
    bend = np.zeros(3)
    for b in (f"{side}1", f"{side}2"):
        rel = rigs.world_head(rig, b) - hip
        bend += rel - np.dot(rel, axis) * axis
    return bend / np.linalg.norm(bend)


def _side(point: np.ndarray, hip: np.ndarray, foot: np.ndarray) -> np.ndarray:
    """The unit direction from the hip -> foot line to `point`, perpendicular to it."""
    axis = (foot - hip) / np.linalg.norm(foot - hip)
    rel = point - hip
    perp = rel - np.dot(rel, axis) * axis
    return perp / np.linalg.norm(perp)


def _reached(rig: bpy.types.Object, chains: dict[str, object]) -> None:
    for side, ch in chains.items():
        assert ch.is_valid, ch.message
        miss = _miss(rig, f"{side}2", GOALS[side])
        assert miss <= TOL, f"leg {side}: the foot is {miss:.3g} from its target ({ch.message!r})"


def test_each_branch_bends_toward_its_own_pole() -> None:
    rig = _tree()
    chains = _chains(rig, GOALS)
    poles = {"l": rigs.empty("Pl", (-0.7, -2.0, 0.8)), "r": rigs.empty("Pr", (0.7, 2.0, 0.8))}
    for side in LEGS:
        chains[side].pole = poles[side]
    rigs.update()
    _reached(rig, chains)
    for side in LEGS:
        hip, foot = rigs.world_head(rig, f"{side}0"), rigs.world_tail(rig, f"{side}2")
        want = _side(np.array(poles[side].location), hip, foot)
        got = _bend(rig, side)
        assert np.dot(got, want) > 0.999, f"leg {side} bends toward {got}, its pole is toward {want}"
    # The left pole moved behind to the front: only the left leg turns.
    poles["l"].location = (-0.7, 2.0, 0.8)
    right_before = _bend(rig, "r")
    rigs.update()
    _reached(rig, chains)
    hip, foot = rigs.world_head(rig, "l0"), rigs.world_tail(rig, "l2")
    assert np.dot(_bend(rig, "l"), _side(np.array(poles["l"].location), hip, foot)) > 0.999
    assert np.dot(_bend(rig, "r"), right_before) > 0.999


def test_pole_angle_turns_a_branch_bend_plane() -> None:
    rig = _tree()
    chains = _chains(rig, GOALS)
    pole = rigs.empty("Pl", (-0.7, -2.0, 0.8))
    chains["l"].pole = pole
    rigs.update()
    plain = _bend(rig, "l")
    chains["l"].pole_angle = math.radians(90.0)
    rigs.update()
    _reached(rig, chains)
    turned = _bend(rig, "l")
    angle = math.degrees(math.acos(float(np.clip(np.dot(plain, turned), -1.0, 1.0))))
    # About the branch's hip -> target axis, where the bend is measured.
    assert 89.0 < angle < 91.0, f"Pole Angle 90 turned the bend plane by {angle:.1f} degrees"


def test_natural_roll_bends_a_branch_like_its_rest_pose() -> None:
    rig = _tree()
    # Twist the left leg half a turn about its hip bone: its knee now bends backward (-Y).
    pb = rig.pose.bones["l0"]
    pb.rotation_mode = "QUATERNION"
    pb.rotation_quaternion = Quaternion((0.0, 1.0, 0.0), math.pi)
    rigs.update()
    assert _bend(rig, "l")[1] < -0.5, "setup: the twisted leg bends backward"
    chains = _chains(rig, GOALS)
    rig.reach_ik.roll_mode = "KEEP"
    rigs.update()
    _reached(rig, chains)
    kept = _bend(rig, "l")
    for side in LEGS:
        ch = chains[side]
        ch.enabled = False
    rigs.update()
    pb.rotation_quaternion = Quaternion((0.0, 1.0, 0.0), math.pi)
    for pbone in rig.pose.bones:
        if pbone.name != "l0":
            pbone.rotation_quaternion = (1.0, 0.0, 0.0, 0.0)
    for side in LEGS:
        chains[side].enabled = True
    rig.reach_ik.roll_mode = "NATURAL"
    rigs.update()
    _reached(rig, chains)
    natural = _bend(rig, "l")
    assert natural[1] > 0.5, f"NATURAL: the left knee bends {natural}, its rest bend is forward (+Y)"
    assert kept[1] < 0.0, f"KEEP keeps the twisted leg's backward bend ({kept}): the roll mode made the difference"


def test_target_rotation_on_a_branch() -> None:
    rig = _tree()
    chains = _chains(rig, GOALS)
    target = bpy.data.objects["Tl"]
    target.rotation_euler = Euler((0.3, -0.4, 2.5))
    chains["l"].use_target_rotation = True
    rigs.update()
    _reached(rig, chains)
    ev = rig.evaluated_get(bpy.context.evaluated_depsgraph_get())
    tip = (ev.matrix_world @ ev.pose.bones["l2"].matrix).to_3x3().normalized()
    want = target.matrix_world.to_3x3().normalized()
    err = math.degrees((tip.to_quaternion().rotation_difference(want.to_quaternion())).angle)
    assert err < 0.05, f"the tip bone is {err:.3g} degrees from the target's orientation"


def test_target_rotation_on_a_shared_tip_is_refused() -> None:
    rig = _tree()
    chains = _chains(rig, GOALS)
    trunk = rigs.add_chain(rig, "body", 1, rigs.empty("Tb", (0.0, 0.0, 1.0)))
    trunk.use_target_rotation = True
    rigs.update()
    for ch in [*chains.values(), trunk]:
        assert not ch.is_valid and "Target Rotation" in ch.message and "'body'" in ch.message, ch.message


def test_soft_on_a_branch() -> None:
    rig = _tree()
    # The left chain's length from the body's head to the foot, and a target just inside full extension.
    lengths = [rig.data.bones[b].length for b in ("body", "l0", "l1", "l2")]
    total = sum(lengths)
    direction = np.array([-0.6, 0.1, -0.2])
    direction /= np.linalg.norm(direction)
    goal = 0.97 * total * direction
    # The right foot's target within its leg's reach wherever the body leans for the left leg's near-straight reach.
    goals = {"l": tuple(goal), "r": tuple(direction + np.array([1.0, 0.0, 0.0]))}
    rig.reach_ik.max_iterations = 200
    left = rigs.add_chain(rig, "l2", 4, rigs.empty("Tl", goals["l"]))
    right = rigs.add_chain(rig, "r2", 4, rigs.empty("Tr", goals["r"]))
    rigs.update()
    assert left.is_valid and right.is_valid, (left.message, right.message)
    assert _miss(rig, "l2", goal) <= TOL, "without Soft the foot reaches"
    left.soft = 0.1
    rigs.update()
    assert left.is_valid and right.is_valid, (left.message, right.message)
    assert _miss(rig, "r2", goals["r"]) <= TOL, "the other leg still reaches"
    # Soft IK's curve, worked out here: past (1 - soft) L the reach eases toward L.
    s = 0.1 * total
    d = 0.97 * total
    eased = total - s * math.exp(-(d - (total - s)) / s)
    foot = rigs.world_tail(rig, "l2")
    assert abs(float(np.linalg.norm(foot)) - eased) <= 2e-3, (
        f"the foot is {np.linalg.norm(foot):.4f} out, eased {eased:.4f}"
    )
    off_line = float(np.linalg.norm(foot - np.dot(foot, direction) * direction))
    assert off_line <= 2e-3, f"the foot is {off_line:.3g} off the root -> target line"
    assert "softened" in left.message, left.message


def test_a_tree_bake_replays_every_frame_reached() -> None:
    # The frames of a tree bake are solved in one batch (`solvers.tree_frames`); the replayed keys reach.
    rig = _tree()
    chains = _chains(rig, GOALS)
    chains["r"].pole = rigs.empty("Pr", (0.7, 2.0, 0.8))
    chains["l"].use_target_rotation = True
    keyed = {
        "l": ((-1.0, 0.2, 0.3), (-0.9, 0.5, 0.6), (-1.1, -0.2, 0.1)),
        "r": ((1.0, 0.2, 0.3), (0.8, 0.3, 0.8), (1.2, 0.0, 0.4)),
    }
    for side in LEGS:
        target = bpy.data.objects[f"T{side}"]
        for frame, loc in zip((1, 8, 15), keyed[side], strict=True):
            target.location = loc
            target.keyframe_insert("location", frame=frame)
    rig.reach_ik.start_from = "REST"
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.bake(frame_start=1, frame_end=15) == {"FINISHED"}
    for frame in range(1, 16):
        bpy.context.scene.frame_set(frame)
        for side in LEGS:
            goal = np.array(bpy.data.objects[f"T{side}"].matrix_world.translation)
            miss = float(np.linalg.norm(rigs.world_tail(rig, f"{side}2") - goal))
            assert miss <= TOL, f"frame {frame}: the replayed {side} foot is {miss:.3g} from its target"
        hip, foot = rigs.world_head(rig, "r0"), rigs.world_tail(rig, "r2")
        side_dir = _side(np.array(bpy.data.objects["Pr"].location), hip, foot)
        assert np.dot(_bend(rig, "r"), side_dir) > 0.99, f"frame {frame}: the right leg left its pole's side"


def test_stretch_on_a_branch() -> None:
    rig = _tree()
    for b in ("l1", "l2", "r1", "r2"):
        rig.data.bones[b].inherit_scale = "NONE"  # each leg bone carries its own stretch
    total = sum(rig.data.bones[b].length for b in ("body", "l0", "l1", "l2"))
    direction = np.array([-0.6, 0.1, -0.2])
    direction /= np.linalg.norm(direction)
    goal = 1.15 * total * direction  # beyond the left chain's reach
    goals = {"l": tuple(goal), "r": tuple(direction + np.array([1.0, 0.0, 0.0]))}
    rig.reach_ik.max_iterations = 200
    left = rigs.add_chain(rig, "l2", 4, rigs.empty("Tl", goals["l"]))
    right = rigs.add_chain(rig, "r2", 4, rigs.empty("Tr", goals["r"]))
    rigs.update()
    assert left.is_valid and "out of reach" in left.message, left.message
    left.stretch = 1.5
    rigs.update()
    assert left.is_valid and not left.message, left.message
    assert right.is_valid and not right.message, right.message
    assert _miss(rig, "l2", goal) <= TOL, f"the stretched leg misses by {_miss(rig, 'l2', goal):.3g}"
    assert _miss(rig, "r2", goals["r"]) <= TOL
    scales = {b: rig.pose.bones[b].scale[1] for b in ("body", "l0", "l1", "l2", "r0", "r1", "r2")}
    assert scales["body"] == 1.0, f"the shared body keeps its length: {scales}"
    assert all(scales[b] > 1.0 for b in ("l0", "l1", "l2")), f"the left branch stretches: {scales}"
    assert all(scales[b] == 1.0 for b in ("r0", "r1", "r2")), f"the right branch does not: {scales}"
    # Measured on the evaluated pose: the left leg's bones are longer by their Y scale, the right leg's not.
    for b in ("l1", "r1"):
        length = float(np.linalg.norm(rigs.world_tail(rig, b) - rigs.world_head(rig, b)))
        assert abs(length - rig.data.bones[b].length * scales[b]) <= 1e-5, f"{b}: {length}"
    # Past what Stretch allows: the message says how far the chain was stretched.
    bpy.data.objects["Tl"].location = tuple(2.0 * total * direction)
    left.stretch = 1.2
    rigs.update()
    assert left.is_valid and "stretched to" in left.message and "raise Stretch" in left.message, left.message
    # Stretch back to 1 undoes the stretch this solve wrote.
    left.stretch = 1.0
    rigs.update()
    assert all(rig.pose.bones[b].scale[1] == 1.0 for b in ("l0", "l1", "l2"))
    assert left.is_valid and "out of reach" in left.message, left.message


def test_stretch_on_a_branch_that_cannot_is_refused() -> None:
    rig = _tree()  # l1 inherits l0's scale in full: stretching l0 would shear it
    chains = _chains(rig, GOALS)
    rigs.update()
    before = rigs.pose_snapshot(rig)
    chains["l"].stretch = 1.5
    rigs.update()
    for ch in chains.values():
        assert not ch.is_valid and "branch" in ch.message and "'l1'" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before


def test_a_stretching_tree_bake_replays_reached() -> None:
    rig = _tree()
    for b in ("l1", "l2", "r1", "r2"):
        rig.data.bones[b].inherit_scale = "NONE"
    total = sum(rig.data.bones[b].length for b in ("body", "l0", "l1", "l2"))
    direction = np.array([-0.6, 0.1, -0.2])
    direction /= np.linalg.norm(direction)
    rig.reach_ik.max_iterations = 200
    left = rigs.add_chain(rig, "l2", 4, rigs.empty("Tl", (0.0, 0.0, 0.0)))
    rigs.add_chain(rig, "r2", 4, rigs.empty("Tr", tuple(direction + np.array([1.0, 0.0, 0.0]))))
    left.stretch = 1.5
    target = bpy.data.objects["Tl"]
    for frame, reach in ((1, 0.8), (6, 1.1), (12, 1.25)):  # from inside the chain's reach to past it
        target.location = tuple(reach * total * direction)
        target.keyframe_insert("location", frame=frame)
    rig.reach_ik.start_from = "REST"
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.bake(frame_start=1, frame_end=12) == {"FINISHED"}
    stretched = 0
    for frame in range(1, 13):
        bpy.context.scene.frame_set(frame)
        for side in LEGS:
            goal = np.array(bpy.data.objects[f"T{side}"].matrix_world.translation)
            miss = float(np.linalg.norm(rigs.world_tail(rig, f"{side}2") - goal))
            assert miss <= TOL, f"frame {frame}: the replayed {side} foot is {miss:.3g} from its target"
        ev = rig.evaluated_get(bpy.context.evaluated_depsgraph_get())
        body = float(np.linalg.norm(rigs.world_tail(rig, "body") - rigs.world_head(rig, "body")))
        assert abs(body - 1.0) <= 1e-5, f"frame {frame}: the shared body is {body} long"
        stretched += ev.pose.bones["l1"].scale[1] > 1.0 + 1e-6
    assert stretched >= 3, f"the left branch stretched in only {stretched} of 12 frames"


def test_a_branch_stretch_blends_with_influence() -> None:
    # As for a single chain (test_ikfk.py): at Influence 0.5 the branch stretches half-way, its status is
    # measured on that pose; at 0 every channel is the FK pose again.
    rig = _tree()
    for b in ("l1", "l2", "r1", "r2"):
        rig.data.bones[b].inherit_scale = "NONE"
    rigs.update()
    fk = rigs.pose_snapshot(rig)
    total = sum(rig.data.bones[b].length for b in ("body", "l0", "l1", "l2"))
    direction = np.array([-0.6, 0.1, -0.2])
    direction /= np.linalg.norm(direction)
    goal = 1.15 * total * direction
    rig.reach_ik.max_iterations = 200
    left = rigs.add_chain(rig, "l2", 4, rigs.empty("Tl", tuple(goal)))
    rigs.add_chain(rig, "r2", 4, rigs.empty("Tr", tuple(direction + np.array([1.0, 0.0, 0.0]))))
    left.stretch = 1.5
    for _ in range(3):
        rigs.update()
    ik_y = float(rig.pose.bones["l1"].scale[1])
    assert ik_y > 1.02, f"the branch stretches to reach ({ik_y})"
    left.influence = 0.5
    for _ in range(3):
        rigs.update()
    assert float(rig.pose.bones["l1"].scale[1]) == pytest.approx(1.0 + 0.5 * (ik_y - 1.0), abs=1e-5)
    far = _miss(rig, "l2", goal)
    assert far > 1e-2 and left.residual == pytest.approx(far, rel=1e-3, abs=1e-5), left.message
    for ch in rig.reach_ik.chains:
        ch.influence = 0.0
    for _ in range(3):
        rigs.update()
    assert rigs.pose_snapshot(rig) == fk
