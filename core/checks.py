"""What a solve checks before it runs: broken inputs, joint limits the solver would refuse, bones scaled to
zero, Soft and Stretch a chain cannot take. Each refusal is a message on the chain, in the panel's terms."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..solvers.limits import TWIST_BOUND_SLACK, JointLimits
from .model import (
    CHANNEL_NAMES,
    F64,
    BoneLimits,
    ChainOutcome,
    ChainPlan,
    Group,
    Inputs,
    Plan,
    RigReport,
    Skeleton,
    Snapshot,
    usable,
)

Channels = dict[str, NDArray[np.float32]]


def _broken_rows(mats: F64) -> NDArray[np.bool_]:
    """(..., 4, 4) -> (...): rows that are not `usable` (NaN, inf, or Blender's clamped FLT_MAX)."""
    flat = mats.reshape(*mats.shape[:-2], -1)
    # |x| < 1e30 is False for NaN too, so one comparison covers all three.
    fine = (np.abs(flat) < 1e30).all(axis=-1)
    return np.asarray(~fine, dtype=np.bool_)  # an array also for one matrix (numpy 2 stubs: bool | array)


def check_inputs(sk: Skeleton, plan: Plan, rig: str, inputs: Inputs) -> str | None:
    """A message naming the first broken transform (NaN, inf), or None. Frame 0 is the first of the stack."""
    whole, chains = broken_inputs(sk, plan, rig, inputs)
    return whole if whole is not None else next(iter(chains.values()), None)


def broken_inputs(sk: Skeleton, plan: Plan, rig: str, inputs: Inputs) -> tuple[str | None, dict[int, str]]:
    """What is broken (NaN, inf) in `inputs`: a message for the whole rig (a bone's pose, the armature's
    transform) or None, and a message for each chain whose own pole angle, target or pole is broken."""
    pose, world = inputs.pose, inputs.world
    # Whole-array tests first (one pass each); the per-matrix ones only run to name what is broken.
    if not usable(pose):
        f, b = (int(v) for v in np.argwhere(_broken_rows(pose))[0])
        name = sk.names[b]
        return f"{_at(f, inputs)}bone '{name}' has a NaN or infinite pose: reset its transform (Alt G/R/S)", {}
    if not usable(world):
        return f"{_at(int(np.flatnonzero(_broken_rows(world))[0]), inputs)}'{rig}' has a NaN or infinite transform", {}
    chains: dict[int, str] = {}
    for i, angles in inputs.pole_angles.items():
        bad_angle = ~np.isfinite(angles)
        if bad_angle.any():
            f = int(np.flatnonzero(bad_angle)[0])
            chains[i] = (
                f"{_at(f, inputs)}the Pole Angle of chain '{_chain_name(plan, i)}' is not a number: type an angle"
            )
    stacked = inputs.objects
    if stacked is None and (inputs.targets or inputs.poles):
        stacked = np.concatenate([*inputs.targets.values(), *inputs.poles.values()])
    if stacked is not None and usable(stacked):
        return None, chains
    by_index = {c.index: c for g in plan.groups for c in g.chains}
    for role, mats in (("target", inputs.targets), ("pole", inputs.poles)):
        for i, m in mats.items():
            bad = _broken_rows(m)
            if bad.any() and i not in chains:
                f = int(np.flatnonzero(bad)[0])
                chains[i] = f"{_at(f, inputs)}the {role} {by_index[i].label(role)} has a NaN or infinite transform"
    return None, chains


def _chain_name(plan: Plan, index: int) -> str:
    return next((c.name for g in plan.groups for c in g.chains if c.index == index), f"#{index}")


def _at(f: int, inputs: Inputs) -> str:
    return "" if inputs.world.shape[0] == 1 else f"frame #{f}: "


def twist_bound(value: float) -> float:
    """A twist property as the solver takes it: within float32 rounding of +-pi snaps to +-pi.

    The properties are float32 with the UI range [-180, 180] degrees: 180 degrees is stored as 3.1415927,
    8.7e-8 above pi. The slack is the solver's own (`JointLimits` snaps the same bounds).
    """
    v = float(value)
    if math.pi < abs(v) <= math.pi + TWIST_BOUND_SLACK:
        return math.copysign(math.pi, v)
    return v


def _limits_for(limits: BoneLimits, bone_rows: list[list[int]]) -> JointLimits | None:
    """Per-bone cone/twist limits for (K, N) bones, or None when no bone in the batch is limited."""
    idx = np.asarray(bone_rows, dtype=np.int64)  # (K, N)
    use_cone, use_twist = limits.use_cone[idx], limits.use_twist[idx]
    if not (use_cone.any() or use_twist.any()):
        return None
    cone = np.where(use_cone[..., None], limits.cone[idx], 0.0)
    # Bounds within float32 rounding of +-pi are snapped by JointLimits itself (TWIST_BOUND_SLACK).
    twist = np.where(use_twist[..., None], np.sort(limits.twist[idx], axis=-1), 0.0)
    return JointLimits(cone=cone, use_cone=use_cone, twist=twist, use_twist=use_twist)


def cached_limits(snap: Snapshot, rows: list[list[int]]) -> JointLimits | None:
    """Limits for these bone rows, read once per plan (a limit change bumps the settings version)."""
    key = tuple(tuple(r) for r in rows)
    if key not in snap.plan.limits:
        snap.plan.limits[key] = _limits_for(snap.limits, rows)
    return snap.plan.limits[key]  # type: ignore[return-value]


# UI names of the cone properties, in the solver's column order (up, down, left, right).
_CONE_SIDES = ("Up", "Down", "Left", "Right")


# `plan.limits` keys of the per-group limit checks start with this row (no bone row holds -1).
_CHECK_ROW = (-1,)


def _angle_text(value: float) -> str:
    """An angle in radians as the UI shows it (degrees), or what is wrong with it."""
    if math.isnan(value):
        return "not a number (NaN)"
    if math.isinf(value):
        return "infinite"
    return f"{math.degrees(value):.4g}°"


def _limit_problem(sk: Skeleton, limits: BoneLimits, bones: Sequence[int]) -> str | None:
    """Why the solver would refuse the joint limits of these bones, in the panel's terms; None if it takes them.

    The same ranges `JointLimits` checks, read as `_limits_for` reads them. The properties' own ranges keep
    typed values inside, but a script (or an expression typed into the field) can still store NaN.
    """
    for b in bones:
        name = sk.names[b]
        if limits.use_cone[b]:
            for column, side in enumerate(_CONE_SIDES):
                value = float(limits.cone[b, column])
                if not 0.0 <= value < math.pi:  # False for NaN too
                    return (
                        f"bone '{name}': its Cone {side} limit is {_angle_text(value)}; set it from 0° to 179.9° "
                        "(Reach IK tab > Joint Limits) or turn the cone off"
                    )
        if limits.use_twist[b]:
            for side, raw in (("Min", limits.twist[b, 0]), ("Max", limits.twist[b, 1])):
                value = twist_bound(raw)
                if not -math.pi <= value <= math.pi:
                    return (
                        f"bone '{name}': its Twist {side} limit is {_angle_text(value)}; set it from -180° to 180° "
                        "(Reach IK tab > Joint Limits) or turn the twist off"
                    )
    return None


def _limit_bones(group: Group) -> list[int]:
    """The bones of a group whose limits the solver applies (a tip that takes the target's rotation has none)."""
    if group.is_tree:
        return group.bones
    c = group.chains[0]
    return c.bones[:-1] if c.use_target_rotation else c.bones


def limit_checked_groups(snap: Snapshot, report: RigReport) -> list[Group]:
    """The groups whose joint limits the solver takes; the chains of the others are reported invalid.

    Checked per group before chains are batched, so a bad limit on one chain's bone invalidates that chain
    (or the tree it belongs to: a tree is solved as one) and never the other chains of its batch. The
    answer is kept with the plan, like the limits themselves (a limit change rebuilds the plan).
    """
    plan = snap.plan
    ok = []
    for g in plan.groups:
        bones = _limit_bones(g)
        key = (_CHECK_ROW, tuple(bones))
        if key not in plan.limits:
            plan.limits[key] = _limit_problem(snap.sk, snap.limits, bones)
        problem = plan.limits[key]
        if problem is None:
            ok.append(g)
            continue
        for c in g.chains:
            report.outcomes[c.index] = ChainOutcome(False, str(problem))
    return ok


def usable_groups(
    snap: Snapshot,
    groups: list[Group],
    inputs: Inputs,
    scale: F64,
    report: RigReport,
    channels: Channels | None,
) -> list[Group]:
    """Groups that can be solved on these inputs; the chains of the others are reported invalid.

    Checked per chain, on numbers that change while animating (so not in the cached plan): bones scaled to
    zero, a rotation channel Blender clamped to FLT_MAX (an infinite value typed in: the pose stays finite,
    but no rotation we write could be compared with or continue from it), and a target scaled to zero on a
    chain that takes the target's rotation (it has no orientation to take).
    """
    smallest = scale.min(axis=(0, 2))  # (B,) each bone's smallest axis scale over every frame
    sk = snap.sk
    broken_channel: dict[int, str] = {}
    if channels is not None and snap.channel_kind is not None:
        # Any channel of any bone out of range is rare: one whole-array test each, then name the bones.
        for kind, attr in enumerate(CHANNEL_NAMES):
            if (np.abs(channels[attr]) < 1e30).all():  # False for NaN too
                continue
            bones = np.unique(np.fromiter((b for g in groups for b in g.bones), dtype=np.int64))
            rows = bones[snap.channel_kind[bones] == kind]
            fine = (np.abs(channels[attr][rows]) < 1e30).all(axis=1)
            broken_channel.update((int(b), attr) for b in rows[~fine].tolist())
    flat_bones = set(np.flatnonzero(smallest < 1e-6).tolist())  # usually empty: one test for every group
    ok = []
    for g in groups:
        msg = ""
        flat = [b for b in g.bones if b in flat_bones] if flat_bones else []
        bad = [b for b in g.bones if b in broken_channel] if broken_channel else []
        if flat:
            name = sk.names[flat[0]]
            msg = f"bone '{name}' is scaled to zero in the pose: reset its scale (Alt S) so the chain has length"
        elif bad:
            name = sk.names[bad[0]]
            msg = (
                f"bone '{name}' has an infinite value in its {broken_channel[bad[0]].replace('_', ' ')} "
                "channel: reset its rotation (Alt R) or type a finite value"
            )
        for c in g.chains:
            if msg or not c.use_target_rotation:
                continue
            axes = np.linalg.norm(inputs.targets[c.index][:, :3, :3], axis=1)  # (F, 3) column lengths
            if (axes < 1e-6).any():
                msg = (
                    f"the target {c.label('target')} is scaled to zero, so it has no rotation for Use Target "
                    "Rotation: give it a scale or turn Use Target Rotation off"
                )
        if msg:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        else:
            ok.append(g)
    return ok


def _most(values: dict[int, F64], c: ChainPlan, planned: float) -> float:
    """A chain's largest Soft or Stretch over the frames: as read per frame when it was, else as planned."""
    read = values.get(c.index)
    return planned if read is None else float(np.max(read))


def soft_checked_groups(groups: list[Group], inputs: Inputs, report: RigReport) -> list[Group]:
    """The groups soft and stretch can be solved for; the chains of the others are reported invalid.

    In trees (chains that share bones) a chain stretches its branch's bones only (`trees`), which its
    carriers then name. A chain whose bones cannot stretch (`ChainPlan.stretch_problem`)
    is refused in the frames it would. Checked on the per-frame values, so an animated Soft or Stretch is
    caught in a bake as well as live (where the plan checks the current values first).
    """
    ok = []
    for g in groups:
        msg = ""
        if g.is_tree:
            for c in g.chains:
                if c.carriers is None and _most(inputs.stretch, c, c.stretch) > 1.0:
                    msg = (
                        f"chain '{c.name}' stretches, and in a tree (chains that share bones, solved as one) a chain "
                        f"stretches the bones of its branch only: {c.stretch_problem or 'set Stretch to 1'}"
                    )
                    break
        else:
            c = g.chains[0]
            if c.carriers is None and _most(inputs.stretch, c, c.stretch) > 1.0:
                msg = c.stretch_problem or "this chain cannot stretch: set Stretch to 1"
        if msg:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, msg)
        else:
            ok.append(g)
    return ok


def owned_stretch(groups: list[Group], inputs: Inputs) -> dict[int, list[int]]:
    """Chain index -> carriers, for the chains that own their bones' Y scale in this solve: those whose
    Stretch is above 1 in some frame, and those with a stretch of ours to undo (`Inputs.release`)."""
    owned = {}
    for c in (c for g in groups for c in g.chains):
        if c.carriers is not None and (_most(inputs.stretch, c, c.stretch) > 1.0 or c.index in inputs.release):
            owned[c.index] = c.carriers
    return owned
