"""The set-up operators a rigger uses from the sidebar, on the bpy wheel: chains, hierarchy, limit presets.

Positions are measured from Blender's evaluated pose (rigs.world_tail/world_head), not from our arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import addon_utils
import bpy
import numpy as np
import pytest
import rigs
from mathutils import Vector


def _pose_mode(rig: bpy.types.Object, active: str, selected: Sequence[str] = ()) -> None:
    """Pose Mode on `rig` with bone `active` active and `selected` (plus the active one) selected."""
    bpy.context.view_layer.objects.active = rig
    rig.select_set(True)
    bpy.ops.object.mode_set(mode="POSE")
    wanted = {active, *selected}
    for pb in rig.pose.bones:
        sel = pb.name in wanted
        if "select" in pb.bl_rna.properties:  # Blender 5.0+
            pb.select = sel
        else:
            pb.bone.select = sel
    rig.data.bones.active = rig.data.bones[active]


def _chain(rig: bpy.types.Object, index: int = -1) -> bpy.types.PropertyGroup:
    return rig.reach_ik.chains[index]


# ---------------------------------------------------------------------------------------------------------
# reach.chain_add
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "selected,length,solver",
    [((), 2, "TWO_BONE"), (("b3",), 2, "TWO_BONE"), (("b3", "b2", "b1", "b0"), 5, "FABRIK")],
    ids=["tip-only", "two-bones", "five-bones"],
)
def test_chain_add_length_from_selection(selected: tuple[str, ...], length: int, solver: str) -> None:
    rig = rigs.chain_rig(5)
    _pose_mode(rig, "b4", selected)
    tail = rigs.world_tail(rig, "b4")
    assert bpy.ops.reach.chain_add() == {"FINISHED"}
    ch = _chain(rig)
    assert (ch.tip_bone, ch.chain_length, ch.solver) == ("b4", length, solver), (
        f"selection {('b4', *selected)}: expected a {length}-bone {solver} chain, got "
        f"{ch.chain_length}-bone {ch.solver}"
    )
    assert ch.target is not None and ch.target.type == "EMPTY" and ch.created_target
    dist = np.linalg.norm(np.array(ch.target.matrix_world.translation) - tail)
    assert dist < 1e-5, f"the target must be created at the tip's tail, it is {dist:.2e} away"
    assert (ch.pole is not None) == (length == 2), "a pole is created for two-bone chains only"
    assert ch.created_pole == (length == 2)
    assert rig.reach_ik.active_chain_index == len(rig.reach_ik.chains) - 1, "the new chain becomes active"


def test_chain_add_tip_only_on_a_root_bone_gives_one_bone() -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b0")
    bpy.ops.reach.chain_add()
    assert _chain(rig).chain_length == 1 and _chain(rig).solver == "FABRIK" and _chain(rig).pole is None


def test_chain_add_explicit_length_too_long_is_refused() -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b2")
    with pytest.raises(RuntimeError, match=r"length 7 is longer than the hierarchy above 'b2' \(3 bones\)"):
        bpy.ops.reach.chain_add(length=7)
    assert len(rig.reach_ik.chains) == 0


def test_chain_add_on_a_non_armature_says_so() -> None:
    mesh = bpy.data.objects.new("Cube", bpy.data.meshes.new("Cube"))
    bpy.context.scene.collection.objects.link(mesh)
    bpy.context.view_layer.objects.active = mesh
    assert not bpy.ops.reach.chain_add.poll()
    with pytest.raises(RuntimeError, match="make an armature the active object"):
        bpy.ops.reach.chain_add()
    assert not bpy.data.objects.get("Cube.target"), "nothing may be created on failure"


def test_chain_add_without_an_active_bone_says_so() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    rig.data.bones.active = None
    with pytest.raises(RuntimeError, match="no active bone: click the chain's tip bone"):
        bpy.ops.reach.chain_add()


def test_chain_add_twice_on_the_same_tip_is_refused() -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b2")
    bpy.ops.reach.chain_add()
    empties = len([o for o in bpy.data.objects if o.type == "EMPTY"])
    with pytest.raises(RuntimeError, match="chain 'b2' already ends at bone 'b2'"):
        bpy.ops.reach.chain_add()
    assert len(rig.reach_ik.chains) == 1
    assert len([o for o in bpy.data.objects if o.type == "EMPTY"]) == empties, "a refused add creates nothing"


@pytest.mark.parametrize("bend_deg", [35.0, 0.0], ids=["bent", "straight"])
def test_adding_a_pole_does_not_move_the_chain(bend_deg: float) -> None:
    """Measured from the evaluated pose: after chain_add (target + pole) and an update, nothing moved."""
    rig = rigs.armature(
        "Arm",
        [
            ("upper", None, (0, 0, 0), (1.0, 0.0, 0.0), False),
            ("lower", "upper", (1.0, 0, 0), (2.0, 0.0, 0.0), True),
        ],
    )
    rig.rotation_euler = (0.3, -0.2, 0.5)  # an arbitrary placement: nothing may depend on world axes
    rig.location = (0.5, -1.0, 2.0)
    pb = rig.pose.bones
    for b in pb:
        b.rotation_mode = "XYZ"
    pb["upper"].rotation_euler = (0.2, 0.4, 0.1)
    pb["lower"].rotation_euler = (0.0, 0.0, math.radians(bend_deg))
    rigs.update()
    before = {"mid": rigs.world_head(rig, "lower"), "tip": rigs.world_tail(rig, "lower")}
    _pose_mode(rig, "lower")
    bpy.ops.reach.chain_add()
    ch = _chain(rig)
    assert ch.solver == "TWO_BONE" and ch.pole is not None
    rigs.update()
    rigs.update()
    after = {"mid": rigs.world_head(rig, "lower"), "tip": rigs.world_tail(rig, "lower")}
    for joint in before:
        moved = float(np.linalg.norm(after[joint] - before[joint]))
        assert moved <= 1e-5, f"adding target + pole moved the {joint} joint by {moved:.2e} (bend {bend_deg}°)"
    assert ch.is_valid, ch.message
    # And the arm follows its target, bending toward the pole's side.
    root = Vector(rigs.world_head(rig, "upper"))
    ch.target.location = root.lerp(Vector(before["tip"]), 0.7) + Vector((0.0, 0.1, 0.0))
    rigs.update()
    tip = rigs.world_tail(rig, "lower")
    assert np.linalg.norm(tip - np.array(ch.target.location)) <= 1e-3, "the arm must follow its target"


# ---------------------------------------------------------------------------------------------------------
# reach.chain_remove / reach.chain_move
# ---------------------------------------------------------------------------------------------------------


def test_chain_remove_deletes_only_created_empties() -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b2")
    bpy.ops.reach.chain_add()
    made = (_chain(rig).target.name, _chain(rig).pole.name)
    mine = rigs.empty("MyTarget", (1, 1, 1))
    _pose_mode(rig, "b1", ("b0",))
    bpy.ops.reach.chain_add()
    _chain(rig).target, _chain(rig).created_target = mine, False
    # Remove the second chain (user-picked target): the Empty stays.
    rig.reach_ik.active_chain_index = 1
    bpy.ops.reach.chain_remove()
    assert bpy.data.objects.get("MyTarget") is not None, "a target the user picked is never deleted"
    rig.reach_ik.active_chain_index = 0
    bpy.ops.reach.chain_remove(delete_empties=False)
    assert all(bpy.data.objects.get(n) for n in made), "delete_empties=False keeps the created Empties"
    assert len(rig.reach_ik.chains) == 0


def test_chain_remove_with_created_empties() -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b2")
    bpy.ops.reach.chain_add()
    made = (_chain(rig).target.name, _chain(rig).pole.name)
    bpy.ops.reach.chain_remove()
    assert not any(bpy.data.objects.get(n) for n in made), "the Empties chain_add made are deleted with it"
    assert not bpy.ops.reach.chain_remove.poll(), "nothing left to remove"


def test_chain_move() -> None:
    rig = rigs.chain_rig(3)
    for tip in ("b0", "b1", "b2"):
        rigs.add_chain(rig, tip, 1, rigs.empty(f"T{tip}"))
    rig.reach_ik.active_chain_index = 2
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.chain_move(direction="UP") == {"FINISHED"}
    assert [c.tip_bone for c in rig.reach_ik.chains] == ["b0", "b2", "b1"]
    assert rig.reach_ik.active_chain_index == 1, "the moved chain stays active"
    bpy.ops.reach.chain_move(direction="UP")
    assert bpy.ops.reach.chain_move(direction="UP") == {"CANCELLED"}, "already at the top"
    assert [c.tip_bone for c in rig.reach_ik.chains] == ["b2", "b0", "b1"]


# ---------------------------------------------------------------------------------------------------------
# reach.chains_from_hierarchy
# ---------------------------------------------------------------------------------------------------------


def _spider(with_root: bool) -> bpy.types.Object:
    """A body with 8 three-bone legs around it; `with_root` puts a root bone on the ground below the body."""
    bones: list[tuple] = []
    body_parent = None
    if with_root:
        bones.append(("root", None, (0, 0, 0), (0, -0.5, 0), False))
        body_parent = "root"
    bones.append(("body", body_parent, (0, 0, 1.0), (0, 0.6, 1.0), False))
    for i in range(8):
        a = 2 * math.pi * (i + 0.5) / 8
        d = np.array([math.cos(a), math.sin(a), 0.0])
        hip = np.array([0, 0.3, 1.0]) + 0.25 * d
        knee = hip + 0.5 * d + np.array([0, 0, 0.4])
        ankle = knee + 0.5 * d - np.array([0, 0, 0.6])
        foot = ankle + 0.2 * d - np.array([0, 0, 0.8])
        bones += [
            (f"leg{i}.1", "body", tuple(hip), tuple(knee), False),
            (f"leg{i}.2", f"leg{i}.1", tuple(knee), tuple(ankle), True),
            (f"leg{i}.3", f"leg{i}.2", tuple(ankle), tuple(foot), True),
        ]
    return rigs.armature("Spider", bones)


def _tree_sizes(rig: bpy.types.Object) -> list[int]:
    """Sizes of the groups of chains that share bones (each group is solved as one tree)."""
    sets = []
    for ch in rig.reach_ik.chains:
        pb = rig.pose.bones[ch.tip_bone]
        line = {pb.name}
        for _ in range(ch.chain_length - 1):
            pb = pb.parent
            line.add(pb.name)
        sets.append(line)
    groups: list[set[int]] = []
    for i, s in enumerate(sets):
        joined = [g for g in groups if any(sets[j] & s for j in g)]
        merged = {i}.union(*joined) if joined else {i}
        groups = [g for g in groups if g not in joined] + [merged]
    return sorted(len(g) for g in groups)


def _move_targets_and_check(rig: bpy.types.Object, offset: tuple[float, float, float], tol: float) -> None:
    for ch in rig.reach_ik.chains:
        ch.target.location = ch.target.location + Vector(offset)
    rigs.update()
    for ch in rig.reach_ik.chains:
        assert ch.is_valid, f"chain '{ch.name}' invalid: {ch.message}"
        tip = rigs.world_tail(rig, ch.tip_bone)
        err = float(np.linalg.norm(tip - np.array(ch.target.matrix_world.translation)))
        assert err <= tol, f"chain '{ch.name}' tip is {err:.3g} from its moved target"


def test_chains_from_hierarchy_spider_with_root_is_one_tree() -> None:
    rig = _spider(with_root=True)
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.chains_from_hierarchy() == {"FINISHED"}
    chains = rig.reach_ik.chains
    assert sorted(c.tip_bone for c in chains) == sorted(f"leg{i}.3" for i in range(8)), "one chain per foot"
    assert all(c.chain_length == 4 and c.solver == "FABRIK" for c in chains), (
        "each leg runs from its foot up to just below the root: 3 leg bones + the body "
        f"({[(c.name, c.chain_length) for c in chains]})"
    )
    assert _tree_sizes(rig) == [8], "all legs share the body: one tree of 8 chains"
    assert all(c.target is not None and c.created_target for c in chains)
    rigs.update()
    assert all(c.is_valid for c in chains), [(c.name, c.message) for c in chains if not c.is_valid]
    # Lift every foot a little: the body (a fork of 8 branches) and the legs move together.
    _move_targets_and_check(rig, (0.0, 0.0, 0.15), tol=5e-3)


def test_chains_from_hierarchy_spider_body_as_root_gives_independent_legs() -> None:
    rig = _spider(with_root=False)
    bpy.context.view_layer.objects.active = rig
    bpy.ops.reach.chains_from_hierarchy()
    chains = rig.reach_ik.chains
    assert len(chains) == 8 and all(c.chain_length == 3 for c in chains), "the root body stays out of the chains"
    assert _tree_sizes(rig) == [1] * 8
    _move_targets_and_check(rig, (0.05, 0.0, 0.2), tol=1e-3)
    # Running it again adds nothing (every leaf already ends a chain).
    assert bpy.ops.reach.chains_from_hierarchy() == {"CANCELLED"}
    assert len(chains) == 8


@pytest.fixture
def rigify() -> Iterator[None]:
    """Blender's bundled Rigify, enabled for one test and disabled again so nothing stays registered."""
    mod = addon_utils.enable("rigify", default_set=True, handle_error=None)
    if mod is None:
        pytest.skip("the bundled rigify add-on is not available in this bpy build")
    try:
        yield
    finally:
        addon_utils.disable("rigify", default_set=True, handle_error=None)
    left = [name for name in dir(bpy.types) if "rigify" in name.lower()]
    assert not left, f"rigify left classes registered: {left[:5]}"


def test_chains_from_hierarchy_humanoid_metarig(rigify: None) -> None:
    bpy.ops.object.armature_human_metarig_add()
    rig = bpy.context.active_object
    leaves = sorted(b.name for b in rig.data.bones if not b.children)
    assert bpy.ops.reach.chains_from_hierarchy() == {"FINISHED"}
    chains = {c.tip_bone: c for c in rig.reach_ik.chains}
    # One chain per leaf, and one for the head: its only child 'face' pivots on the head's own head, so the
    # face is a separate tree and 'spine.006' ends a chain through the neck.
    assert sorted(chains) == sorted([*leaves, "spine.006"]), "one chain per leaf bone, plus the head"
    assert chains["spine.006"].chain_length == 6, "head -> neck -> chest -> spine.001 (just below 'spine')"
    assert chains["eye.L"].chain_length == 2, "eye.L -> face: the face chains stop at the 'face' pivot"
    # From each leaf up to just below the root bone 'spine' (the hips).
    assert chains["toe.L"].chain_length == 4, "toe.L -> foot.L -> shin.L -> thigh.L"
    assert chains["heel.02.L"].chain_length == 4
    assert chains["pelvis.L"].chain_length == 1, "a bone hanging straight from the root: one bone"
    assert chains["f_index.03.L"].chain_length == 11, "a finger runs up to just below 'spine' (3+palm+hand+"
    "forearm+upper_arm+shoulder+spine.003/2/1)"
    sizes = _tree_sizes(rig)
    # Upper body (10 fingers, 2 breasts, the head) is one tree; the face (21 leaves) another; each leg (toe +
    # heel) is a two-chain tree; pelvis.L/R are one-bone chains.
    assert sizes == [1, 1, 2, 2, 13, 21], sizes
    rigs.update()
    bad = [(c.name, c.message) for c in rig.reach_ik.chains if not c.is_valid]
    assert not bad, f"every chain must be valid after an update: {bad}"
    # Move both feet: the legs follow (a real solve, not only validation).
    for side in ("L", "R"):
        for leaf in (f"toe.{side}", f"heel.02.{side}"):
            chains[leaf].target.location = chains[leaf].target.location + Vector((0.0, -0.1, 0.15))
    rigs.update()
    for leaf in ("toe.L", "heel.02.L", "toe.R", "heel.02.R"):
        err = np.linalg.norm(rigs.world_tail(rig, leaf) - np.array(chains[leaf].target.location))
        assert err < 5e-3, f"{leaf} is {err:.3g} from its target"


# ---------------------------------------------------------------------------------------------------------
# reach.limits_preset
# ---------------------------------------------------------------------------------------------------------


def test_limits_preset_knee_bends_the_modelled_way() -> None:
    # A leg bent slightly forward at the knee in rest: the shin's +Z side is where it bends further.
    rig = rigs.armature(
        "Leg",
        [
            ("thigh", None, (0, 0, 1.0), (0, -0.05, 0.5), False),
            ("shin", "thigh", (0, -0.05, 0.5), (0, 0, 0.0), True),
        ],
    )
    _pose_mode(rig, "shin")
    assert bpy.ops.reach.limits_preset(preset="KNEE") == {"FINISHED"}
    lim = rig.pose.bones["shin"].reach_ik
    sides = {s: math.degrees(getattr(lim, f"cone_{s}")) for s in ("up", "down", "left", "right")}
    assert lim.use_cone and lim.use_twist
    bend = max(sides, key=sides.get)
    assert sides[bend] == pytest.approx(150.0)
    straight = {"up": "down", "down": "up", "left": "right", "right": "left"}[bend]
    bones = rig.data.bones
    shin_vec = bones["shin"].tail_local - bones["shin"].head_local
    thigh_vec = bones["thigh"].tail_local - bones["thigh"].head_local
    rest_bend = math.degrees(shin_vec.angle(thigh_vec))
    assert sides[straight] == pytest.approx(max(rest_bend, 1.0), abs=1e-3), (
        "a knee straightens back to straight and no further"
    )
    # Bending further is away from the thigh's direction: check it in the rest frame.
    axis = {"up": (0, 0, 1), "down": (0, 0, -1), "left": (-1, 0, 0), "right": (1, 0, 0)}[bend]
    shin = rig.data.bones["shin"].matrix_local.to_3x3()
    thigh_dir = thigh_vec.normalized()
    bend_dir = shin @ Vector(axis)
    assert bend_dir.dot(thigh_dir) < 0.0, "the knee must bend away from straight"


@pytest.mark.parametrize("preset", ["BALL", "HINGE", "SHOULDER", "KNEE", "SPINE"])
def test_every_preset_sets_valid_limits_on_selected_bones(preset: str) -> None:
    rig = rigs.chain_rig(3)
    _pose_mode(rig, "b1", ("b2",))
    bpy.ops.reach.limits_preset(preset=preset)
    for name in ("b1", "b2"):
        lim = rig.pose.bones[name].reach_ik
        angles = [lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right]
        assert lim.use_cone and all(0.0 <= a < math.pi for a in angles), f"{preset} on {name}: {angles}"
        assert lim.twist_min <= lim.twist_max
    assert not rig.pose.bones["b0"].reach_ik.use_cone, "unselected bones are untouched"
    # The rig still solves with those limits.
    rigs.add_chain(rig, "b2", 3, rigs.empty("T", (0.5, 0.3, 2.6)))
    rigs.update()
    assert rig.reach_ik.chains[0].is_valid, rig.reach_ik.chains[0].message


def test_chain_add_with_control_bones() -> None:
    rig = rigs.chain_rig(3)
    rig.pose.bones["b1"].rotation_quaternion = (0.95, 0.3, 0.0, 0.0)  # a posed, bent chain
    rigs.update()
    _pose_mode(rig, "b2", ["b1"])
    tail, elbow = rigs.world_tail(rig, "b2"), rigs.world_head(rig, "b2")
    assert bpy.ops.reach.chain_add(controls="BONE") == {"FINISHED"}
    assert rig.mode == "POSE", "back in the mode it was in"
    ch = _chain(rig)
    assert (ch.target, ch.target_bone, ch.pole, ch.pole_bone) == (rig, "IK-b2", rig, "Pole-b2")
    assert ch.created_target_bone and ch.created_pole_bone and not ch.created_target
    assert not rig.data.bones["IK-b2"].use_deform and not rig.data.bones["Pole-b2"].use_deform
    assert rig.data.bones["IK-b2"].parent is None
    assert not [ob for ob in bpy.data.objects if ob.type == "EMPTY"], "no Empties"
    rigs.update()
    rigs.update()
    assert ch.is_valid, ch.message
    assert np.linalg.norm(rigs.world_head(rig, "IK-b2") - tail) < 1e-5, "the control sits at the tip's tail"
    assert np.linalg.norm(rigs.world_tail(rig, "b2") - tail) < 1e-4, "adding the chain moves nothing"
    assert np.linalg.norm(rigs.world_head(rig, "b2") - elbow) < 1e-3, "not even the elbow"
    rig.pose.bones["IK-b2"].location = (0.0, -0.3, 0.2)  # move the control: the chain follows
    rigs.update()
    rigs.update()
    assert np.linalg.norm(rigs.world_tail(rig, "b2") - rigs.world_head(rig, "IK-b2")) < 1e-3
