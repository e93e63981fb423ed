"""Baking the same animated rig with `reach.bake` vs `bpy.ops.nla.bake(visual_keying=True)` over Blender's IK.

Both runs use the demo character (two-bone arms and legs with poles, FABRIK spine, CCD tail) whose targets
follow reachable paths (forward kinematics of a moving pose, keyed on the Empties). Prints the time of each,
their ratio, and how far the baked pose is from the live solve (tip to target, world units) when replayed.

    .venv/bin/python bench/bake.py [--frames 250]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402

from demo import rigs  # noqa: E402


def animated_character(frames: int, amplitude: float = 0.15) -> rigs.Rig:
    """The character with targets keyed along reachable paths (where its tips go under a moving pose)."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    rig = rigs.character()
    pbs = rig.obj.pose.bones
    for f in range(1, frames + 1, 5):
        rigs.wave_pose(rig, 0.1 * f, amplitude)
        bpy.context.view_layer.update()
        for spec in rig.chains:
            spec.target.location = rig.obj.matrix_world @ pbs[spec.tip].tail
            spec.target.keyframe_insert("location", frame=f)
    rigs.rest_pose(rig)
    return rig


def replay_error(rig: rigs.Rig, frames: int) -> float:
    worst = 0.0
    for f in range(1, frames + 1, max(1, frames // 25)):
        bpy.context.scene.frame_set(f)
        deps = bpy.context.evaluated_depsgraph_get()
        ev = rig.obj.evaluated_get(deps)
        for spec in rig.chains:
            tip = ev.matrix_world @ ev.pose.bones[spec.tip].tail
            worst = max(worst, (tip - spec.target.matrix_world.translation).length)
    return worst


def bake_reach(frames: int) -> tuple[float, float]:
    rig = animated_character(frames)
    rigs.use_reach(rig)
    rig.obj.reach_ik.max_iterations = 60
    bpy.context.view_layer.objects.active = rig.obj
    # Both runs start from an evaluated scene, so neither pays for the set-up's pending update.
    bpy.context.view_layer.update()
    start = time.perf_counter()
    bpy.ops.reach.bake(frame_start=1, frame_end=frames)
    seconds = time.perf_counter() - start
    rig.obj.reach_ik.live = False
    return seconds, replay_error(rig, frames)


def bake_blender(frames: int) -> tuple[float, float]:
    rig = animated_character(frames)
    rigs.use_blender_ik(rig)
    bpy.context.view_layer.objects.active = rig.obj
    bpy.ops.object.mode_set(mode="POSE")
    bones = {b for spec in rig.chains for b in _chain_bones(rig, spec)}
    for pb in rig.obj.pose.bones:
        pb.bone.select = pb.name in bones
    bpy.context.view_layer.update()
    start = time.perf_counter()
    bpy.ops.nla.bake(
        frame_start=1,
        frame_end=frames,
        only_selected=True,
        visual_keying=True,
        clear_constraints=True,
        bake_types={"POSE"},
        channel_types={"ROTATION"},
    )
    seconds = time.perf_counter() - start
    bpy.ops.object.mode_set(mode="OBJECT")
    return seconds, replay_error(rig, frames)


def _chain_bones(rig: rigs.Rig, spec: rigs.ChainSpec) -> list[str]:
    out, pb = [], rig.obj.pose.bones[spec.tip]
    for _ in range(spec.length):
        out.append(pb.name)
        pb = pb.parent
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3, help="bakes of each kind, alternating (default 3)")
    args = parser.parse_args()
    bpy_session.enable_addon()
    ours, ref = [], []
    for _ in range(args.repeats):
        # Alternating, so a burst of load on a shared machine hits both; the best of each is compared.
        ours.append(bake_reach(args.frames))
        ref.append(bake_blender(args.frames))
    (t_ours, our_err), (t_ref, ref_err) = min(ours), min(ref)
    print("reach:", [round(t, 4) for t, _ in ours], "nla:", [round(t, 4) for t, _ in ref])
    print(f"bench/bake.py on bpy {bpy.app.version_string}: character rig (6 chains), {args.frames} frames")
    print(f"best of {args.repeats} bakes each")
    print(f"{'':28} {'seconds':>9} {'worst tip-target when replayed':>32}")
    print(f"{'reach.bake':28} {t_ours:9.4f} {our_err:32.2e}")
    print(f"{'nla.bake over Blender IK':28} {t_ref:9.4f} {ref_err:32.2e}")
    print(f"time ratio reach/nla: {t_ours / t_ref:.3f} (goal <= 0.2)")
    bpy_session.finish(0)


if __name__ == "__main__":
    main()
