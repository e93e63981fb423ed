"""The solve and the write of a rig: what `rig.snapshot` read, solved in the core, written back to Blender.

The data flows one way: Blender data -> `core.model.Snapshot` + `Inputs` (`rig.snapshot`, the read phase) ->
`core.solve` (no bpy) -> solved rotations -> Blender's channels (`armature.write_channels`), the FK store,
the stretch this session wrote (`remember_stretch`) and each chain's status (`store_status`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import checks
from ..core import solve as core
from ..core.model import (
    ChainOutcome,
    Group,
    Inputs,
    Plan,
    RigReport,
    Skeleton,
    Solved,
)
from ..core.solve import stack_inputs
from . import armature, cache, fk
from . import body as rig_body
from .props import ReachRigSettings, rig_settings
from .snapshot import LiveReads, prepare, read_inputs, snapshot, stretch_release, stuck_stretch

__all__ = ["ChainOutcome", "Inputs", "RigReport", "Solved", "stack_inputs"]


def solve_inputs(
    obj: bpy.types.Object,
    sk: Skeleton,
    plan: Plan,
    inputs: Inputs,
    report: RigReport,
    smooth: bool = False,
    channels: armature.Channels | None = None,
    final_pose: bool = False,
) -> Solved:
    """`core.solve` on a snapshot of `obj` (see there)."""
    snap = snapshot(obj, sk, plan, with_channels=channels is not None, bake=inputs.pose.shape[0] > 1)
    return core.solve(snap, inputs, report, smooth, channels, final_pose)


def solve_rig(
    obj: bpy.types.Object,
    *,
    write: bool = True,
    only: set[int] | None = None,
    cached: bool = False,
    reads: LiveReads | None = None,
    carry: bool = False,
    select: Callable[[Plan], list[Group]] | None = None,
) -> RigReport:
    """Solve the enabled chains of armature `obj` on its current pose; write rotations if `write`.

    Invalid chains are reported in the outcome (and never written); valid ones are still solved, so one
    broken chain never stops the others. `reads` (live solving) is what the caller read this update; its
    channel arrays then hold exactly what was written. `select` picks the planned groups to solve (live
    solving: those whose inputs changed, and the groups below them); the others keep their pose.
    """
    settings = rig_settings(obj) if reads is None else reads.settings  # read once, for every step below
    report, sk, plan = prepare(obj, only, cached, reads, settings)
    if sk is None or plan is None:
        return report
    channels = reads.channels if reads is not None else armature.read_channels(obj, WRITTEN_CHANNELS)
    store = fk.Store.read(obj)
    restored: set[str] = set()
    given: list[int] = []  # bones given their FK pose back (no enabled chain drives them any more)
    if write and store.names and only is None:
        held_y = channels["scale"][:, 1].copy()
        restored = _restore_free(obj, sk, plan, store, channels, given)
    chosen = plan.groups if select is None else select(plan)
    if not chosen:
        if restored:
            armature.write_channels(obj, channels, restored)
            store.write(obj)
        return report
    modes = armature.rotation_mode_values(obj)  # read once: the snapshot, the FK pose and the write use it
    # Built on the whole plan, so its cached lengths and limits are the plan's own.
    snap = snapshot(obj, sk, plan, with_channels=True, modes=modes, channels=channels, settings=settings)
    if len(chosen) != len(plan.groups):
        # A view of the plan: the same caches (limits, lengths), fewer groups.
        plan = replace(plan, groups=chosen)
        snap = replace(snap, plan=plan)
    if reads is not None:
        inputs = read_inputs(obj, plan, reads.pose, reads.world, reads.channels["scale"], sk_now=sk, settings=settings)
    else:
        inputs = read_inputs(obj, plan, settings=settings)
    whole, broken = checks.broken_inputs(sk, plan, obj.name, inputs)
    if whole is not None:
        report.rig_error = whole
        for g in plan.groups:
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, whole)
        return report
    if broken:
        # Only the chains at fault are refused (a tree as a whole: it is solved as one); the others are solved,
        # those below a refused chain on the pose Blender shows for it (nothing of the refused chain is written).
        kept = []
        for g in plan.groups:
            fault = next((broken[c.index] for c in g.chains if c.index in broken), None)
            if fault is None:
                kept.append(g)
                continue
            for c in g.chains:
                report.outcomes[c.index] = ChainOutcome(False, broken.get(c.index, fault))
        if not kept:
            return report
        plan = replace(plan, groups=kept)
        snap = replace(snap, plan=plan)
    assert inputs.scale is not None  # read_inputs reads the scale channels
    inputs.release, inputs.release_bones = stretch_release(obj, sk, plan, inputs.scale[0])
    weights = fk.influences(obj, plan, reads.influences if reads is not None else None)
    frame = fk.fill(plan, sk.names, modes, channels, store, weights, inputs)
    if given:
        # The chains still driven are solved on the pose the given-back bones will show.
        raw = fk.raw_rotations(channels, given, modes[given].tolist())
        basis = fk.basis_rotations(raw, modes[given].tolist())
        inputs.preset = {b: basis[k][None] for k, b in enumerate(given)}
        for b in given:
            if channels["scale"][b, 1] != held_y[b] and held_y[b] != 0.0:
                inputs.preset_scale[b] = np.array([float(channels["scale"][b, 1]) / float(held_y[b])])
    stuck = stuck_stretch(obj, sk, plan, channels["scale"]) if write else []
    if stuck:
        # A stretch of ours on a chain that cannot stretch now (lengthened over a bone with Inherit Scale
        # 'Full' as its Stretch went back to 1): its Y scale goes back to 1 in this solve, and the bones below
        # it follow (as for a bone given back its FK pose).
        raw_s = fk.raw_rotations(channels, stuck, modes[stuck].tolist())
        basis_s = fk.basis_rotations(raw_s, modes[stuck].tolist())
        for k, b in enumerate(stuck):
            inputs.preset.setdefault(b, basis_s[k][None])
            inputs.preset_scale[b] = np.array([1.0 / float(channels["scale"][b, 1])])
            channels["scale"][b, 1] = 1.0
        remember_stretch(obj, sk, stuck, np.ones(len(stuck), dtype=np.float32))
    if snap.body is not None and snap.settings.start_from == "CURRENT":  # Full Body: the spine from its FK pose
        inputs.preset = {**inputs.preset, **rig_body.fk_start(frame, rig_body.carrier_bones(sk, plan))}
    solved = core.solve(snap, inputs, report, channels=channels, final_pose=carry)
    if write:
        changed = set(restored) | ({"scale"} if stuck else set())
        if solved.bones:
            changed |= armature.rotations_to_channels(obj, solved.bones, solved.basis[0], channels, modes)
        if solved.location_bones or snap.body is None:  # Full Body: the body root's location (rig/body.py)
            changed |= (
                rig_body.write(obj, sk, solved, channels, modes) if snap.body else rig_body.release(obj, channels)
            )
        if given:
            # Their exact FK values, not the solve's float64 round trip of them.
            fk.put_raw_rotations(channels, given, modes[given].tolist(), raw)
        if solved.scale_bones:
            changed |= armature.scale_to_channels(solved.scale_bones, solved.scale_y[0], channels)
            remember_stretch(obj, sk, solved.scale_bones, channels["scale"][solved.scale_bones, 1])
        # Only chains that were solved: a chain refused here keeps its pose, and its bones' FK as it was.
        valid = {b for g in plan.groups for c in g.chains if report.outcomes.get(c.index, _NONE).valid for b in c.bones}
        changed |= fk.written(frame, store, channels, valid)
        armature.write_channels(obj, channels, changed)
        store.write(obj)
        if carry and changed and solved.pose is not None:
            report.moved = (inputs.pose[0], solved.pose[0])
    return report


_NONE = ChainOutcome(False, "")


def _restore_free(
    obj: bpy.types.Object, sk: Skeleton, plan: Plan, store: fk.Store, channels: armature.Channels, given: list[int]
) -> set[str]:
    """Give the stored bones that no enabled chain drives any more their FK values back (`fk.restore`); the
    bones whose channels changed are added to `given`."""
    if plan.bone_names is None:
        plan.bone_names = frozenset(sk.names[b] for g in plan.groups for b in g.bones)
    planned = plan.bone_names
    if len(store.names) <= len(planned) and planned.issuperset(store.names):
        return set()  # the common case: every stored bone is still driven
    keep = fk.enabled_chain_bones(obj)
    if keep is None:
        return set()
    return fk.restore(store, sk.index, armature.rotation_mode_values(obj), channels, keep, given)


WRITTEN_CHANNELS = armature.WRITTEN_CHANNELS


def remember_stretch(obj: bpy.types.Object, sk: Skeleton, bones: list[int], values: NDArray[np.float32]) -> None:
    """Note the Y scales written to `bones` (a bone back at 1 holds no stretch of ours)."""
    table = cache.stretched.setdefault(obj.session_uid, {})
    for b, v in zip(bones, values.tolist(), strict=True):
        if v == 1.0:
            table.pop(sk.names[b], None)
        else:
            table[sk.names[b]] = v
    if not table:
        del cache.stretched[obj.session_uid]


def store_status(
    obj: bpy.types.Object,
    report: RigReport,
    shown: dict[int, ChainOutcome] | None = None,
    only: Iterable[int] | None = None,
    settings: ReachRigSettings | None = None,
) -> None:
    """Copy the outcome into each chain's read-only status, touching only what changed (no redraw storms).

    `shown`: the outcomes stored last time (live solving); a chain whose outcome is the same object (not
    solved again) is not read back at all. `only`: the indices of the only chains whose outcome may have
    changed (the live program's), so the others are not even visited. `settings`: the rig's settings
    (`props.rig_settings(obj)`), when already read.
    """
    chains = (rig_settings(obj) if settings is None else settings).chains
    count = len(chains)
    for i in range(count) if only is None else (i for i in only if i < count):
        ch = chains[i]
        out = report.outcomes.get(i)
        if shown is not None and out is not None and shown.get(i) is out:
            continue
        if out is None:
            valid, message, iters, residual = True, "", 0, 0.0
        else:
            valid, message, iters, residual = out.valid, out.message, round(out.iterations), out.residual
        if ch.is_valid != valid:
            ch.is_valid = valid
        if ch.message != message:
            ch.message = message
        if ch.iterations != iters:
            ch.iterations = iters
        if not math.isclose(ch.residual, residual, rel_tol=1e-3, abs_tol=1e-7):
            ch.residual = residual
