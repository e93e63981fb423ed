"""The read phase: a rig's Blender data -> what the core needs.

One module reads a rig for a solve: its skeleton (`armature.skeleton`), its chains' settings as a plan sees
them (`chain_state`), the plan (`chains.build_plan`, cached for live solving: `prepare`), the
`core.model.Snapshot` (`snapshot`: settings, limits, lengths, rotation modes, Full Body) and the per-frame
`Inputs` (`read_inputs`: pose, world matrices of the armature, targets and poles, scale channels), and the
stretch a solve of this session left in the bones (`stretch_release`, `stuck_stretch`). `armature`'s bulk
reads are its library. What is solved and the write back to Blender are `rig.solve`'s: nothing here writes a
pose. `prepare` also does what a new plan asks of the rig, as it always has: bones renamed since the last
check are followed (`renames`) and the hands' follow constraints kept in step (`ikfk_follow.guard`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import checks
from ..core.model import (
    AXIS_ANGLE,
    EULER,
    QUATERNION,
    BoneLimits,
    ChainOutcome,
    Inputs,
    Plan,
    RigReport,
    Settings,
    Skeleton,
    Snapshot,
)
from . import armature, cache, ikfk_follow, renames
from . import body as rig_body
from .chains import build_plan, rig_problem, system_override
from .fingerprint import Objects, Seen, channel_bytes
from .props import ReachRigSettings, bone_limits, rig_settings

F64 = NDArray[np.float64]


class ChainRow(NamedTuple):
    """One chain's settings as a plan sees them (compared as a whole: any change rebuilds the plan)."""

    enabled: bool
    solver: str
    tip_bone: str
    chain_length: int
    # The object's identity and bone parenting, or None. Not `users_scene` (it scans every scene): unlinking
    # an object is a structure update, which drops every cached plan and fingerprint (cache.prune).
    target: object
    pole: object
    weight: float
    use_target_rotation: bool
    name: str
    target_bone: str  # "" unless the target is an armature
    pole_bone: str
    # Whether those bones exist: renaming or deleting a bone of another armature must rebuild the plan
    # (this rig's own bones are part of the skeleton's key).
    bones_found: bool
    soft: float
    stretch: float


# A chain's target or pole as read: the object, and its bone ("" = the object itself).
Entry = tuple[bpy.types.Object, str]


ChainState = tuple[ChainRow, ...]


def chain_state(obj: bpy.types.Object, settings: ReachRigSettings | None = None) -> tuple[ChainState, list[Entry]]:
    """Every chain setting a plan depends on (one tuple per chain), and the targets and poles themselves
    (`settings`: the rig's, `props.rig_settings(obj)`, when already read).

    The live handler reads this once per update, for its change detection and for the plan cache.
    """
    rows = []
    objects: list[Entry] = []
    make = ChainRow._make  # a NamedTuple's own constructor costs several times more (every chain, every update)
    for ch in (rig_settings(obj) if settings is None else settings).chains:
        target, pole = ch.target, ch.pole
        target_bone = ch.target_bone if target is not None and target.type == "ARMATURE" else ""
        pole_bone = ch.pole_bone if pole is not None and pole.type == "ARMATURE" else ""
        if target is not None:
            objects.append((target, target_bone))
        if pole is not None:
            objects.append((pole, pole_bone))
        rows.append(
            make(
                (
                    ch.enabled,
                    ch.solver,
                    ch.tip_bone,
                    ch.chain_length,
                    _object_key(target),
                    _object_key(pole),
                    ch.weight,
                    ch.use_target_rotation,
                    ch.name,
                    target_bone,
                    pole_bone,
                    (not target_bone or target_bone in target.data.bones)
                    and (not pole_bone or pole_bone in pole.data.bones),
                    ch.soft,
                    ch.stretch,
                )
            )
        )
    return tuple(rows), objects


def _object_key(ob: bpy.types.Object | None) -> object:
    """A target's or pole's identity and what it hangs from (a plan refuses targets that hang from the chain)."""
    if ob is None:
        return None
    parent = ob.parent
    if parent is None:
        # Not `parent_type`: with no parent left (its bone-parent deleted) Blender prints an enum warning on
        # every read, and it means nothing then.
        return ob.session_uid
    return (ob.session_uid, parent.session_uid, ob.parent_type, ob.parent_bone)


def _plan_key(obj: bpy.types.Object, sk: Skeleton, state: ChainState) -> tuple[object, ...]:
    """What a plan depends on besides per-frame numbers: chain settings, the objects they point at, bones
    (and, for chains that stretch, whether their bones' Y scale is locked)."""
    locks = armature.scale_locks(obj) if any(row.stretch > 1.0 for row in state) else b""
    # A driver added or removed (a chain refuses bones whose rotation a driver sets: `chains.driven_rotations`)
    # changes the count: the chains are checked again.
    ad = obj.animation_data
    drivers = len(ad.drivers) if ad is not None else 0
    return (sk.key, cache.versions.get(obj.session_uid, 0), obj.data.as_pointer(), state, locks, drivers)


@dataclass
class LiveReads:
    """What the live handler already read in this update, so the solve does not read it again."""

    settings: ReachRigSettings  # `props.rig_settings(obj)`, fetched once for the whole update
    sk: Skeleton
    state: ChainState
    channels: armature.Channels  # every channel; the write-back updates the rotation arrays in place
    world: armature.WorldMatrices  # every object's world matrix
    system_override: bool  # whether the armature is a system override (`chains.system_override`)
    pose: F64 | None = None  # (B,4,4) pose matrices, when the handler needed them
    world_key: bytes = b""  # the armature's world matrix as read (float32 bytes)
    influences: tuple[float, ...] = ()  # every chain's Influence, as read for the change test


# The live handler's part of its read (`rig.live._read`): given the chain state, the targets and poles as read
# and the world matrices before any is read, it notes what the targets hang from and moves those that hang
# from bones solved earlier in the same update (`live._carry`).
Follow = Callable[[ChainState, list[Entry], armature.WorldMatrices], None]


def read_live(obj: bpy.types.Object, follow: Follow | None = None) -> tuple[Seen, LiveReads, Objects]:
    """Everything a live solve of `obj` reads, once: what the change test compares (the fingerprint) and what
    the solve reuses (`LiveReads`), and the rows of the target and pole matrices of each chain.

    `follow` runs once the chains' targets and poles are read and before any world matrix is.
    """
    s = rig_settings(obj)
    sk = armature.skeleton(obj)
    state, objects = chain_state(obj, s)
    world = armature.WorldMatrices()
    if follow is not None:
        follow(state, objects, world)
    controls = tuple(bone for ob, bone in objects if bone and ob == obj)
    pose = None
    roots = _outside_parents(obj.session_uid, sk, state, controls)
    if roots:
        # Constraints above the chain (Child Of, Copy Transforms...) move a chain's parent without
        # changing any channel: include the evaluated matrices of those outside parents.
        pose = armature.pose_matrices(obj)
    # The armature's own matrix comes from the same one-call read as the targets and poles (bone targets:
    # their armature's matrix times the bone's pose, so a moved control bone changes its row).
    mats = armature.target_matrices(obj, [(obj, ""), *objects], world, sk, pose)
    roots_bytes = pose[roots].tobytes() if roots and pose is not None else b""
    channels = armature.read_channels(obj, armature.ALL_CHANNELS)
    # Pole angles and influences are per-frame numbers (keyable): a change solves the rig, without a new plan.
    angles = tuple((ch.pole_angle, ch.influence) for ch in s.chains)
    # A system override is refused (chains.rig_problem); made editable in place, it solves with nothing else new.
    override = system_override(obj)
    editable = not override
    version = cache.settings_version(obj)
    settings = (s.tolerance, s.max_iterations, s.roll_mode, s.start_from, version, state, angles, editable)
    seen = Seen(channel_bytes(channels), settings, sk.key, mats[0].tobytes(), mats, pose, channels, roots=roots_bytes)
    # Rows of `mats` of each chain's target and pole (chain_state lists them chain by chain).
    rows: dict[int, list[int]] = {}
    k = 1
    for i, row in enumerate(state):
        n = (row.target is not None) + (row.pole is not None)
        rows[i] = list(range(k, k + n))
        k += n
    reads = LiveReads(
        settings=s,
        sk=sk,
        state=state,
        channels=channels,
        world=world,
        system_override=override,
        pose=pose,
        world_key=seen.world,
        influences=tuple(w for _angle, w in angles),
    )
    seen.objects = Objects(mats, rows)
    return seen, reads, seen.objects


def _outside_parents(uid: int, sk: Skeleton, state: ChainState, controls: tuple[str, ...] = ()) -> list[int]:
    """Bones whose evaluated pose a check reads: the parent of each chain's root bone (chains as set, valid
    or not) and the rig's own control bones (`controls`: target and pole bones of this armature), cached
    while tips, lengths and controls hold."""
    key = (tuple((row.tip_bone, row.chain_length) for row in state), controls)
    hit = cache.roots.get(uid)
    if hit is not None and hit[0] is sk and hit[1] == key:
        return hit[2]  # type: ignore[no-any-return]
    roots: set[int] = set()
    for tip, length in key[0]:
        b = sk.index.get(tip, -1)
        if int(length) <= 0:
            continue  # up to the root bone: nothing above the chain
        for _ in range(max(int(length) - 1, 0)):
            if b < 0:
                break
            b = int(sk.parent[b])
        if b >= 0 and sk.parent[b] >= 0:
            roots.add(int(sk.parent[b]))
    # A control bone moves with its parents, its constraints and drivers, without any channel of its own
    # changing: its evaluated pose is part of what a check compares.
    roots.update(sk.index[c] for c in controls if c in sk.index)
    out = sorted(roots)
    cache.roots[uid] = (sk, key, out)
    return out


def prepare(
    obj: bpy.types.Object,
    only: set[int] | None = None,
    cached: bool = False,
    reads: LiveReads | None = None,
    settings: ReachRigSettings | None = None,
) -> tuple[RigReport, Skeleton | None, Plan | None]:
    """Validate `obj` and its chains (optionally only the chain indices in `only`).

    With `cached` (live solving) the plan is reused while nothing it depends on changed. `reads`: what the live
    handler read in this update; `settings`: the rig's settings (`props.rig_settings(obj)`), when already read.
    """
    report = RigReport()
    if reads is not None and reads.world_key:
        # Live: the armature-wide checks depend on its transform (linking and overrides are structure updates,
        # which drop this cache) and on whether it is a system override (made editable in place), so they run
        # again only when one of those changes.
        checked = (reads.world_key, reads.system_override)
        hit = cache.rig_checks.get(obj.session_uid)
        if hit is not None and hit[0] == checked:
            problem = hit[1]
        else:
            problem = rig_problem(obj)
            cache.rig_checks[obj.session_uid] = (checked, problem)
    else:
        problem = rig_problem(obj)
        if problem is None:
            renames.follow(obj)  # a bake or an operator: bones renamed since the last check are followed
    chains = (rig_settings(obj) if settings is None else settings).chains if obj.type == "ARMATURE" else []
    if problem is not None:
        if chains and obj.mode != "EDIT":
            # Where the chains' bones are now, also while the whole rig is refused (their rest places do not
            # depend on what is refused): a bone moved at rest meanwhile and then renamed is still followed.
            renames.remember(obj, {i for i, ch in enumerate(chains) if ch.enabled})
        report.rig_error = problem
        for i, ch in enumerate(chains):
            if ch.enabled and (only is None or i in only):
                report.outcomes[i] = ChainOutcome(False, problem)
        return report, None, None
    sk = reads.sk if reads is not None else armature.skeleton(obj)
    plan: Plan | None = None
    if cached and only is None:
        key = _plan_key(obj, sk, reads.state if reads is not None else chain_state(obj, settings)[0])
        hit = cache.plans.get(obj.session_uid)
        if hit is not None and hit[0] == key:
            plan = hit[1]
        else:
            plan = build_plan(obj, sk)
            cache.plans[obj.session_uid] = (key, plan)
            ikfk_follow.guard(obj)  # a control deleted or back: the hands' follow constraints follow suit
    else:
        plan = build_plan(obj, sk, only)
        ikfk_follow.guard(obj)
    for i, msg in plan.errors.items():
        report.outcomes[i] = ChainOutcome(False, msg)
    return report, sk, plan


def read_limits(obj: bpy.types.Object, sk: Skeleton, plan: Plan) -> BoneLimits:
    """The joint limits of the planned bones, read once per plan (a limit change rebuilds the plan)."""
    if plan.bone_limits is not None:
        return plan.bone_limits
    table = BoneLimits.none(len(sk.names))
    pose_bones = obj.pose.bones
    for b in sorted({b for g in plan.groups for b in g.bones}):
        lim = bone_limits(pose_bones[sk.names[b]])
        if lim.use_cone:
            table.use_cone[b] = True
            table.cone[b] = (lim.cone_up, lim.cone_down, lim.cone_left, lim.cone_right)
        if lim.use_twist:
            table.use_twist[b] = True
            table.twist[b] = (lim.twist_min, lim.twist_max)
    plan.bone_limits = table
    return table


_KIND_OF_MODE = {"QUATERNION": QUATERNION, "AXIS_ANGLE": AXIS_ANGLE}
# Rotation-mode enum value -> channel kind, as an array to index with every bone's mode at once (shifted:
# axis-angle's value is -1).
_MODE_SHIFT = -min(armature.MODE_NAMES)
_KIND_OF_VALUE = np.full(max(armature.MODE_NAMES) + _MODE_SHIFT + 1, EULER, dtype=np.int64)
for _value, _mode in armature.MODE_NAMES.items():
    _KIND_OF_VALUE[_value + _MODE_SHIFT] = _KIND_OF_MODE.get(_mode, EULER)


def snapshot(
    obj: bpy.types.Object,
    sk: Skeleton,
    plan: Plan,
    with_channels: bool = False,
    modes: NDArray[np.int32] | None = None,
    channels: armature.Channels | None = None,
    bake: bool = False,
    settings: ReachRigSettings | None = None,
) -> Snapshot:
    """Everything of `obj` the core needs besides the per-frame inputs (`with_channels`: rotation modes too;
    `modes`: every bone's rotation mode value, `settings`: the rig's settings, when already read)."""
    s = rig_settings(obj) if settings is None else settings
    if plan.lengths is None:
        plan.lengths = armature.bone_lengths(obj, sk) if plan.groups else np.zeros(len(sk.names))
    kinds = None
    if with_channels:
        kinds = _KIND_OF_VALUE[(armature.rotation_mode_values(obj) if modes is None else modes) + _MODE_SHIFT]
    return Snapshot(
        sk=sk,
        plan=plan,
        settings=Settings(obj.name, float(s.tolerance), int(s.max_iterations), s.roll_mode, s.start_from),
        limits=read_limits(obj, sk, plan),
        lengths=plan.lengths,
        channel_kind=kinds,
        body=rig_body.settings(obj, sk, plan, channels, modes, bake, s) if s.full_body else None,
    )


def check_inputs(obj: bpy.types.Object, sk: Skeleton, plan: Plan, inputs: Inputs) -> str | None:
    """A message naming the first broken transform of `inputs` (NaN, inf), or None (`core.checks.check_inputs`)."""
    return checks.check_inputs(sk, plan, obj.name, inputs)


def broken_inputs(obj: bpy.types.Object, sk: Skeleton, plan: Plan, inputs: Inputs) -> tuple[str | None, dict[int, str]]:
    """What is broken in `inputs`: for the whole rig, and chain by chain (`core.checks.broken_inputs`)."""
    return checks.broken_inputs(sk, plan, obj.name, inputs)


def target_entries(
    obj: bpy.types.Object, plan: Plan, settings: ReachRigSettings | None = None
) -> list[tuple[bpy.types.Object, str]]:
    """The (object, bone) `read_inputs` reads the world matrices of: the armature, every planned chain's target,
    then the poles of those with one (`settings`: the rig's settings, when already read)."""
    chain_settings = (rig_settings(obj) if settings is None else settings).chains
    chains = [c for g in plan.groups for c in g.chains]
    entries = [(obj, ""), *((chain_settings[c.index].target, c.target_bone) for c in chains)]
    entries += [(chain_settings[c.index].pole, c.pole_bone) for c in chains if c.pole is not None]
    return entries


def read_inputs(
    obj: bpy.types.Object,
    plan: Plan,
    pose_now: F64 | None = None,
    world_now: armature.WorldMatrices | None = None,
    scale_now: NDArray[np.float32] | None = None,
    settings_now: bool = False,
    sk_now: Skeleton | None = None,
    controls_now: dict[int, tuple[bpy.types.Object, bpy.types.Object | None]] | None = None,
    angles_now: dict[int, float] | None = None,
    entries_now: list[tuple[bpy.types.Object, str]] | None = None,
    settings: ReachRigSettings | None = None,
) -> Inputs:
    """The current (evaluated) inputs of every planned chain, as one frame (`pose_now`, `world_now`,
    `scale_now`, `sk_now`: the pose, world matrices, scale channels and skeleton, already read;
    `controls_now`, `angles_now`: each chain's target and pole objects and its pole angle, already known, so
    no chain's settings are read: the live program's, whose chains have no bone targets; `entries_now`: the
    (object, bone) of the armature, then every chain's target, then every pole, as `target_entries` lists
    them, for a bake whose chain settings nothing animates; `settings`: the rig's settings,
    `props.rig_settings(obj)`, already read).
    `settings_now`: read each chain's Soft and Stretch too (a bake stepping frames: they are keyable), else
    the plan's values hold."""
    pose_b = armature.pose_matrices(obj) if pose_now is None else pose_now
    pose = pose_b[None]
    chains = [c for g in plan.groups for c in g.chains]
    with_pole = [c for c in chains if c.pole is not None]
    world_mats = armature.WorldMatrices() if world_now is None else world_now
    s = rig_settings(obj) if settings is None else settings
    chain_settings = s.chains
    if entries_now is not None:
        entries = entries_now
    elif controls_now is None:
        entries = target_entries(obj, plan, s)
    else:
        entries = [(obj, ""), *((controls_now[c.index][0], "") for c in chains)]
        pole_objects = [controls_now[c.index][1] for c in with_pole]
        entries += [(ob, "") for ob in pole_objects if ob is not None]
        assert len(entries) == 1 + len(chains) + len(with_pole), "a chain planned with a pole has one"
    sk = sk_now
    if sk is None and any(bone for _ob, bone in entries):
        sk = armature.skeleton(obj)
    mats = armature.target_matrices(obj, entries, world_mats, sk, pose_b)
    objects = mats[None, 1:]
    targets = {c.index: objects[:, k] for k, c in enumerate(chains)}
    poles = {c.index: objects[:, len(chains) + k] for k, c in enumerate(with_pole)}
    inputs = Inputs(pose, mats[None, 0], targets, poles, objects=objects)
    for c in with_pole:
        angle = float(chain_settings[c.index].pole_angle if angles_now is None else angles_now[c.index])
        if angle != 0.0:
            inputs.pole_angles[c.index] = np.array([angle])
    if settings_now:
        for c in chains:
            ch = chain_settings[c.index]
            inputs.soft[c.index] = np.array([ch.soft])
            inputs.stretch[c.index] = np.array([ch.stretch])
    if s.start_from == "REST":
        basis, loc, scale = armature.basis_parts(obj)
        inputs.basis, inputs.location, inputs.scale = basis[None], loc[None], scale[None]
    else:
        # A stretching chain divides the stretch its bones hold (their Y scale channel) out of their lengths.
        if scale_now is None:
            scale_now = armature.read_channels(obj, (("scale", 3),))["scale"]
        inputs.scale = scale_now.astype(np.float64)[None]
    return inputs


def stretch_release(obj: bpy.types.Object, sk: Skeleton, plan: Plan, scale: F64) -> tuple[set[int], set[int]]:
    """Chains whose Stretch is back to 1 while their bones still hold the stretch this session wrote, and
    those of their bones that hold it without being their chain's carriers now (the chain was lengthened or
    shortened in the same edit: the stretch sits on a bone that no longer carries it).

    Their solve divides that stretch out and puts the Y scale back to 1. A Y scale set by hand (anything
    other than the exact float32 value written) is not ours and is left alone. `scale`: (B, 3) channels.
    """
    written = cache.stretched.get(obj.session_uid)
    if not written:
        return set(), set()
    out: set[int] = set()
    loose: set[int] = set()
    for g in plan.groups:
        for c in g.chains:
            if c.carriers is None or c.stretch > 1.0:
                continue
            solved = c.bones[:-1] if c.use_target_rotation else c.bones
            for b in solved[len(solved) - len(c.carriers) :]:  # the rows `carriers` name (a tree's: its branch)
                value = written.get(sk.names[b])
                if value is not None and np.float32(scale[b, 1]) == np.float32(value):
                    out.add(c.index)
                    if b not in c.carriers:
                        loose.add(b)
    return out, loose


def stuck_stretch(obj: bpy.types.Object, sk: Skeleton, plan: Plan, scale: NDArray[np.float32]) -> list[int]:
    """Bones of chains that cannot stretch (no carriers) and do not stretch now, still holding the exact Y
    scale a solve of this session wrote (a stretch left behind: `stretch_release` covers chains that can)."""
    written = cache.stretched.get(obj.session_uid)
    if not written:
        return []
    out = []
    for g in plan.groups:
        for c in g.chains:
            if c.carriers is not None or c.stretch > 1.0:
                continue
            for b in c.bones:
                value = written.get(sk.names[b])
                if value is not None and np.float32(scale[b, 1]) == np.float32(value) and value != 1.0:
                    out.append(b)
    return sorted(set(out), key=lambda b: (int(sk.depth[b]), b))
