"""The live program's side of the rig layer (`core/live.py` solves, this module reads and writes for it):
the rig compiled for lean updates (`Lean`, `compile_lean`, `_check`), the updates that move only targets, poles
and control bones (`solve_lean`: `_own_moved` finds which, `lean_scalar`, `lean_body` and `_lean_batch` solve and
write), and full-path updates handed to the program (`program_full`). `rig.live` decides which path an update
takes; see docs/design/live-solving.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import bpy
import numpy as np
from mathutils import Matrix, Vector
from numpy.typing import NDArray

from ..core import body_live
from ..core import solve as core
from ..core.checks import check_inputs
from ..core.live import Program
from ..core.messages import mark_body_blocked
from ..core.model import ChainOutcome, Group, Plan, RigReport, Snapshot
from ..solvers.scalar import SCALAR_MAX_CHAINS
from . import armature, cache, fk
from . import body as rig_body
from .chains import rig_problem
from .fingerprint import Objects as _Objects
from .fingerprint import Seen as _Seen
from .props import rig_settings
from .snapshot import LiveReads, read_inputs, snapshot
from .solve import store_status

F64 = NDArray[np.float64]

lean_order: list[int] = []  # chain indices the current `solve_lean` solved (`rig.live` carries them on)


def program_full(
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
    lean: Lean | None = cache.programs.get(uid)
    if lean is None or lean.plan is not plan or lean.modes != modes.tobytes():
        # Compiled as `solve_lean` compiles it (playback alone never drags a control).
        lean = cache.programs[uid] = compile_lean(obj, plan, modes)
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
    # The armature-wide checks (scale, overrides: `snapshot.prepare`) for its transform now (it may be animated).
    checked = (reads.world_key, reads.system_override)
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
    if not lean.driven.issuperset(store.names):
        return None  # a stored bone no chain drives any more: `solve_rig` gives it its FK value back
    if not (
        np.array_equal(channels["location"][posed], last.arrays["location"][posed])
        and np.array_equal(channels["scale"], last.arrays["scale"])
    ):
        # A chain bone's own geometry moved, or a bone's scale (which scales the bones below it): the chains'
        # shapes are measured anew.
        program.forget()
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
    store_status(obj, RigReport(outcomes=shown), before, result.outcomes, reads.settings)
    return shown


@dataclass
class Lean:
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
    row_chain: dict[int, int] = field(default_factory=dict)  # fingerprint row of a target or pole -> its chain
    turned: set[int] = field(default_factory=set)  # rows of targets whose orientation a chain takes
    carried: set[int] = field(default_factory=set)  # bones that are or hang below a bone the program poses
    refused_uids: set[int] = field(default_factory=set)  # targets and poles of chains left to the full solve
    driven: frozenset[str] = frozenset()  # every bone the program poses, by name (`program_full`'s FK store)
    checked: _Seen | None = None  # the fingerprint the last check was for
    ok: bool = False  # that check's verdict
    body: bool = False  # Full Body: the program solves the limbs after the body stage (`lean_body`)
    found: body_live.Captured | None = None  # what the last full solve left for the body stage (`_check`)
    # Controls moved together -> what solving their links asks of a guess (`rig.live_pre._Links`), or None
    # where the program refuses one of them.
    link_sets: dict[frozenset[int], object] = field(default_factory=dict)


def compile_lean(obj: bpy.types.Object, plan: Plan, modes: NDArray[np.int32]) -> Lean:
    """`plan` compiled for lean updates (`program` says why not when it cannot be)."""
    lean = Lean(plan, modes.tobytes(), "")
    sk = armature.skeleton(obj)
    lean.snap = snapshot(obj, sk, plan, with_channels=True, modes=modes)
    lean.body = lean.snap.body is not None
    # Full Body: the program solves the limbs, after the body stage (`lean_body`), on every chain's link.
    program = Program.build(replace(lean.snap, body=None), [armature.MODE_NAMES[v] for v in modes.tolist()])
    if lean.body and isinstance(program, Program) and program.refused:
        program = "Full Body with a chain the program leaves to the full solve"
    lean.program = program
    if isinstance(program, str):
        return lean
    lean.data_uid = obj.data.session_uid
    lean.driven = frozenset(program.snap.sk.names[b] for link in program.links for b in link.posed)
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


def _check(obj: bpy.types.Object, uid: int, last: _Seen, lean: Lean) -> bool:
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
    lean.row_chain = {row: i for i, (_t, _p, t_row, p_row) in lean.chains.items() for row in (t_row, p_row) if row >= 0}
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
    roots: list[int]  # the bones whose pose the fingerprint holds (`snapshot._outside_parents`)

    taken: bool = False  # `take_channels` done

    def take_channels(self, last: _Seen, lean: Lean) -> None:
        """The fingerprint's channel arrays (which the lean path writes whole) take the control bones' rows."""
        assert last.arrays is not None
        if self.taken:
            return
        for attr, now in self.channels.items():
            last.arrays[attr][lean.own] = now[lean.own]
        self.taken = True

    def note(self, last: _Seen, lean: Lean) -> None:
        """The fingerprint takes the control bones as they are now (after a lean solve: the full path's next
        check compares against them)."""
        assert last.arrays is not None and last.pose is not None and last.mats is not None
        own = lean.own
        self.take_channels(last, lean)
        last.pose[own] = self.pose[own]
        last.roots = last.pose[self.roots].tobytes()
        last.mats[list(lean.row_bone)] = last.mats[0] @ self.pose[list(lean.row_bone.values())]
        last.channels = None


def _own_moved(obj: bpy.types.Object, uid: int, last: _Seen, lean: Lean, read: dict[int, Matrix | F64]) -> _Own | None:
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
            changed.add(lean.row_chain[row])
        read[row] = mats[k]  # made a Matrix only where a solve reads it (`solve_lean`'s `matrix`)
    return _Own(changed, moved, channels, pose, roots)


def recheck(uid: int) -> None:
    """Check the rig's compiled program again before its next use: recompiled if its plan or rotation modes
    changed, its chain geometry read afresh, its other conditions checked (`_check`)."""
    lean: Lean | None = cache.programs.get(uid)
    if lean is not None:
        lean.checked = None


def solve_lean(obj: bpy.types.Object, uid: int, updated: set[int], again: frozenset[int] = frozenset()) -> bool:
    """Solve an update that moved only targets and poles of `obj` on its compiled program; False when the
    update needs the full path (`_solve_live`): the rig is not compiled, or the armature itself changed."""
    last: _Seen | None = cache.fingerprints.get(uid)
    planned = cache.plans.get(uid)
    if last is None or planned is None:
        return False
    lean: Lean | None = cache.programs.get(uid)
    listed = uid in updated or (lean.data_uid if lean is not None else obj.data.session_uid) in updated
    if listed and lean is not None and not lean.bones:
        # Posed, transformed, keyed, its settings or bones changed: the full path compares everything, and
        # the next lean update checks the rig again (rotation modes, say).
        recheck(uid)
        return False
    if lean is None or lean.checked is not last:
        modes = armature.rotation_mode_values(obj)
        if lean is None or lean.plan is not planned[1] or lean.modes != modes.tobytes():
            lean = cache.programs[uid] = compile_lean(obj, planned[1], modes)
        if isinstance(lean.program, Program):
            lean.program.forget()  # bone scales, locations or the rest pose may have changed since
    touched = {i for u in updated for i in lean.by_uid.get(u, ())}
    if lean.checked is not last:
        lean.ok = _check(obj, uid, last, lean)
        lean.checked = last
    if not lean.ok or isinstance(lean.program, str):
        if listed:
            recheck(uid)
        return False
    program = lean.program
    if not lean.refused_uids.isdisjoint(updated):
        # A control of a chain the program leaves to the full solve moved (or something it depends on).
        recheck(uid)
        return False
    assert last.arrays is not None and last.mats is not None
    read: dict[int, Matrix | F64] = {}  # row of the fingerprint's matrices -> the matrix read now
    own: _Own | None = None
    if listed:
        # The armature itself changed: the lean path goes on only if what changed is its control bones.
        own = _own_moved(obj, uid, last, lean, read)
        if own is None:
            recheck(uid)
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
            recheck(uid)
            return False  # the spine's control moved: its solve (the pre-body pose) is the full path's
        # Every limb: the body may move what each hangs from (the pinned legs follow the hips).
        closure: list[int] | None = sorted(
            (program.by_chain[c.index] for c in captured.anchors), key=lambda j: program.links[j].level
        )
    else:
        closure = program.closure(changed)
    if closure is None:
        recheck(uid)
        return False  # a chain the program leaves to the full solve moved, or hangs below one that did
    order = closure
    lean_order[:] = [program.links[j].chain.index for j in order]
    text = obj.get(fk.NAMES_KEY)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if text != lean.store_names or held is None or held.shape[0] != lean.store_size:
        recheck(uid)
        return False
    if own is not None:
        # The write below sets whole channel arrays: the control bones' rows must hold what the user set.
        own.take_channels(last, lean)
    outcomes: dict[int, ChainOutcome] | None
    if captured is not None:
        outcomes = lean_body(obj, lean, captured, order, matrix, last.arrays, held)
    elif len(order) > SCALAR_MAX_CHAINS:
        # Many chains at once: numpy batches are faster than one scalar solve after another
        # (bench/scalar.py), on inputs read here without the full path's reading and comparing.
        outcomes = _lean_batch(obj, lean, order, last.arrays, held, world)
        if outcomes is None:
            return False  # broken inputs: the full path refuses them with a message
        cache.batch_solves[uid] = cache.batch_solves.get(uid, 0) + 1
    else:
        outcomes = lean_scalar(obj, lean, order, matrix, last.arrays, held)
    # Only the translation (all the program reads): converting a whole Matrix costs ~17 us. A turned target
    # leaves its row's rotation stale, which can only make the next full check solve its chain again, to the
    # same pose.
    lean.seen.update(moved)
    if len(moved) > 6:
        last.mats[list(moved), :3, 3] = list(moved.values())
    else:
        for row, xyz in moved.items():  # a few rows: one assignment each costs a fifth of a fancy index
            last.mats[row, :3, 3] = xyz
    if own is not None:
        own.note(last, lean)
    last.channels = None
    note_solved(obj, uid, outcomes)
    return True


def note_solved(obj: bpy.types.Object, uid: int, outcomes: dict[int, ChainOutcome]) -> None:
    """Count a solve of `obj` on its compiled program, and show its chains' `outcomes` (the chains it did not
    solve keep theirs)."""
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


def _goals(
    lean: Lean, program: Program, order: list[int], matrix: Callable[[bpy.types.Object, int], Matrix]
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


def lean_scalar(
    obj: bpy.types.Object,
    lean: Lean,
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


def lean_body(
    obj: bpy.types.Object,
    lean: Lean,
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
        # As `lean_scalar`: the channels hold what Reach IK wrote, their FK values stand; the body root's
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
    lean: Lean, mats: F64, touched: set[int], world: armature.WorldMatrices
) -> tuple[list[int], dict[int, tuple[float, ...]]] | None:
    """`solve_lean`'s moved test for many chains at once: the chains among `touched` whose target or pole is no
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
    lean: Lean,
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
