"""A render leaves the pose and every chain's status byte-identical, also when chain bones carry keys of
their own (issue 35 item 2), measured after Blender evaluates the scene again."""

from __future__ import annotations

import math
from pathlib import Path

import bpy
import pytest
import rigs
from test_render import _arm, _setup


def _status(rig: bpy.types.Object) -> list[tuple[object, ...]]:
    return [(ch.is_valid, ch.message, ch.iterations, ch.residual) for ch in rig.reach_ik.chains]


@pytest.mark.parametrize("keyed", ["rotation", "rotation+scale", "one bone"])
@pytest.mark.parametrize("frame", [3, 1, 9])
def test_render_keeps_pose_and_residual_with_keyed_chain_bones(tmp_path: Path, keyed: str, frame: int) -> None:
    rig, _target = _arm()
    names = ("fore",) if keyed == "one bone" else ("upper", "fore")
    for f, angle in ((1, 0.2), (6, -0.4)):
        for name in names:
            pb = rig.pose.bones[name]
            pb.rotation_quaternion = (math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0)
            pb.keyframe_insert("rotation_quaternion", frame=f)
            if keyed == "rotation+scale":
                pb.scale = (1.0, 1.0 + 0.1 * f, 1.0)
                pb.keyframe_insert("scale", frame=f)
    sc = _setup(tmp_path)
    sc.frame_set(frame)
    rigs.update()
    rigs.update()
    before = (rigs.pose_snapshot(rig), _status(rig))
    bpy.ops.render.render(animation=True)
    assert (rigs.pose_snapshot(rig), _status(rig)) == before, "the render changed the pose or the status"
    rigs.update()
    assert (rigs.pose_snapshot(rig), _status(rig)) == before, "after an update, the pose or the status changed"


@pytest.mark.parametrize("animation", [True, False])
def test_render_keeps_a_chain_below_a_keyed_chain(tmp_path: Path, animation: bool) -> None:
    """The chain below reads the evaluated pose of the keyed chain above it: Blender's closing frame change
    evaluates that from the keys, before the channels put back are evaluated (found by the random operator
    run: the lower chain solved again on it)."""
    rig = rigs.chain_rig(5, name="Arm")
    upper_t = rigs.empty("T.upper", (0.4, 0.2, 2.6))
    lower_t = rigs.empty("T.lower", (0.6, 0.5, 4.4))
    rigs.add_chain(rig, "b2", 3, upper_t, name="upper")
    rigs.add_chain(rig, "b4", 2, lower_t, name="lower")
    for f, angle in ((1, 0.2), (6, -0.4)):
        for name in ("b1",):  # one bone of the upper chain keyed: its solve depends on where it starts
            pb = rig.pose.bones[name]
            pb.rotation_quaternion = (math.cos(angle / 2), math.sin(angle / 2), 0.0, 0.0)
            pb.keyframe_insert("rotation_quaternion", frame=f)
    for f, loc in ((1, (0.6, 0.5, 4.4)), (6, (-0.3, 0.4, 4.2))):
        lower_t.location = loc
        lower_t.keyframe_insert("location", frame=f)
    sc = _setup(tmp_path)
    sc.frame_set(2)
    sc.frame_set(3)
    rigs.update()
    before = (rigs.pose_snapshot(rig), _status(rig))
    bpy.ops.render.render(animation=animation)
    rigs.update()
    assert (rigs.pose_snapshot(rig), _status(rig)) == before, "the render changed the pose or the status"
