"""A bake with Start From 'Current': the first frame's start and which bones carry a frame's result to the
next (`core.sequence` solves the frames in order; this reads what it needs from Blender).

Live playback starts each frame from the pose Blender shows: a chain bone whose rotation is animated (keys,
NLA, drivers) shows the frame's animation; one that is not shows the previous frame's result. The bake
starts the range's first frame from the FK pose there (the rule of `rig/fk.py`: the channels, or the value
stored when Reach IK last wrote them), so its keys do not depend on the frame that was current.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import bpy
import numpy as np
from mathutils import Matrix, Vector
from numpy.typing import NDArray

from ..core.live import Program
from ..core.model import ChainOutcome, Inputs, Plan, RigReport, Snapshot, Solved
from ..core.sequence import merge_outcomes, reposed
from . import anim, armature, fk

F64 = NDArray[np.float64]


def first_start(
    obj: bpy.types.Object, names: tuple[str, ...], plan: Plan, channels: armature.Channels
) -> tuple[dict[int, F64], set[int]]:
    """(bone -> (3,3) FK basis rotation of every chain bone, as `channels` hold it; the chain bones whose
    rotation is not animated, which each frame starts from the previous frame's result)."""
    bones = sorted({b for g in plan.groups for b in g.bones})
    if not bones:
        return {}, set()
    modes = armature.rotation_mode_values(obj)[bones].tolist()
    basis = fk.basis_rotations(fk.fk_values(obj, names, bones, channels)[0], modes)
    animated = anim.animated_rotations(obj)
    return {b: basis[k] for k, b in enumerate(bones)}, {b for b in bones if names[b] not in animated}


def solve_live_order(
    obj: bpy.types.Object,
    snap: Snapshot,
    inputs: Inputs,
    report: RigReport,
    channels_before: armature.Channels,
) -> Solved | None:
    """Frames solved in order with the live program (`core.live.Program`, live playback's own solver), each
    from the pose the frame before left: the cheap way for a plain rig whose armature is not animated (the
    bake's fast read gave one pose for every frame: `inputs.static`). None when the rig is not such a rig
    (`Program.build` says why), for `core.sequence.solve_in_order` to do it.

    The pose each frame starts from is worked out from the channels the previous frame wrote, bone by bone
    from the root (Blender's ``parent @ rest_rel @ basis``), for the bones the program reads."""
    if not inputs.static or inputs.influence or inputs.preset:
        return None
    sk, plan = snap.sk, snap.plan
    mode_values = armature.rotation_mode_values(obj)
    modes = [armature.MODE_NAMES[v] for v in mode_values.tolist()]
    program = Program.build(snap, modes)
    if isinstance(program, str) or program.refused:
        return None
    if any(link.chain.target_bone or link.chain.pole_bone for link in program.links):
        return None  # control bones: their pose per frame may depend on the solve (`core.sequence` orders it)
    chains = [c.index for g in plan.groups for c in g.chains]
    order = program.closure(chains)
    if order is None:
        return None
    bones = sorted({b for g in plan.groups for b in g.bones}, key=lambda b: (int(sk.depth[b]), b))
    channels = {k: v.copy() for k, v in channels_before.items() if k.startswith("rotation_")}
    # The first frame starts from the FK pose.
    start = fk.fk_values(obj, sk.names, bones, channels_before)[0]
    fk.put_raw_rotations(channels, bones, [int(mode_values[b]) for b in bones], start)
    # Every bone the program reads and the bones above them, parents first; a bone in no chain keeps its
    # place relative to its parent as read (the armature is not animated), a chain bone is re-posed.
    parents = sk.parent.tolist()
    need: set[int] = set()
    for link in program.links:
        for b in (*link.bones, link.parent):
            while b >= 0 and b not in need:
                need.add(b)
                b = parents[b]
    need_order = sorted(need, key=lambda b: (int(sk.depth[b]), b))
    if not all(bool(sk.inherits[b]) for b in need_order if parents[b] >= 0):
        return None  # a bone that does not inherit its parent's rotation or full scale: the core's own kinematics
    # From rest data and channels alone (not the pose read, which the frame that was current left): the keys do
    # not depend on it. Blender: pose = parent pose @ rest_rel4 @ basis (a connected bone ignores its location).
    rest_rel4 = [Matrix(m.tolist()) for m in sk.rest_rel4]
    locations = channels_before["location"]
    scales = channels_before["scale"]
    fixed = {
        b: (
            Vector((0.0, 0.0, 0.0)) if bool(sk.connected[b]) else Vector(locations[b].tolist()),
            Vector(scales[b].tolist()),
        )
        for b in need_order
    }
    pose: dict[int, Matrix] = {}
    chain_set = set(bones)
    # Only chain bones and the bones below one change from frame to frame; the others are posed once.
    moving: list[int] = []
    for b in need_order:
        p = parents[b]
        if b in chain_set or (p >= 0 and p in moving):
            moving.append(b)
    attrs = {b: armature.rotation_channel(modes[b])[0] for b in need_order}

    def repose(which: list[int]) -> None:
        for b in which:
            loc, scale = fixed[b]
            m = rest_rel4[b] @ armature.basis_matrix(modes[b], channels[attrs[b]][b].tolist(), loc, scale)
            p = parents[b]
            pose[b] = m if p < 0 else pose[p] @ m

    repose(need_order)
    n_frames = inputs.pose.shape[0]
    raws = np.zeros((n_frames, len(bones), 4), dtype=np.float32)
    rows = [(k, channels[attrs[b]], b) for k, b in enumerate(bones)]
    outcomes: dict[int, list[ChainOutcome]] = {}
    goals = _Goals(inputs, chains)
    for f in range(n_frames):
        result = program.solve(order, pose.__getitem__, *goals.frame(f), channels)
        for i, o in result.outcomes.items():
            outcomes.setdefault(i, []).append(o)
        out = raws[f]
        for k, channel, b in rows:
            row = channel[b]
            out[k, : row.shape[0]] = row
        repose(moving)
    for i, outs in outcomes.items():
        report.outcomes[i] = merge_outcomes(outs)
    flat = fk.basis_rotations(raws.reshape(-1, 4), [int(mode_values[b]) for b in bones] * n_frames)
    return Solved(bones, flat.reshape(n_frames, len(bones), 3, 3))


def body_limbs_in_order(
    obj: bpy.types.Object,
    snap: Snapshot,
    inputs: Inputs,
    batched: Solved,
    report: RigReport,
    carried: set[int],
    channels_before: armature.Channels,
) -> Solved | None:
    """A Full Body bake from the current pose, the cheap way: `batched` (every frame solved at once) has the
    body right (each frame's root and spine are a function of its targets alone: `core/body.py`), but it
    started every frame's limbs from the pose at bake time, and under Roll 'Keep' a limb's twist follows the
    pose it starts from. So the limbs (the groups of `carried` bones) are solved again frame after frame with
    the live program (live playback's solver, `core.live.Program`), each from the frame before's result (the
    first from the FK pose), on the body `batched` put there: what live playback does; `report` (the batched
    solve's) takes the limbs' outcomes. None (`report` as it was) when the program does not take the limbs, or a
    limb's control or pole hangs below a bone the body or a limb moves (the caller solves the frames in order
    with `core.solve`)."""
    sk, plan = snap.sk, snap.plan
    limbs = [g for g in plan.groups if set(g.bones) <= carried]
    limb_bones = sorted({b for g in limbs for b in g.bones}, key=lambda b: (int(sk.depth[b]), b))
    if not limbs or not set(limb_bones) <= set(batched.bones) or not set(batched.location_bones) <= set(batched.bones):
        return None  # (a body root whose location alone the solve set: `reposed` moves bones it turns)
    chains = [c.index for g in limbs for c in g.chains]
    if any(i in inputs.influence for i in chains) or inputs.release or inputs.release_bones:
        return None  # blending with FK, or a stretch to give back: the full solve's
    moved = set(batched.bones)
    for g in limbs:
        for c in g.chains:
            for b in (c.target_local, c.pole_local):
                if b >= 0 and (b in moved or any(a in moved for a in sk.ancestors(b))):
                    return None
    mode_values = armature.rotation_mode_values(obj)
    modes = [armature.MODE_NAMES[v] for v in mode_values.tolist()]
    program = Program.build(
        replace(snap, plan=Plan(groups=limbs, errors=plan.errors, notes=plan.notes), body=None), modes
    )
    if isinstance(program, str) or program.refused:
        return None
    order = program.closure(chains)
    if order is None:
        return None
    channels = {k: v.copy() for k, v in channels_before.items() if k.startswith("rotation_")}
    limb_modes = [int(mode_values[b]) for b in limb_bones]
    fk.put_raw_rotations(channels, limb_bones, limb_modes, fk.fk_values(obj, sk.names, limb_bones, channels_before)[0])
    # Every other bone the batched solve turned (the body, a chain not carried) starts where it left it.
    limb_set = set(limb_bones)
    body = [(k, b) for k, b in enumerate(batched.bones) if b not in limb_set]
    column = {b: k for k, b in enumerate(batched.bones)}
    located = {b: k for k, b in enumerate(batched.location_bones)}
    n_frames = inputs.pose.shape[0]
    raws = np.zeros((n_frames, len(limb_bones), 4), dtype=np.float32)
    outcomes: dict[int, list[ChainOutcome]] = {}
    goals = _Goals(inputs, chains)
    for f in range(n_frames):
        start = {b: batched.basis[f : f + 1, k] for k, b in body}
        limb_basis = fk.basis_rotations(fk.raw_rotations(channels, limb_bones, limb_modes), limb_modes)
        start.update({b: limb_basis[k][None] for k, b in enumerate(limb_bones)})
        at = {b: batched.location[f : f + 1, k] for b, k in located.items()}
        pose = reposed(sk, inputs.pose[f : f + 1], start, at)[0]
        result = program.solve(order, partial(_matrix, pose.tolist()), *goals.frame(f), channels)
        for i, o in result.outcomes.items():
            outcomes.setdefault(i, []).append(o)
        raws[f] = fk.raw_rotations(channels, limb_bones, limb_modes)
    basis = batched.basis.copy()
    flat = fk.basis_rotations(raws.reshape(-1, 4), limb_modes * n_frames).reshape(n_frames, len(limb_bones), 3, 3)
    for k, b in enumerate(limb_bones):
        basis[:, column[b]] = flat[:, k]
    for i, outs in outcomes.items():
        merged = merge_outcomes(outs)
        before = report.outcomes.get(i)
        if before is not None and before.message and not merged.message:
            merged.message = before.message  # what the body did to it (pinned, blocked), as the batched solve said
        report.outcomes[i] = merged
    return replace(batched, basis=basis, pose=None)


def _matrix(rows: list[list[list[float]]], b: int) -> Matrix:
    return Matrix(rows[b])


class _Goals:
    """Each frame's world matrix, targets, poles and pole angles of `chains` as `Program.solve` takes them,
    from the bake's stacked inputs (every frame's matrices made nested lists once: numpy -> Matrix one frame at
    a time costs more)."""

    def __init__(self, inputs: Inputs, chains: list[int]) -> None:
        self.chains = chains
        self.with_pole = [i for i in chains if i in inputs.poles]
        self.targets = {i: inputs.targets[i].tolist() for i in chains}
        self.poles = {i: inputs.poles[i].tolist() for i in self.with_pole}
        self.world = inputs.world.tolist()
        self.angles = {i: a.tolist() for i, a in inputs.pole_angles.items()}

    def frame(self, f: int) -> tuple[Matrix, dict[int, Matrix], dict[int, Matrix], dict[int, float]]:
        return (
            Matrix(self.world[f]),
            {i: Matrix(self.targets[i][f]) for i in self.chains},
            {i: Matrix(self.poles[i][f]) for i in self.with_pole},
            {i: float(a[f]) for i, a in self.angles.items()},
        )
