"""The rig users get from one click of Set Up Character, dragged and played back, against Blender's IK.

Used by `bench/live.py` (cases d, d4, d5: the Mixamo-named humanoid of the tests set up with defaults and its
controls dragged; m: the CMU walk played back) and `bench/bake.py` (`--rig mocap`). Both sides run the same
armature built the same way: Reach IK's side is `reach.auto_setup` with its defaults (control bones, Knee and
Elbow hinges, cones, hands and feet following their controls); Blender's side is the same set-up with Reach's
chains switched off and an IK constraint per chain (chain length as Reach's, target and pole the same control
bones, no limits), so both pay for the same control bones and follow constraints.

Each update (a drag) moves the controls of the workload, then calls `view_layer.update()` twice, as
`bench/live.py` does; a playback frame is one `scene.frame_set()`. The mocap rows set up the CMU armature
itself when Set Up Character takes it (`cmu_rig`, the clip's own frames), else the keyed Mixamo stand-in.
Every row prints the median, p95 and max per update of both sides, the median's and p95's ratio, the worst
tip-to-control distance of Reach's side (from the evaluated pose) and Reach's own handler time (median and
max).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import bpy
import bpy_session
from mathutils import Matrix, Vector

from demo import rigs

MOCAP = Path(__file__).resolve().parents[2] / "shared" / "data" / "mocap" / "cmu_131_01.bvh"
# Chain -> the CMU bones of its root, middle and end joints (CMU names a bone after the joint at its head).
CMU_LIMBS = {
    "arm.L": ("LeftShoulder", "LeftElbow", "LeftWrist"),
    "arm.R": ("RightShoulder", "RightElbow", "RightWrist"),
    "leg.L": ("LeftHip", "LeftKnee", "LeftAnkle"),
    "leg.R": ("RightHip", "RightKnee", "RightAnkle"),
}
_LIMBS = ("arm.L", "arm.R", "leg.L", "leg.R")


def fresh() -> None:
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)


def set_up(limits: bool = True, name: str = "Character", full_body: bool = False) -> bpy.types.Object:
    """The Mixamo-named humanoid of the tests (elbows and knees a little bent), set up in one click."""
    obj = rigs.humanoid("mixamo", name=name, bent=True)
    bpy.context.view_layer.update()
    bpy.context.view_layer.objects.active = obj
    if bpy.ops.reach.auto_setup(limits=limits, full_body=full_body) != {"FINISHED"}:
        raise RuntimeError("Set Up Character refused the Mixamo humanoid")
    bpy.context.view_layer.update()
    return obj


def to_blender_ik(obj: bpy.types.Object) -> None:
    """Reach's chains off, an IK constraint per chain on the same control bones instead (no limits)."""
    for ch in obj.reach_ik.chains:
        con = obj.pose.bones[ch.tip_bone].constraints.new("IK")
        con.target, con.subtarget = ch.target, ch.target_bone
        con.chain_count = ch.chain_length
        con.use_rotation = ch.use_target_rotation
        if ch.pole is not None:
            con.pole_target, con.pole_subtarget = ch.pole, ch.pole_bone
            con.pole_angle = math.radians(-90.0)
        ch.enabled = False
    obj.reach_ik.live = False
    bpy.context.view_layer.update()


def _chains(obj: bpy.types.Object) -> dict[str, bpy.types.PropertyGroup]:
    return {ch.name: ch for ch in obj.reach_ik.chains}


def _root_of(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> bpy.types.PoseBone:
    pb = obj.pose.bones[ch.tip_bone]
    for _ in range(ch.chain_length - 1):
        pb = pb.parent
    return pb


def _reach(obj: bpy.types.Object, ch: bpy.types.PropertyGroup) -> float:
    pb, total = obj.pose.bones[ch.tip_bone], 0.0
    for _ in range(ch.chain_length):
        total += pb.bone.length
        pb = pb.parent
    return total


def drag_path(obj: bpy.types.Object, workload: str, rounds: int) -> dict[str, list[Matrix]]:
    """Armature-space matrices of the moved controls, per round (deterministic).

    Hands: around the shoulder at 0.15-0.95 of the arm's reach, sweeping outward, forward, up and across the
    chest (so the elbow's hinge and the shoulder's cone bind, and the hand is sometimes inside the fold limit).
    Feet: around the hip at 0.55-0.95 of the leg's reach, swinging forward, back and sideways. Chest and head:
    a few centimetres around where they stand.
    """
    chains = _chains(obj)
    names = {"one_hand": ("arm.L",), "limbs": _LIMBS, "chest_head": ("spine", "neck")}[workload]
    out: dict[str, list[Matrix]] = {}
    for name in names:
        ch = chains[name]
        control = obj.pose.bones[ch.target_bone]
        rest = control.matrix.copy()
        root = Vector(_root_of(obj, ch).head)
        reach = _reach(obj, ch)
        side = 1.0 if name.endswith(".L") else -1.0
        mats = []
        for r in range(rounds):
            t = 0.21 * r + (0.0 if side > 0 else 1.3) + (0.7 if name.startswith("leg") else 0.0)
            if name.startswith("arm"):
                d = reach * (0.55 + 0.4 * math.sin(0.37 * t))
                way = Vector((side * math.cos(0.53 * t), -0.9 * math.sin(0.71 * t), 0.9 * math.cos(0.29 * t)))
            elif name.startswith("leg"):
                d = reach * (0.75 + 0.2 * math.sin(0.41 * t))
                way = Vector((side * 0.4 * math.cos(0.47 * t), -0.8 * math.sin(0.63 * t), -1.0))
            else:
                m = rest.copy()
                m.translation = rest.translation + Vector((0.04 * math.sin(0.5 * t), 0.04 * math.cos(0.7 * t), -0.03))
                mats.append(m)
                continue
            m = rest.copy()
            m.translation = root + way.normalized() * d
            mats.append(m)
        out[ch.target_bone] = mats
    return out


def _residual(obj: bpy.types.Object, names: tuple[str, ...] | None = None) -> float:
    """Worst tip-to-control distance (armature units) over the chains `names` (all), evaluated pose."""
    ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    worst = 0.0
    for ch in obj.reach_ik.chains:
        if names is not None and ch.name not in names:
            continue
        tip = ev.pose.bones[ch.tip_bone].tail
        goal = ev.pose.bones[ch.target_bone].head
        worst = max(worst, (tip - goal).length)
    return worst


class Timed:
    """Reach IK's depsgraph and frame handlers wrapped to time each call (its own share of an update)."""

    def __init__(self) -> None:
        self.live = bpy_session.submodule("rig.live")
        self.seconds: list[float] = []
        self.pairs = [
            (bpy.app.handlers.depsgraph_update_pre, self.live.on_depsgraph_pre),
            (bpy.app.handlers.depsgraph_update_post, self.live.on_depsgraph_update),
            (bpy.app.handlers.frame_change_post, self.live.on_frame_change),
        ]
        self.wrappers = [self._wrap(fn) for _, fn in self.pairs]

    def _wrap(self, fn: Callable[..., None]) -> Callable[..., None]:
        def timed(*args: object) -> None:
            start = time.perf_counter()
            fn(*args)
            self.seconds.append(time.perf_counter() - start)

        return timed

    def __enter__(self) -> Timed:
        for (handlers, fn), wrapper in zip(self.pairs, self.wrappers, strict=True):
            handlers[handlers.index(fn)] = wrapper
        return self

    def __exit__(self, *_exc: object) -> None:
        for (handlers, fn), wrapper in zip(self.pairs, self.wrappers, strict=True):
            handlers[handlers.index(wrapper)] = fn


def stats(seconds: list[float]) -> dict[str, float]:
    ms = sorted(1e3 * s for s in seconds)
    return {"med": statistics.median(ms), "p95": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))], "max": ms[-1]}


WARM = 3


def drag_run(workload: str, mode: str, rounds: int, limits: bool = True, before: bool = True) -> dict[str, object]:
    """Per-update seconds of dragging `workload`'s controls on the set-up rig, `mode` 'reach' or 'blender';
    `before`: Reach IK may solve before the evaluation (`rig.live_pre`), else only after it."""
    live = bpy_session.submodule("rig.live")
    live.solve_before = before
    try:
        return _drag_run(workload, mode, rounds, limits)
    finally:
        live.solve_before = True


def _drag_run(workload: str, mode: str, rounds: int, limits: bool) -> dict[str, object]:
    fresh()
    obj = set_up(limits=limits)
    if mode == "blender":
        to_blender_ik(obj)
    path = drag_path(obj, workload, rounds + WARM)
    pbs = obj.pose.bones
    moved = tuple(ch.name for ch in obj.reach_ik.chains if ch.target_bone in path)
    times, handler, residuals = [], [], []
    with Timed() as timed:
        for r in range(rounds + WARM):
            for bone, mats in path.items():
                pbs[bone].matrix = mats[r]
            timed.seconds.clear()
            start = time.perf_counter()
            bpy.context.view_layer.update()
            bpy.context.view_layer.update()
            elapsed = time.perf_counter() - start
            if r >= WARM:
                times.append(elapsed)
                handler.append(sum(timed.seconds))
                residuals.append(_residual(obj, moved))
    return {"times": times, "handler": handler, "res": max(residuals)}


# The mocap clip ---------------------------------------------------------------------------------------------


def import_clip(path: Path = MOCAP) -> bpy.types.Object:
    bpy.ops.import_anim.bvh(filepath=str(path), global_scale=0.056444, rotate_mode="NATIVE")
    obj = bpy.context.active_object
    bpy.context.view_layer.update()
    return obj


def _cmu_frame(mocap: bpy.types.Object) -> tuple[Vector, Matrix]:
    """The clip's hips (world) and a horizontal body frame (columns: left, back, up) at the current frame."""
    pbs, mw = mocap.pose.bones, mocap.matrix_world
    hips = mw @ pbs["Hips"].head
    left = mw @ pbs["LeftHip"].head - mw @ pbs["RightHip"].head
    left.z = 0.0
    left.normalize()
    up = Vector((0.0, 0.0, 1.0))
    back = up.cross(left)  # the humanoid's +Y (it faces -Y, its left on +X)
    return hips, Matrix((left, back, up)).transposed()


CLIP_STEP = 4
"""Clip frames per played frame: the 120 fps clip at 30 fps, so 240 frames cover the walk (start, walk, stop)."""


def clip_targets(frames: int) -> dict[str, list[Vector]]:
    """Per frame (every `CLIP_STEP`-th of the clip's), each CMU limb's end joint relative to its root joint, in the
    body's frame (left, back, up), in units of the limb's reach (a limb of another length reaches as far)."""
    mocap = import_clip()
    scene = bpy.context.scene
    out: dict[str, list[Vector]] = {name: [] for name in CMU_LIMBS}
    pbs, mw = mocap.pose.bones, mocap.matrix_world
    reach = {name: pbs[a].bone.length + pbs[b].bone.length for name, (a, b, _) in CMU_LIMBS.items()}
    for f in range(frames):
        scene.frame_set(1 + CLIP_STEP * f)
        _hips, frame = _cmu_frame(mocap)
        inv = frame.transposed()
        for name, (root, _, end) in CMU_LIMBS.items():
            out[name].append(inv @ (mw @ pbs[end].head - mw @ pbs[root].head) / reach[name])
    bpy.data.objects.remove(mocap)
    return out


def cmu_rig(frames: int, mode: str, limits: bool) -> bpy.types.Object | None:
    """The CMU armature set up in one click, its controls keyed on every frame where the clip puts its
    chains' tips (so the live solve replays the clip), or None while Set Up Character refuses it."""
    fresh()
    mocap = import_clip()
    scene = bpy.context.scene
    bpy.context.view_layer.objects.active = mocap
    try:
        done = bpy.ops.reach.auto_setup(limits=limits)
    except RuntimeError:  # the operator's error report raises in background mode
        return None
    if done != {"FINISHED"} or not mocap.reach_ik.chains:
        return None
    settings = mocap.reach_ik
    settings.live = False
    pbs = mocap.pose.bones
    keyed = [(ch.target_bone, ch.tip_bone) for ch in settings.chains if ch.target_bone]
    tips: dict[str, list[Vector]] = {bone: [] for bone, _ in keyed}
    # The clip's own frames (its action plays on the armature, root motion included): the controls keyed
    # where the action puts the tips on the same frame.
    for f in range(1, frames + 1):
        scene.frame_set(f)
        for bone, tip in keyed:
            tips[bone].append(pbs[tip].tail.copy())
    for bone, _tip in keyed:
        pb = pbs[bone]
        rest = pb.matrix.copy()
        for i, at in enumerate(tips[bone]):
            m = rest.copy()
            m.translation = at
            pb.matrix = m
            pb.keyframe_insert("location", frame=i + 1)
    settings.live = True
    if mode == "blender":
        to_blender_ik(mocap)
    scene.frame_set(1)
    return mocap


def cmu_set_up_works() -> bool:
    """Whether Set Up Character takes the CMU skeleton (else the mocap rows use the stand-in, with a note)."""
    fresh()
    mocap = import_clip()
    bpy.context.view_layer.objects.active = mocap
    try:
        done = bpy.ops.reach.auto_setup()
    except RuntimeError as error:
        print(f"note: Set Up Character refuses the CMU skeleton ({str(error).strip().splitlines()[-1][:90]}...):")
        print("      (m) drives the set-up Mixamo humanoid's hand and foot controls with the clip's wrists and ankles")
        return False
    return done == {"FINISHED"} and bool(mocap.reach_ik.chains)


def keyed_character(
    frames: int, limits: bool, clip: dict[str, list[Vector]], full_body: bool = False
) -> bpy.types.Object:
    """The set-up Mixamo humanoid with its hand and foot controls keyed on every frame from the clip (each
    limb's end where the actor's is, relative to the limb's root, scaled by the limbs' reach)."""
    fresh()
    obj = set_up(limits=limits, full_body=full_body)
    chains = _chains(obj)
    pbs = obj.pose.bones
    for name, ends in clip.items():
        ch = chains[name]
        pb = pbs[ch.target_bone]
        rest = pb.matrix.copy()
        root, reach = Vector(_root_of(obj, ch).head), _reach(obj, ch)
        for i in range(frames):
            m = rest.copy()
            m.translation = root + reach * ends[i]
            pb.matrix = m
            pb.keyframe_insert("location", frame=i + 1)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    scene.frame_set(1)
    return obj


def mocap_rig(
    frames: int, mode: str, limits: bool, clip: dict[str, list[Vector]] | None, full_body: bool = False
) -> bpy.types.Object:
    """The clip's rig: the CMU armature set up in one click when `clip` is None, else the keyed stand-in."""
    if clip is None:
        cmu = cmu_rig(frames, mode, limits)
        assert cmu is not None
        return cmu
    obj = keyed_character(frames, limits, clip, full_body)
    if mode == "blender":
        to_blender_ik(obj)
    bpy.context.view_layer.update()
    return obj


def playback_run(
    frames: int,
    mode: str,
    limits: bool,
    clip: dict[str, list[Vector]] | None,
    ahead: bool = True,
    full_body: bool = False,
) -> dict[str, object]:
    """Per-frame seconds of `scene.frame_set()` over the keyed clip. With `ahead`, Reach IK first solves the
    playback range ahead (`rig.lookahead.fill`: what its timer does in the GUI while nothing happens, here at
    once since no timer runs in the background); its seconds per frame are returned as "ahead"."""
    obj = mocap_rig(frames, mode, limits, clip, full_body)
    scene = bpy.context.scene
    # Played as a loop plays it: arriving at the first frame from the last (a playback started on the first
    # frame right after editing there starts from the pose the edit left: its first loop is solved live).
    scene.frame_set(frames)
    spent = 0.0
    if mode == "reach" and ahead:
        lookahead = bpy_session.submodule("rig.lookahead")
        start = time.perf_counter()
        why = lookahead.fill(obj)
        spent = (time.perf_counter() - start) / max(1, lookahead.ready(obj))
        if why is not None:
            print(f"  (not solved ahead: {why})")
    times, handler, residuals = [], [], []
    with Timed() as timed:
        for f in range(1, frames + 1):
            timed.seconds.clear()
            start = time.perf_counter()
            scene.frame_set(f)
            elapsed = time.perf_counter() - start
            if f > WARM:
                times.append(elapsed)
                handler.append(sum(timed.seconds))
                if f % 10 == 0:
                    residuals.append(_residual(obj))
    return {"times": times, "handler": handler, "res": max(residuals), "ahead": spent}


# Rows --------------------------------------------------------------------------------------------------------

HEADER = (
    f"{'case':34} {'Reach med/p95/max ms':>22} {'Blender med/p95/max ms':>24} {'ratio':>6} {'p95 r':>6} "
    f"{'Reach res':>9} {'handler med/max':>16}"
)


def row(label: str, ours: dict[str, object], ref: dict[str, object]) -> str:
    a, b = stats(ours["times"]), stats(ref["times"])  # type: ignore[arg-type]
    h = stats(ours["handler"])  # type: ignore[arg-type]
    return (
        f"{label:34} {a['med']:6.2f} {a['p95']:7.2f} {a['max']:7.2f} {b['med']:7.3f} {b['p95']:7.3f} {b['max']:7.3f}"
        f" {a['med'] / b['med']:6.1f} {a['p95'] / b['p95']:6.1f} {ours['res']:9.1e} {h['med']:7.2f} {h['max']:7.2f}"
    )


def best(runs: list[dict[str, object]]) -> dict[str, object]:
    """The least disturbed run (lowest median)."""
    return min(runs, key=lambda r: statistics.median(r["times"]))  # type: ignore[arg-type]


DRAGS = {
    "d": ("(d) set-up rig: one hand dragged", "one_hand", True, True),
    "d4": ("(d4) set-up rig: four limbs", "limbs", True, True),
    "d5": ("(d5) set-up rig: chest and head", "chest_head", True, True),
    "d0": ("(d0) one hand, limits=False", "one_hand", False, True),
    # The same drags solved only after the evaluation (two evaluations per update, as before `rig.live_pre`).
    "dp": ("(dp) one hand, solved after evaluation", "one_hand", True, False),
    "d4p": ("(d4p) four limbs, solved after evaluation", "limbs", True, False),
}


def run_cases(letters: list[str], rounds: int, repeats: int, frames: int) -> None:
    print(HEADER)
    for letter in letters:
        if letter in DRAGS:
            label, workload, limits, before = DRAGS[letter]
            pairs = [
                (drag_run(workload, "reach", rounds, limits, before), drag_run(workload, "blender", rounds, limits))
                for _ in range(repeats)
            ]
        elif letter in ("m", "m0", "mp"):
            limits = letter != "m0"
            ahead = letter != "mp"
            clip = None
            if not cmu_set_up_works():
                fresh()
                clip = clip_targets(frames)
            label = f"({letter}) CMU walk, {frames} frames" + (" (stand-in)" if clip else "")
            label += "" if limits else ", no limits"
            label += "" if ahead else ", not ahead"
            pairs = [
                (playback_run(frames, "reach", limits, clip, ahead), playback_run(frames, "blender", limits, clip))
                for _ in range(repeats)
            ]
            if ahead:
                spent = min(float(p[0]["ahead"]) for p in pairs)  # type: ignore[arg-type]
                print(f"  ({letter}) solved ahead first: {1e3 * spent:.2f} ms per frame, once, while idle")
        elif letter in ("k", "kp", "kb"):
            # The animator's rig: the set-up humanoid with only its hand and foot controls keyed (the chain
            # bones carry each frame's result to the next), played from the range's first frame; (kb) with
            # Full Body (not solved ahead: frame changes take the body stage and the program, as drags do).
            ahead = letter == "k"
            body = letter == "kb"
            fresh()
            clip = clip_targets(frames)
            label = f"({letter}) keyed controls, {frames} frames" + ("" if ahead or body else ", not ahead")
            label += ", Full Body" if body else ""
            pairs = [
                (
                    playback_run(frames, "reach", True, clip, ahead, body),
                    playback_run(frames, "blender", True, clip, full_body=body),
                )
                for _ in range(repeats)
            ]
            if ahead:
                spent = min(float(p[0]["ahead"]) for p in pairs)  # type: ignore[arg-type]
                print(f"  ({letter}) solved ahead first: {1e3 * spent:.2f} ms per frame, once, while idle")
        else:
            continue
        print(row(label, best([p[0] for p in pairs]), best([p[1] for p in pairs])), flush=True)


# Bake ---------------------------------------------------------------------------------------------------------


def _baked_bones(obj: bpy.types.Object) -> set[str]:
    """The bones both bakes key: every chain bone, and the hands and feet that follow their controls."""
    out = set()
    for ch in obj.reach_ik.chains:
        pb = obj.pose.bones[ch.tip_bone]
        for _ in range(ch.chain_length):
            out.add(pb.name)
            pb = pb.parent
    out.update(pb.name for pb in obj.pose.bones if any(c.type == "COPY_ROTATION" for c in pb.constraints))
    return out


def bake_run(frames: int, mode: str, limits: bool, clip: dict[str, list[Vector]] | None) -> float:
    """Seconds of `reach.bake` (mode 'reach') or `nla.bake(visual_keying=True)` over Blender's IK of the clip."""
    obj = mocap_rig(frames, mode, limits, clip)
    bpy.context.view_layer.objects.active = obj
    bpy.context.scene.frame_set(1)
    bpy.context.view_layer.update()
    if mode == "reach":
        start = time.perf_counter()
        bpy.ops.reach.bake(frame_start=1, frame_end=frames)
        return time.perf_counter() - start
    bpy.ops.object.mode_set(mode="POSE")
    bones = _baked_bones(obj)
    compat = bpy_session.submodule("rig.compat")
    for pb in obj.pose.bones:
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
    return seconds


def bake_rows(frames: int, repeats: int) -> None:
    """`bench/bake.py --rig mocap`: the clip baked with limits on and off, against `nla.bake` over Blender's IK."""
    clip = None
    if not cmu_set_up_works():
        fresh()
        clip = clip_targets(frames)
    print(f"{'mocap clip baked, ' + str(frames) + ' frames':40} {'reach s':>8} {'nla s':>8} {'ratio':>6}")
    for limits in (True, False):
        ours, ref = [], []
        for _ in range(repeats):
            ours.append(bake_run(frames, "reach", limits, clip))
            ref.append(bake_run(frames, "blender", limits, clip))
        label = ("CMU walk" if clip is None else "CMU walk on the stand-in") + ("" if limits else ", no limits")
        print(f"{label:40} {min(ours):8.3f} {min(ref):8.3f} {min(ours) / min(ref):6.2f}", flush=True)
