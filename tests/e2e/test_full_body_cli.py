"""Full Body on the real Blender binary: the CLI's bake keys the body root, replayed in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, Blender

TOL = 1e-3

MAKE_SHOT = r"""
import bpy, json, sys
argv = sys.argv[sys.argv.index("--") + 1:]
out, root = argv[0], argv[1]
sys.path.insert(0, root)
from demo import rigs
from mathutils import Matrix, Vector
bpy.ops.wm.read_homefile(use_empty=True)
obj = rigs.humanoid("mixamo")
bpy.context.view_layer.update()
bpy.context.view_layer.objects.active = obj
assert bpy.ops.reach.auto_setup(full_body=True) == {"FINISHED"}
obj.reach_ik.start_from = "REST"
pbs = obj.pose.bones
hand, upper, fore = pbs["IK-hand.L"], pbs["mixamorig:LeftArm"], pbs["mixamorig:LeftForeArm"]
goal = upper.head + Vector((0.5, -0.8, -0.3)).normalized() * (upper.length + fore.length + 0.15)
start = hand.matrix.copy()
for frame, where in ((1, start.translation), (20, goal)):
    hand.matrix = Matrix.Translation(where - start.translation) @ start
    hand.keyframe_insert("location", frame=frame)
bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, 20
bpy.ops.wm.save_as_mainfile(filepath=out)
print("RESULT " + json.dumps({"goal": list(obj.matrix_world @ goal)}))
"""

REPLAY = r"""
import bpy, json
obj = bpy.data.objects["Character"]
obj.reach_ik.live = False
pbs = obj.pose.bones
bpy.context.scene.frame_set(20)
deps = bpy.context.evaluated_depsgraph_get()
ev = obj.evaluated_get(deps)
def tail(name):
    return list(ev.matrix_world @ ev.pose.bones[name].tail)
def head(name):
    return list(ev.matrix_world @ ev.pose.bones[name].head)
action = obj.animation_data.action
paths = {fc.data_path for fc in action.fcurves} if hasattr(action, "fcurves") else set()
out = {
    "hand": tail("mixamorig:LeftForeArm"),
    "feet": [tail("mixamorig:LeftLeg"), tail("mixamorig:RightLeg")],
    "controls": [head("IK-foot.L"), head("IK-foot.R")],
    "hips": head("mixamorig:Hips"),
    "hips_rest": list(obj.matrix_world @ obj.data.bones["mixamorig:Hips"].head_local),
    "paths": sorted(paths),
}
print("RESULT " + json.dumps(out))
"""


def _dist(a: object, b: object) -> float:
    return sum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5  # type: ignore[call-overload]


def test_cli_bake_carries_the_body_root(installed: Blender, tmp_path: Path) -> None:
    shot = tmp_path / "shot.blend"
    made = installed.python(MAKE_SHOT, str(shot), str(ROOT))
    out, report = tmp_path / "out.blend", tmp_path / "r.json"
    proc = installed.run(
        ["-b", str(shot), "-c", "reach_ik", "bake", "--frames", "1-20", "--output", str(out), "--report", str(report)]
    )
    assert "baked 'Character'" in proc.stdout, proc.stdout[-2000:]
    data = json.loads(report.read_text())
    assert data["ok"], data
    bones = data["rigs"][0]["bones"]
    assert "mixamorig:Hips" in bones, bones
    got = installed.python(REPLAY, blend=out)
    assert _dist(got["hand"], made["goal"]) <= TOL, f"the hand ends {_dist(got['hand'], made['goal']):.4f} off"
    for foot, control in zip(got["feet"], got["controls"], strict=True):  # type: ignore[call-overload]
        assert _dist(foot, control) <= TOL, "a foot left its control"
    assert _dist(got["hips"], got["hips_rest"]) > 1e-3, "the baked hips moved"
    if got["paths"]:  # legacy actions list their curves (4.3); slotted ones are checked by the bpy tier
        assert 'pose.bones["mixamorig:Hips"].location' in got["paths"], got["paths"]
