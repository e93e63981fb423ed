"""Live solving: persistent depsgraph/frame handlers that re-solve the chains whose inputs changed.

`depsgraph_update_post` catches interactive edits (a moved Empty, a changed setting) and
`frame_change_post` catches playback and scrubbing (BLENDER_NOTES: `frame_set` fires only the latter).
Three filters, cheapest first:
1. a rig none of whose objects (the armature, its data, its targets and poles) Blender lists as updated is
   skipped after one set test (structure updates and frame changes check every rig);
2. a rig whose inputs (transform, channels, targets, poles, the evaluated pose above its chains, settings,
   bone structure) are byte-identical to those after its last solve is not solved;
3. otherwise only the chain groups whose own inputs changed are solved, with the groups below them
   (`_select`), and chains not solved keep their status.
Rigs whose targets hang from another rig's bones are solved after it, on targets carried with its solved
pose. Writing the pose from the handler never re-enters it (a busy flag), and we never ask Blender to
re-evaluate from inside a handler (that crashed bpy 4.5 in our experiments). Every cache is in `cache.py`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import bpy
import numpy as np
from bpy.app.handlers import persistent
from mathutils import Matrix, Vector
from numpy.typing import NDArray

from ..core import body_live
from ..core import solve as core
from ..core.checks import check_inputs
from ..core.live import Program
from ..core.messages import mark_body_blocked
from ..core.model import ChainOutcome, Group, Plan, RigReport, Skeleton, Snapshot
from ..solvers import search
from ..solvers.scalar import SCALAR_MAX_CHAINS
from . import armature, cache, fk, follow, renames
from . import body as rig_body
from .chains import rig_problem, system_override
from .props import rig_settings
from .solve import ChainState, Entry, LiveReads, chain_state, read_inputs, snapshot, solve_rig, store_status

F64 = NDArray[np.float64]
_busy = False
# Whether updates that move only targets and poles take the compiled program (`_lean`). Tests and
# bench/live.py turn it off to compare with the full path; nothing else does.
use_program = True
# Seconds of the global stage per rig and update of a drag (None: unbounded). Bounded, a search under limits
# that bind goes on over the next updates, so where it lands depends on how the clock cut it: tests that
# compare live poses for equality set None.
stage_budget: float | None = search.LIVE_BUDGET
# Whether a drag's update may leave the global stage to the updates that carry it on (`search.defer_stage`).
defer_stage = True
_suspended: set[int] = set()  # session_uid of armatures being baked: the bake solves them itself
# True while a render (or an export) plays the keys rig/render.py recorded: nothing is solved or given back
# meanwhile, since in the GUI the render thread evaluates the same data.
paused = False


@contextmanager
def suspended(obj: bpy.types.Object) -> Iterator[None]:
    """Keep live solving off `obj` (a bake steps through frames and solves them itself)."""
    uid = obj.session_uid
    _suspended.add(uid)
    try:
        yield
    finally:
        _suspended.discard(uid)
        cache.forget(uid)


def suspend(obj: bpy.types.Object) -> None:
    """Keep live solving off `obj` until `resume` (a render plays a temporary bake of it meanwhile)."""
    _suspended.add(obj.session_uid)


def resume(obj: bpy.types.Object) -> None:
    _suspended.discard(obj.session_uid)


_skip_once: set[int] = set()  # rigs the next check leaves alone (`skip_next`)


def skip_next(obj: bpy.types.Object) -> None:
    """Leave `obj` alone at the next check: its channels were just put back to what its last solve wrote
    (after a render), and Blender has not evaluated them yet, so its evaluated pose would read as a change."""
    _skip_once.add(obj.session_uid)


def scene_rigs(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The scene's armatures with chains (or FK values to give back), rigs that others follow first."""
    return list(_scene_rigs(scene))


def solve_count(obj: bpy.types.Object) -> int:
    """How many times the live handlers have solved `obj` in this session."""
    return cache.stats.get(obj.session_uid, 0)


def check_count(obj: bpy.types.Object) -> int:
    """How many times the live handlers have read and compared the inputs of `obj` (solved or not)."""
    return cache.checks.get(obj.session_uid, 0)


@dataclass
class _Objects:
    mats: F64  # (1 + M, 4, 4): the armature's world matrix, then every chain's target and pole
    rows: dict[int, list[int]]  # chain index -> its rows of `mats`


@dataclass
class _Seen:
    """The inputs of an armature's last solve. Bytes compare exactly (NaN too); settings compare as values."""

    channels: bytes | None  # every bone's rotation, location and scale channels, raw (None: as in `arrays`)
    settings: tuple[object, ...]
    structure: bytes  # bone names, rest data and flags (core.model.Skeleton.key)
    world: bytes = b""  # the armature's world matrix
    # The inputs as arrays, to find which chains they concern (`_select`): the armature's, targets' and
    # poles' world matrices, the evaluated pose (when read) and every channel (after our write).
    mats: F64 | None = None
    pose: F64 | None = None
    arrays: armature.Channels | None = None
    solved: tuple[tuple[int, ...], ...] = ()  # chain indices of each group of the plan last solved
    planned: frozenset[int] = frozenset()  # every chain index in `solved`
    roots: bytes = b""  # the evaluated pose of the bones above the chains and of control bones (`_outside_parents`)
    objects: _Objects | None = None  # the rows of `mats` of each chain

    def after_write(self, channels: armature.Channels) -> None:
        """Our write changed only rotation channels (and the Y scale of stretching chains), in these arrays:
        the values written stand for a re-read."""
        self.channels = None
        self.arrays = channels

    def channel_bytes(self) -> bytes:
        if self.channels is None:
            assert self.arrays is not None
            self.channels = _channel_bytes(self.arrays)
        return self.channels

    def same(self, other: _Seen) -> bool:
        return (
            self.roots == other.roots
            and _mats_bytes(self) == _mats_bytes(other)
            and self.channel_bytes() == other.channel_bytes()
            and self.structure == other.structure
            and self.same_settings(other)
        )

    def same_settings(self, other: _Seen) -> bool:
        # repr() only when the values differ: a NaN setting is unequal to itself but has an equal repr.
        return self.settings == other.settings or repr(self.settings) == repr(other.settings)


def _mats_bytes(seen: _Seen) -> bytes:
    """The world, target and pole matrices as compared (exactly: NaN too)."""
    return b"" if seen.mats is None else seen.mats.tobytes()


def _channel_bytes(channels: armature.Channels) -> bytes:
    return b"".join(a.tobytes() for a in channels.values())


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


def _hanging(
    objects: list[bpy.types.Object], bone_targets: Sequence[tuple[bpy.types.Object, str]] = ()
) -> tuple[tuple[int, str, bpy.types.Object], ...]:
    """(armature uid, bone, object) for each object that hangs from an armature's bone, at any depth, and
    (armature uid, bone, armature) for each bone of another armature that is a target or pole itself."""
    out = [(arm.session_uid, bone, arm) for arm, bone in bone_targets]
    for ob in objects:
        node: bpy.types.Object | None = ob
        depth = 0
        while node is not None and depth < 1000:
            # Followed through a constraint (Child Of, Copy Location, Copy Transforms) as through a parent.
            out.extend((arm_uid, bone, ob) for arm_uid, bone in follow.constraint_leaders(node))
            parent = node.parent
            if parent is not None and parent.type == "ARMATURE" and node.parent_type == "BONE" and node.parent_bone:
                out.append((parent.session_uid, node.parent_bone, ob))
            node, depth = parent, depth + 1
    return tuple(out)


def leaders_of(obj: bpy.types.Object) -> list[bpy.types.Object]:
    """The other armatures whose bones the targets and poles of `obj` hang from (or are), in the file."""
    uids = {a for a, _b, _o in _hangs_of(obj, chain_state(obj)[1]) if a != obj.session_uid}
    return [ob for ob in bpy.data.objects if ob.type == "ARMATURE" and ob.session_uid in uids]


def _hangs_of(obj: bpy.types.Object, entries: list[Entry]) -> tuple[tuple[int, str, bpy.types.Object], ...]:
    """What the targets and poles of `obj` hang from (`_hanging`); its own control bones are not listed."""
    others = [(ob, bone) for ob, bone in entries if bone and ob != obj]
    return _hanging([ob for ob, _bone in entries], others)


# Armature uid -> (world matrix, pose before, pose after, bone index by name) of a rig solved and written in
# this update: objects parented to its bones are where Blender will put them once it evaluates our write.
_Moved = dict[int, tuple[F64, F64, F64, dict[str, int]]]


def _carry(world: armature.WorldMatrices, obj: bpy.types.Object, moved: _Moved) -> None:
    """Move the snapshot's targets and poles of `obj` that hang from bones solved in this update.

    Inside a handler Blender cannot re-evaluate them (BLENDER_NOTES); an object parented to a bone moves
    rigidly with it, so its new world matrix is D @ old with D = W @ P_new @ P_old^-1 @ W^-1.
    """
    done: set[int] = set()
    for arm_uid, bone, ob in cache.hangs.get(obj.session_uid, ()):
        hit = moved.get(arm_uid)
        if hit is None or bone not in hit[3]:
            continue
        w, before, after, index = hit
        b = index[bone]
        if ob.session_uid == arm_uid:
            # A bone of that armature is the target itself: it is where the solve put it.
            world.bones[(arm_uid, bone)] = after[b]
            continue
        if ob.session_uid in done:
            continue
        d = w @ after[b] @ np.linalg.inv(before[b]) @ np.linalg.inv(w)
        old = world.of([ob])[0]
        along = follow.point_follower(ob, arm_uid, bone)
        if along is None:
            world.override(ob, d @ old)
        else:
            # Copy Location: it moves with the point it copies, its rotation its own.
            point = w @ before[b] @ np.array((0.0, along[0] * along[1], 0.0, 1.0))
            new = old.copy()
            new[:3, 3] += (d @ point)[:3] - point[:3]
            world.override(ob, new)
        done.add(ob.session_uid)


def _read(obj: bpy.types.Object, moved: _Moved | None = None) -> tuple[_Seen, LiveReads, _Objects]:
    """Everything a solve of `obj` reads, once: what the change test compares and what the solve reuses."""
    s = rig_settings(obj)
    sk = armature.skeleton(obj)
    state, objects = chain_state(obj)
    uid = obj.session_uid
    known = cache.depends.get(uid)
    targets_changed = known is None or known[0] != state
    if targets_changed:
        # What the chains point at changed (or is not known yet): what this rig follows, and depends on.
        hangs = _hangs_of(obj, objects)
        if cache.hangs.get(uid) != hangs:
            cache.hangs[uid] = hangs
            cache.scene_rigs.clear()  # list the rigs again, in the new dependency order
    world = armature.WorldMatrices()
    if moved:
        _carry(world, obj, moved)
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
    editable = not system_override(obj)
    version = cache.settings_version(obj)
    settings = (s.tolerance, s.max_iterations, s.roll_mode, s.start_from, version, state, angles, editable)
    seen = _Seen(_channel_bytes(channels), settings, sk.key, mats[0].tobytes(), mats, pose, channels, roots=roots_bytes)
    # What can change this rig's solve: itself (pose, transform, settings), its armature data, and the
    # objects it reaches for. Blender lists an object as updated when anything it depends on moved (a
    # parent, a constraint target, a driver), so these IDs are enough to skip unrelated updates.
    if targets_changed:
        # Bone targets: their armature data too (a bone renamed lists only the data).
        bones = (o.data.session_uid for o, b in objects if b and o.data is not None)
        ids = (uid, obj.data.session_uid, *(o.session_uid for o, _b in objects), *bones)
        cache.depends[uid] = (state, frozenset(ids))
    # Rows of `mats` of each chain's target and pole (chain_state lists them chain by chain).
    rows: dict[int, list[int]] = {}
    k = 1
    for i, row in enumerate(state):
        n = (row.target is not None) + (row.pole is not None)
        rows[i] = list(range(k, k + n))
        k += n
    reads = LiveReads(
        sk=sk,
        state=state,
        channels=channels,
        world=world,
        pose=pose,
        world_key=seen.world,
        influences=tuple(w for _angle, w in angles),
    )
    seen.objects = _Objects(mats, rows)
    return seen, reads, seen.objects


def _select(
    obj: bpy.types.Object, seen: _Seen, last: _Seen | None, reads: LiveReads, objects: _Objects
) -> Callable[[Plan], list[Group]]:
    """Which planned groups a live update solves: those whose own inputs changed, those the last solve refused,
    and every group below them.

    Everything is solved when anything rig-wide changed (settings, bones, the armature's transform). A
    group's own inputs are its targets and poles, the evaluated pose of the bone above its root (Blender
    moves it for parents posed by hand, constraints, drivers), and its bones' channels (posed by hand).
    """
    rig_wide = (
        last is None or last.world != seen.world or last.structure != seen.structure or not last.same_settings(seen)
    )

    def select(plan: Plan) -> list[Group]:
        seen.solved = tuple(tuple(c.index for c in g.chains) for g in plan.groups)
        seen.planned = frozenset(i for gid in seen.solved for i in gid)
        if rig_wide or last is None or last.solved != seen.solved or not _comparable(seen, last):
            return list(plan.groups)
        assert last.mats is not None and last.arrays is not None and seen.arrays is not None
        sk = reads.sk
        # Which inputs changed, found with a few whole-array comparisons (NaN counts as changed).
        moved_rows = set(np.flatnonzero((objects.mats != last.mats).any(axis=(1, 2))).tolist())
        posed: set[int] = set()
        for attr, now in seen.arrays.items():
            posed.update(np.flatnonzero((now != last.arrays[attr]).any(axis=1)).tolist())
        if seen.pose is not None and last.pose is not None:
            posed.update(np.flatnonzero((seen.pose != last.pose).any(axis=(1, 2))).tolist())
        if posed:
            rows = sorted(posed)
            if not all(np.isfinite(now[rows]).all() for now in seen.arrays.values()):
                # A NaN on any bone (one in no chain too) refuses the whole rig: the full solve's check says so.
                return list(plan.groups)
        # Chains the last solve refused (a NaN target its own chain, a NaN bone pose every chain of the rig) were
        # not solved on the inputs it saw: whatever changed since, they are solved again.
        refused = {i for i, out in cache.outcomes.get(obj.session_uid, {}).items() if not out.valid}
        dirty: list[Group] = []
        dirty_bones: set[int] = set()
        for g in plan.groups:  # levels ascending: a group's upper groups are decided before it
            root_parent = int(sk.parent[g.bones[0]])
            changed = (
                any(c.index in refused for c in g.chains)
                or any(r in moved_rows for c in g.chains for r in objects.rows[c.index])
                or (root_parent >= 0 and root_parent in posed)
                or any(b in posed for b in g.bones)
                or (bool(dirty_bones) and any(a in dirty_bones for a in sk.ancestors(g.bones[0])))
                # A control bone of this rig that moved, or hangs below a group solved in this update.
                or any(
                    b in posed or (bool(dirty_bones) and any(a in dirty_bones for a in sk.ancestors(b)))
                    for c in g.chains
                    for b in (c.target_local, c.pole_local)
                    if b >= 0
                )
            )
            if changed:
                dirty.append(g)
                dirty_bones.update(g.bones)
        return dirty

    return select


def _comparable(seen: _Seen, last: _Seen) -> bool:
    """Whether the arrays of two checks line up row for row (same objects, bones and reads)."""
    if seen.mats is None or last.mats is None or seen.mats.shape != last.mats.shape:
        return False
    if (seen.pose is None) != (last.pose is None) or last.arrays is None or seen.arrays is None:
        return False
    return all(last.arrays[k].shape == v.shape for k, v in seen.arrays.items())


def _solve_live(obj: bpy.types.Object, moved: _Moved, carry: bool) -> None:
    """Check `obj` and solve it if its inputs changed; with `carry`, record how its bones moved in `moved`."""
    uid = obj.session_uid
    cache.checks[uid] = cache.checks.get(uid, 0) + 1
    seen, reads, objects = _read(obj, moved)
    last = cache.fingerprints.get(uid)
    if last is not None and last.same(seen):
        return
    if any(row.enabled and (row.tip_bone not in reads.sk.index or not row.bones_found) for row in reads.state):
        # A bone a chain names is gone: renamed, the chain takes the new name (rig/renames.py) and reads again.
        if renames.follow(obj):
            seen, reads, objects = _read(obj, moved)
    # Full Body: every chain may move the body, so every group is solved (as for a rig-wide change).
    select = _select(obj, seen, None if rig_settings(obj).full_body else last, reads, objects)
    planned = cache.plans.get(uid)
    if use_program and not carry and last is not None and planned is not None:
        shown_now = _program_full(obj, uid, seen, last, reads, objects, planned[1], select)
        if shown_now is not None:
            seen.after_write(reads.channels)
            cache.fingerprints[uid] = seen
            return
    if planned is not None:
        body_live.forget(planned[1])  # the solve below captures anew what lean updates of its body need
    report = solve_rig(obj, write=True, cached=True, reads=reads, carry=carry, select=select)
    if report.moved is not None:
        moved[uid] = (objects.mats[0], report.moved[0], report.moved[1], reads.sk.index)
    cache.stats[uid] = cache.stats.get(uid, 0) + 1
    counts = cache.chain_solves.setdefault(uid, {})
    for i, out in report.outcomes.items():
        if out.valid:
            counts[i] = counts.get(i, 0) + 1
    # Chains not solved now keep the outcome they had; chains no longer planned (disabled) drop theirs.
    before = cache.outcomes.get(uid, {})
    shown = {i: o for i, o in before.items() if i in seen.planned}
    shown.update(report.outcomes)
    cache.outcomes[uid] = shown
    report.outcomes = shown
    store_status(obj, report, before)
    # Our write changed only rotation channels (and the Y scale of stretching chains), and `reads.channels`
    # now holds exactly the float32 values written (foreach_set stores them as given), so it stands for a
    # re-read: the write is no change.
    seen.after_write(reads.channels)
    cache.fingerprints[uid] = seen


def _program_full(
    obj: bpy.types.Object,
    uid: int,
    seen: _Seen,
    last: _Seen,
    reads: LiveReads,
    objects: _Objects,
    plan: Plan,
    select: Callable[[Plan], list[Group]],
) -> dict[int, ChainOutcome] | None:
    """A full-path update (a frame change, a bone posed by hand, a keyed setting) solved on the rig's compiled
    program instead of `core.solve`, when nothing but the pose, the targets, poles and pole angles changed
    since the last full solve and the program takes every chain that must be solved: the same change test
    (`_select`), FK store and outcomes as `solve_rig`, one scalar solve per chain (the kernels `core.solve`
    uses, so both give the same pose to float32 rounding). None (nothing written) when the full solve must do it:
    the plan or a setting changed, a chain blends with FK or stretches, an input is not finite, a chain the
    program leaves out must be solved, the store holds bones no chain drives."""
    # Settings but the pole angles and influences (per-frame numbers the program takes), the chains, the
    # bones as the last full solve saw them: its plan (`plan`) and checks stand.
    if (
        seen.structure != last.structure
        or seen.settings[:6] != last.settings[:6]
        or seen.settings[7:] != last.settings[7:]
    ):
        return None
    modes = armature.rotation_mode_values(obj)
    lean: _Lean | None = cache.programs.get(uid)
    if lean is None or lean.plan is not plan or lean.modes != modes.tobytes():
        # Compiled as `_lean` compiles it (playback alone never drags a control).
        lean = cache.programs[uid] = _compile(obj, plan, modes)
        if isinstance(lean.program, Program):
            lean.program.forget()
    if isinstance(lean.program, str) or lean.body or lean.program.refused:
        return None
    program = lean.program
    angles = seen.settings[6]
    assert isinstance(angles, tuple)
    if any(weight != 1.0 for _angle, weight in angles):
        return None  # a chain blends with its FK pose: the full solve's
    if cache.stretched.get(uid) or cache.hangs.get(uid):
        return None
    # The armature-wide checks (scale, overrides: `solve.prepare`) for its transform now (it may be animated).
    checked = (reads.world_key, system_override(obj))
    hit = cache.rig_checks.get(uid)
    if hit is None or hit[0] != checked:
        hit = cache.rig_checks[uid] = (checked, rig_problem(obj))
    if hit[1] is not None:
        return None  # refused: the full path says why on every chain
    shown = cache.outcomes.get(uid, {})
    if last.arrays is None or any(not getattr(shown.get(link.chain.index), "valid", False) for link in program.links):
        return None  # a chain the last full solve refused (or never solved): the full solve says why
    channels = reads.channels
    # NaN fails the comparison; infinite and float32's largest values (Blender's stand-in for infinity) too.
    if not (np.abs(objects.mats).max() < 1e30 and all(np.abs(a).max() < 1e30 for a in channels.values() if a.size)):
        return None  # the full solve refuses it with a message
    groups = select(plan)
    order = program.closure(c.index for g in groups for c in g.chains)
    if order is None:
        return None
    store = fk.Store.read(obj)
    names = program.snap.sk.names
    posed = [b for j in order for b in program.links[j].posed]
    posed_names = [names[b] for b in posed]
    if not set(store.names) <= {names[b] for link in program.links for b in link.posed}:
        return None  # a stored bone no chain drives any more: `solve_rig` gives it its FK value back
    for attr in ("location", "scale"):
        if not np.array_equal(channels[attr][posed], last.arrays[attr][posed]):
            program.forget()  # a chain bone's own geometry moved (its shape is measured anew)
            break
    if not np.array_equal(channels["scale"], last.arrays["scale"]):
        program.forget()  # a parent's scale scales the bones below it
    bone_modes = modes[posed].tolist()
    # The FK pose, by the live rule (`fk.fill`): a channel that is not what Reach IK last wrote is the FK value.
    store.fk(posed_names, bone_modes, fk.raw_rotations(channels, posed, bone_modes), channels["scale"][posed, 1])
    rows = objects.rows
    targets: dict[int, Matrix] = {}
    poles: dict[int, Matrix] = {}
    for j in order:
        c = program.links[j].chain
        at = rows[c.index]
        targets[c.index] = Matrix(objects.mats[at[0]].tolist())
        if c.pole is not None and len(at) > 1:
            poles[c.index] = Matrix(objects.mats[at[1]].tolist())
    pose_bones = obj.pose.bones
    result = program.solve(
        order,
        lambda b: pose_bones[b].matrix.copy(),
        Matrix(objects.mats[0].tolist()),
        targets,
        poles,
        {i: float(angles[i][0]) for i in program.by_chain},
        channels,
    )
    for attr in sorted(result.changed):
        pose_bones.foreach_set(attr, channels[attr].ravel())
    if result.changed:
        obj.update_tag(refresh={"DATA"})
    store.wrote(posed_names, fk.raw_rotations(channels, posed, bone_modes), channels["scale"][posed, 1].copy())
    store.write(obj)
    cache.stats[uid] = cache.stats.get(uid, 0) + 1
    cache.full_program_solves[uid] = cache.full_program_solves.get(uid, 0) + 1
    counts = cache.chain_solves.setdefault(uid, {})
    for i in result.outcomes:
        counts[i] = counts.get(i, 0) + 1
    before = shown
    shown = {i: o for i, o in before.items() if i in seen.planned}
    shown.update(result.outcomes)
    cache.outcomes[uid] = shown
    store_status(obj, RigReport(outcomes=shown), before, result.outcomes)
    return shown


@dataclass
class _Lean:
    """A rig compiled for live updates that move only its targets and poles (`core.live.Program`), with what
    the rig layer reads and writes for it.

    Compiled once per plan and rotation modes; checked again (cheaply) for each new fingerprint, since
    what a plan does not hold can rule the lean path out for a while: an Influence below 1, a stretch to
    undo, a chain the last full solve refused.
    """

    plan: Plan
    modes: bytes  # every bone's rotation mode value, as compiled
    program: Program | str  # or why the plan cannot be compiled
    data_uid: int = 0
    chains: dict[int, tuple[bpy.types.Object, bpy.types.Object | None, int, int]] = field(default_factory=dict)
    controls: dict[int, tuple[bpy.types.Object, bpy.types.Object | None]] = field(default_factory=dict)
    by_uid: dict[int, list[int]] = field(default_factory=dict)  # object session_uid -> its chains' indices
    angles: dict[int, float] = field(default_factory=dict)
    held_at: dict[int, int] = field(default_factory=dict)  # bone -> where its written values go in the FK store
    store_off: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # bone -> its FK row
    snap: Snapshot | None = None  # what `program` was compiled from (the batch path solves on it too)
    store_names: str = ""
    store_size: int = -1
    seen: dict[int, tuple[float, ...]] = field(default_factory=dict)  # row -> its matrix's translation
    # Control bones of the rig itself: chain index -> (target bone, pole bone), -1 for an object; every such
    # bone, and the fingerprint's row of each (`_check`).
    bones: dict[int, tuple[int, int]] = field(default_factory=dict)
    own: list[int] = field(default_factory=list)
    row_bone: dict[int, int] = field(default_factory=dict)
    turned: set[int] = field(default_factory=set)  # rows of targets whose orientation a chain takes
    carried: set[int] = field(default_factory=set)  # bones that are or hang below a bone the program poses
    refused_uids: set[int] = field(default_factory=set)  # targets and poles of chains left to the full solve
    checked: _Seen | None = None  # the fingerprint the last check was for
    ok: bool = False  # that check's verdict
    body: bool = False  # Full Body: the program solves the limbs after the body stage (`_lean_body`)
    found: body_live.Captured | None = None  # what the last full solve left for the body stage (`_check`)


def _compile(obj: bpy.types.Object, plan: Plan, modes: NDArray[np.int32]) -> _Lean:
    """`plan` compiled for lean updates (`program` says why not when it cannot be)."""
    lean = _Lean(plan, modes.tobytes(), "")
    sk = armature.skeleton(obj)
    lean.snap = snapshot(obj, sk, plan, with_channels=True, modes=modes)
    lean.body = lean.snap.body is not None
    # Full Body: the program solves the limbs, after the body stage (`_lean_body`), on every chain's link.
    program = Program.build(replace(lean.snap, body=None), [armature.MODE_NAMES[v] for v in modes.tolist()])
    if lean.body and isinstance(program, Program) and program.refused:
        program = "Full Body with a chain the program leaves to the full solve"
    lean.program = program
    if isinstance(program, str):
        return lean
    lean.data_uid = obj.data.session_uid
    settings = rig_settings(obj).chains
    for index in program.refused:
        ch = settings[index]
        # Its control bones in this armature: `_own_moved` sends their moves to the full path (not among `own`).
        lean.refused_uids.update(ob.session_uid for ob in (ch.target, ch.pole) if ob is not None and ob != obj)
    for link in program.links:
        c = link.chain
        ch = settings[c.index]
        target, pole = ch.target, ch.pole if c.pole is not None else None
        lean.chains[c.index] = (target, pole, -1, -1)
        lean.controls[c.index] = (target, pole)
        if c.target_local >= 0 or c.pole_local >= 0:
            lean.bones[c.index] = (c.target_local, c.pole_local if c.pole is not None else -1)
        for ob in (target, pole):
            if ob is not None:
                lean.by_uid.setdefault(ob.session_uid, []).append(c.index)
    return lean


def _check(obj: bpy.types.Object, uid: int, last: _Seen, lean: _Lean) -> bool:
    """Whether the rig, as its last full check saw it (`last`), can take lean updates."""
    program = lean.program
    check = cache.rig_checks.get(uid)
    if isinstance(program, str) or last.objects is None or last.arrays is None or check is None or check[1]:
        return False
    shown = cache.outcomes.get(uid, {})
    angles = last.settings[6]
    assert isinstance(angles, tuple)
    for link in program.links:
        i = link.chain.index
        out = shown.get(i)
        if out is None or not out.valid or angles[i][1] != 1.0:
            return False  # refused by the full solve, or blending with FK
        c = link.chain
        if (c.target_bone and c.target_local < 0) or (c.pole_bone and c.pole is not None and c.pole_local < 0):
            return False  # a bone of another armature (or one not found): the full path carries it
    if cache.stretched.get(uid) or cache.hangs.get(uid):
        return False  # a stretch of ours to undo, or targets that hang from bones
    lean.found = None
    if lean.body:
        found = body_live.captured(lean.plan)
        if found is None or {c.index for c in found.anchors} | {s[0].index for s in found.spine} != set(
            program.by_chain
        ):
            return False  # the last full solve left nothing for it (a bake, an Influence, a nested body...)
        if obj.get(rig_body.BONE_KEY) != program.snap.sk.names[found.root]:
            return False
        lean.found = found
    text = obj.get(fk.NAMES_KEY)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if not isinstance(text, str) or held is None:
        return False
    if text != lean.store_names or held.shape[0] != lean.store_size:
        store = fk.Store.read(obj)
        names = program.snap.sk.names
        modes = np.frombuffer(lean.modes, dtype=np.int32)
        at = {}
        for link in program.links:
            for b in link.posed:
                row = store.index.get(names[b])
                if row is None or int(store.rows[row, fk.MODE]) != int(modes[b]):
                    return False  # a bone Reach IK has not written yet: its FK value is not stored
                at[b] = row * fk.WIDTH
        lean.held_at = {b: offset + fk.WRITTEN.start for b, offset in at.items()}
        lean.store_names, lean.store_size = text, held.shape[0]
        lean.store_off = np.full(len(names), -1, dtype=np.int64)
        lean.store_off[list(at)] = list(at.values())
    lean.seen = {}
    lean.row_bone = {}
    for index, (target, pole, _t, _p) in lean.chains.items():
        rows = last.objects.rows[index]
        lean.chains[index] = (target, pole, rows[0], rows[1] if pole is not None else -1)
        for row in rows:
            lean.seen[row] = tuple(last.objects.mats[row][:3, 3].tolist())
        for row, bone in zip(rows, lean.bones.get(index, ()), strict=False):
            if bone >= 0:
                lean.row_bone[row] = bone
    lean.own = sorted(set(lean.row_bone.values()))
    lean.turned = {lean.chains[link.chain.index][2] for link in program.links if link.rot_tip >= 0}
    sk = program.snap.sk
    posed = {b for link in program.links for b in link.posed}
    if lean.found is not None:
        posed.add(lean.found.root)
    lean.carried = {b for b in range(len(sk.names)) if b in posed or any(a in posed for a in sk.ancestors(b))}
    if lean.own and (last.pose is None or obj.get(fk.NAMES_KEY) is None):
        return False  # control bones are compared against the evaluated pose the last full check read
    lean.angles = {i: float(angles[i][0]) for i in lean.chains}
    return True


@dataclass
class _Own:
    """What moved among a rig's own control bones in an update that listed the armature (`_own_moved`)."""

    changed: set[int]  # chain indices whose control bone moved
    moved: dict[int, tuple[float, ...]]  # fingerprint row -> the control's translation now, where it changed
    channels: armature.Channels  # every channel, read now
    pose: F64  # the evaluated pose, read now
    roots: list[int]  # the bones whose pose the fingerprint holds (`_outside_parents`)

    taken: bool = False  # `take_channels` done

    def take_channels(self, last: _Seen, lean: _Lean) -> None:
        """The fingerprint's channel arrays (which the lean path writes whole) take the control bones' rows."""
        assert last.arrays is not None
        if self.taken:
            return
        for attr, now in self.channels.items():
            last.arrays[attr][lean.own] = now[lean.own]
        self.taken = True

    def note(self, last: _Seen, lean: _Lean) -> None:
        """The fingerprint takes the control bones as they are now (after a lean solve: the full path's next
        check compares against them)."""
        assert last.arrays is not None and last.pose is not None and last.mats is not None
        own = lean.own
        self.take_channels(last, lean)
        last.pose[own] = self.pose[own]
        last.roots = last.pose[self.roots].tobytes()
        last.mats[list(lean.row_bone)] = last.mats[0] @ self.pose[list(lean.row_bone.values())]
        last.channels = None


def _own_moved(obj: bpy.types.Object, uid: int, last: _Seen, lean: _Lean, read: dict[int, Matrix | F64]) -> _Own | None:
    """An update listed the armature: which of its control bones moved (their chains, and their world matrices
    put in `read` by fingerprint row), or None when anything else of the armature may have changed (a bone
    posed, its transform, rotation modes, bones, a bone's evaluated pose above a chain): the full path's."""
    if not lean.own or last.pose is None or last.arrays is None or last.mats is None:
        return None
    program = lean.program
    assert isinstance(program, Program)
    if armature.skeleton(obj) is not program.snap.sk:
        return None
    if armature.rotation_mode_values(obj).tobytes() != lean.modes:
        return None
    # The armature's own matrix alone (WorldMatrices reads every object's): the same float32 values widened.
    world = np.array(obj.matrix_world, dtype=np.float64)
    if world.tobytes() != last.world:
        return None
    own = set(lean.own)
    channels = armature.read_channels(obj, armature.ALL_CHANNELS)
    for attr, now in channels.items():
        before = last.arrays.get(attr)
        if before is None or before.shape != now.shape:
            return None
        # NaN compares unequal: a NaN outside the control bones goes to the full path, which refuses it.
        if not own.issuperset(np.flatnonzero((now != before).any(axis=1)).tolist()):
            return None
    pose = armature.pose_matrices(obj)
    hit = cache.roots.get(uid)
    if hit is None or hit[0] is not program.snap.sk or pose.shape != last.pose.shape:
        return None
    roots: list[int] = hit[2]
    # Bones the program poses, and those below them, moved with its last write (their channels compare above).
    others = [b for b in roots if b not in own and b not in lean.carried]
    if others and not np.array_equal(pose[others], last.pose[others]):
        return None  # a bone above a chain moved (a constraint, a driver): the full path finds which chains
    changed: set[int] = set()
    moved: dict[int, tuple[float, ...]] = {}
    by_row = {row: i for i, (_t, _p, t_row, p_row) in lean.chains.items() for row in (t_row, p_row) if row >= 0}
    rows = list(lean.row_bone)
    # Every control's world matrix in one product; compared by translation (a chain with Target Rotation
    # takes the control's orientation too: its whole matrix compares).
    mats = world @ pose[list(lean.row_bone.values())]
    for k, at in enumerate(map(tuple, mats[:, :3, 3].tolist())):
        row = rows[k]
        if at != lean.seen.get(row) or (row in lean.turned and not np.array_equal(mats[k], last.mats[row])):
            if not abs(at[0]) + abs(at[1]) + abs(at[2]) < 1e30:
                return None  # NaN or infinite: the full path refuses it with a message
            moved[row] = at
            changed.add(by_row[row])
        read[row] = mats[k]  # made a Matrix only where a solve reads it (`_lean`'s `matrix`)
    return _Own(changed, moved, channels, pose, roots)


def _recheck(uid: int) -> None:
    """Check the rig's compiled program again before its next use: recompiled if its plan or rotation modes
    changed, its chain geometry read afresh, its other conditions checked (`_check`)."""
    lean: _Lean | None = cache.programs.get(uid)
    if lean is not None:
        lean.checked = None


def _lean(obj: bpy.types.Object, uid: int, updated: set[int], again: frozenset[int] = frozenset()) -> bool:
    """Solve an update that moved only targets and poles of `obj` on its compiled program; False when the
    update needs the full path (`_solve_live`): the rig is not compiled, or the armature itself changed."""
    last: _Seen | None = cache.fingerprints.get(uid)
    planned = cache.plans.get(uid)
    if last is None or planned is None:
        return False
    lean: _Lean | None = cache.programs.get(uid)
    listed = uid in updated or (lean.data_uid if lean is not None else obj.data.session_uid) in updated
    if listed and lean is not None and not lean.bones:
        # Posed, transformed, keyed, its settings or bones changed: the full path compares everything, and
        # the next lean update checks the rig again (rotation modes, say).
        _recheck(uid)
        return False
    if lean is None or lean.checked is not last:
        modes = armature.rotation_mode_values(obj)
        if lean is None or lean.plan is not planned[1] or lean.modes != modes.tobytes():
            lean = cache.programs[uid] = _compile(obj, planned[1], modes)
        if isinstance(lean.program, Program):
            lean.program.forget()  # bone scales, locations or the rest pose may have changed since
    touched = {i for u in updated for i in lean.by_uid.get(u, ())}
    if lean.checked is not last:
        lean.ok = _check(obj, uid, last, lean)
        lean.checked = last
    if not lean.ok or isinstance(lean.program, str):
        if listed:
            _recheck(uid)
        return False
    program = lean.program
    if not lean.refused_uids.isdisjoint(updated):
        # A control of a chain the program leaves to the full solve moved (or something it depends on).
        _recheck(uid)
        return False
    assert last.arrays is not None and last.mats is not None
    read: dict[int, Matrix | F64] = {}  # row of the fingerprint's matrices -> the matrix read now
    own: _Own | None = None
    if listed:
        # The armature itself changed: the lean path goes on only if what changed is its control bones.
        own = _own_moved(obj, uid, last, lean, read)
        if own is None:
            _recheck(uid)
            return False
        # The control bones' chains: `own` says which moved; other objects' chains as without bones.
        touched = {i for u in updated if u not in (uid, lean.data_uid) for i in lean.by_uid.get(u, ())}
    elif not touched and not again:
        cache.checks[uid] = cache.checks.get(uid, 0) + 1
        return True

    def matrix(ob: bpy.types.Object, row: int) -> Matrix:
        m = read.get(row)
        if isinstance(m, np.ndarray):
            m = read[row] = Matrix(m.tolist())
        elif m is None:
            bone = lean.row_bone.get(row)
            # A control bone: where Blender's IK aims, the armature's matrix times the bone's pose (its head).
            m = ob.matrix_world.copy() if bone is None else obj.matrix_world @ obj.pose.bones[bone].matrix
            read[row] = m
        return m

    changed: list[int] = []
    moved: dict[int, tuple[float, ...]] = {}  # row -> the translation read now, where it changed
    world: armature.WorldMatrices | None = None
    if len(touched) > SCALAR_MAX_CHAINS:
        # Many chains (the batch route below): every object's matrix in one bulk read, compared at once.
        world = armature.WorldMatrices()
        found = _moved_many(lean, last.mats, touched, world)
        if found is None:
            return False  # NaN or infinite: the full path refuses it with a message
        changed, moved = found
    else:
        for i in sorted(touched):
            target, pole, t_row, p_row = lean.chains[i]
            for ob, row in ((target, t_row), (pole, p_row)):
                if ob is None or row in lean.row_bone:
                    continue  # a control bone: `_own_moved` compares it
                # Only where it is matters (no chain here takes a target's rotation): a turned Empty is no
                # change here, and the next full check (which compares whole matrices) solves its chain
                # again, to the same pose.
                t = matrix(ob, row).translation
                at = (t.x, t.y, t.z)
                if at != lean.seen.get(row):
                    if not abs(at[0]) + abs(at[1]) + abs(at[2]) < 1e30:
                        return False  # NaN or infinite: the full path refuses it with a message
                    moved[row] = at
                    changed.append(i)
    if own is not None:
        moved.update(own.moved)
        changed = sorted(set(changed) | own.changed)
    if again:
        if not again <= lean.chains.keys():
            return False  # a chain the program does not solve: the full path
        changed = sorted(set(changed) | again)
    cache.checks[uid] = cache.checks.get(uid, 0) + 1
    if not changed:
        if own is not None:
            own.note(last, lean)
        return True
    captured = lean.found
    if captured is not None:
        if any(s[0].index in changed for s in captured.spine):
            _recheck(uid)
            return False  # the spine's control moved: its solve (the pre-body pose) is the full path's
        # Every limb: the body may move what each hangs from (the pinned legs follow the hips).
        closure: list[int] | None = sorted(
            (program.by_chain[c.index] for c in captured.anchors), key=lambda j: program.links[j].level
        )
    else:
        closure = program.closure(changed)
    if closure is None:
        _recheck(uid)
        return False  # a chain the program leaves to the full solve moved, or hangs below one that did
    order = closure
    _lean_order[:] = [program.links[j].chain.index for j in order]
    text = obj.get(fk.NAMES_KEY)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if text != lean.store_names or held is None or held.shape[0] != lean.store_size:
        _recheck(uid)
        return False
    if own is not None:
        # The write below sets whole channel arrays: the control bones' rows must hold what the user set.
        own.take_channels(last, lean)
    outcomes: dict[int, ChainOutcome] | None
    if captured is not None:
        outcomes = _lean_body(obj, lean, captured, order, matrix, last.arrays, held)
    elif len(order) > SCALAR_MAX_CHAINS:
        # Many chains at once: numpy batches are faster than one scalar solve after another
        # (bench/scalar.py), on inputs read here without the full path's reading and comparing.
        outcomes = _lean_batch(obj, lean, order, last.arrays, held, world)
        if outcomes is None:
            return False  # broken inputs: the full path refuses them with a message
        cache.batch_solves[uid] = cache.batch_solves.get(uid, 0) + 1
    else:
        outcomes = _lean_scalar(obj, lean, order, matrix, last.arrays, held)
    # Only the translation (all the program reads): converting a whole Matrix costs ~17 us. A turned target
    # leaves its row's rotation stale, which can only make the next full check solve its chain again, to the
    # same pose.
    lean.seen.update(moved)
    if moved:
        last.mats[list(moved), :3, 3] = list(moved.values())
    if own is not None:
        own.note(last, lean)
    last.channels = None
    cache.stats[uid] = cache.stats.get(uid, 0) + 1
    cache.program_solves[uid] = cache.program_solves.get(uid, 0) + 1
    counts = cache.chain_solves.setdefault(uid, {})
    for i in outcomes:
        counts[i] = counts.get(i, 0) + 1
    before = cache.outcomes.get(uid, {})
    shown = dict(before)
    shown.update(outcomes)
    cache.outcomes[uid] = shown
    store_status(obj, RigReport(outcomes=shown), before, outcomes)
    return True


def _goals(
    lean: _Lean, program: Program, order: list[int], matrix: Callable[[bpy.types.Object, int], Matrix]
) -> tuple[dict[int, Matrix], dict[int, Matrix]]:
    """The world matrices of the targets and poles of links `order`, by chain index."""
    targets: dict[int, Matrix] = {}
    poles: dict[int, Matrix] = {}
    for j in order:
        index = program.links[j].chain.index
        target, pole, t_row, p_row = lean.chains[index]
        targets[index] = matrix(target, t_row)
        if pole is not None:
            poles[index] = matrix(pole, p_row)
    return targets, poles


def _lean_scalar(
    obj: bpy.types.Object,
    lean: _Lean,
    order: list[int],
    matrix: Callable[[bpy.types.Object, int], Matrix],
    channels: armature.Channels,
    held: fk.F32,
) -> dict[int, ChainOutcome]:
    """Solve links `order` of the compiled program one scalar solve after another; write what changed."""
    program = lean.program
    assert isinstance(program, Program)
    targets, poles = _goals(lean, program, order, matrix)
    pose_bones = obj.pose.bones
    result = program.solve(
        order,
        lambda b: pose_bones[b].matrix.copy(),
        obj.matrix_world.copy(),
        targets,
        poles,
        lean.angles,
        channels,
    )
    if result.changed:
        for attr in sorted(result.changed):
            pose_bones.foreach_set(attr, channels[attr].ravel())
        obj.update_tag(refresh={"DATA"})
        # The channels hold what Reach IK wrote; their FK values stand (nothing else changed them). Noted only
        # once Blender has the values: a store saying "written" over a channel that is not loses its FK pose.
        for b, attr in result.written:
            value = channels[attr][b]
            at = lean.held_at[b]
            held[at : at + value.shape[0]] = value
    return result.outcomes


def _lean_body(
    obj: bpy.types.Object,
    lean: _Lean,
    found: body_live.Captured,
    order: list[int],
    matrix: Callable[[bpy.types.Object, int], Matrix],
    channels: armature.Channels,
    held: fk.F32,
) -> dict[int, ChainOutcome]:
    """A Full Body update that moved only the limbs' controls: the body stage from what the last full solve
    captured (`core/body_live.py`), the body bones written, then the limbs (links `order`) solved on the
    compiled program from where the body put them, as `core.body.solve_levels` does; write what changed."""
    program = lean.program
    assert isinstance(program, Program)
    targets, poles = _goals(lean, program, order, matrix)
    world = obj.matrix_world.copy()
    st = body_live.stage(
        found, np.array(world, dtype=np.float64), np.array([targets[c.index] for c in found.anchors], dtype=np.float64)
    )
    modes = np.frombuffer(lean.modes, dtype=np.int32)
    written: dict[str, list[int]] = {}
    changed = armature.rotations_to_channels(obj, found.bones, st.basis, channels, modes, written)
    root = found.root
    old = channels["location"][root]
    # `rig.body.write`'s rule: moved by more than rounding.
    if (np.abs(st.location - old) > 1e-6 + 8.0 * np.spacing(np.abs(old)).astype(np.float64)).any():
        channels["location"][root] = st.location
        changed.add("location")
    placed = {
        b: (Vector(st.heads[k].tolist()), Matrix(st.frames[k].tolist()).to_quaternion())
        for k, b in enumerate(found.bones)
    }
    pose_bones = obj.pose.bones
    result = program.solve(
        order,
        lambda b: pose_bones[b].matrix.copy(),
        world,
        targets,
        poles,
        lean.angles,
        channels,
        placed,
    )
    changed |= result.changed
    if changed:
        for attr in sorted(changed):
            pose_bones.foreach_set(attr, channels[attr].ravel())
        obj.update_tag(refresh={"DATA"})
        # As `_lean_scalar`: the channels hold what Reach IK wrote, their FK values stand; the body root's
        # store takes its written channels (its home stands).
        rows = [(b, attr) for attr, bones in written.items() for b in bones]
        for b, attr in [*rows, *result.written]:
            at = lean.held_at.get(b)
            if at is not None:
                value = channels[attr][b]
                held[at : at + value.shape[0]] = value
        rig_body.note_written(obj, program.snap.sk.names[root], root, channels, int(modes[root]))
    outcomes = dict(result.outcomes)
    outcomes.update(st.spine)
    if st.blocked:
        mark_body_blocked(outcomes, found.anchors, {c.index for c in found.pins})
    return outcomes


def _moved_many(
    lean: _Lean, mats: F64, touched: set[int], world: armature.WorldMatrices
) -> tuple[list[int], dict[int, tuple[float, ...]]] | None:
    """`_lean`'s moved test for many chains at once: the chains among `touched` whose target or pole is no
    longer where the fingerprint's `mats` has it, and those objects' rows with where they are now; None when
    one of them is not at a finite place."""
    objects: list[bpy.types.Object] = []
    rows: list[int] = []
    owners: list[int] = []
    for i in touched:
        target, pole, t_row, p_row = lean.chains[i]
        if t_row not in lean.row_bone:  # a control bone: `_own_moved` compares it
            objects.append(target)
            rows.append(t_row)
            owners.append(i)
        if pole is not None and p_row not in lean.row_bone:
            objects.append(pole)
            rows.append(p_row)
            owners.append(i)
    now = world.of(objects)[:, :3, 3]
    differ = np.flatnonzero((now != mats[rows, :3, 3]).any(axis=1))
    if not (np.abs(now[differ]).sum(axis=1) < 1e30).all():
        return None
    at = now[differ].tolist()
    changed = sorted({owners[k] for k in differ.tolist()})
    return changed, {rows[k]: tuple(xyz) for k, xyz in zip(differ.tolist(), at, strict=True)}


def _lean_batch(
    obj: bpy.types.Object,
    lean: _Lean,
    order: list[int],
    channels: armature.Channels,
    held: fk.F32,
    world: armature.WorldMatrices | None = None,
) -> dict[int, ChainOutcome] | None:
    """Solve links `order` of the compiled program in numpy batches: only the pose, the armature's, targets'
    and poles' world matrices are read (`world`: already read). Writes what changed; None (nothing written)
    when an input is broken (NaN, infinite) or a solver refuses a problem.

    Links that hang below none of the others take the program's own batches (`Program.solve_many`: the
    full solve's arrays and solvers for these chains alone); stacked ones take the full solve (`core.solve`,
    its levels) on the plan and snapshot compiled with the program."""
    program = lean.program
    assert isinstance(program, Program) and lean.snap is not None
    wanted = {program.links[j].chain.index for j in order}
    # A view of the plan (its cached lengths and limits), as the full path's `select` makes.
    plan = replace(lean.plan, groups=[g for g in lean.plan.groups if g.chains[0].index in wanted])
    inputs = read_inputs(
        obj,
        plan,
        armature.pose_matrices(obj),
        armature.WorldMatrices() if world is None else world,
        channels["scale"],
        sk_now=lean.snap.sk,
        controls_now=lean.controls,
        angles_now=lean.angles,
    )
    if check_inputs(lean.snap.sk, plan, obj.name, inputs):
        return None
    many = program.batchable(order)
    if many is not None:
        targets = {i: m[0] for i, m in inputs.targets.items()}
        poles = {i: m[0] for i, m in inputs.poles.items()}
        try:
            bones, basis, outcomes = program.solve_many(
                many, inputs.pose[0], inputs.world[0], targets, poles, lean.angles
            )
        except ValueError:
            return None  # a solver refused a problem: the full path reports it on its chains
    else:
        report = RigReport()
        solved = core.solve(replace(lean.snap, plan=plan), inputs, report, channels=channels)
        bones, basis, outcomes = solved.bones, solved.basis, report.outcomes
    if bones:
        written: dict[str, list[int]] = {}
        modes = np.frombuffer(lean.modes, dtype=np.int32)
        changed = armature.rotations_to_channels(obj, bones, basis[0], channels, modes, written)
        for attr in sorted(changed):
            obj.pose.bones.foreach_set(attr, channels[attr].ravel())
            # The channels hold what Reach IK wrote; their FK values stand (nothing else changed them).
            rows = np.asarray(written[attr], dtype=np.int64)
            width = channels[attr].shape[1]
            held[lean.store_off[rows][:, None] + (fk.WRITTEN.start + np.arange(width))] = channels[attr][rows]
        if changed:
            obj.update_tag(refresh={"DATA"})
    return outcomes


def program_solve_count(obj: bpy.types.Object) -> int:
    """How many of `obj`'s live solves took the compiled program (`_lean`) in this session."""
    return cache.program_solves.get(obj.session_uid, 0)


def full_program_solve_count(obj: bpy.types.Object) -> int:
    """How many of `obj`'s full-path live solves (frame changes, bones posed by hand) took the compiled
    program instead of `core.solve` (`_program_full`) in this session."""
    return cache.full_program_solves.get(obj.session_uid, 0)


def batch_solve_count(obj: bpy.types.Object) -> int:
    """How many of those (`program_solve_count`) solved many chains in numpy batches (`_lean_batch`)."""
    return cache.batch_solves.get(obj.session_uid, 0)


def chain_solve_count(obj: bpy.types.Object, chain: int) -> int:
    """How many times live solving has solved chain number `chain` of `obj` in this session."""
    return cache.chain_solves.get(obj.session_uid, {}).get(chain, 0)


def _scene_rigs(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The scene's armatures that have chains, listed once per structure change (not on every update)."""
    key = scene.session_uid
    rigs = cache.scene_rigs.get(key)
    if rigs is None:
        # An armature with no chains left may still hold FK values to give back (`fk.release`).
        found = [
            ob for ob in scene.objects if ob.type == "ARMATURE" and (len(rig_settings(ob).chains) or fk.has_store(ob))
        ]
        for ob in found:
            cache.hangs[ob.session_uid] = _hangs_of(ob, chain_state(ob)[1])
        rigs = _dependency_order(found)
        cache.scene_rigs[key] = rigs
    return rigs


def _dependency_order(rigs: list[bpy.types.Object]) -> list[bpy.types.Object]:
    """Rigs whose targets hang from another rig's bones come after that rig (a cycle keeps the given order)."""
    uids = {ob.session_uid for ob in rigs}
    after = {ob.session_uid: {a for a, _b, _o in cache.hangs.get(ob.session_uid, ()) if a in uids} for ob in rigs}
    out: list[bpy.types.Object] = []
    placed: set[int] = set()
    pending = list(rigs)
    while pending:
        ready = [ob for ob in pending if after[ob.session_uid] <= placed | {ob.session_uid}]
        if not ready:
            ready = pending[:1]  # a cycle: one of them is a frame late, whatever the order
        for ob in ready:
            out.append(ob)
            placed.add(ob.session_uid)
            pending.remove(ob)
    return out


def _run(scene: bpy.types.Scene, updated: set[int] | None) -> None:
    """Check every rig of `scene` whose inputs may have changed (`updated`: IDs Blender re-evaluated; None: all)."""
    global _busy
    if _busy:
        return
    _busy = True
    try:
        try:
            rigs = list(_scene_rigs(scene))
            uids = [ob.session_uid for ob in rigs]
        except ReferenceError:
            # An object of the cached list was removed without a structure update reaching us first.
            cache.scene_rigs.clear()
            rigs = list(_scene_rigs(scene))
            uids = [ob.session_uid for ob in rigs]
        if _suspended.issuperset(uids):
            return  # every rig is being baked (a bake steps frames): nothing to check
        # Armatures that other rigs' targets hang from: their solves also report how their bones moved.
        leaders = {a for u in uids for a, _b, _o in cache.hangs.get(u, ())}
        moved: _Moved = {}
        counts = follow.begin()
        for obj, uid in zip(rigs, uids, strict=True):
            # A rig whose targets hang from a rig that moved in this update is checked whatever `updated` says.
            follows = bool(moved) and any(a in moved for a, _b, _o in cache.hangs.get(uid, ()))
            dirty = uid in cache.dirty
            if not follows and updated is not None and not dirty:
                deps = cache.depends.get(uid)
                if deps is not None and deps[1].isdisjoint(updated):
                    continue  # nothing this rig reads was re-evaluated: the cheap, common case
            cache.dirty.discard(uid)
            if updated is None or dirty:
                # A frame change (or a setting) may change anything, rotation modes too: check the compiled
                # program again before its next use (`_lean`).
                _recheck(uid)
            if uid in _skip_once:
                _skip_once.discard(uid)
                continue
            if uid in _suspended or obj.mode == "EDIT":
                # In Edit Mode Blender shows the edit bones, not the pose, and bones may be half-renamed:
                # the structure key catches every edit when the armature leaves Edit Mode.
                continue
            settings = rig_settings(obj)
            if not settings.live or not len(settings.chains):
                fk.release(obj)  # chains disabled or removed give their bones' FK pose back, Live or not
                continue
            try:
                lean = use_program and updated is not None and not dirty and not follows and uid not in leaders
                # Chains whose search the budget cut in the last (lean) update: solved again now, moved or not.
                again = _resume.pop(uid, frozenset())
                # The global stage within a budget per rig and update; a search the budget cut goes on in the
                # next update (the rig is solved again then, whatever moved).
                # Frame changes solve unbounded: playback poses as the render and the bake do.
                _lean_order.clear()
                # A drag's update may leave the stage to the updates that carry it on (`search.defer_stage`):
                # those run when the target stands still, and search.
                bounded = stage_budget if updated is not None else None
                carried = uid in _tagged  # an update `carry_on` asked for: it searches
                _tagged.discard(uid)
                with search.budget(bounded) as spent, search.deferring(defer_stage and not carried):
                    took = lean and _lean(obj, uid, updated, again)  # type: ignore[arg-type]  # a set, if lean
                    if not took:
                        _lean_order.clear()
                        if again:
                            cache.fingerprints.pop(uid, None)  # the full path solves every chain again
                        _solve_live(obj, moved, uid in leaders)
                if spent.cut:
                    _carry_on_later(uid, frozenset(_lean_order) if took else None)
            except Exception:
                # One rig's failure never stops the others; print each distinct failure once.
                text = traceback.format_exc()
                if cache.reported.get(uid) != text:
                    cache.reported[uid] = text
                    print(f"Reach IK: solving '{obj.name}' failed (other rigs go on):\n{text}")
        # Rigs that follow one solved now in a way `_carry` cannot predict: solved again at the next update.
        follow.settle(rigs, counts, _suspended)
    finally:
        _busy = False
        _skip_once.clear()  # for this check only


_STRUCTURE_TYPES = (bpy.types.Collection, bpy.types.Scene)


def _prune() -> None:
    """Drop cache entries of objects that no longer exist (cache.prune)."""
    objects = bpy.data.objects
    alive = [ob.session_uid for ob in objects if ob.type == "ARMATURE"]
    data = [arm.as_pointer() for arm in bpy.data.armatures]
    cache.prune(alive, data)


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    if _busy or paused:
        return
    updated: set[int] = set()
    structural = False
    for u in depsgraph.updates:
        ident = u.id
        if isinstance(ident, _STRUCTURE_TYPES):
            # Objects linked, unlinked, added or deleted: what a chain can reach may have changed without
            # any number we compare changing (a target unlinked from the scene), and caches may hold
            # entries of deleted objects.
            structural = True
        else:
            updated.add(ident.original.session_uid)
    if structural:
        _prune()
    _run(scene, None if structural else updated)


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    # No list of what changed comes with a frame change: every rig compares its inputs.
    if not paused:
        _run(scene, None)
    _skip_once.clear()


@persistent
def on_load(*_args: object) -> None:
    # Session uids, pointers and cached object lists belong to the previous file (or undo state).
    cache.clear()


_HANDLERS = (
    ("depsgraph_update_post", on_depsgraph_update),
    ("frame_change_post", on_frame_change),
    ("load_post", on_load),
    ("undo_post", on_load),
    ("redo_post", on_load),
)


_carrying: set[int] = set()


_resume: dict[int, frozenset[int]] = {}  # rig uid -> chains the budget cut in a lean update (`_lean_order`)
_tagged: set[int] = set()  # rigs `carry_on` tagged: their next update searches (no `search.defer_stage`)
_lean_order: list[int] = []  # chain indices the current `_lean` solved


def _carry_on_later(uid: int, chains: frozenset[int] | None) -> None:
    """The budget cut a search of rig `uid`: solve it again (its inputs stand still) after this update, from
    a timer (tagging it inside the handler would not make Blender evaluate it again). `chains`: what a lean
    update solved (the next one solves them again, on the program too); None: the full path solves it all."""
    if chains:
        _resume[uid] = _resume.get(uid, frozenset()) | chains
    else:
        cache.fingerprints.pop(uid, None)
        cache.dirty.add(uid)
    _carrying.add(uid)
    global _carry_asked
    _carry_asked = time.monotonic()
    if not bpy.app.timers.is_registered(_carry_on_when_still):
        bpy.app.timers.register(_carry_on_when_still, first_interval=CARRY_AFTER)


CARRY_AFTER = 0.05
"""Seconds without a new cut (or deferred) update before the carried-on search runs: while a drag goes on,
every update solves its new target anyway, and a search for a target already left behind is wasted; once
the target stands still this long, the search goes on (a viewport repaints at about this rate)."""
_carry_asked = 0.0


def _carry_on_when_still() -> float | None:
    """The timer of `_carry_on_later`: `carry_on` once no update asked for it for `CARRY_AFTER` seconds."""
    wait = _carry_asked + CARRY_AFTER - time.monotonic()
    if wait > 1e-3:
        return wait
    carry_on()
    return None


def carrying() -> bool:
    """Whether some rig's search was cut by the live budget and waits for `carry_on`."""
    return bool(_carrying)


def carry_on() -> None:
    """Tag the rigs whose search the live budget cut, so the next evaluation solves them on (a timer)."""
    uids, _carrying_now = set(_carrying), _carrying.clear()
    _tagged.update(uids)
    for obj in bpy.data.objects:
        if obj.session_uid in uids:
            obj.update_tag()


def register() -> None:
    for kind, fn in _HANDLERS:
        getattr(bpy.app.handlers, kind).append(fn)


def unregister() -> None:
    # Removed by reference, never by name: another add-on may use the same function names.
    for kind, fn in reversed(_HANDLERS):
        handlers = getattr(bpy.app.handlers, kind)
        while fn in handlers:
            handlers.remove(fn)
    if bpy.app.timers.is_registered(_carry_on_when_still):
        bpy.app.timers.unregister(_carry_on_when_still)
    _carrying.clear()
    _resume.clear()
    _tagged.clear()
    search.forget()
    cache.clear(keep_stats=False)
