"""Solve a rig snapshot: chains batched per solver, chains below chains level by level, outcomes with messages.

A solve works on a stack of F frames at once (live solving: F = 1; baking: every baked frame), and chains
of one level that share a solver and a length are batched into one solver call over all frames. A chain
whose root hangs below another chain's bones is solved after it, on a pose derived by forward kinematics
from our own arrays (inside Blender's handlers, asking Blender to re-evaluate is unsafe). Nothing here
imports bpy: `rig/` builds the `Snapshot` and `Inputs` and writes `Solved` back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import numpy as np
from numpy.typing import NDArray

from . import convert
from .batch import solve_batch, with_local_targets
from .blend import blend_level, fk_start
from .checks import limit_checked_groups, owned_stretch, soft_checked_groups, usable_groups
from .kinematics import Space, Work, apply_preset, local_rotations, rest_start_pose
from .messages import refused_message
from .model import F64, ChainOutcome, ChainPlan, Group, Inputs, RigReport, Skeleton, Snapshot, Solved
from .trees import solve_tree

Channels = dict[str, NDArray[np.float32]]


def stack_inputs(frames: Sequence[Inputs]) -> Inputs:
    def cat(name: str) -> F64 | None:
        parts = [getattr(f, name) for f in frames]
        return None if parts[0] is None else np.concatenate(parts)

    return Inputs(
        pose=np.concatenate([f.pose for f in frames]),
        world=np.concatenate([f.world for f in frames]),
        targets={k: np.concatenate([f.targets[k] for f in frames]) for k in frames[0].targets},
        poles={k: np.concatenate([f.poles[k] for f in frames]) for k in frames[0].poles},
        pole_angles={k: np.concatenate([f.pole_angles[k] for f in frames]) for k in frames[0].pole_angles},
        basis=cat("basis"),
        location=cat("location"),
        scale=cat("scale"),
        soft={k: np.concatenate([f.soft[k] for f in frames]) for k in frames[0].soft},
        stretch={k: np.concatenate([f.stretch[k] for f in frames]) for k in frames[0].stretch},
        release=set().union(*(f.release for f in frames)),
        influence={k: np.concatenate([f.influence[k] for f in frames]) for k in frames[0].influence},
        fk={k: np.concatenate([f.fk[k] for f in frames]) for k in frames[0].fk},
        fk_scale={k: np.concatenate([f.fk_scale[k] for f in frames]) for k in frames[0].fk_scale},
    )


def _guarded(
    report: RigReport,
    sk: Skeleton,
    chains: list[ChainPlan],
    run: Callable[[list[ChainPlan]], None],
    split: bool = True,
) -> list[ChainPlan]:
    """Run one solver call on `chains`; return those it could not solve (reported invalid).

    A ValueError (bad numbers that slipped past validation) marks the call's chains invalid. The solver
    raises before anything is stored in the working pose, so nothing of these chains is written. With
    `split` (a batch of independent chains) a failed call is run again chain by chain, so one chain's bad
    numbers never take the other chains of its batch down; a tree (`split=False`) fails as one.
    """
    try:
        run(chains)
    except ValueError as exc:
        if split and len(chains) > 1:
            return [bad for c in chains for bad in _guarded(report, sk, [c], run)]
        for c in chains:
            report.outcomes[c.index] = ChainOutcome(False, refused_message(sk, c, exc, tree=not split))
        return chains
    return []


def _whole(run: Callable[[], None]) -> Callable[[list[ChainPlan]], None]:
    """A solve of a whole group (a tree) as `_guarded` calls it: it takes the group's chains and ignores them."""

    def call(_chains: list[ChainPlan]) -> None:
        run()

    return call


def _solve_levels(
    snap: Snapshot,
    work: Work,
    groups: list[Group],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool,
    dropped: Sequence[Group] = (),
) -> None:
    """Solve `groups` level by level (chains below chains after them); `dropped`: groups already refused.

    A chain below a chain that is not solved: nothing of the upper chain is written, so Blender keeps
    showing its bones as they are, and the chain below is solved on exactly that pose and says "reached"
    only if it reaches there. With Start From 'Current' the working pose is the pose Blender evaluated;
    with 'Rest', chains refused for their limits are left out of the start pose (`solve`), so their
    bones keep Blender's pose too. Only a chain refused after the 'Rest' start pose was built (`dropped`:
    a bone scaled to zero; or a solver error here) has its bones at rest in the working pose, a pose
    Blender does not show: a chain below it is refused as well rather than solved for a pose nobody sees.
    """
    sk = work.sk
    # The one rig setting the solver checks that its UI range does not guard (a script can store NaN).
    tolerance = float(snap.settings.tolerance)
    if not (math.isfinite(tolerance) and tolerance > 0.0):
        msg = (
            f"'{snap.settings.rig}' has a Tolerance of {tolerance:.4g}: set a distance above 0 "
            "(world units; default 0.001) in the Reach IK panel"
        )
        for g in groups:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        return
    rest_start = inputs.basis is not None
    off_pose = {b for g in dropped for b in g.bones} if rest_start else set()  # at rest here, not in Blender
    levels = sorted({g.level for g in groups})
    for li, lv in enumerate(levels):
        if li > 0:
            work.propagate()
        batches: dict[tuple[str, int, bool, float], list[ChainPlan]] = {}
        inputs = with_local_targets(work, inputs, [g for g in groups if g.level == lv])
        held = fk_start(work, [g for g in groups if g.level == lv], inputs) if inputs.influence else {}
        for g in groups:
            if g.level != lv:
                continue
            above = [a for a in sk.ancestors(g.bones[0]) if a in off_pose] if off_pose else []
            if above:
                msg = (
                    f"not solved: it hangs below bone '{sk.names[above[0]]}' of a chain that cannot be solved, "
                    "and Start From 'Rest' would solve it on a pose Blender does not show: fix that chain first"
                )
                for c in g.chains:
                    report.outcomes[c.index] = ChainOutcome(False, msg)
                continue
            if g.is_tree:
                tree_run = _whole(partial(solve_tree, snap, work, g, inputs, space, report, smooth))
                if _guarded(report, sk, g.chains, tree_run, split=False) and rest_start:
                    off_pose.update(g.bones)
                continue
            c = g.chains[0]
            key = (c.solver, len(c.bones), c.use_target_rotation, c.ccd_max_step)
            batches.setdefault(key, []).append(c)
        for (solver, _n, _rot, _cap), chains in batches.items():
            # `run(chains)` solves any subset of the batch (`_guarded` retries chain by chain).
            run = partial(solve_batch, snap, work, solver, inputs=inputs, space=space, report=report, smooth=smooth)
            failed = _guarded(report, sk, chains, run)
            if rest_start:
                off_pose.update(b for c in failed for b in c.bones)
        if inputs.influence:
            blend_level(snap, work, [g for g in groups if g.level == lv], inputs, space, report, held)


def _first(a: F64 | None) -> F64 | None:
    return None if a is None else a[:1]


def solve(
    snap: Snapshot,
    inputs: Inputs,
    report: RigReport,
    smooth: bool = False,
    channels: Channels | None = None,
    final_pose: bool = False,
) -> Solved:
    """Solve every planned group over the stacked frames of `inputs`; fill `report`; return basis rotations.

    `smooth` (for baking) makes results vary continuously from frame to frame (`uniform_iterations`).
    `channels` (the current rotation channels, when the result is written to them) are checked too.
    `final_pose` also returns the whole armature's pose after the solve (`Solved.pose`).
    """
    sk, plan, lengths = snap.sk, snap.plan, snap.lengths
    f = inputs.pose.shape[0]
    # Chains whose limits the solver would refuse are dropped before the start pose is built: their bones
    # keep Blender's pose there, and chains below them are solved on it (see `_solve_levels`).
    limited = soft_checked_groups(limit_checked_groups(snap, report), inputs, report)
    owned = owned_stretch(limited, inputs)
    unit_y = list(dict.fromkeys(b for carriers in owned.values() for b in carriers))
    loose = {b for b in inputs.release_bones if b not in unit_y}
    unit_y += sorted(loose)
    if inputs.static and f > 1:
        # The same start in every frame: work it out for one frame and repeat it.
        first = replace(
            inputs,
            pose=inputs.pose[:1],
            basis=_first(inputs.basis),
            location=_first(inputs.location),
            scale=_first(inputs.scale),
            static=False,
        )
        pose1 = rest_start_pose(sk, plan, first, limited, unit_y) if first.basis is not None else first.pose
        rot1, sc1 = convert.rotation_parts(pose1[:, :, :3, :3])
        pose, rot, sc = (np.repeat(a, f, axis=0) for a in (pose1, rot1, sc1))
    else:
        pose = rest_start_pose(sk, plan, inputs, limited, unit_y) if inputs.basis is not None else inputs.pose
        rot, sc = convert.rotation_parts(pose[:, :, :3, :3])
    work = Work(sk=sk, original=pose, matrices=pose.copy(), rot=rot, rot0=rot.copy(), scale=sc, lengths=lengths)
    if owned:
        work.owned = owned
        work.loose = loose
        if inputs.scale is not None:
            # The stretch a previous solve left in the carriers' Y scale (a 'Rest' start takes it as 1).
            channel_y = np.broadcast_to(inputs.scale[..., 1], (f, len(sk.names))).copy()
            work.held_y = channel_y.copy()
            if inputs.basis is not None:
                channel_y[:, unit_y] = 1.0
            work.channel_y = channel_y
    if inputs.preset:
        apply_preset(work, inputs.preset, inputs.preset_scale)
    groups = usable_groups(snap, limited, inputs, sc, report, channels)
    kept = {id(g) for g in groups}
    dropped = [g for g in limited if id(g) not in kept]
    _solve_levels(snap, work, groups, inputs, Space.of(inputs.world), report, smooth, dropped)
    for i, note in plan.notes.items():
        if i in report.outcomes and report.outcomes[i].valid and not report.outcomes[i].message:
            report.outcomes[i].message = note
    if not work.solved:
        return Solved([], np.zeros((inputs.pose.shape[0], 0, 3, 3)), inputs.pose if final_pose else None)
    if final_pose:
        work.propagate()
    solved = np.fromiter(work.solved, dtype=np.int64, count=len(work.solved))
    order = solved[np.lexsort((solved, sk.depth[solved]))]  # parents before children
    bones = order.tolist()
    # `work.rot` holds every solved rotation (set_bones writes both; propagate never moves solved bones).
    frames = work.rot[:, order]  # (F, n, 3, 3)
    parent_frames = work.parent_rot(bones)
    basis = local_rotations(frames, parent_frames, sk.rest_rel[bones][None])
    out = Solved(bones, basis, work.matrices if final_pose else None)
    if work.scale_out:
        out.scale_bones = list(work.scale_out)
        out.scale_y = np.stack(list(work.scale_out.values()), axis=1)
    return out
