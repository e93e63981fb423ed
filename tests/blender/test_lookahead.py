"""Playback solved ahead (`rig.lookahead`): a CMU clip set up in one click, its range solved while nothing
happens, then played. Every frame change that finds Blender showing what a frame was solved for takes it
(the counter `lookahead.hits`), and what Blender evaluates then, the chains' statuses and the FK pose the
store keeps are those of the same playback solved frame by frame after the evaluation; an update listing
the rig drops what was solved ahead; a channel, a constraint or a pole angle Blender applies that the
prediction did not see makes the frame change solve as before; the idle timer solves the range in slices.
"""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from mathutils import Vector
from test_live_program import _evaluated_pose
from test_mocap import import_clip, set_up
from test_playback_program import _released, _statuses

from demo import rigs as demo_rigs

FRAMES = 24
NEAR = 1e-4  # the solve ahead reads its own forward kinematics of the channels, Blender's evaluation float32


def _lookahead():  # type: ignore[no-untyped-def]
    return bpy_session.submodule("rig.lookahead")


def _cmu() -> tuple[bpy.types.Object, int]:
    """The CMU walk set up in one click, its controls snapped over the range, the scene's range set to it."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    obj = import_clip("cmu_131_01")
    start = int(obj.animation_data.action.frame_range[0])
    scene = bpy.context.scene
    scene.frame_set(start)
    assert set_up(obj) == {"FINISHED"}
    done = bpy.ops.reach.snap_to_pose(chains="ALL", use_range=True, frame_start=start, frame_end=start + FRAMES)
    assert done == {"FINISHED"}
    scene.frame_start, scene.frame_end = start, start + FRAMES
    scene.frame_set(start)
    return obj, start


def _play(obj: bpy.types.Object, start: int) -> tuple[list[np.ndarray], list[list], int]:
    la = _lookahead()
    before = la.hits(obj)
    poses, statuses = [], []
    for f in range(start, start + FRAMES + 1):
        bpy.context.scene.frame_set(f)
        poses.append(_evaluated_pose(obj))
        statuses.append(_statuses(obj))
    return poses, statuses, la.hits(obj) - before


def _same(ahead: tuple[list[np.ndarray], list[list]], after: tuple[list[np.ndarray], list[list]]) -> None:
    for f, (a, b) in enumerate(zip(ahead[0], after[0], strict=True)):
        worst = float(np.abs(a - b).max())
        assert worst < NEAR, f"frame {f}: the pose solved ahead differs from the live solve's by {worst}"
    for f, (a, b) in enumerate(zip(ahead[1], after[1], strict=True)):
        for (valid_a, text_a, res_a), (valid_b, text_b, res_b) in zip(a, b, strict=True):
            assert valid_a == valid_b and text_a == text_b, f"frame {f}: '{text_a}' vs '{text_b}'"
            assert abs(res_a - res_b) < NEAR


def test_mocap_played_ahead_shows_what_the_live_solve_shows() -> None:
    la = _lookahead()
    obj, start = _cmu()
    assert la.ready(obj) == 0
    *after, hits_after = _play(obj, start)
    fk_after = _released(obj)
    assert hits_after == 0

    obj, start = _cmu()
    assert la.fill(obj) is None, la.why_not(obj)
    assert la.ready(obj) == FRAMES + 1
    *ahead, hits = _play(obj, start)
    assert hits == FRAMES + 1, f"{hits} of {FRAMES + 1} frames taken (last miss: {la.missed.get(obj.session_uid)})"
    _same((ahead[0], ahead[1]), (after[0], after[1]))
    # The FK store kept the keyed pose as the live solve did: letting the chains go shows the same FK pose.
    assert np.abs(_released(obj) - fk_after).max() < 1e-6
    # The chains were let go (a setting): nothing solved ahead is taken.
    *_again, hits = _play(obj, start)
    assert hits == 0


def test_frames_are_taken_in_any_order_and_an_edit_solves_them_again() -> None:
    la = _lookahead()
    obj, start = _cmu()
    assert la.fill(obj) is None
    scene = bpy.context.scene
    reference = {}
    for f in (start + 5, start + 20, start + 3, start + 20):
        before = la.hits(obj)
        scene.frame_set(f)
        assert la.hits(obj) == before + 1, la.missed.get(obj.session_uid)
        reference.setdefault(f, _evaluated_pose(obj))
        assert np.abs(_evaluated_pose(obj) - reference[f]).max() == 0.0
    # An update that changes nothing the rig reads (Play lists the scene and its animated objects when it
    # starts): the frames solved ahead are checked and kept.
    entry = la.cache.ahead[obj.session_uid]
    obj.update_tag()
    rigs.update()
    assert entry.stale
    assert la.fill(obj) is None
    assert la.cache.ahead[obj.session_uid] is entry and not entry.stale
    before = la.hits(obj)
    scene.frame_set(start + 4)
    assert la.hits(obj) == before + 1
    # A control's key moved: the frame change does not take the frame solved ahead (Blender shows another
    # channel); it is solved after the evaluation, toward the moved key.
    ch = obj.reach_ik.chains[0]
    fc = _fcurve(obj, f'pose.bones["{ch.target_bone}"].location', 2)
    for kp in fc.keyframe_points:
        kp.co.y += 0.05
        kp.handle_left.y += 0.05
        kp.handle_right.y += 0.05
    fc.update()
    obj.update_tag()
    rigs.update()
    before = la.hits(obj)
    scene.frame_set(start + 7)
    assert la.hits(obj) == before and la.missed[obj.session_uid] == "channels"
    gap = _tip_gap(obj, 0)
    assert gap <= obj.reach_ik.tolerance * 1.01 or obj.reach_ik.chains[0].message, "the arm follows the moved key"
    # Checked when things are quiet: the keys changed, so the range is solved again, and taken again.
    assert la.fill(obj) is None
    assert la.cache.ahead[obj.session_uid] is not entry
    scene.frame_set(start + 8)
    assert la.hits(obj) == before + 1


def _fcurve(obj: bpy.types.Object, path: str, index: int) -> bpy.types.FCurve:
    anim = bpy_session.submodule("rig.anim")
    return next(
        fc
        for fc in anim.all_fcurves(obj.animation_data.action, obj)
        if fc.data_path == path and fc.array_index == index
    )


def _tip_gap(obj: bpy.types.Object, chain: int) -> float:
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    ch = obj.reach_ik.chains[chain]
    tip = ev.pose.bones[ch.tip_bone].tail
    goal = ev.pose.bones[ch.target_bone].head
    return float((tip - goal).length)


@pytest.mark.parametrize("change", ["scale", "constraint", "pole_angle"])
def test_what_the_prediction_did_not_see_is_solved_after_the_evaluation(change: str) -> None:
    """Changes made with no update Blender reports before the frame change (a script that changes a channel no
    key sets, adds a constraint, or sets a setting through an ID property, then steps a frame): the frame
    change finds Blender showing something else than what was solved ahead, and solves as before."""
    la = _lookahead()
    obj, start = _cmu()
    assert la.fill(obj) is None
    ch = obj.reach_ik.chains[0]
    control = obj.pose.bones[ch.target_bone]
    scene = bpy.context.scene
    if change == "scale":
        control.scale = (1.5, 1.5, 1.5)  # no key sets it: the channels differ from the prediction
        expected = "channels"
    elif change == "constraint":
        con = control.constraints.new("LIMIT_LOCATION")
        con.use_min_z = con.use_max_z = True
        con.min_z = con.max_z = float(control.head.z) + 0.1
        expected = "pose"
    else:
        ch.pole_angle = ch.pole_angle + 0.5  # a setting: the version the frames were solved for changed
        expected = "settings"
    before = la.hits(obj)
    scene.frame_set(start + 6)
    assert la.hits(obj) == before, "the frame solved ahead was taken"
    if expected == "settings":
        # A setting marks the rig to check: its frame change is solved as before, the frames checked when quiet.
        assert la.cache.ahead[obj.session_uid].stale
        assert la.fill(obj) is None and not la.cache.ahead[obj.session_uid].stale
    else:
        assert la.missed.get(obj.session_uid) == expected
    # What Blender shows is the live solve's: the chain reaches its control as shown (or says it does not).
    gap = _tip_gap(obj, 0)
    assert gap <= obj.reach_ik.tolerance * 1.01 or obj.reach_ik.chains[0].message, gap


def test_the_idle_timer_solves_the_range_in_slices() -> None:
    la = _lookahead()
    obj, start = _cmu()
    uid = obj.session_uid
    la.want(uid)
    la._quiet_since = 0.0  # as long ago as it gets: nothing changed since
    calls = 0
    while True:
        calls += 1
        again = la._tick()
        assert la.ready(obj) <= FRAMES + 1
        if again is None:
            break
        assert calls < 10_000
    assert la.ready(obj) == FRAMES + 1
    # A frame change after the last update is taken.
    before = la.hits(obj)
    bpy.context.scene.frame_set(start + 2)
    assert la.hits(obj) == before + 1


def test_a_rig_whose_targets_are_objects_is_not_solved_ahead_and_plays_as_before() -> None:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    rig = demo_rigs.character()
    demo_rigs.use_reach(rig)
    obj = rig.obj
    target = obj.reach_ik.chains[0].target
    for f, dx in ((1, 0.0), (10, 0.1)):
        target.location.x += dx
        target.keyframe_insert("location", frame=f)
    bpy.context.scene.frame_set(2)
    la = _lookahead()
    why = la.fill(obj)
    assert isinstance(why, str) and why, why
    assert la.ready(obj) == 0
    before = la.hits(obj)
    bpy.context.scene.frame_set(5)
    assert la.hits(obj) == before


def test_a_key_equal_to_what_reach_ik_wrote_keeps_the_stored_fk_value() -> None:
    """The FK store's rule (`rig/fk.py`): a channel holding exactly what Reach IK last wrote keeps the FK value
    stored then. A frame whose keys give a chain bone exactly what the frame before wrote is therefore not
    taken from the frames solved ahead (they take every channel for FK): it is solved as before, and the
    store keeps the earlier FK value, as live playback keeps it."""
    la = _lookahead()
    fk = bpy_session.submodule("rig.fk")
    armature = bpy_session.submodule("rig.armature")
    obj, start = _cmu()
    scene = bpy.context.scene
    f = start + 10
    # The control a little off the clip's hand at frame f: the solve turns the arm away from its keys there.
    ch = obj.reach_ik.chains[0]
    for i in range(3):
        kp = next(
            k for k in _fcurve(obj, f'pose.bones["{ch.target_bone}"].location', i).keyframe_points if round(k.co.x) == f
        )
        kp.co.y += 0.03
        kp.handle_left.y += 0.03
        kp.handle_right.y += 0.03
    rigs.update()
    assert la.fill(obj) is None
    scene.frame_set(f)
    bone = ch.tip_bone
    b = obj.pose.bones.find(bone)
    mode = obj.pose.bones[b].rotation_mode
    attr, width = armature.rotation_channel(mode)
    written = [float(v) for v in getattr(obj.pose.bones[b], attr)][:width]
    fk_before = fk.Store.read(obj).rows[fk.Store.read(obj).index[bone], fk.FK][:width].copy()
    assert not np.array_equal(np.float32(written), fk_before), "the solve turned the bone"
    # The next frame's keys give the bone exactly what the solve wrote at this one.
    for i in range(width):
        fc = _fcurve(obj, f'pose.bones["{bone}"].{attr}', i)
        kp = next(k for k in fc.keyframe_points if round(k.co.x) == f + 1)
        kp.co.y = kp.handle_left.y = kp.handle_right.y = written[i]
    rigs.update()
    assert la.fill(obj) is None  # solved again for the new keys
    scene.frame_set(f)
    before = la.hits(obj)
    scene.frame_set(f + 1)
    assert la.hits(obj) == before and la.missed[obj.session_uid] == "ours"
    store = fk.Store.read(obj)
    assert np.array_equal(store.rows[store.index[bone], fk.FK][:width], fk_before), "the stored FK value stands"


def test_a_longer_playback_range_is_solved_ahead_again() -> None:
    """The scene's range changed (an update that lists the scene, not the rig): a frame outside the frames
    solved ahead is solved as it is shown, and the new range is solved ahead when things are quiet."""
    la = _lookahead()
    obj, start = _cmu()
    assert la.fill(obj) is None
    scene = bpy.context.scene
    scene.frame_end = start + FRAMES + 6
    rigs.update()
    before = la.hits(obj)
    scene.frame_set(start + FRAMES + 3)
    assert la.hits(obj) == before
    assert la.cache.ahead[obj.session_uid].stale
    assert la.fill(obj) is None and la.ready(obj) == FRAMES + 7
    scene.frame_set(start + FRAMES + 4)
    assert la.hits(obj) == before + 1


KEYED = 12  # frames of the animator's rig below


def _keyed_controls() -> bpy.types.Object:
    """The set-up Mixamo humanoid animated as an animator does: only its hand and foot controls keyed (every
    fourth frame, each on a little circle), its chain bones not (each frame starts them from the frame
    before's result); the playback range is the keyed one."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    obj = demo_rigs.humanoid("mixamo", bent=True)
    bpy.context.view_layer.update()
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.auto_setup() == {"FINISHED"}
    rigs.update()
    pbs = obj.pose.bones
    controls = [ch.target_bone for ch in obj.reach_ik.chains if "hand" in ch.target_bone or "foot" in ch.target_bone]
    assert len(controls) == 4, controls
    for k, name in enumerate(controls):
        pb = pbs[name]
        home = pb.location.copy()
        for f in range(1, KEYED + 1, 4):
            angle = 0.6 * f + k
            pb.location = home + Vector((0.08 * math.cos(angle), 0.06 * math.sin(angle), 0.05 * math.sin(2 * angle)))
            pb.keyframe_insert("location", frame=f)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, KEYED
    scene.frame_set(KEYED)  # not the first frame: playback arrives there
    return obj


def _loops(obj: bpy.types.Object, loops: int = 2) -> tuple[list[np.ndarray], list[list], int]:
    la = _lookahead()
    before = la.hits(obj)
    poses, statuses = [], []
    for _ in range(loops):
        for f in range(1, KEYED + 1):
            bpy.context.scene.frame_set(f)
            poses.append(_evaluated_pose(obj))
            statuses.append(_statuses(obj))
    return poses, statuses, la.hits(obj) - before


def test_controls_keyed_alone_are_played_ahead_frame_after_frame() -> None:
    """The chain bones no key sets start each frame from the frame before's result: the range is solved ahead
    in that order, from the first frame, which starts from the FK pose (`fk.start_over`) on every loop. Every
    frame of two loops is taken, and shows what live playback solving each frame after the evaluation shows,
    the same on both loops, with the same statuses and FK store."""
    la = _lookahead()
    obj = _keyed_controls()
    *after, hits_after = _loops(obj)
    assert hits_after == 0
    worst = max(float(np.abs(a - b).max()) for a, b in zip(after[0][:KEYED], after[0][KEYED:], strict=True))
    assert worst == 0.0, f"live playback's second loop differs from its first by {worst}"
    fk_after = _released(obj)

    obj = _keyed_controls()
    assert la.fill(obj) is None, la.why_not(obj)
    entry = la.cache.ahead[obj.session_uid]
    assert entry.carried, "the chain bones carry each frame's result to the next"
    *ahead, hits = _loops(obj)
    assert hits == 2 * KEYED, f"{hits} of {2 * KEYED} frames taken (last miss: {la.missed.get(obj.session_uid)})"
    _same((ahead[0], ahead[1]), (after[0], after[1]))
    assert np.abs(_released(obj) - fk_after).max() < 1e-6, "the FK store holds the FK pose, as live playback's"


def test_frames_shown_out_of_order_are_solved_as_shown_and_playback_takes_them_again() -> None:
    """A frame shown after another than the one before it (scrubbing) starts elsewhere: it is solved as it is
    shown, and nothing solved ahead is dropped for it; the next loop from the first frame takes them again. A
    chain bone posed by hand changes where the range starts: solved ahead anew."""
    la = _lookahead()
    obj = _keyed_controls()
    assert la.fill(obj) is None
    entry = la.cache.ahead[obj.session_uid]
    scene = bpy.context.scene
    scene.frame_set(1)
    before = la.hits(obj)
    scene.frame_set(7)
    assert la.hits(obj) == before and la.missed[obj.session_uid] == "order"
    scene.frame_set(1)
    for f in range(2, KEYED + 1):
        scene.frame_set(f)
    assert la.hits(obj) == before + KEYED, la.missed.get(obj.session_uid)
    assert la.cache.ahead[obj.session_uid] is entry, "kept"
    # The user turns a chain bone by hand (its FK value): the frames are solved again from the new start.
    name = obj.reach_ik.chains[0].tip_bone
    pb = obj.pose.bones[name]
    pb.rotation_mode = pb.rotation_mode  # as it is
    attr = "rotation_quaternion" if pb.rotation_mode == "QUATERNION" else "rotation_euler"
    value = list(getattr(pb, attr))
    value[1] += 0.2
    setattr(pb, attr, value)
    rigs.update()
    assert la.fill(obj) is None
    assert la.cache.ahead[obj.session_uid] is not entry, "solved again from the new FK pose"
    fresh = la.cache.ahead[obj.session_uid]
    k = fresh.carried_bones.index(obj.pose.bones.find(name))
    assert np.abs(fresh.start[k, : len(value)] - np.float32(value)).max() == 0.0, "the hand's pose is its FK value"
    scene.frame_set(KEYED)
    before = la.hits(obj)
    for f in range(1, KEYED + 1):
        scene.frame_set(f)
    assert la.hits(obj) == before + KEYED, la.missed.get(obj.session_uid)
