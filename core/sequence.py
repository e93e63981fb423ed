"""Solving frames in order, each from the previous frame's result: a bake that plays back as live playback.

bpy-free. With Start From 'Current', live playback solves each frame from the pose Blender shows: the
frame's own animation for bones whose rotation is keyed, and for the others the result of the frame played
before. A bake that solved every frame from one pose (the pose at baking time) lands a redundant chain on
other solutions where the targets have swung far from that pose: twists flip by up to 180 degrees between two
frames while the tips stay exact. `solve_in_order` gives each frame the start live playback gives it,
frame by frame from the range's first frame, so the keys are those of live playback from there and the same
whatever frame was current when the bake ran.

The frames are solved one by one (one `core.solve` call per frame, every chain of the rig together): a frame
cannot start before the previous one has ended. Start From 'Rest' needs none of this (every frame starts from
the rest pose, live as baked) and keeps the batched solve of all frames at once.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from .kinematics import child_pose, child_relative
from .model import ChainOutcome, Inputs, RigReport, Skeleton, Snapshot, Solved
from .solve import solve

F64 = NDArray[np.float64]


def frame_of(inputs: Inputs, f: int) -> Inputs:
    """Frame `f` of stacked `inputs`, as a one-frame `Inputs`."""

    def cut(a: F64 | None) -> F64 | None:
        return None if a is None else a[f : f + 1]

    def cut_all(d: dict[int, F64]) -> dict[int, F64]:
        return {k: v[f : f + 1] for k, v in d.items()}

    return replace(
        inputs,
        pose=inputs.pose[f : f + 1],
        world=inputs.world[f : f + 1],
        targets=cut_all(inputs.targets),
        poles=cut_all(inputs.poles),
        pole_angles=cut_all(inputs.pole_angles),
        basis=cut(inputs.basis),
        location=cut(inputs.location),
        scale=cut(inputs.scale),
        objects=cut(inputs.objects),
        static=False,
        soft=cut_all(inputs.soft),
        stretch=cut_all(inputs.stretch),
        influence=cut_all(inputs.influence),
        fk=cut_all(inputs.fk),
        fk_scale=cut_all(inputs.fk_scale),
        preset=cut_all(inputs.preset),
    )


def merge_outcomes(outcomes: list[ChainOutcome]) -> ChainOutcome:
    """One chain's outcomes of single frames, as one outcome of the whole range (`ChainOutcome`'s meaning)."""
    residuals = np.concatenate([o.residuals if o.residuals is not None else np.array([o.residual]) for o in outcomes])
    counts = np.concatenate(
        [o.iteration_counts if o.iteration_counts is not None else np.array([o.iterations]) for o in outcomes]
    )
    worst = max(range(len(outcomes)), key=lambda k: outcomes[k].residual)
    invalid = next((o for o in outcomes if not o.valid), None)
    base = invalid if invalid is not None else outcomes[worst]
    return ChainOutcome(
        valid=invalid is None,
        message=base.message,
        iterations=float(counts.mean()),
        residual=float(residuals.max()),
        reached=all(o.reached for o in outcomes),
        status=base.status,
        residuals=residuals,
        iteration_counts=counts,
        stretch=max(o.stretch for o in outcomes),
    )


def reposed(sk: Skeleton, pose: F64, start: dict[int, F64], locations: dict[int, F64] | None = None) -> F64:
    """`pose` (1, B, 4, 4) with the bones of `start` given those basis rotations (bone -> (1, 3, 3)), each keeping
    its location (but those `locations` gives: bone -> (1, 3), a bone of `start`) and scale channels, and every
    bone below them following (Blender's ``parent @ rest_rel @ basis``, with each bone's Inherit Scale). One
    level of the hierarchy at a time (a numpy call per level, not per bone: a bake calls this on every
    frame)."""
    out = pose.copy()
    modes = sk.scale_modes()
    parents = sk.parent
    moved = np.zeros(len(parents), dtype=bool)
    starts = np.zeros(len(parents), dtype=bool)
    starts[list(start)] = True
    depth = sk.depth
    for level in range(int(depth.max(initial=-1)) + 1):
        at = depth == level
        parent_moved = np.zeros_like(at)
        rooted = at & (parents >= 0)
        parent_moved[rooted] = moved[parents[rooted]]
        bones = np.flatnonzero(at & (starts | parent_moved))
        if not len(bones):
            continue
        ps = parents[bones]
        rel = pose[:, bones].copy()
        inner = ps >= 0
        if inner.any():
            rel[:, inner] = child_relative(pose[:, ps[inner]], pose[:, bones[inner]], modes[bones[inner]])
        for k, b in enumerate(bones.tolist()):
            if b in start:
                basis = np.linalg.inv(sk.rest_rel4[b])[None] @ rel[:, k]
                scale = np.linalg.norm(basis[:, :3, :3], axis=-2, keepdims=True)
                basis[:, :3, :3] = start[b] * scale
                if locations is not None and b in locations:
                    basis[:, :3, 3] = locations[b]
                rel[:, k] = sk.rest_rel4[b][None] @ basis
        out[:, bones[~inner]] = rel[:, ~inner]
        if inner.any():
            out[:, bones[inner]] = child_pose(out[:, ps[inner]], rel[:, inner], modes[bones[inner]])
        moved[bones] = True
    return out


def solve_in_order(
    snap: Snapshot,
    inputs: Inputs,
    report: RigReport,
    first: dict[int, F64],
    carried: set[int],
    repose: bool = False,
) -> Solved | None:
    """Every frame of `inputs` solved in order, as live playback from the first frame solves them.

    `first` (bone -> (3,3)): the basis rotations the first frame starts from (the FK pose there) for the
    bones in `carried`, the chain bones whose rotation is not animated: each later frame starts them from the
    previous frame's result. Other bones start from the frame's own pose, as live playback does. Fills
    `report` as one solve of all frames would; None when the frames did not solve the same bones (a chain
    refused in some frame only), for the caller to solve them together instead. With `repose` the carried bones
    start from the frame's pose re-posed with those rotations (`reposed`) rather than from presets: a Full
    Body solve moves the body first and carries them with it, as live playback carries the limbs (a preset
    bone is placed, and the body would leave it where it was).
    """
    f_count = inputs.pose.shape[0]
    seed = {b: r[None] for b, r in first.items() if b in carried}
    # An armature whose pose is the same in every frame (not animated) and whose every chain bone is carried:
    # the next frame starts from the whole pose the last one ended with (cheaper than re-posing the bones).
    whole = inputs.static and all(b in carried for g in snap.plan.groups for b in g.bones)
    start: F64 | None = None
    bones: list[int] | None = None
    basis: list[F64] = []
    scale_bones: list[int] | None = None
    scale_y: list[F64] = []
    location: list[F64] = []  # Full Body: the body root's location channel (core/body.py)
    location_bones: list[int] = []
    outcomes: dict[int, list[ChainOutcome]] = {}
    for f in range(f_count):
        one = frame_of(inputs, f)
        if start is not None:
            one.pose = start
        elif seed and repose:
            one.pose = reposed(snap.sk, one.pose, seed)
        elif seed:
            one.preset = {**one.preset, **seed}
        frame_report = RigReport()
        solved = solve(snap, one, frame_report, final_pose=whole)
        if whole and solved.pose is not None:
            start = solved.pose
        if frame_report.rig_error:
            report.rig_error = frame_report.rig_error
            return None
        if bones is None:
            bones, scale_bones = solved.bones, solved.scale_bones
        elif solved.bones != bones or solved.scale_bones != scale_bones:
            return None
        basis.append(solved.basis)
        if solved.scale_bones:
            scale_y.append(solved.scale_y)
        if solved.location_bones:
            location.append(solved.location)
            location_bones = solved.location_bones
        for i, o in frame_report.outcomes.items():
            outcomes.setdefault(i, []).append(o)
        seed = {b: solved.basis[:, k] for k, b in enumerate(solved.bones) if b in carried}
    for i, outs in outcomes.items():
        report.outcomes[i] = merge_outcomes(outs)
    out = Solved(bones or [], np.concatenate(basis, axis=0) if basis else np.zeros((f_count, 0, 3, 3)))
    if scale_bones:
        out.scale_bones = list(scale_bones)
        out.scale_y = np.concatenate(scale_y, axis=0)
    if location and len(location) == f_count:
        out.location_bones = list(location_bones)
        out.location = np.concatenate(location, axis=0)
    return out
