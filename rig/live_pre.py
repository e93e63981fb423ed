"""Drags solved before Blender evaluates them: one evaluation per update instead of two.

A `depsgraph_update_post` handler sees a moved control only once Blender has evaluated the move, and the pose
it writes costs a second evaluation of the armature: on the rig Set Up Character makes, ~0.13 ms each, half
of what Blender's own IK costs for the whole update. Set Up Character's control bones hang from no bone and
have no constraint or driver, so where Blender will put them is known before it evaluates: the bone's rest
matrix times its channels (`Matrix.LocRotScale`). So `solve_before` (from `depsgraph_update_pre`), when the
only channels that changed since the rig's last check are those of such control bones, solves their chains
on the compiled program (`rig.live_program`, as a post update would) and writes the pose before the
evaluation: one evaluation shows the moved control and the limb that follows it.

Everything it assumed is checked after the evaluation (`check_after`, from `depsgraph_update_post`): the
armature's world matrix, the evaluated pose of the bone above each solved chain, and each moved control where
Blender put it (within float32 rounding of the prediction; a chain that says 'reached' must still be within
its tolerance of the control as shown). Only then does the post handler skip the rig, after noting the
controls as Blender shows them in its fingerprint. When a check fails, nothing is noted: the post handler finds
the control moved and solves its chain again on what Blender shows (a second evaluation, as without this
module), so a status never rests on a guess. Why a rig cannot take this path is decided once per compiled
program check (`_guessable`): Full Body, controls with a parent, constraints or drivers, rigs other rigs follow
or that follow others, an Influence below 1 (the program's own check), a stretch to undo.
"""

from __future__ import annotations

from dataclasses import dataclass

import bpy
import numpy as np
from mathutils import Matrix
from numpy.typing import NDArray

from ..core import body_live
from ..core.live import Program
from ..core.model import ChainOutcome
from . import anim as anim_paths
from . import armature, cache, fk
from .fingerprint import Seen
from .live_program import Lean, lean_body, lean_order, lean_scalar, note_solved
from .props import rig_settings

F64 = NDArray[np.float64]
# A control Blender put farther than this (relative to the armature's size) from where it was predicted is a
# failed guess: float32 rounding of rest @ basis is ~1e-7; anything more means the prediction was wrong.
_NEAR = 1e-5


@dataclass
class _Ready:
    """What a rig's guesses need, worked out once per check of its compiled program (`_guessable`)."""

    checked: Seen  # the fingerprint the program's check was for
    rest: dict[int, Matrix]  # control bone -> its rest matrix (armature space)
    rows: dict[int, list[int]]  # control bone -> the fingerprint rows (target or pole) it fills
    attrs: tuple[tuple[str, int], ...]  # the channels read and compared (location, scale, the modes' rotations)
    modes: bytes  # the rotation modes `attrs` was chosen for
    buffer: NDArray[np.float32]  # the channels `attrs` of every bone, read into one buffer
    before: NDArray[np.float32]  # every channel as the fingerprint holds it (its arrays are views of it), `attrs` first
    slices: dict[str, NDArray[np.float32]]  # attr -> its part of `buffer`, flat
    bone_at: NDArray[np.int64]  # position in `buffer` -> its bone
    world: Matrix  # the armature's world matrix the fingerprint holds
    near: float  # `_Guess.near`
    turn: float  # `_Guess.turn`
    quiet: int  # `_Guess.quiet`


@dataclass
class _Guess:
    """What a solve before the evaluation assumed (`check_after` compares it with what Blender shows)."""

    last: Seen
    world: Matrix  # the armature's world matrix, as the solve read it
    near: float  # how far (world space) Blender may put a control from its prediction: float32 rounding
    turn: float  # the same for the entries of its rotation and scale
    parents: dict[int, Matrix]  # bone above a solved chain -> its pose as the solve read it
    predicted: dict[int, Matrix]  # fingerprint row of a moved control -> its world matrix as predicted
    outcomes: dict[int, ChainOutcome]
    posed: tuple[str, ...]  # the channels of every bone the solve posed (their rotations; Full Body's root location)
    # The armature's driver count when none of its drivers sets a pose channel (-1: one does): with no action
    # and no NLA either, the evaluation cannot set a channel and `check_after` does not read them back.
    quiet: int


def _guessable(obj: bpy.types.Object, uid: int, lean: Lean, last: Seen) -> _Ready | None:
    """The rig's `_Ready` for the fingerprint its program was last checked against, or None when its controls'
    pose cannot be predicted from their channels (worked out once per fingerprint: `cache.guess_ready`)."""
    hit = cache.guess_ready.get(uid)
    if hit is None or hit[0] is not last or (hit[1] is not None and hit[1].modes != lean.modes):
        hit = cache.guess_ready[uid] = (last, _work_out(obj, lean, last))
    ready: _Ready | None = hit[1]
    return ready


def _work_out(obj: bpy.types.Object, lean: Lean, last: Seen) -> _Ready | None:
    """`_guessable`'s verdict, worked out: None when a control's pose is not rest @ channels (a parent, a
    constraint, a driver, Local Location off) or the rig's program has no control bones."""
    if (lean.body and lean.found is None) or not lean.own or last.arrays is None or len(last.world) != 128:
        return None
    pbs = obj.pose.bones
    anim = obj.animation_data
    driven = {d.data_path for d in anim.drivers} if anim is not None else set()
    rest: dict[int, Matrix] = {}
    for b in lean.own:
        pb = pbs[b]
        if pb.parent is not None or len(pb.constraints) or not pb.bone.use_local_location:
            return None  # its pose depends on more than its channels, or on them otherwise than rest @ basis
        prefix = f'pose.bones["{bpy.utils.escape_identifier(pb.name)}"]'
        if any(path.startswith(prefix) for path in driven):
            return None  # a driver sets its channels as Blender evaluates
        rest[b] = pb.bone.matrix_local.copy()
    rows: dict[int, list[int]] = {}
    for row, bone in lean.row_bone.items():
        rows.setdefault(bone, []).append(row)
    n = len(pbs)
    if any(a.shape[0] != n for a in last.arrays.values()):
        return None
    # The channels a guess reads and compares: location, scale and the rotation channels some bone's mode uses
    # (a change to a channel no mode uses moves nothing; the full path's next check still sees it).
    used = {
        armature.rotation_channel(armature.MODE_NAMES[v])[0] for v in set(np.frombuffer(lean.modes, np.int32).tolist())
    }
    widths = {attr: int(a.shape[1]) for attr, a in last.arrays.items()}
    order = sorted(widths, key=lambda attr: attr not in used and attr not in ("location", "scale"))
    attrs = tuple((attr, widths[attr]) for attr in order if attr in used or attr in ("location", "scale"))
    size = sum(n * w for _a, w in attrs)
    buffer = np.empty(size, dtype=np.float32)
    # The fingerprint's channel arrays become views of one buffer (same values; every later change to them is
    # in place), the channels a guess reads first, so it compares them in one operation.
    before = np.concatenate([last.arrays[attr].ravel() for attr in order])
    slices, at = {}, 0
    owners = []
    for attr in order:
        width = widths[attr]
        if at < size:
            slices[attr] = buffer[at : at + n * width]
            owners.append(np.repeat(np.arange(n, dtype=np.int64), width))
        last.arrays[attr] = before[at : at + n * width].reshape(n, width)
        at += n * width
    world = np.frombuffer(last.world, dtype=np.float64).reshape(4, 4)
    # Float32 rounding of rest @ basis at the armature's size (its scale times its bones' reach).
    scale = max(float(np.abs(world[:3, :3]).max()), 1e-12)
    near = _NEAR * scale * max(float(np.abs(last.pose[:, :3, 3]).max()), 1.0) if last.pose is not None else 0.0
    return _Ready(
        last,
        rest,
        rows,
        attrs,
        lean.modes,
        buffer,
        before,
        slices,
        np.concatenate(owners),
        Matrix(world.tolist()),
        near,
        _NEAR * scale,
        quiet_drivers(obj),
    )


@dataclass(frozen=True)
class _Links:
    """What solving links `order` (parents first) asks of a guess, the same on every update that moves the same
    controls (kept with the program: `Lean.link_sets`)."""

    order: list[int]
    above: list[int]  # the bone above each chain, where none of the solved bones moves it: read as evaluated
    channels: tuple[str, ...]  # the channels of every bone the solve poses: the evaluation must leave them
    chains: list[int]  # the chains' indices (`rig.live.lean_order`)


_UNSEEN = object()


def _links(
    program: Program, order: list[int], found: body_live.Captured | None = None, modes: NDArray[np.int32] | None = None
) -> _Links:
    """`_Links` of `order`; with `found` (Full Body) the body stage's bones count as posed (they move what hangs
    below them) and their channels (in `modes`, every bone's rotation mode value) and the root's location too."""
    links = [program.links[j] for j in order]
    posed = {b for link in links for b in link.posed}
    sk = program.snap.sk
    above = [link.parent for link in links]
    channels = {
        attr for link in links for _b, (attr, _mode) in zip(link.posed, [*link.channel, link.tip_channel], strict=False)
    }
    if found is not None:
        posed.update(found.bones)
        above.append(int(sk.parent[found.root]))
        assert modes is not None
        channels.update(armature.rotation_channel(armature.MODE_NAMES[int(modes[b])])[0] for b in found.bones)
        channels.add("location")
    reads = [p for p in dict.fromkeys(above) if p >= 0 and p not in posed and posed.isdisjoint(sk.ancestors(p))]
    return _Links(order, reads, tuple(sorted(channels)), [link.chain.index for link in links])


def solve_before(obj: bpy.types.Object, uid: int, again: frozenset[int]) -> bool:
    """From `depsgraph_update_pre`: when only control bones of `obj` moved since its last check, solve their
    chains (and `again`: chains a cut search left) and write the pose now; False (nothing written) otherwise."""
    cache.guesses.pop(uid, None)  # a guess no post update checked: its fingerprint was not noted, nothing to undo
    last: Seen | None = cache.fingerprints.get(uid)
    lean: Lean | None = cache.programs.get(uid)
    if last is None or lean is None or lean.checked is not last or not lean.ok or isinstance(lean.program, str):
        return False
    if last.arrays is None or last.mats is None or last.pose is None or cache.hangs.get(uid):
        return False
    ready = _guessable(obj, uid, lean, last)
    if ready is None:
        return False
    if any(a.base is not ready.before for a in last.arrays.values()):
        return False  # not the arrays `_work_out` made views of (a fingerprint's arrays change in place only)
    pbs = obj.pose.bones
    for attr, _width in ready.attrs:
        pbs.foreach_get(attr, ready.slices[attr])
    size = ready.buffer.shape[0]
    moved_bones = set(ready.bone_at[np.flatnonzero(ready.buffer != ready.before[:size])].tolist())
    if not moved_bones and not again:
        return False  # nothing of ours moved: the post handler checks what did
    if not moved_bones.issubset(ready.rest) or not again <= lean.chains.keys():
        return False  # a bone posed by hand (or a NaN): the post handler's
    modes = armature.rotation_mode_values(obj)
    if modes.tobytes() != lean.modes:
        return False
    world = obj.matrix_world.copy()
    if world != ready.world:
        return False
    predicted: dict[int, Matrix] = {}
    changed = set(again)
    for b in moved_bones:
        # Blender's own matrix_basis of the channels just read (as `armature.basis_matrix` builds it, in C).
        at = ready.rest[b] @ pbs[b].matrix_basis
        m = world @ at
        t = m.translation
        if not abs(t.x) + abs(t.y) + abs(t.z) < 1e30:
            return False  # NaN or infinite: the full path refuses it with a message
        for row in ready.rows.get(b, ()):
            predicted[row] = m
            changed.add(lean.row_chain[row])
    if not changed:
        return False
    program = lean.program
    found = lean.found if lean.body else None
    links: _Links | None
    if found is not None:
        if any(spine[0].index in changed for spine in found.spine):
            return False  # the spine's control moved: its solve (the pre-body pose) is the full path's
        # Every limb: the body may move what each hangs from (as `solve_lean`).
        order = sorted((program.by_chain[c.index] for c in found.anchors), key=lambda j: program.links[j].level)
        links = _links(program, order, found, modes)
    else:
        # The same controls moved update after update of a drag: what they ask of the program is kept with it.
        key = frozenset(changed)
        links = lean.link_sets.get(key, _UNSEEN)  # type: ignore[assignment]
        if links is _UNSEEN:
            order_or_none = program.closure(changed)
            links = lean.link_sets[key] = None if order_or_none is None else _links(program, order_or_none)
    if links is None:
        return False
    order = links.order
    text = obj.get(fk.NAMES_KEY)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if text != lean.store_names or held is None or held.shape[0] != lean.store_size:
        return False
    # The bone above each chain, as the last evaluation left it: the solve assumes Blender puts it there again
    # (`check_after`); those below a chain solved now move with it, as the program carries them.
    parents = {p: pbs[p].matrix.copy() for p in links.above}

    def matrix(ob: bpy.types.Object, row: int) -> Matrix:
        m = predicted.get(row)
        if m is not None:
            return m
        bone = lean.row_bone.get(row)
        return ob.matrix_world.copy() if bone is None else world @ pbs[bone].matrix

    # The channel arrays the program writes into hold what the user set on the controls (nothing else differs).
    ready.before[:size] = ready.buffer
    lean_order[:] = links.chains
    if found is None:
        outcomes = lean_scalar(obj, lean, order, matrix, last.arrays, held)
    else:
        outcomes = lean_body(obj, lean, found, order, matrix, last.arrays, held)
    last.channels = None
    cache.checks[uid] = cache.checks.get(uid, 0) + 1
    note_solved(obj, uid, outcomes)
    cache.guesses[uid] = _Guess(
        last, world, ready.near, ready.turn, parents, predicted, outcomes, links.channels, ready.quiet
    )
    cache.guessed[uid] = cache.guessed.get(uid, 0) + 1
    return True


def quiet_drivers(obj: bpy.types.Object) -> int:
    """The armature's driver count when none of its drivers sets a pose channel (Set Up Character's set the
    follow constraints' influence), else -1: `animated`'s memory of what its drivers set."""
    anim = obj.animation_data
    if anim is None:
        return 0
    drivers = anim.drivers
    return -1 if any(anim_paths.sets_channel(d.data_path) for d in drivers) else len(drivers)


def animated(obj: bpy.types.Object, quiet: int) -> bool:
    """Whether Blender's evaluation of `obj` may set a pose channel: an action or an NLA track, or a driver on
    a channel (`quiet`: `quiet_drivers` when the guess was made; a driver added since counts as one). Another
    add-on's handler writing channels after the evaluation is not animation: the next update's channels, read
    before its evaluation, differ from the fingerprint's then, and that update is solved after it."""
    anim = obj.animation_data
    if anim is None:
        return False
    return quiet < 0 or anim.action is not None or bool(len(anim.nla_tracks)) or len(anim.drivers) != quiet


def check_after(obj: bpy.types.Object, uid: int) -> bool:
    """From `depsgraph_update_post`: whether the guess `solve_before` made for `obj` holds in the pose Blender
    evaluated; if so, the rig's fingerprint takes the controls where Blender put them (the update is done).
    False when there was no guess, or it failed: the post handler solves the rig as usual."""
    guess: _Guess | None = cache.guesses.pop(uid, None)
    if guess is None:
        return False
    last: Seen | None = cache.fingerprints.get(uid)
    lean: Lean | None = cache.programs.get(uid)
    if last is not guess.last or lean is None or lean.checked is not last or last.arrays is None:
        return False
    world = obj.matrix_world
    if world != guess.world:
        return False
    pbs = obj.pose.bones
    for p, m in guess.parents.items():
        if pbs[p].matrix != m:
            return False  # the bone above a chain moved as Blender evaluated (a constraint, a driver)
    # Only animation sets a channel as Blender evaluates: without it, what the solve wrote and read stands and is
    # not read back (~7 us of every update).
    for attr in guess.posed if animated(obj, guess.quiet) else ():
        # Every bone's values of the channel, read at once (a read per posed bone costs twice as much): the
        # solve's as written, the others' as read before the evaluation (one the evaluation changed, a driver
        # reading a control, fails here, as it would fail the next update's prediction).
        held = last.arrays[attr]
        now = np.empty(held.size, dtype=np.float32)
        pbs.foreach_get(attr, now)
        if not np.array_equal(now, held.ravel()):
            return False  # the evaluation set a channel the solve posed or read (animation or a driver written back)
    slack = 0.0
    noted: dict[int, tuple[int, Matrix]] = {}
    for row, predicted in guess.predicted.items():
        bone = lean.row_bone[row]
        shown = pbs[bone].matrix
        off = world @ shown - predicted
        moved = off.translation.length
        if not moved <= guess.near:
            # Blender put the control elsewhere than its channels said (a constraint or driver added since the
            # rig's controls were looked at): looked at again before the next guess.
            cache.guess_ready.pop(uid, None)
            return False
        # Its rotation matters only to a chain that takes the control's orientation (Target Rotation).
        if row in lean.turned and max(abs(x) for c in off.to_3x3().col for x in c) > guess.turn:
            cache.guess_ready.pop(uid, None)
            return False
        slack = max(slack, moved)
        noted[row] = (bone, shown.copy())
    tolerance = rig_settings(obj).tolerance
    if slack and any(out.reached and out.residual + slack > tolerance for out in guess.outcomes.values()):
        return False  # 'reached' on the prediction, maybe not on the control as shown: solved again
    # The fingerprint takes the controls as Blender shows them, at the rig's next check (`note`): numpy work
    # a drag of many updates does once, at its end.
    hit = cache.notes.get(uid)
    if hit is not None and hit[0] is last:
        hit[1].update(noted)
    else:
        cache.notes[uid] = (last, noted)
    return True


def note(uid: int) -> None:
    """The controls Blender showed after the guesses `check_after` accepted, into the rig's fingerprint (as
    `_Own.note` puts them: float64 from the float32 values, the world matrix times their pose), so its next
    check compares like with like."""
    hit = cache.notes.pop(uid, None)
    if hit is None:
        return
    last, noted = hit
    lean: Lean | None = cache.programs.get(uid)
    if cache.fingerprints.get(uid) is not last or lean is None or last.mats is None or last.pose is None:
        return  # the fingerprint was replaced (or dropped): it has its own reading
    rows = list(noted)
    bones = [noted[row][0] for row in rows]
    pose = np.array([[r[:] for r in noted[row][1]] for row in rows], dtype=np.float64)
    now = last.mats[0] @ pose
    last.pose[bones] = pose
    last.mats[rows] = now
    for k, row in enumerate(rows):
        lean.seen[row] = tuple(now[k, :3, 3].tolist())
    roots = cache.roots.get(uid)
    if roots is not None:
        last.roots = last.pose[roots[2]].tobytes()
