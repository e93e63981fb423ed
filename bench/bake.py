"""Baking the same animated rig with `reach.bake` vs `bpy.ops.nla.bake(visual_keying=True)` over Blender's IK.

Both runs use the demo character (two-bone arms and legs with poles, FABRIK spine, CCD tail) whose targets
follow reachable paths (forward kinematics of a moving pose, keyed on the Empties). Prints the time of each,
their ratio, how far the baked pose is from the live one (the largest distance of any chain bone's tail
from where the live solve put it, over 25 frames), how far the tips are from the targets when the bake
is replayed with IK off, and the time of a re-bake of the same range into the action the bake wrote.

`--rig mocap`: the CMU walk in `../shared/data/mocap/` on the rig Set Up Character makes, with its limits and
without (`bench/setup_rig.py`; the set-up Mixamo humanoid's controls keyed from the clip while Set Up Character
refuses CMU's skeleton), against `nla.bake` over Blender's IK on the same skeleton.

`--rig spider`: the demo's spider instead, eight 3-bone legs sharing the body (one FABRIK tree for Reach IK,
whose frames a bake solves in one batch; eight IK constraints for Blender), its legs waving.

`--start-from CURRENT`: each frame starts from the previous frame's result, live and baked (the bake then
solves the frames one after another, `core/sequence.py`); the live pose is played on every frame.

    .venv/bin/python bench/bake.py [--frames 250] [--rig character|spider|mocap] [--start-from REST|CURRENT]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import bpy_session  # noqa: E402  (sets a temporary BLENDER_USER_RESOURCES before bpy starts)

# isort: split
import bpy  # noqa: E402
import numpy as np  # noqa: E402

from demo import rigs  # noqa: E402

RIG = "character"
START_FROM = "REST"


def _wave_spider(rig: rigs.Rig, t: float, amplitude: float) -> None:
    """The spider's body sways and its legs swing (each bone its own phase), reachable by construction."""
    for i, pb in enumerate(rig.obj.pose.bones):
        pb.rotation_mode = "XYZ"
        a, c = math.sin(t + 0.7 * i), math.cos(1.3 * t + 0.4 * i)
        scale = 0.5 if pb.name == "body" else 1.5
        pb.rotation_euler = (scale * amplitude * a, 0.0, scale * amplitude * c)


def animated_character(frames: int, amplitude: float = 0.15) -> rigs.Rig:
    """The character (or with `--rig spider` the spider) with targets keyed along reachable paths (where its
    tips go under a moving pose)."""
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    rig = rigs.character() if RIG == "character" else rigs.spider()
    pbs = rig.obj.pose.bones
    for f in range(1, frames + 1, 5):
        if RIG == "character":
            rigs.wave_pose(rig, 0.1 * f, amplitude)
        else:
            _wave_spider(rig, 0.1 * f, amplitude)
        bpy.context.view_layer.update()
        for spec in rig.chains:
            spec.target.location = rig.obj.matrix_world @ pbs[spec.tip].tail
            spec.target.keyframe_insert("location", frame=f)
    rigs.rest_pose(rig)
    return rig


def sample(rig: rigs.Rig, frames: int) -> tuple[np.ndarray, float]:
    """Tails of every chain bone (world) at 25 frames spread over the range, and the worst tip-target gap."""
    bones = [b for spec in rig.chains for b in _chain_bones(rig, spec)]
    tails, worst = [], 0.0
    every = max(1, frames // 25)
    for f in range(1, frames + 1):
        bpy.context.scene.frame_set(f)
        if (f - 1) % every:
            continue
        ev = rig.obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
        tails.append([tuple(ev.matrix_world @ ev.pose.bones[b].tail) for b in bones])
        for spec in rig.chains:
            tip = ev.matrix_world @ ev.pose.bones[spec.tip].tail
            worst = max(worst, (tip - spec.target.matrix_world.translation).length)
    return np.array(tails), worst


def bake_reach(frames: int) -> tuple[float, float, float, float]:
    """Seconds, worst tip-target gap replayed, the largest distance of a baked joint from the live one, and
    the seconds of a second bake of the same range into the action the first one wrote (a re-bake)."""
    rig = animated_character(frames)
    rigs.use_reach(rig)
    rig.obj.reach_ik.max_iterations = 60
    # Every frame starts from the rest pose, live and baked alike (the farm setting): with 'CURRENT' the
    # live solve of a frame starts from the frame played before it, the bake from the pose at the start,
    # and redundant chains (spine, tail) land on different, equally valid, solutions.
    rig.obj.reach_ik.start_from = START_FROM
    bpy.context.view_layer.objects.active = rig.obj
    live, _ = sample(rig, frames)
    bpy.context.scene.frame_set(1)
    # Both runs start from an evaluated scene, so neither pays for the set-up's pending update.
    bpy.context.view_layer.update()
    start = time.perf_counter()
    bpy.ops.reach.bake(frame_start=1, frame_end=frames)
    seconds = time.perf_counter() - start
    for chain in rig.obj.reach_ik.chains:
        chain.enabled = True
    bpy.context.view_layer.update()
    start = time.perf_counter()
    bpy.ops.reach.bake(frame_start=1, frame_end=frames)
    again = time.perf_counter() - start
    rig.obj.reach_ik.live = False
    baked, gap = sample(rig, frames)
    return seconds, gap, float(np.linalg.norm(baked - live, axis=-1).max()), again


def bake_blender(frames: int) -> tuple[float, float, float]:
    rig = animated_character(frames)
    rigs.use_blender_ik(rig)
    bpy.context.view_layer.objects.active = rig.obj
    live, _ = sample(rig, frames)
    bpy.context.scene.frame_set(1)
    bpy.ops.object.mode_set(mode="POSE")
    bones = {b for spec in rig.chains for b in _chain_bones(rig, spec)}
    compat = bpy_session.submodule("rig.compat")  # Bone.select up to 4.5, PoseBone.select from 5.0
    for pb in rig.obj.pose.bones:
        compat.select_bone(pb, pb.name in bones)
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
    baked, gap = sample(rig, frames)
    return seconds, gap, float(np.linalg.norm(baked - live, axis=-1).max())


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
    parser.add_argument("--rig", choices=("character", "spider", "mocap"), default="character")
    parser.add_argument("--start-from", choices=("REST", "CURRENT"), default="REST")
    args = parser.parse_args()
    if args.rig == "mocap":
        bpy_session.enable_addon()
        sys.path.insert(0, str(ROOT / "bench"))
        import setup_rig

        setup_rig.bake_rows(args.frames, args.repeats)
        bpy_session.finish(0)
    global RIG, START_FROM
    RIG, START_FROM = args.rig, args.start_from
    bpy_session.enable_addon()
    ours, ref = [], []
    for _ in range(args.repeats):
        # Alternating, so a burst of load on a shared machine hits both; the best of each is compared.
        ours.append(bake_reach(args.frames))
        ref.append(bake_blender(args.frames))
    (t_ours, our_gap, our_diff, _), (t_ref, ref_gap, ref_diff) = min(ours), min(ref)
    t_again = min(r[3] for r in ours)
    print("seconds, each run: reach", [round(r[0], 4) for r in ours], "nla", [round(r[0], 4) for r in ref])
    what = "character rig (6 chains)" if RIG == "character" else "spider (8 legs sharing the body: one tree)"
    print(f"bench/bake.py on bpy {bpy.app.version_string}: {what}, {args.frames} frames, Start From {START_FROM}")
    print(f"best of {args.repeats} bakes each; distances in world units over 25 frames, replayed with IK off")
    print(f"{'':26} {'seconds':>9} {'baked vs live pose':>19} {'tip to target':>14}")
    print(f"{'reach.bake':26} {t_ours:9.4f} {our_diff:19.2e} {our_gap:14.2e}")
    print(f"{'nla.bake over Blender IK':26} {t_ref:9.4f} {ref_diff:19.2e} {ref_gap:14.2e}")
    print(f"time ratio reach/nla: {t_ours / t_ref:.3f} (goal <= 0.25)")
    print(f"re-bake of the same range into the baked action: {t_again:.4f} s ({t_again / t_ref:.3f} of nla.bake)")
    bpy_session.finish(0)


if __name__ == "__main__":
    main()
