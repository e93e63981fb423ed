"""Read a bake's inputs for every frame without stepping the scene, when that gives the same numbers.

Stepping frames (`scene.frame_set`) re-evaluates the whole scene and costs ~0.15 ms per frame even for a
tiny scene: more than everything else a bake does. When every input is simple, it is exactly equivalent to
evaluate the targets' F-Curves directly:

- targets and poles have no parent, no constraints, no drivers, no NLA tracks, identity delta transforms,
  and their animation is F-Curves on location / rotation (their own rotation mode) / scale;
- the armature object is not animated, parented, constrained or driven, no bone has constraints, and its
  action (if any) only keys the chain bones' rotations (which the solve overwrites; with Start From
  'Current' those keys would be the warm start, so then this path is not used).

Anything else falls back to stepping frames, and so do bone targets and poles (their armature's evaluated
pose). `tests/blender/test_fastread.py` checks both paths agree.
"""

from __future__ import annotations

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import convert
from ..core.model import Plan
from . import anim, armature, fk
from .props import rig_settings
from .solve import Inputs

F64 = NDArray[np.float64]
_TRANSFORM = {"location", "rotation_euler", "rotation_quaternion", "rotation_axis_angle", "scale"}


def _static_extras(ob: bpy.types.Object) -> bool:
    """No parent, constraints, drivers, NLA or delta transforms: its matrix is its own channels."""
    if ob.parent is not None or len(ob.constraints):
        return False
    deltas = np.concatenate([np.array(ob.delta_location), np.array(ob.delta_rotation_euler)])
    if np.abs(deltas).max() > 0.0:
        return False
    if np.array(ob.delta_rotation_quaternion).tolist() != [1.0, 0.0, 0.0, 0.0]:
        return False
    if np.array(ob.delta_scale).tolist() != [1.0, 1.0, 1.0]:
        return False
    ad = ob.animation_data
    if ad is None:
        return True
    plain_blend = ad.action_blend_type == "REPLACE" and ad.action_influence == 1.0
    return plain_blend and not len(ad.drivers) and not len(ad.nla_tracks)


def _object_curves(ob: bpy.types.Object) -> list[bpy.types.FCurve] | None:
    """The object's transform F-Curves, or None when something else is animated or it is not simple."""
    if not _static_extras(ob):
        return None
    ad = ob.animation_data
    if ad is None or ad.action is None:
        return []
    curves = anim.all_fcurves(ad.action, ob)
    if any(fc.data_path not in _TRANSFORM for fc in curves):
        return None
    return curves


def _evaluate(ob: bpy.types.Object, curves: list[bpy.types.FCurve], frames: list[int]) -> F64:
    """(F,4,4) world matrices of an unparented object from its channels, F-Curves evaluated per frame."""
    f = len(frames)
    static = {
        "location": ob.location,
        "rotation_euler": ob.rotation_euler,
        "rotation_quaternion": ob.rotation_quaternion,
        "rotation_axis_angle": ob.rotation_axis_angle,
        "scale": ob.scale,
    }
    # Only animated channels get a row per frame; the others stay one row and broadcast.
    values: dict[str, F64] = {}
    for fc, sampled in zip(curves, _sampled(ob, curves, frames), strict=True):
        if fc.mute:
            continue
        if sampled is None:
            evaluate = fc.evaluate
            # Blender stores channel values as float32: round the same way so both paths agree exactly.
            sampled = np.array([evaluate(fr) for fr in frames], dtype=np.float32)
        path = fc.data_path
        if path not in values:
            values[path] = np.tile(np.array(static[path], dtype=np.float64), (f, 1))
        values[path][:, fc.array_index] = sampled

    def channel(path: str) -> F64:
        found = values.get(path)
        return found if found is not None else np.array(static[path], dtype=np.float64)[None]

    mode = ob.rotation_mode
    if mode == "QUATERNION":
        q = channel("rotation_quaternion")
        rot = convert.quaternion_to_matrix(q / np.linalg.norm(q, axis=1, keepdims=True))
    elif mode == "AXIS_ANGLE":
        aa = channel("rotation_axis_angle")
        axis = aa[:, 1:] / np.maximum(np.linalg.norm(aa[:, 1:], axis=1, keepdims=True), 1e-300)
        half = 0.5 * aa[:, 0]
        q = np.concatenate([np.cos(half)[:, None], np.sin(half)[:, None] * axis], axis=1)
        rot = convert.quaternion_to_matrix(q)
    else:
        rot = convert.euler_to_matrix(channel("rotation_euler"), mode)
    out = np.zeros((f, 4, 4))
    out[:, :3, :3] = rot * channel("scale")[:, None, :]
    out[:, :3, 3] = channel("location")
    out[:, 3, 3] = 1.0
    return out


def _sampled(
    ob: bpy.types.Object, curves: list[bpy.types.FCurve], frames: list[int]
) -> list[NDArray[np.float32] | None]:
    """Each curve's value at every frame, as `FCurve.evaluate` gives it, from one C loop per curve.

    `evaluate` is one Python call per frame and curve (most of a fast read). `convert_to_samples` runs the
    same evaluation (modifiers included) over a frame range in C and stores float32 values, bit-identical to
    `evaluate`'s. It replaces the keys, so it runs on a throwaway copy of the action, removed at once. None
    for a curve (the caller evaluates it frame by frame) when the copy does not give it, or when the frames
    are sparse in their range (a large step), where sampling every frame between would cost more.
    """
    ad = ob.animation_data
    start, end = min(frames), max(frames)
    if not curves or ad is None or ad.action is None or end - start + 1 > 4 * len(frames):
        return [None] * len(curves)
    copy = ad.action.copy()
    try:
        handle = getattr(ad, "action_slot_handle", None)
        twins = {(fc.data_path, fc.array_index): fc for fc in anim.slot_fcurves(copy, handle)}
        pick = np.asarray(frames, dtype=np.int64) - start
        out: list[NDArray[np.float32] | None] = []
        for fc in curves:
            twin = twins.get((fc.data_path, fc.array_index))
            if twin is None or fc.mute:
                out.append(None)
                continue
            twin.convert_to_samples(start, end + 1)  # the end is exclusive
            points = twin.sampled_points
            if len(points) != end - start + 1:
                out.append(None)
                continue
            co = np.empty(2 * len(points), dtype=np.float32)
            points.foreach_get("co", co)
            out.append(co[1::2][pick])
        return out
    finally:
        bpy.data.actions.remove(copy)


def read_all(obj: bpy.types.Object, plan: Plan, frames: list[int]) -> Inputs | None:
    """Every frame's inputs read from F-Curves, or None when only stepping frames gives exact answers."""
    render = bpy.context.scene.render
    if render.frame_map_old != render.frame_map_new:  # time remapping: only frame_set knows the answer
        return None
    if not _static_extras(obj) or any(len(pb.constraints) for pb in obj.pose.bones):
        return None
    chain_bones = {obj.pose.bones[b].name for g in plan.groups for b in g.bones}
    ad = obj.animation_data
    if ad is not None and ad.action is not None:
        if rig_settings(obj).start_from != "REST":
            return None
        prefix = 'pose.bones["'
        for fc in anim.all_fcurves(ad.action, obj):
            path = fc.data_path
            if not path.startswith(prefix) or '"].rotation_' not in path:
                return None
            if path[len(prefix) : path.index('"].rotation_')] not in chain_bones:
                return None
    chains = [c for g in plan.groups for c in g.chains]
    if any(rig_settings(obj).chains[c.index].influence < 1.0 for c in chains):
        # A blend with the FK pose: the FK pose of each frame is the chain bones' channels there (frame_set).
        return None
    if any(c.target_bone or c.pole_bone for c in chains):
        # A bone target's matrix is its armature's evaluated pose (parents, constraints, drivers): step frames.
        return None
    settings = rig_settings(obj).chains
    targets = {c.index: settings[c.index].target for c in chains}
    poles = {c.index: settings[c.index].pole for c in chains if c.pole is not None}
    objects = {ob.name: ob for ob in (*targets.values(), *poles.values())}
    curves = {}
    for name, ob in objects.items():
        found = _object_curves(ob)
        if found is None:
            return None
        curves[name] = found
    mats = {name: _evaluate(ob, curves[name], frames) for name, ob in objects.items()}
    # One evaluation so the armature's matrix and pose are current (a script may have just moved it).
    bpy.context.view_layer.update()
    f = len(frames)
    pose = np.tile(armature.pose_matrices(obj)[None], (f, 1, 1, 1))
    world = np.tile(np.array(obj.matrix_world, dtype=np.float64)[None], (f, 1, 1))
    inputs = Inputs(
        pose=pose,
        world=world,
        targets={i: mats[ob.name] for i, ob in targets.items()},
        poles={i: mats[ob.name] for i, ob in poles.items()},
        # The armature's action keys chain-bone rotations only (checked above), so pole angles are not keyed.
        pole_angles={i: np.full(f, float(settings[i].pole_angle)) for i in poles if settings[i].pole_angle != 0.0},
        static=True,  # the armature is not animated here: one pose for every frame
    )
    if rig_settings(obj).start_from == "REST":
        basis, loc, scale = armature.basis_parts(obj)
        inputs.basis = np.tile(basis[None], (f, 1, 1, 1))
        inputs.location = np.tile(loc[None], (f, 1, 1))
        inputs.scale = np.tile(scale[None], (f, 1, 1))
    else:
        # The stretch a live solve left in the chain bones' Y scale (`read_inputs`); Soft and Stretch are not
        # animated here (the armature's action keys chain bone rotations only), so the plan's values hold.
        scale = armature.read_channels(obj, (("scale", 3),))["scale"].astype(np.float64)
        inputs.scale = np.tile(scale[None], (f, 1, 1))
    return inputs


def read_posed(obj: bpy.types.Object, plan: Plan, frames: list[int]) -> Inputs | None:
    """Every frame's inputs of an armature its own action animates whose targets and poles are its own bones
    (motion capture set up in one click), without stepping the scene: the channels from the F-Curves, the pose
    by forward kinematics (Blender's ``parent @ rest_rel @ basis``), the targets and poles from that pose. None
    when only stepping frames gives the answer.

    What makes it equivalent (as `rig.lookahead`'s prediction of a frame): every animated channel is a pose
    bone's transform set by an F-Curve of the armature's one action (`anim.pose_curves`); the bones the solve
    reads (the chains, the bones above them, the control bones) have no constraints, inherit their parent's
    rotation and scale in full and use local location; the armature object is neither parented, constrained
    nor animated. Other bones (the hands and feet a follow constraint turns) get their channels' pose, which no
    chain's solve reads. The pose is float64 from the float32 channels, where Blender evaluates in float32
    (`tests/blender/test_fastread.py` compares both paths)."""
    render = bpy.context.scene.render
    if render.frame_map_old != render.frame_map_new or obj.parent is not None or len(obj.constraints):
        return None
    s = rig_settings(obj)
    chains = [c for g in plan.groups for c in g.chains]
    if s.start_from != "CURRENT" or not chains or obj.data.pose_position != "POSE":
        return None
    if any(s.chains[c.index].influence < 1.0 for c in chains):
        return None
    if any(c.target_local < 0 or (c.pole is not None and c.pole_local < 0) for c in chains):
        return None
    curves = anim.pose_curves(obj)
    if isinstance(curves, str):
        return None
    sk = armature.skeleton(obj)
    parents: list[int] = sk.parent.tolist()
    need: set[int] = set()
    for c in chains:
        # With Use Target Rotation the tip bone (not among the chain's bones) takes the target's orientation.
        tip = sk.index.get(s.chains[c.index].tip_bone, -1) if c.use_target_rotation else -1
        for b in (*c.bones, c.target_local, c.pole_local, tip):
            if b >= 0:
                need.add(b)
                need.update(sk.ancestors(b))
    if armature.channel_pose_problem(obj, sk, need) is not None:
        return None
    # One evaluation so the channels no key sets and the armature's matrix are current.
    bpy.context.view_layer.update()
    base = armature.read_channels(obj, armature.ALL_CHANNELS)
    f = len(frames)
    values = {attr: np.repeat(v[None], f, axis=0) for attr, v in base.items()}
    for (attr, b, i, fc), sampled in zip(curves, _sampled(obj, [c[3] for c in curves], frames), strict=True):
        if sampled is None:
            evaluate = fc.evaluate
            sampled = np.array([evaluate(fr) for fr in frames], dtype=np.float32)
        values[attr][:, b, i] = sampled
    modes = armature.rotation_mode_values(obj).tolist()
    n = len(sk.names)
    pose = np.empty((f, n, 4, 4))
    basis = np.zeros((f, 4, 4))
    basis[:, 3, 3] = 1.0
    raw = np.zeros((f, 4), dtype=np.float32)
    for b in sorted(range(n), key=lambda k: (int(sk.depth[k]), k)):
        attr, width = armature.rotation_channel(armature.MODE_NAMES[modes[b]])
        raw[:, :width] = values[attr][:, b]
        rot = fk.basis_rotations(raw, [modes[b]] * f)  # as Blender builds matrix_basis, every frame at once
        basis[:, :3, :3] = rot * values["scale"][:, b].astype(np.float64)[:, None, :]
        basis[:, :3, 3] = 0.0 if bool(sk.connected[b]) else values["location"][:, b]
        local = sk.rest_rel4[b] @ basis
        pose[:, b] = local if parents[b] < 0 else pose[:, parents[b]] @ local
    world = np.tile(np.array(obj.matrix_world, dtype=np.float64)[None], (f, 1, 1))
    with_pole = [c for c in chains if c.pole is not None]
    rows = [c.target_local for c in chains] + [c.pole_local for c in with_pole]
    objects = world[:, None] @ pose[:, rows]
    targets = {c.index: objects[:, k] for k, c in enumerate(chains)}
    poles = {c.index: objects[:, len(chains) + k] for k, c in enumerate(with_pole)}
    inputs = Inputs(pose, world, targets, poles, objects=objects)
    for c in with_pole:
        angle = float(s.chains[c.index].pole_angle)
        if angle != 0.0:
            inputs.pole_angles[c.index] = np.full(f, angle)
    inputs.scale = values["scale"].astype(np.float64)
    return inputs
