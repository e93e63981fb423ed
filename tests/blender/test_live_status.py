"""A chain's live status never lies: after any edit it matches the pose Blender evaluates.

Each test solves a rig, then makes one edit that used to leave the old status in place (the change test
did not see it), and checks the chain's status against the pose measured from Blender's evaluated pose.
"""

from __future__ import annotations

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Matrix

TOL = 1e-3


def _cache():  # type: ignore[no-untyped-def]
    return bpy_session.submodule("rig.cache")


def _live():  # type: ignore[no-untyped-def]
    return bpy_session.submodule("rig.live")


def _measured(rig: bpy.types.Object, ch: bpy.types.PropertyGroup) -> float:
    """Tip (tail of the tip bone) to target, in world units, from Blender's evaluated pose."""
    return float(np.linalg.norm(rigs.world_tail(rig, ch.tip_bone) - np.array(ch.target.matrix_world.translation)))


def _assert_honest(rig: bpy.types.Object, what: str) -> None:
    """A valid chain reports the residual Blender shows; an invalid one has a message."""
    _assert_chain_honest(rig, 0, what)


def _solved_rig(n: int = 3, target: tuple[float, float, float] = (0.6, 0.2, 2.3)) -> bpy.types.Object:
    rig = rigs.chain_rig(n)
    t = rigs.empty("T", target)
    rigs.add_chain(rig, f"b{n - 1}", n, t)
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert ch.is_valid and _measured(rig, ch) <= TOL, ch.message
    return rig


def test_unlinking_the_target_invalidates_the_chain() -> None:
    rig = _solved_rig()
    before = rigs.pose_snapshot(rig)
    bpy.context.scene.collection.objects.unlink(rig.reach_ik.chains[0].target)
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert not ch.is_valid and "not in the scene" in ch.message, (ch.is_valid, ch.message)
    assert rigs.pose_snapshot(rig) == before


def test_renaming_the_tip_of_a_chain_from_the_root() -> None:
    rig = _solved_rig()  # b0..b2: the chain starts at the root bone (no outside parent to watch)
    before = rigs.pose_snapshot(rig)
    rig.data.bones["b2"].name = "hand"
    rigs.update()
    ch = rig.reach_ik.chains[0]
    # Followed, as Blender's constraints follow a renamed subtarget (rig/renames.py): nothing to solve anew.
    assert ch.tip_bone == "hand" and ch.is_valid, ch.message
    assert rigs.pose_snapshot(rig) == before
    ch.target.location.x -= 0.1
    rigs.update()
    assert ch.is_valid and _measured(rig, ch) <= TOL, ch.message


@pytest.mark.parametrize("edit", ["inherit_rotation", "inherit_scale"])
def test_bone_relations_edited_after_a_solve(edit: str) -> None:
    rig = _solved_rig()
    before = rigs.pose_snapshot(rig)
    bone = rig.data.bones["b1"]
    if edit == "inherit_rotation":
        bone.use_inherit_rotation = False
    else:
        bone.inherit_scale = "AVERAGE"  # 'Full', 'Aligned' and 'None' are solved exactly; 'Average' is refused
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert not ch.is_valid and "'b1'" in ch.message and "inherit" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before


def test_bone_lengthened_in_edit_mode() -> None:
    rig = _solved_rig(target=(0.5, 0.0, 2.5))
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode="EDIT")
    eb = rig.data.edit_bones["b2"]
    eb.tail = eb.head + (eb.tail - eb.head) * 1.6  # the same direction, 60% longer: matrix_local unchanged
    rigs.update()  # in Edit Mode: nothing is solved, nothing raises
    bpy.ops.object.mode_set(mode="POSE")
    rigs.update()
    _assert_honest(rig, "after lengthening b2 in Edit Mode")
    ch = rig.reach_ik.chains[0]
    assert ch.is_valid and _measured(rig, ch) <= TOL, f"{ch.message}: {_measured(rig, ch):.4g}"


def test_renaming_in_edit_mode_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    rig = _solved_rig()
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode="EDIT")
    rig.data.edit_bones["b1"].name = "forearm"
    rigs.update()
    rig.reach_ik.tolerance = 0.002  # any setting change while still in Edit Mode
    rigs.update()
    bpy.ops.object.mode_set(mode="OBJECT")
    rigs.update()
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err, out.out + out.err
    assert not _cache().reported, _cache().reported
    _assert_honest(rig, "after a rename in Edit Mode")


def test_target_whose_bone_parent_was_deleted_is_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    rig = _solved_rig()
    other = rigs.chain_rig(1, name="Holder")
    other.location = (3.0, 0.0, 0.0)
    t = rig.reach_ik.chains[0].target
    t.parent = other
    t.parent_type = "BONE"
    t.parent_bone = "b0"
    rigs.update()
    bpy.data.objects.remove(other)  # parent is gone; parent_type still says 'BONE'
    rigs.update()
    capfd.readouterr()
    for k in range(3):
        t.location.x += 0.01 * (k + 1)
        rigs.update()
    err = capfd.readouterr()
    assert "enum" not in (err.out + err.err).lower(), err.out + err.err
    _assert_honest(rig, "target with a deleted bone-parent")


def test_caches_do_not_grow_with_deleted_rigs() -> None:
    for i in range(30):
        rig = _solved_rig()
        rig.name = f"Rig{i}"
        target = rig.reach_ik.chains[0].target
        arm = rig.data
        bpy.data.objects.remove(rig)
        bpy.data.objects.remove(target)
        bpy.data.armatures.remove(arm)
        rigs.update()
    sizes = _cache().sizes()
    assert all(v <= 2 for v in sizes.values()), f"caches kept entries of deleted rigs: {sizes}"


def test_unrelated_update_reads_no_rig() -> None:
    rigs_ = [_solved_rig() for _ in range(3)]
    other = rigs.empty("Unrelated", (5.0, 0.0, 0.0))
    rigs.update()
    live = _live()
    checks = [live.check_count(r) for r in rigs_]
    for k in range(5):
        other.location.x += 0.1 * (k + 1)
        rigs.update()
    assert [live.check_count(r) for r in rigs_] == checks, "an unrelated object's move made rigs read their inputs"
    t = rigs_[1].reach_ik.chains[0].target
    t.location.x -= 0.05
    rigs.update()
    after = [live.check_count(r) for r in rigs_]
    assert after[1] > checks[1] and after[0] == checks[0] and after[2] == checks[2], (checks, after)
    _assert_honest(rigs_[1], "after moving its target")


def _assert_chain_honest(rig: bpy.types.Object, i: int, what: str) -> None:
    ch = rig.reach_ik.chains[i]
    if not ch.is_valid:
        assert ch.message, f"{what}: invalid chain without a message"
        return
    measured = _measured(rig, ch)
    assert abs(ch.residual - measured) <= 1e-4 + 1e-3 * measured, (
        f"{what}: chain '{ch.name}' says residual {ch.residual:.4g} but the tip is {measured:.4g} from the target"
    )


def test_stacked_chains_with_a_non_inheriting_bone_between() -> None:
    rig = rigs.chain_rig(5)
    rig.data.bones["b2"].use_inherit_rotation = False  # between the two chains, part of neither
    t1 = rigs.empty("T1", (0.5, 0.3, 1.7))
    rigs.add_chain(rig, "b1", 2, t1, name="upper")
    t2 = rigs.empty("T2", (0.9, 0.8, 3.6))
    rigs.add_chain(rig, "b4", 2, t2, solver="TWO_BONE", name="lower")
    before = rigs.pose_snapshot(rig)
    rigs.update()
    upper, lower = rig.reach_ik.chains
    assert upper.is_valid and _measured(rig, upper) <= TOL, upper.message
    _assert_chain_honest(rig, 1, "chain below a bone that does not inherit rotation")
    assert not lower.is_valid and "'b2'" in lower.message and "Inherit Rotation" in lower.message, lower.message
    b3 = slice(3 * 4 * 4, 5 * 4 * 4)  # quaternion channels of b3, b4 in the snapshot (4 floats of 4 bytes)
    assert rigs.pose_snapshot(rig)[b3] == before[b3], "the refused chain's bones were written"


def test_rest_start_ignores_a_connected_bones_location_channel() -> None:
    rig = rigs.chain_rig(3)
    assert rig.data.bones["b1"].use_connect
    rig.pose.bones["b1"].location = (0.4, -0.2, 0.3)  # Blender ignores it: b1 is connected
    t = rigs.empty("T", (0.6, 0.2, 2.3))
    rigs.add_chain(rig, "b2", 3, t)
    rig.reach_ik.start_from = "REST"
    rigs.update()
    _assert_honest(rig, "Start From Rest with a location on a connected bone")
    assert rig.reach_ik.chains[0].is_valid and _measured(rig, rig.reach_ik.chains[0]) <= TOL


@pytest.mark.parametrize("start", ["CURRENT", "REST"])
def test_target_rotation_with_a_disconnected_tip(start: str) -> None:
    rig = rigs.chain_rig(3, gap=0.3)
    assert not rig.data.bones["b2"].use_connect
    # A reachable goal: where the tip bone is (tail and orientation) in another pose of the same chain.
    for name, q in (("b0", (0.95, 0.2, 0.1, 0.0)), ("b1", (0.9, 0.0, 0.3, 0.2)), ("b2", (0.9, 0.3, 0.0, -0.2))):
        rig.pose.bones[name].rotation_quaternion = q
    rigs.update()
    ev = rig.evaluated_get(bpy.context.evaluated_depsgraph_get())
    goal = ev.matrix_world @ ev.pose.bones["b2"].matrix
    goal.translation = ev.matrix_world @ ev.pose.bones["b2"].tail
    for pb in rig.pose.bones:
        pb.rotation_quaternion = (1.0, 0.0, 0.0, 0.0)
    rigs.update()
    t = rigs.empty("T", (0.0, 0.0, 0.0))
    t.matrix_world = goal
    ch = rigs.add_chain(rig, "b2", 3, t)
    ch.use_target_rotation = True
    rig.reach_ik.start_from = start
    rigs.update()
    _assert_honest(rig, "Use Target Rotation with an offset tip head")
    assert ch.is_valid and _measured(rig, ch) <= TOL, f"{ch.message}: {_measured(rig, ch):.4g}"
    ev = rig.evaluated_get(bpy.context.evaluated_depsgraph_get())
    tip_rot = (ev.matrix_world @ ev.pose.bones["b2"].matrix).to_quaternion()
    assert tip_rot.rotation_difference(t.matrix_world.to_quaternion()).angle < 1e-3


@pytest.mark.parametrize(
    "mode,attr,value",
    [
        ("XYZ", "rotation_euler", (float("inf"), 0.0, 0.0)),
        ("AXIS_ANGLE", "rotation_axis_angle", (float("inf"), 0.0, 1.0, 0.0)),
        ("QUATERNION", "rotation_quaternion", (1.0, float("inf"), 0.0, 0.0)),
    ],
)
def test_infinite_rotation_channel_is_refused(mode: str, attr: str, value: tuple[float, ...]) -> None:
    rig = _solved_rig()
    for pb in rig.pose.bones:
        pb.rotation_mode = mode
    rigs.update()
    setattr(rig.pose.bones["b1"], attr, value)  # stored as FLT_MAX
    before = rigs.pose_snapshot(rig)
    rig.reach_ik.chains[0].target.location.x += 0.1
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert not ch.is_valid and "'b1'" in ch.message and "infinite" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before


def test_target_rotation_from_a_zero_scaled_target_is_refused() -> None:
    rig = _solved_rig()
    ch = rig.reach_ik.chains[0]
    ch.use_target_rotation = True
    rigs.update()
    before = rigs.pose_snapshot(rig)
    ch.target.scale = (0.0, 0.0, 0.0)
    rigs.update()
    assert not ch.is_valid and "scaled to zero" in ch.message and "'T'" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before


def _two_rigs(start_b: str = "REST") -> tuple[bpy.types.Object, bpy.types.Object, bpy.types.Object, bpy.types.Object]:
    """Rig B reaches for TB; rig A reaches for TA, which is parented to B's tip bone (B's chain moves it)."""
    b = rigs.chain_rig(3, name="B")
    tb = rigs.empty("TB", (0.5, 0.2, 2.5))
    rigs.add_chain(b, "b2", 3, tb, name="lead")
    # REST: B's pose depends on its target only; CURRENT (the default): also on the frames played before.
    b.reach_ik.start_from = start_b
    a = rigs.chain_rig(3, name="A")
    a.location = (1.5, 0.0, 0.0)
    rigs.update()
    ta = rigs.empty("TA", (0.0, 0.0, 0.0))
    ta.parent = b
    ta.parent_type = "BONE"
    ta.parent_bone = "b2"
    rigs.update()
    ta.matrix_world = Matrix.Translation((0.9, 0.1, 2.4))
    rigs.add_chain(a, "b2", 3, ta, name="follow")
    rigs.update()
    return a, ta, b, tb


def test_target_hanging_from_another_rigs_chain_is_followed_in_the_same_update() -> None:
    a, ta, b, tb = _two_rigs()
    for k, loc in enumerate(((0.6, 0.3, 2.4), (0.3, -0.2, 2.6), (0.7, 0.1, 2.2))):
        tb.location = loc
        rigs.update()  # one update: B solves, and A reaches for where B's solve put TA
        goal = np.array(ta.matrix_world.translation)  # evaluated now, with B's written pose
        assert np.linalg.norm(rigs.world_tail(b, "b2") - np.array(loc)) <= TOL, f"step {k}: B missed"
        tip = rigs.world_tail(a, "b2")
        assert np.linalg.norm(tip - goal) <= TOL, f"step {k}: A's tip is {np.linalg.norm(tip - goal):.4g} from TA"
        _assert_honest(a, f"step {k}")


def test_bake_of_a_rig_whose_target_hangs_from_a_live_rig() -> None:
    a, ta, _b, tb = _two_rigs()
    for frame, loc in ((1, (0.6, 0.3, 2.4)), (10, (0.3, -0.2, 2.6)), (20, (0.7, 0.1, 2.2))):
        tb.location = loc
        tb.keyframe_insert("location", frame=frame)
    bpy.context.view_layer.objects.active = a
    assert bpy.ops.reach.bake(frame_start=1, frame_end=20) == {"FINISHED"}
    assert not a.reach_ik.chains[0].enabled, "the baked chain is disabled so its keys play back"
    for frame in (1, 5, 10, 15, 20):
        bpy.context.scene.frame_set(frame)
        rigs.update()  # B's frame handler wrote its pose after Blender placed TA: evaluate that
        goal = np.array(ta.matrix_world.translation)
        d = float(np.linalg.norm(rigs.world_tail(a, "b2") - goal))
        assert d <= TOL, f"frame {frame}: the baked tip is {d:.4g} from where TA was"


def test_bake_of_a_rig_following_a_history_dependent_live_rig_matches_the_replay() -> None:
    """B starts from its current pose (the default): where TB's path comes back, B's tip is twisted by the way
    it came (its KEEP roll), so TA on a frame depends on the frames shown before it (played back and forth, not
    where it is played forward; playback from the range's first frame starts over from the FK pose there). The bake
    reads the pass it steps through and puts B back as it found it, so a replay from there puts A's tip on
    TA, and warns."""
    a, ta, b, tb = _two_rigs("CURRENT")
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, 20
    for frame, loc in ((1, (0.6, 0.3, 2.4)), (10, (0.3, -0.2, 2.6)), (20, (0.7, 0.1, 2.2))):
        tb.location = loc
        tb.keyframe_insert("location", frame=frame)
    forward, backward = {}, {}
    scene.frame_set(20)
    for frame in range(1, 21):  # playback from the first frame (arriving there from another one)
        scene.frame_set(frame)
        forward[frame] = np.array(ta.matrix_world.translation)
    for _bounce in range(3):  # back and forth over frames 2-20 (never the first): the twist builds up
        for frame in (*range(20, 1, -1), *range(2, 21)):
            scene.frame_set(frame)
            backward[frame] = np.array(ta.matrix_world.translation)
    drift = max(float(np.linalg.norm(forward[f] - backward[f])) for f in backward)
    assert drift > 10 * TOL, "B's pose depends on the frames shown before (history-dependent)"
    scene.frame_set(20)
    scene.frame_set(1)  # the loop: B starts over from its FK pose, and plays the forward pass again
    replay = {}
    for frame in range(1, 21):
        scene.frame_set(frame)
        replay[frame] = np.array(ta.matrix_world.translation)
    assert max(float(np.linalg.norm(forward[f] - replay[f])) for f in forward) <= 1e-6, "every loop plays alike"
    b_before = rigs.pose_snapshot(b)
    bake = bpy_session.submodule("rig.bake")
    result = bake.bake_rig(a, bake.BakeOptions(frame_start=1, frame_end=20))
    assert result.read_path == "frame_set"
    assert any("'B'" in w and "Start From" in w for w in result.warnings), result.warnings
    assert rigs.pose_snapshot(b) == b_before, "the bake puts the live rig it stepped back as it found it"
    assert not a.reach_ik.chains[0].enabled
    for frame in range(1, 21):
        scene.frame_set(frame)
        rigs.update()
        goal = np.array(ta.matrix_world.translation)
        d = float(np.linalg.norm(rigs.world_tail(a, "b2") - goal))
        assert d <= TOL, f"frame {frame}: the baked tip is {d:.4g} from where TA is on the replay"


def test_a_chain_removed_from_a_script_gives_the_fk_pose_back_after_update_tag() -> None:
    """`chains.remove(i)` tags nothing (a Python collection): the FK pose comes back at the rig's next update,
    and at once when the script tags the object (README, Data)."""
    rig = rigs.chain_rig(3)
    fk = np.array(rig.pose.bones["b1"].rotation_quaternion, dtype=np.float32)
    t = rigs.empty("T", (0.6, 0.2, 2.3))
    rigs.add_chain(rig, "b2", 3, t)
    rigs.update()
    assert not np.array_equal(np.array(rig.pose.bones["b1"].rotation_quaternion, dtype=np.float32), fk), "IK posed"
    rig.reach_ik.chains.remove(0)
    rigs.update()
    solved = np.array(rig.pose.bones["b1"].rotation_quaternion, dtype=np.float32)
    assert not np.array_equal(solved, fk), "untagged, nothing re-evaluates: the IK pose stays for now"
    rig.update_tag()
    rigs.update()
    back = np.array(rig.pose.bones["b1"].rotation_quaternion, dtype=np.float32)
    assert np.array_equal(back, fk), f"tagged: the FK pose is back at once ({back} vs {fk})"
    rest_tip = np.array(rig.matrix_world @ rig.data.bones["b2"].tail_local)
    assert np.linalg.norm(rigs.world_tail(rig, "b2") - rest_tip) < 1e-5, "Blender shows the FK (rest) pose"


def _constrained_rigs(kind: str) -> tuple[bpy.types.Object, bpy.types.Object, bpy.types.Object, bpy.types.Object]:
    """As `_two_rigs`, but TA follows B's tip bone through a constraint, not parenting."""
    b = rigs.chain_rig(3, name="B")
    tb = rigs.empty("TB", (0.5, 0.2, 2.5))
    rigs.add_chain(b, "b2", 3, tb, name="lead")
    b.reach_ik.start_from = "REST"
    a = rigs.chain_rig(3, name="A")
    a.location = (1.5, 0.0, 0.0)
    rigs.update()
    ta = rigs.empty("TA", (0.9, 0.1, 2.4))
    con = ta.constraints.new(kind)
    con.target = b
    con.subtarget = "b2"
    if kind == "COPY_LOCATION":
        con.head_tail = 0.5  # halfway along the bone
    rigs.update()
    if kind == "CHILD_OF":
        # Set Inverse, as the operator does: TA stays where it is, then follows the bone.
        con.inverse_matrix = (b.matrix_world @ b.pose.bones["b2"].matrix).inverted()
    rigs.update()
    rigs.add_chain(a, "b2", 3, ta, name="follow")
    rigs.update()
    return a, ta, b, tb


@pytest.mark.parametrize("kind", ["CHILD_OF", "COPY_LOCATION", "COPY_TRANSFORMS"])
def test_target_following_another_rigs_bone_through_a_constraint_in_the_same_update(kind: str) -> None:
    """Issue 35 item 14: a target that follows another Reach IK rig's bone through Child Of or Copy Location
    was solved toward where it was (0.29 m off) while its chain said "reached"."""
    a, ta, b, tb = _constrained_rigs(kind)
    for k, loc in enumerate(((0.6, 0.3, 2.4), (0.3, -0.2, 2.6), (0.7, 0.1, 2.2))):
        tb.location = loc
        rigs.update()  # one update: B solves, and A reaches for where B's solve put TA
        goal = np.array(ta.evaluated_get(bpy.context.evaluated_depsgraph_get()).matrix_world.translation)
        assert np.linalg.norm(rigs.world_tail(b, "b2") - np.array(loc)) <= TOL, f"step {k}: B missed"
        tip = rigs.world_tail(a, "b2")
        assert np.linalg.norm(tip - goal) <= TOL, f"step {k}: A's tip is {np.linalg.norm(tip - goal):.4g} from TA"
        _assert_honest(a, f"step {k}")
