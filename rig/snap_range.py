"""Snap IK to Pose over a frame range: key the targets and poles on every frame so the IK gives the animation.

An imported clip (motion capture) animates the bones themselves; a set-up's controls stand still. Snapped
over the clip's range, each chain's target and pole are placed and keyed on every frame where the clip puts
the bones (`rig.ikfk`'s placement, checked by dry solves, frame by frame), so live playback and a bake
reproduce the motion, and the clip can then be edited with its IK controls (move a foot's control on some
frames, the leg follows), as Rigify's and Auto-Rig Pro's "snap over frame range" do.

On each frame the pose snapped to is the bones' own animation there: live solving is held off the rig while
the frame is set, so the chains show their FK pose. A hand or foot that follows its control's rotation (Set
Up Character's Copy Rotation) gets a control turned as the animation turns that hand or foot, so it keeps its
motion too. Everything runs as one transaction: a failure on any frame puts back every control, key and
action as they were, and the current frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core.model import Plan, Skeleton
from . import ikfk, ikfk_base, live
from .ikfk_follow import FOLLOW_CONSTRAINT
from .props import rig_settings

F64 = NDArray[np.float64]


def _follower(obj: bpy.types.Object, sk: Skeleton, target: ikfk_base.Control, tip: int) -> int:
    """The bone below `tip` that takes `target`'s rotation (Set Up Character's follow constraint), or -1."""
    pbs = obj.pose.bones
    for b in range(len(sk.names)):
        if int(sk.parent[b]) != tip:
            continue
        con = pbs[sk.names[b]].constraints.get(FOLLOW_CONSTRAINT)
        if con is not None and not con.mute and con.target == target.ob and con.subtarget == target.bone:
            return b
    return -1


def _fk_rotation(obj: bpy.types.Object, sk: Skeleton, b: int, pose: F64) -> F64:
    """(3,3) bone `b`'s armature-space rotation from its channels under its parent's pose (constraints off)."""
    p = int(sk.parent[b])
    local = sk.rest_rel4[b]  # rest relative to the parent's rest (a root's: to the armature)
    basis = np.array(obj.pose.bones[sk.names[b]].matrix_basis, dtype=np.float64)
    m = (pose[p] if p >= 0 else np.eye(4)) @ local @ basis
    rot = m[:3, :3] / np.maximum(np.linalg.norm(m[:3, :3], axis=0), 1e-12)
    return np.asarray(rot, dtype=np.float64)


def _frame(
    obj: bpy.types.Object,
    sk: Skeleton,
    plan: Plan,
    picked: Sequence[int],
    tx: ikfk_base._Transaction,
    misses: dict[str, tuple[float, int, int]],
    frame: int,
) -> None:
    """Snap and key the picked chains on the current frame; note each chain's miss in `misses`."""
    chosen = set(picked)
    tol = float(rig_settings(obj).tolerance)
    pose = ikfk._Pose(obj, sk)
    groups = [g for g in plan.groups if any(c.index in chosen for c in g.chains)]
    places = [p for g in groups for p in ikfk._place_group(obj, sk, plan, g, chosen, pose, tol)]
    for p in places:
        follower = _follower(obj, sk, p.target, p.chain.bones[-1])
        if follower >= 0 and not p.chain.use_target_rotation:
            p.target_at = p.target_at.copy()
            p.target_at[:3, :3] = _fk_rotation(obj, sk, follower, pose.matrices) * np.linalg.norm(
                p.target_at[:3, :3], axis=0
            )
        worst, count, at = misses.get(p.chain.name, (0.0, 0, frame))
        if p.miss > tol:
            count += 1
            if p.miss > worst:
                worst, at = p.miss, frame
        misses[p.chain.name] = (worst, count, at)
    ikfk._write(obj, places, pose, tx, tol)
    for p in places:
        for control in [p.target] + ([p.pole] if p.pole is not None else []):
            for path in control.key_paths():
                tx.key(control.ob, path, control.bone or "Object Transforms")


def snap_range(obj: bpy.types.Object, which: str | set[int], frame_start: int, frame_end: int) -> ikfk.Outcome:
    """Snap IK to Pose on every frame from `frame_start` to `frame_end`, keying targets and poles there.

    Raises `ikfk.IkFkError` having changed nothing (controls, keys, actions, the current frame)."""
    if frame_end < frame_start:
        raise ikfk.IkFkError(
            f"the frame range {frame_start}-{frame_end} is empty: the end must not come before the start"
        )
    picked, sk, plan = ikfk._chosen(obj, which, "snap IK to the pose over a frame range")
    scene = bpy.context.scene
    if scene is None:
        raise ikfk.IkFkError("there is no active scene")
    original = scene.frame_current, scene.frame_subframe
    misses: dict[str, tuple[float, int, int]] = {}
    try:
        with ikfk_base._transaction(obj) as tx:
            for f in range(frame_start, frame_end + 1):
                with live.suspended(obj):
                    scene.frame_set(f)  # the bones show their own animation: live solving held off
                _frame(obj, sk, plan, picked, tx, misses, f)
    finally:
        scene.frame_set(original[0], subframe=original[1])
    chains = rig_chain_names(obj, picked)
    outcome = ikfk.Outcome(chains)
    frames = frame_end - frame_start + 1
    for name, (worst, count, at) in misses.items():
        if count:
            outcome.warnings.append(
                f"chain '{name}': on {count} of {frames} frame(s) the IK solution differs from the pose (worst "
                f"{worst:.4g} at frame {at}: a pose outside the joint limits, Roll 'Rest' or 'Natural', Soft at "
                "full extension, or Start From 'Rest' on a chain of more than two bones)"
            )
    return outcome


def rig_chain_names(obj: bpy.types.Object, picked: Sequence[int]) -> list[str]:
    chains = rig_settings(obj).chains
    return [chains[i].name for i in picked]
