"""Renders show each frame's live pose, measured in the rendered images and in the render's own depsgraph.

A two-bone arm reaches for a keyed Empty; a small sphere hangs from the hand bone. Workbench renders it at a
tiny resolution on a transparent background, the sphere's centroid is found from the alpha channel and
compared with where the target projects (`world_to_camera_view`). The user's data (actions, keys, pose, FK
store, frame, chain flags) must end byte-identical, also when the render fails.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import bpy
import bpy_session
import numpy as np
import pytest
import rigs
from bpy_extras.object_utils import world_to_camera_view
from mathutils import Vector

RES = 96
ORTHO = 4.0  # metres across the image: one pixel is ~4 cm
KEYS = ((1, (0.5, 0.0, 1.5)), (4, (1.2, 0.3, 0.8)), (6, (-0.8, 0.2, 1.0)))


def _arm(name: str = "Arm") -> tuple[bpy.types.Object, bpy.types.Object]:
    rig = rigs.armature(
        name, [("upper", None, (0, 0, 0), (0, 0, 1), False), ("fore", "upper", (0, 0, 1), (0.05, 0, 2), True)]
    )
    target = rigs.empty("Target", KEYS[0][1])
    for frame, loc in KEYS:
        target.location = loc
        target.keyframe_insert("location", frame=frame)
    rigs.add_chain(rig, "fore", 2, target, solver="TWO_BONE")
    return rig, target


def _ball(rig: bpy.types.Object, bone: str) -> bpy.types.Object:
    bpy.ops.mesh.primitive_uv_sphere_add(radius=0.1, segments=16, ring_count=8)
    ball = bpy.context.active_object
    ball.parent = rig
    ball.parent_type = "BONE"
    ball.parent_bone = bone
    ball.location = (0.0, 0.0, 0.0)  # a bone's child sits at the bone's tail
    return ball


def _setup(tmp: Path, start: int = 1, end: int = 6) -> bpy.types.Scene:
    sc = bpy.context.scene
    cam = bpy.data.objects.new("Cam", bpy.data.cameras.new("Cam"))
    sc.collection.objects.link(cam)
    cam.data.type = "ORTHO"
    cam.data.ortho_scale = ORTHO
    cam.location = (0.2, -10.0, 1.0)
    cam.rotation_euler = (math.pi / 2, 0.0, 0.0)
    sc.camera = cam
    r = sc.render
    r.engine = "BLENDER_WORKBENCH"
    r.resolution_x = r.resolution_y = RES
    r.resolution_percentage = 100
    r.film_transparent = True
    r.image_settings.file_format = "PNG"
    r.image_settings.color_mode = "RGBA"
    r.filepath = str(tmp / "f_")
    sc.display.shading.light = "FLAT"
    sc.display.shading.color_type = "SINGLE"
    sc.frame_start, sc.frame_end = start, end
    return sc


def centroid(path: Path) -> np.ndarray:
    """The alpha-weighted centre of the image's visible pixels, in pixels from the bottom-left corner."""
    img = bpy.data.images.load(str(path))
    try:
        w, h = img.size
        px = np.empty(w * h * 4, dtype=np.float32)
        img.pixels.foreach_get(px)  # rows from the bottom, as world_to_camera_view's v
    finally:
        bpy.data.images.remove(img)
    alpha = px.reshape(h, w, 4)[..., 3]
    assert alpha.sum() > 1.0, f"nothing visible in {path.name}"
    ys, xs = np.mgrid[0:h, 0:w]
    return np.array([((xs + 0.5) * alpha).sum(), ((ys + 0.5) * alpha).sum()]) / alpha.sum()


def projection(sc: bpy.types.Scene, point: Any) -> np.ndarray:
    uv = world_to_camera_view(sc, sc.camera, Vector(point))
    return np.array([uv.x * RES, uv.y * RES])


def _target_at(target: bpy.types.Object, frame: int) -> np.ndarray:
    bpy.context.scene.frame_set(frame)
    return np.array(target.matrix_world.translation)


def _fcurve_bytes(obj: bpy.types.Object) -> dict[tuple[str, int], bytes]:
    anim = bpy_session.submodule("rig.anim")
    ad = obj.animation_data
    if ad is None or ad.action is None:
        return {}
    out = {}
    for fc in anim.all_fcurves(ad.action, obj):
        data = anim.read_keys(fc)
        out[(fc.data_path, fc.array_index)] = b"".join(np.ascontiguousarray(v).tobytes() for v in data.values())
    return out


def _prop(value: Any) -> object:
    if hasattr(value, "to_dict"):
        return repr(value.to_dict())  # repr: float values compared exactly, NaN too
    if hasattr(value, "to_list"):
        return bytes(np.asarray(value.to_list(), dtype=np.float32))
    return value


def user_state(*objs: bpy.types.Object) -> dict[str, object]:
    """Everything a render must leave as it was, as comparable values (bytes for floats)."""
    sc = bpy.context.scene
    out: dict[str, object] = {
        "frame": (sc.frame_current, sc.frame_subframe),
        "actions": sorted((a.name, a.users, a.use_fake_user) for a in bpy.data.actions),
    }
    for ob in objs:
        ad = ob.animation_data
        out[ob.name] = {
            "animation_data": ad is not None,
            "action": None if ad is None or ad.action is None else ad.action.name,
            "slot": getattr(ad, "action_slot_handle", None) if ad is not None else None,
            "nla": None if ad is None else [t.name for t in ad.nla_tracks],
            "keys": _fcurve_bytes(ob),
            "pose": rigs.pose_snapshot(ob) if ob.type == "ARMATURE" else None,
            "props": {k: _prop(ob[k]) for k in ob.keys()},  # the FK store and the settings as stored
            "enabled": [ch.enabled for ch in ob.reach_ik.chains] if ob.type == "ARMATURE" else None,
        }
    return out


def same_state(now: dict[str, object], before: dict[str, object]) -> None:
    for key, value in before.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                assert now[key][sub] == v, f"{key} / {sub} changed"  # type: ignore[index]
        else:
            assert now[key] == value, f"{key} changed: {now[key]} vs {value}"
    assert now.keys() == before.keys()


def test_animation_render_shows_each_frames_pose(tmp_path: Path) -> None:
    rig, target = _arm()
    _ball(rig, "fore")
    sc = _setup(tmp_path)
    sc.frame_set(1)
    bpy.ops.render.render(animation=True)
    first = projection(sc, _target_at(target, 1))
    moved = 0
    for f in range(sc.frame_start, sc.frame_end + 1):
        seen = centroid(tmp_path / f"f_{f:04d}.png")
        want = projection(sc, _target_at(target, f))
        live_tip = projection(sc, rigs.world_tail(rig, "fore"))  # live playback at frame f
        assert np.linalg.norm(seen - want) < 1.0, f"frame {f}: the hand renders at {seen}, the target is at {want} px"
        assert np.linalg.norm(seen - live_tip) < 1.0, f"frame {f}: render {seen} vs live playback {live_tip} px"
        moved += np.linalg.norm(want - first) > 10.0
    assert moved >= 3, "the target moves by more than 10 px in most frames (a frozen pose would fail)"


def test_an_invalid_chain_does_not_stop_the_others(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    rig, target = _arm()
    other = rigs.empty("Other", (0.0, 1.0, 1.0))
    broken = rigs.add_chain(rig, "nope", 2, other, solver="TWO_BONE", name="broken")
    _ball(rig, "fore")
    sc = _setup(tmp_path)
    sc.frame_set(1)
    rigs.update()
    assert not broken.is_valid and rig.reach_ik.chains[0].is_valid
    bpy.ops.render.render(animation=True)
    assert "rendering without a bake" not in capfd.readouterr().out
    for f in (4, 6):
        seen = centroid(tmp_path / f"f_{f:04d}.png")
        want = projection(sc, _target_at(target, f))
        assert np.linalg.norm(seen - want) < 1.0, f"frame {f}: the hand renders at {seen}, the target is at {want} px"


def test_a_rig_that_cannot_be_baked_says_so_and_changes_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    rig, target = _animated_user_rig()
    rig.scale = (1.0, 2.0, 1.0)  # refused by live solving and the bake alike (non-uniform armature scale)
    sc = _setup(tmp_path, 1, 2)
    sc.frame_set(1)
    rigs.update()
    before = user_state(rig, target)
    capfd.readouterr()
    bpy.ops.render.render(animation=True)
    out = capfd.readouterr().out
    assert "Reach IK: rendering without a bake of 'Arm'" in out and "scale" in out, out[-2000:]
    same_state(user_state(rig, target), before)


def test_single_frame_render(tmp_path: Path) -> None:
    rig, target = _arm()
    _ball(rig, "fore")
    sc = _setup(tmp_path)
    sc.frame_set(1)
    sc.frame_set(4)  # F12 at frame 4, as `blender -b shot.blend -f 4`
    sc.render.filepath = str(tmp_path / "still.png")
    bpy.ops.render.render(write_still=True)
    seen = centroid(tmp_path / "still.png")
    want = projection(sc, _target_at(target, 4))
    assert np.linalg.norm(seen - want) < 1.0, f"the hand renders at {seen}, the target is at {want} px"


def _animated_user_rig() -> tuple[bpy.types.Object, bpy.types.Object]:
    """An arm with the user's own action: FK keys on the chain bones, a keyed Influence and a keyed control."""
    rig, target = _arm()
    for f, angle in ((1, 0.2), (6, -0.4)):
        for name in ("upper", "fore"):
            pb = rig.pose.bones[name]
            pb.rotation_quaternion = (math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0)
            pb.keyframe_insert("rotation_quaternion", frame=f)
    ch = rig.reach_ik.chains[0]
    for f, w in ((1, 0.5), (6, 1.0)):
        ch.influence = w
        rig.keyframe_insert("reach_ik.chains[0].influence", frame=f)
    return rig, target


def test_render_leaves_the_users_data_exactly(tmp_path: Path) -> None:
    rig, target = _animated_user_rig()
    _ball(rig, "fore")
    sc = _setup(tmp_path)
    sc.frame_set(3)
    rigs.update()
    assert rig.get("_reach_ik_fk") is not None, "live solving has stored FK values (they must come back as they were)"
    before = user_state(rig, target)
    bpy.ops.render.render(animation=True)
    render = bpy_session.submodule("rig.render")
    assert not render.active()
    same_state(user_state(rig, target), before)
    # The rendered frames followed the keyed Influence: at 1.0 (frame 6) the hand is on the target.
    seen = centroid(tmp_path / "f_0006.png")
    want = projection(sc, _target_at(target, 6))
    assert np.linalg.norm(seen - want) < 1.0, f"frame 6: the hand renders at {seen}, the target is at {want} px"


@pytest.mark.parametrize("how", ["unwritable output", "no camera"])
def test_failed_render_leaves_the_users_data_exactly(tmp_path: Path, how: str) -> None:
    rig, target = _animated_user_rig()
    static, _t = _arm("Static")  # a rig with no action of its own: the bake creates one for the render
    sc = _setup(tmp_path)
    sc.frame_set(2)
    rigs.update()
    before = user_state(rig, target, static)
    render = bpy_session.submodule("rig.render")
    baked: list[int] = []
    spy = lambda *_a: baked.append(len(render.baked()))  # noqa: E731  (render_pre: after the bake)
    bpy.app.handlers.render_pre.append(spy)
    try:
        if how == "unwritable output":
            (tmp_path / "file").write_text("not a folder")
            sc.render.filepath = str(tmp_path / "file" / "f_")
        else:
            sc.camera = None
            before["frame"] = (sc.frame_current, sc.frame_subframe)
        with pytest.raises(RuntimeError):
            bpy.ops.render.render(animation=True)
    finally:
        bpy.app.handlers.render_pre.remove(spy)
    assert baked == [2], "both rigs were baked for the render before it failed"
    assert not render.active()
    same_state(user_state(rig, target, static), before)


def test_cancel_path_restores(tmp_path: Path) -> None:
    """What `render_cancel` runs (Esc in the GUI), called directly after a prepared render."""
    rig, target = _animated_user_rig()
    sc = _setup(tmp_path)
    sc.frame_set(5)
    rigs.update()
    before = user_state(rig, target)
    render = bpy_session.submodule("rig.render")
    render.on_render_init(sc)
    assert render.active() and rig.animation_data.action.name != before["Arm"]["action"]  # type: ignore[index]
    render.on_render_end(sc)
    same_state(user_state(rig, target), before)


def _feature_scene(start_from: str) -> list[bpy.types.Object]:
    """Poles, Soft, Stretch, keyed Influence, cone limits, a bone target and a rig that follows a rig."""
    arm, target = _arm()
    pole = rigs.empty("Pole", (0.0, -1.0, 1.0))
    ch = arm.reach_ik.chains[0]
    ch.pole = pole
    ch.soft = 0.1
    ch.stretch = 1.3
    arm.data.bones["fore"].inherit_scale = "ALIGNED"
    for f, w in ((1, 0.7), (5, 1.0)):
        ch.influence = w
        arm.keyframe_insert("reach_ik.chains[0].influence", frame=f)
    target.location = (2.0, 0.3, 0.8)
    target.keyframe_insert("location", frame=4)  # beyond reach at frame 4: the arm stretches

    tail = rigs.chain_rig(4, 0.7, name="Tail")
    tail.location = (1.0, 1.0, 0.0)  # the hand stays within its reach: unreached frames may differ (README)
    hand = rigs.empty("OnHand", (0.0, 0.0, 0.0))
    hand.parent, hand.parent_type, hand.parent_bone = arm, "BONE", "fore"
    hand.location = (0.0, 0.3, 0.0)
    rigs.add_chain(tail, "b3", 4, hand, name="tail")
    for pb in list(tail.pose.bones)[1:]:
        lim = pb.reach_ik
        lim.use_cone = True
        lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = math.radians(60)

    ctl = rigs.armature("Ctl", [("ctl", None, (0, 0, 0), (0, 0, 0.3), False)])
    for f, loc in ((1, (-2.0, 0.4, 2.2)), (6, (-3.5, -0.3, 1.4))):
        ctl.location = loc
        ctl.keyframe_insert("location", frame=f)
    reacher = rigs.chain_rig(5, 0.6, name="Reacher")
    reacher.location = (-3.0, 0.0, 0.0)
    ch = rigs.add_chain(reacher, "b4", 5, ctl, solver="CCD")
    ch.target_bone = "ctl"
    for ob in (arm, tail, reacher):
        ob.reach_ik.start_from = start_from
    return [arm, tail, reacher]


def _tails(obj: bpy.types.Object, depsgraph: bpy.types.Depsgraph) -> np.ndarray:
    ev = obj.evaluated_get(depsgraph)
    return np.array([ev.matrix_world @ pb.tail for pb in ev.pose.bones])


def _render_against_playback(tmp_path: Path, start_from: str) -> tuple[np.ndarray, np.ndarray]:
    """Worst distance of any bone tail and of each rig's last tail, render's depsgraph vs live playback."""
    rig_list = _feature_scene(start_from)
    sc = _setup(tmp_path, 1, 6)
    sc.render.resolution_x = sc.render.resolution_y = 8
    sc.frame_set(1)
    rigs.update()
    for ob in rig_list:
        assert all(ch.is_valid for ch in ob.reach_ik.chains), [ch.message for ch in ob.reach_ik.chains]
    graphs: list[bpy.types.Depsgraph] = []
    rendered: dict[int, list[np.ndarray]] = {}

    def grab(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
        graphs[:] = [depsgraph]

    def measure(scene: bpy.types.Scene, *_a: object) -> None:
        rendered[scene.frame_current] = [_tails(ob, graphs[0]) for ob in rig_list]

    bpy.app.handlers.frame_change_post.append(grab)
    bpy.app.handlers.render_post.append(measure)
    try:
        bpy.ops.render.render(animation=True)
    finally:
        bpy.app.handlers.frame_change_post.remove(grab)
        bpy.app.handlers.render_post.remove(measure)
    assert sorted(rendered) == list(range(1, 7))
    worst = np.zeros(len(rig_list))
    worst_tip = np.zeros(len(rig_list))
    for f in range(1, 7):
        sc.frame_set(f)  # live playback, frame by frame
        deps = bpy.context.evaluated_depsgraph_get()
        for i, ob in enumerate(rig_list):
            d = np.linalg.norm(_tails(ob, deps) - rendered[f][i], axis=1)
            worst[i] = max(worst[i], d.max())
            worst_tip[i] = max(worst_tip[i], d[-1])
    print(f"render vs live playback, worst bone tail per rig: {worst}, tips: {worst_tip}")
    return worst, worst_tip


@pytest.mark.parametrize("start_from", ["CURRENT", "REST"])
def test_render_depsgraph_poses_every_feature_as_live_playback(tmp_path: Path, start_from: str) -> None:
    """With Start From Current each solve starts from the previous frame's: playback's order matters, and
    the render plays what playback from the first frame shows."""
    worst, _tips = _render_against_playback(tmp_path, start_from)
    # The render plays keys recorded from live playback itself (float32 channels): the same pose.
    assert (worst <= 1e-5).all(), f"every bone renders where live playback puts it: {worst}"


def test_render_by_batched_bake(tmp_path: Path) -> None:
    """`rig.render.method = 'bake'`: the batched bake instead of recording playback (Start From Rest)."""
    render = bpy_session.submodule("rig.render")
    render.method = "bake"
    try:
        worst, tips = _render_against_playback(tmp_path, "REST")
    finally:
        render.method = "playback"
    assert (tips <= 2e-3).all(), f"tips render where live playback puts them: {tips}"
    # The inner joints too: a bake runs each FABRIK/CCD frame to the same iteration count, and the global
    # stage under limits must stay near the solver's own pose rather than jump to another pose with the same
    # tip (it did, 1.66 m apart at a joint of the tail, while it preferred the nearest of all its starts).
    assert (worst <= 5e-3).all(), f"every bone renders near its live pose: {worst}"


def test_a_render_that_ends_without_a_word_is_put_back(tmp_path: Path) -> None:
    """No render_complete nor render_cancel: the next frame change of the viewport puts everything back."""
    rig, target = _animated_user_rig()
    sc = _setup(tmp_path)
    sc.frame_set(3)
    rigs.update()
    before = user_state(rig, target)
    render = bpy_session.submodule("rig.render")
    live = bpy_session.submodule("rig.live")
    render.on_render_init(sc)
    assert render.active() and live.paused
    sc.frame_set(3)
    assert not render.active() and not live.paused
    same_state(user_state(rig, target), before)
