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

import bpy
import numpy as np
from bpy.app.handlers import persistent
from numpy.typing import NDArray

from ..core import body_live
from ..core.model import Group, Plan
from ..solvers import search
from . import anim, armature, cache, fk, follow, live_pre, lookahead, renames
from .fingerprint import Objects as _Objects
from .fingerprint import Seen as _Seen
from .live_program import lean_order, program_full, recheck, solve_lean
from .props import rig_settings
from .snapshot import ChainState, Entry, LiveReads, chain_state, read_live
from .solve import solve_rig, store_status

F64 = NDArray[np.float64]
_busy = False
# Whether updates that move only targets and poles take the compiled program (`solve_lean`). Tests and
# bench/live.py turn it off to compare with the full path; nothing else does.
use_program = True
# Seconds of the global stage per rig and update of a drag (None: unbounded). Bounded, a search under limits
# that bind goes on over the next updates, so where it lands depends on how the clock cut it: tests that
# compare live poses for equality set None.
stage_budget: float | None = search.LIVE_BUDGET
# Whether a drag's update may leave the global stage to the updates that carry it on (`search.defer_stage`).
defer_stage = True
# Whether a drag of a rig's own control bones is solved before Blender evaluates it (`rig.live_pre`: one
# evaluation per update instead of two). Tests and bench/live.py turn it off to compare; nothing else does.
solve_before = True
_suspended: set[int] = set()  # session_uid of armatures being baked: the bake solves them itself
_shown: dict[int, int] = {}  # scene session_uid -> the frame its last update or frame change showed
_listed: set[int] = set()  # session uids of the IDs the last depsgraph update listed (`on_depsgraph_pre`)
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
    """The live check's read (`snapshot.read_live`), and what this rig follows and depends on.

    That bookkeeping stays here (`note_follows`, run by the read once it has the chains' targets and poles and
    before it reads any world matrix): it is this handler's own state, not a read (what the targets hang from,
    the order the scene's rigs are solved in, which updates concern this rig, targets carried with a rig
    solved earlier in the same update), and it needs `rig.follow`, which `rig.snapshot` cannot import
    (rig.follow imports rig.solve, which imports rig.snapshot).
    """
    uid = obj.session_uid
    entries: list[Entry] | None = None  # the targets and poles as read, when what the chains point at changed

    def note_follows(state: ChainState, objects: list[Entry], world: armature.WorldMatrices) -> None:
        nonlocal entries
        known = cache.depends.get(uid)
        if known is None or known[0] != state:
            # What the chains point at changed (or is not known yet): what this rig follows, and depends on.
            entries = objects
            hangs = _hangs_of(obj, objects)
            if cache.hangs.get(uid) != hangs:
                cache.hangs[uid] = hangs
                cache.scene_rigs.clear()  # list the rigs again, in the new dependency order
        if moved:
            _carry(world, obj, moved)

    seen, reads, objects = read_live(obj, note_follows)
    # What can change this rig's solve: itself (pose, transform, settings), its armature data, and the
    # objects it reaches for. Blender lists an object as updated when anything it depends on moved (a
    # parent, a constraint target, a driver), so these IDs are enough to skip unrelated updates.
    if entries is not None:
        # Bone targets: their armature data too (a bone renamed lists only the data).
        bones = (o.data.session_uid for o, b in entries if b and o.data is not None)
        ids = (uid, obj.data.session_uid, *(o.session_uid for o, _b in entries), *bones)
        cache.depends[uid] = (reads.state, frozenset(ids))
    return seen, reads, objects


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
        # (An array whose bytes compare equal, as most do, skips the row-by-row test.)
        moved_rows: set[int] = set()
        if objects.mats.tobytes() != last.mats.tobytes():
            moved_rows.update(np.flatnonzero((objects.mats != last.mats).any(axis=(1, 2))).tolist())
        posed: set[int] = set()
        for attr, now in seen.arrays.items():
            before = last.arrays[attr]
            if now.tobytes() != before.tobytes():
                posed.update(np.flatnonzero((now != before).any(axis=1)).tolist())
        if seen.pose is not None and last.pose is not None and seen.pose.tobytes() != last.pose.tobytes():
            posed.update(np.flatnonzero((seen.pose != last.pose).any(axis=(1, 2))).tolist())
        # A NaN on any bone (one in no chain too) refuses the whole rig: the full solve's check says so. (Rows
        # that did not change were finite at the last check, or it refused them and the rig is solved again.)
        if posed and not all(np.isfinite(now).all() for now in seen.arrays.values()):
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
    select = _select(obj, seen, None if reads.settings.full_body else last, reads, objects)
    planned = cache.plans.get(uid)
    if use_program and not carry and last is not None and planned is not None:
        shown_now = program_full(obj, uid, seen, last, reads, objects, planned[1], select)
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
    store_status(obj, report, before, settings=reads.settings)
    # Our write changed only rotation channels (and the Y scale of stretching chains), and `reads.channels`
    # now holds exactly the float32 values written (foreach_set stores them as given), so it stands for a
    # re-read: the write is no change.
    seen.after_write(reads.channels)
    cache.fingerprints[uid] = seen


def program_solve_count(obj: bpy.types.Object) -> int:
    """How many of `obj`'s live solves took the compiled program (`solve_lean`) in this session."""
    return cache.program_solves.get(obj.session_uid, 0)


def guess_count(obj: bpy.types.Object) -> int:
    """How many of `obj`'s live solves were made before Blender evaluated the update (`rig.live_pre`), whether
    or not the evaluation confirmed them (a solve it did not confirm is made again after it)."""
    return cache.guessed.get(obj.session_uid, 0)


def full_program_solve_count(obj: bpy.types.Object) -> int:
    """How many of `obj`'s full-path live solves (frame changes, bones posed by hand) took the compiled
    program instead of `core.solve` (`program_full`) in this session."""
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


def _run(scene: bpy.types.Scene, updated: set[int] | None, frame_change: bool = False) -> None:
    """Check every rig of `scene` whose inputs may have changed (`updated`: IDs Blender re-evaluated; None: all;
    `frame_change`: a frame change, which may take frames solved ahead)."""
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
            untouched = False
            if not follows and updated is not None and not dirty:
                deps = cache.depends.get(uid)
                untouched = deps is not None and deps[1].isdisjoint(updated)
            if (dirty or updated is not None) and not untouched and lookahead.pending(uid):
                lookahead.changed(uid)  # an update listed what it reads: frames solved ahead are checked when quiet
            if uid in cache.guesses and live_pre.check_after(obj, uid) and _only_itself(obj, uid, updated):
                continue  # solved before this evaluation, and Blender shows what that solve assumed
            if untouched:
                continue  # nothing this rig reads was re-evaluated: the cheap, common case
            cache.dirty.discard(uid)
            if uid in cache.notes:
                live_pre.note(uid)  # controls shown after guesses this rig took (their numpy work, once)
            own_frame: set[int] | None = None
            if frame_change and use_program and not dirty and not follows and uid not in leaders:
                own_frame = _own_animation(obj, uid, rig_settings(obj).full_body)
            if (updated is None or dirty) and own_frame is None:
                # A frame change (or a setting) may change anything, rotation modes too: check the compiled
                # program again before its next use (`solve_lean`). Not a frame change that only the rig's own
                # pose channels animate (`_own_animation`): `solve_lean` compares the armature as for a drag
                # (`_own_moved`: bones, rotation modes, transform, every channel but the controls'), and
                # anything else goes to the full path, which checks again. Checking on every frame would
                # measure the chains' shapes again each time (~0.5 ms a frame for Full Body).
                recheck(uid)
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
            if frame_change and not dirty and not follows and uid not in leaders:
                if lookahead.play(obj, uid, scene):
                    continue  # a frame solved ahead, and Blender shows what it was solved for
                lookahead.want(uid)
            try:
                # A frame change takes the lean path only as the update `_own_animation` made of it.
                lean = use_program and updated is not None and not dirty and not follows and uid not in leaders
                rig_updated = updated if own_frame is None else own_frame
                lean = lean or own_frame is not None
                # Chains whose search the budget cut in the last (lean) update: solved again now, moved or not.
                again = _resume.pop(uid, frozenset())
                # The global stage within a budget per rig and update; a search the budget cut goes on in the
                # next update (the rig is solved again then, whatever moved).
                # Frame changes solve unbounded: playback poses as the render and the bake do.
                lean_order.clear()
                # A drag's update may leave the stage to the updates that carry it on (`search.defer_stage`):
                # those run when the target stands still, and search.
                bounded = stage_budget if updated is not None else None
                carried = uid in _tagged  # an update `carry_on` asked for: it searches
                _tagged.discard(uid)
                with search.budget(bounded) as spent, search.deferring(defer_stage and not carried):
                    took = lean and solve_lean(obj, uid, rig_updated, again)  # type: ignore[arg-type]  # a set, if lean
                    if not took:
                        lean_order.clear()
                        if again:
                            cache.fingerprints.pop(uid, None)  # the full path solves every chain again
                        _solve_live(obj, moved, uid in leaders)
                if spent.cut:
                    _carry_on_later(uid, frozenset(lean_order) if took else None, still=not carried)
            except Exception:
                _report_failure(obj, uid)
        # Rigs that follow one solved now in a way `_carry` cannot predict: solved again at the next update.
        follow.settle(rigs, counts, _suspended)
    finally:
        _busy = False
        _skip_once.clear()  # for this check only


def _own_animation(obj: bpy.types.Object, uid: int, full_body: bool) -> set[int] | None:
    """For a frame change of a Full Body rig whose inputs are all its own (its targets and poles its control
    bones) and whose animation sets nothing but pose channels (`anim.pose_curves`: no keyed setting, such as an
    Influence, that the lean path would not see): the IDs to solve it as an update that listed the armature
    alone, so a frame that moves only the limbs' controls (an animator's keys) takes the body stage and the
    compiled program (`solve_lean`) as a drag does, and anything else the full path. None otherwise: the full
    path (`program_full` takes the frame changes of rigs without Full Body)."""
    if not full_body:
        return None
    deps = cache.depends.get(uid)
    own = {uid, obj.data.session_uid}
    if deps is None or not deps[1] <= own:
        return None
    return None if isinstance(anim.pose_curves(obj), str) else own


def _report_failure(obj: bpy.types.Object, uid: int) -> None:
    """One rig's failure never stops the others: print each distinct failure once (from an `except`)."""
    text = traceback.format_exc()
    if cache.reported.get(uid) != text:
        cache.reported[uid] = text
        print(f"Reach IK: solving '{obj.name}' failed (other rigs go on):\n{text}")


def _only_itself(obj: bpy.types.Object, uid: int, updated: set[int] | None) -> bool:
    """Whether, of what `obj` depends on, this update listed only the armature itself (and its data)."""
    deps = cache.depends.get(uid)
    if updated is None or deps is None or uid in cache.dirty:
        return False
    return deps[1].intersection(updated) <= {uid, obj.data.session_uid}


@persistent
def on_depsgraph_pre(scene: bpy.types.Scene, *_args: object) -> None:
    """Before Blender evaluates an update: rigs whose own control bones alone moved are solved now
    (`rig.live_pre`), so one evaluation shows the controls and the pose. No depsgraph comes with it, and it
    runs only when something was tagged (not for frame changes): rigs the last update did not list are
    skipped (the first update of a drag is solved after its evaluation, the next ones before theirs)."""
    global _busy
    if _busy or paused or not (use_program and solve_before):
        return
    rigs = cache.scene_rigs.get(scene.session_uid)
    if not rigs or _listed.isdisjoint(cache.programs):
        return  # no rig the last update listed has a compiled program (a scene's many idle rigs: one test)
    _busy = True
    try:
        try:
            uids = [ob.session_uid for ob in rigs]
        except ReferenceError:
            return  # an object of the list was removed: the post handler lists the rigs again
        leaders = {a for u in uids for a, _b, _o in cache.hangs.get(u, ())}
        for obj, uid in zip(rigs, uids, strict=True):
            if (
                uid not in _listed
                or uid not in cache.programs
                or uid in leaders
                or uid in cache.dirty
                or uid in _suspended
                or uid in _tagged
                or uid in _skip_once
                or obj.mode == "EDIT"
                or not rig_settings(obj).live
            ):
                continue
            again = _resume.pop(uid, frozenset())
            try:
                lean_order.clear()
                with search.budget(stage_budget) as spent, search.deferring(defer_stage):
                    took = live_pre.solve_before(obj, uid, again)
                if not took:
                    if again:
                        _resume[uid] = _resume.get(uid, frozenset()) | again
                    continue
                if spent.cut:
                    _carry_on_later(uid, frozenset(lean_order), still=True)
            except Exception:
                cache.guesses.pop(uid, None)
                if again:
                    _resume[uid] = _resume.get(uid, frozenset()) | again  # the post handler solves them
                _report_failure(obj, uid)
    finally:
        _busy = False


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
    # The next update's solve before the evaluation looks only at rigs this one listed (a drag lists its rig
    # on every update): the others cost it one set test, not a read of their channels.
    _listed.clear()
    if not structural:
        _listed.update(updated)
    _run(scene, None if structural else updated)
    _shown[scene.session_uid] = scene.frame_current


@persistent
def on_frame_change_pre(scene: bpy.types.Scene, *_args: object) -> None:
    """Before Blender evaluates the playback range's first frame: each live rig's chain bones that no
    animation sets get their FK values back (`fk.start_over`), so playback starts there as the bake and
    renders do, on every loop, and the frames after it follow as they were solved ahead."""
    if _busy or paused or scene.frame_subframe != 0.0 or scene.frame_current != lookahead.frame_range(scene)[0]:
        return
    if _shown.get(scene.session_uid) == scene.frame_current:
        return  # the frame shown already (`frame_set` of the current frame): nothing starts over
    try:
        rigs = list(_scene_rigs(scene))
    except ReferenceError:
        cache.scene_rigs.clear()
        rigs = list(_scene_rigs(scene))
    for obj in rigs:
        uid = obj.session_uid
        if uid in _suspended or obj.mode == "EDIT":
            continue
        settings = rig_settings(obj)
        if not settings.live or not any(ch.enabled for ch in settings.chains):
            continue
        try:
            fk.start_over(obj)
        except Exception:
            _report_failure(obj, uid)


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    # No list of what changed comes with a frame change: every rig compares its inputs.
    lookahead.touch()
    if not paused:
        _run(scene, None, frame_change=True)
    _skip_once.clear()
    _shown[scene.session_uid] = scene.frame_current


@persistent
def on_load(*_args: object) -> None:
    # Session uids, pointers and cached object lists belong to the previous file (or undo state).
    cache.clear()
    _listed.clear()
    _shown.clear()
    lookahead.clear()


_HANDLERS = (
    ("depsgraph_update_pre", on_depsgraph_pre),
    ("depsgraph_update_post", on_depsgraph_update),
    ("frame_change_pre", on_frame_change_pre),
    ("frame_change_post", on_frame_change),
    ("load_post", on_load),
    ("undo_post", on_load),
    ("redo_post", on_load),
)


_carrying: set[int] = set()


_resume: dict[int, frozenset[int]] = {}  # rig uid -> chains the budget cut in a lean update (`lean_order`)
_tagged: set[int] = set()  # rigs `carry_on` tagged: their next update searches (no `search.defer_stage`)


def _carry_on_later(uid: int, chains: frozenset[int] | None, still: bool) -> None:
    """The budget cut a search of rig `uid` (or a drag deferred it): solve it again after this update, from a
    timer (tagging it inside the handler would not make Blender evaluate it again). `chains`: what a lean
    update solved (the next one solves them again, on the program too); None: the full path solves it all.
    `still`: wait until no update asked for it for `CARRY_AFTER` seconds (a drag's: the target must stand
    still); else at once (a search the budget cut while the target stood still goes on)."""
    if chains:
        _resume[uid] = _resume.get(uid, frozenset()) | chains
    else:
        cache.fingerprints.pop(uid, None)
        cache.dirty.add(uid)
    _carrying.add(uid)
    global _carry_due
    now = time.monotonic()
    _carry_due = now + CARRY_AFTER if still else now
    registered = bpy.app.timers.is_registered(_carry_on_when_due)
    if registered and not still:
        bpy.app.timers.unregister(_carry_on_when_due)  # it may be waiting for a drag: go on at once
        registered = False
    if not registered:
        bpy.app.timers.register(_carry_on_when_due, first_interval=CARRY_AFTER if still else 0.0)


CARRY_AFTER = 0.05
"""Seconds without a drag's update before the search it deferred runs: while a drag goes on, every update
solves its new target anyway, and a search for a target already left behind is wasted; once the target
stands still this long, the search goes on (a viewport repaints at about this rate)."""
_carry_due = 0.0


def _carry_on_when_due() -> float | None:
    """The timer of `_carry_on_later`: `carry_on` once due (a drag's update pushes it back)."""
    wait = _carry_due - time.monotonic()
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
    if bpy.app.timers.is_registered(_carry_on_when_due):
        bpy.app.timers.unregister(_carry_on_when_due)
    _carrying.clear()
    _resume.clear()
    _tagged.clear()
    lookahead.clear()
    search.forget()
    cache.clear(keep_stats=False)
