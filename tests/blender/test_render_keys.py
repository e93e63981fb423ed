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
