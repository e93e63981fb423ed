"""Playback solved ahead (`core/lookahead.py` solves; this reads what it needs and writes a frame's result).

A rig whose every input on a frame follows from its own action (motion capture set up in one click: keyed
chain bones, keyed control bones as targets and poles, an armature object that is not animated) is solved
for the scene's playback range while nothing happens: a timer (`_tick`) waits for `IDLE` seconds without an
update and a stopped playback, then solves a few frames per call, `SLICE` seconds at most, so the viewport
stays responsive. A frame change (`play`, called by `rig.live` before anything else is read) then takes the
frame's result only when Blender shows what was predicted:

- every bone's channels, byte for byte, as the action gave them when the frame was solved (a key edited,
  a bone posed by hand, anything that changed a channel: no);
- the evaluated pose of every bone the solve reads (the chains, their parents up to the root, the control
  bones) within 1e-5 of the predicted one (a constraint or a driver Blender applies: no);
- the same bones, rest data and rotation modes, world matrix, settings and compiled program, and the FK
  store as the live path would find it.

Otherwise the frame is solved as before (`rig.live`), after the evaluation. Any update that lists the rig
(a key edited, a control moved, a setting) drops what was solved ahead, and the timer solves it again once
things are quiet. The frames a frame change takes write exactly what the solve on the predicted pose wrote,
and the chains' statuses are that solve's, on inputs within 1e-5 of what Blender shows.

In `blender --background` no timer runs: `fill` solves a rig's range at once (the benchmarks and tests call
it). A chain bone whose rotation no key sets (an animator's rig: only the controls keyed) starts each frame
from the result of the frame shown before: the range is then solved in frame order from its first frame,
which playback starts from the FK pose (`fk.start_over`), and a frame is taken only when such bones hold
what the frame before it left (a frame shown out of order is solved as it is shown). Rigs that cannot be
solved ahead say why (`why_not`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core.live import Program
from ..core.lookahead import Ahead, Frame, digest
from ..core.model import RigReport
from ..solvers import search
from . import anim, armature, cache, fk
from .chains import rig_problem, system_override
from .fingerprint import channel_bytes
from .live_program import compile_lean
from .props import rig_settings
from .snapshot import prepare
from .solve import store_status

F32 = NDArray[np.float32]

IDLE = 0.5  # seconds without an update (and no playback) before solving ahead
SLICE = 0.004  # seconds of solving per timer call
MAX_FRAMES = 10000  # a longer range is not solved ahead (a frame keeps ~2 KB for a 30-bone rig)
_NEAR = 1e-5  # how far an evaluated pose may be from the predicted one (translations: times the rig's size)


_wanted: set[int] = set()  # rigs to solve ahead (or to check) when things are quiet
_quiet_since = 0.0  # time.monotonic() of the last update that listed a rig solved ahead or to solve ahead
_why: dict[int, str] = {}  # why a rig was not solved ahead, the last time it was tried
_redrawn_at = 0.0  # when `_tick` last asked the sidebars to redraw
# Which check failed, the last time a frame solved ahead was not taken (tests, benchmarks).
missed: dict[int, str] = {}


@dataclass
class Entry:
    """A rig's frames solved ahead, the first `len(frames)` of its range, and what they were solved for."""

    ahead: Ahead
    first: int
    last: int
    frames: list[Frame]
    # (channel, bone, component) of each F-Curve applied, in order. The F-Curves themselves are looked up again
    # for each slice of solving: a Python reference to one would outlive its deletion.
    paths: list[tuple[str, int, int]]
    keys: bytes | None  # the F-Curves' keys as solved for (None: one has modifiers, not compared)
    base: armature.Channels  # every channel, as read when the entry was made (no F-Curve sets the free ones)
    free: dict[str, NDArray[np.bool_]]  # where no F-Curve sets a channel
    version: int
    structure: bytes
    world: tuple[tuple[float, ...], ...]  # the armature's world matrix, by rows (`_world`)
    modes: bytes
    names_text: str
    held_size: int
    store_rows: NDArray[np.int64]  # each posed bone's row in the FK store
    posed_modes: F32
    # The posed bones whose rotation no key sets: each frame starts them from the frame before's result, the
    # range's first frame from their FK values (`fk.start_over`), which they keep (`start`).
    carried: list[int]  # their places in `ahead.posed`
    carried_bones: list[int]
    carried_modes: list[int]
    start: F32  # (c, 4) their FK values, raw
    near: float  # translation tolerance of the pose check
    frame_map: tuple[int, int]
    stale: bool = False  # an update listed the rig since: `_still` says whether the frames still hold
    broken: bool = False  # a frame change found Blender showing other inputs: solved again when quiet


def why_not(obj: bpy.types.Object) -> str | None:
    """Why `obj` was not solved ahead the last time it was tried (None: it was, or it was not tried)."""
    return _why.get(obj.session_uid)


def ready(obj: bpy.types.Object) -> int:
    """How many frames of `obj`'s range are solved ahead."""
    entry = cache.ahead.get(obj.session_uid)
    return 0 if entry is None else len(entry.frames)


def status(obj: bpy.types.Object) -> tuple[str, str] | None:
    """What the panel says about `obj`'s playback: (text, icon), or None when there is nothing to say (never
    played or scrubbed, or no action to play)."""
    uid = obj.session_uid
    entry: Entry | None = cache.ahead.get(uid)
    why = _why.get(uid)
    if entry is None:
        if why is None or why == "no action" or why.startswith("not "):
            return None
        return f"Playback solved frame by frame: {why}", "INFO"
    total = entry.last - entry.first + 1
    done = len(entry.frames)
    if (entry.stale or entry.broken) and uid in _wanted:
        return "Playback: checking the frames solved ahead after an edit", "TIME"
    if done < total:
        return f"Playback: solving ahead, {done} of {total} frames", "TIME"
    return f"Playback solved ahead: frames {entry.first}-{entry.last}", "CHECKMARK"


def hits(obj: bpy.types.Object) -> int:
    """How many frame changes took a frame solved ahead, in this session."""
    return cache.ahead_hits.get(obj.session_uid, 0)


def frame_range(scene: bpy.types.Scene) -> tuple[int, int]:
    """The playback range: the preview range when it is on, else the scene's."""
    if scene.use_preview_range:
        return scene.frame_preview_start, scene.frame_preview_end
    return scene.frame_start, scene.frame_end


def _start(obj: bpy.types.Object, scene: bpy.types.Scene) -> Entry | str:
    """A new entry for `obj` (no frame solved yet), or why the rig cannot be solved ahead."""
    uid = obj.session_uid
    s = rig_settings(obj)
    if not s.live or not any(ch.enabled for ch in s.chains):
        return "not live"  # nothing solves its playback (every chain off, as after a bake): nothing to say
    lean = cache.programs.get(uid)
    planned = cache.plans.get(uid)
    if planned is None:
        # Dropped with the derived caches (an object added or removed anywhere): planned again, as a solve plans.
        report, _sk, plan = prepare(obj, cached=True)
        planned = cache.plans.get(uid)
        if plan is None or planned is None:
            return report.rig_error or "not planned"
    modes_values = armature.rotation_mode_values(obj)
    if lean is None or lean.plan is not planned[1] or lean.modes != modes_values.tobytes():
        # Compiled as a frame change compiles it (`program_full`).
        lean = cache.programs[uid] = compile_lean(obj, planned[1], modes_values)
        if isinstance(lean.program, Program):
            lean.program.forget()
    program = lean.program
    if not isinstance(program, Program) or lean.body or program.refused:
        return "a chain the live program leaves to the full solve"
    shown = cache.outcomes.get(uid, {})
    if any(i in planned[1].errors or not getattr(shown.get(i), "valid", True) for i in program.by_chain):
        return "a chain the last solve refused"
    if any(ch.influence != 1.0 for ch in s.chains) or cache.stretched.get(uid) or cache.hangs.get(uid):
        return "Influence below 1, a stretch, or targets that hang from another rig"
    if any(uid == a for hangs in cache.hangs.values() for a, _b, _o in hangs):
        return "another rig's targets hang from this one"
    # The key the live path checks the armature under (`program_full`: its world matrix as the fingerprint
    # reads it, and whether it is a system override).
    checked = (armature.WorldMatrices().of([obj])[0].tobytes(), system_override(obj))
    check = cache.rig_checks.get(uid)
    if check is None or check[0] != checked:
        check = cache.rig_checks[uid] = (checked, rig_problem(obj))
    if check[1] is not None:
        return "refused by the rig checks"
    for link in program.links:
        c = link.chain
        if c.target_local < 0 or (c.pole is not None and c.pole_local < 0):
            return "a target or pole that is not a bone of the armature itself"
    if obj.parent is not None or len(obj.constraints) or obj.data.pose_position != "POSE":
        return "the armature object is parented or constrained, or shows its rest position"
    if scene.render.frame_map_old != scene.render.frame_map_new:
        return "Time Stretching (frame map) is on"
    first, last_frame = frame_range(scene)
    if last_frame < first or last_frame - first + 1 > MAX_FRAMES:
        return "the playback range is empty or too long"
    curves = anim.pose_curves(obj)
    if isinstance(curves, str):
        return curves
    paths = [(attr, b, i) for attr, b, i, _fc in curves]
    sk = armature.skeleton(obj)
    modes = [armature.MODE_NAMES[v] for v in modes_values.tolist()]
    angles = {i: float(s.chains[i].pole_angle) for i in program.by_chain}
    world = obj.matrix_world.copy()
    if program.closure(program.by_chain) is None:
        return "the program cannot order its chains"
    ahead = Ahead(program, modes, world, angles)
    problem = armature.channel_pose_problem(obj, sk, ahead.checks)
    if problem is not None:
        return problem
    keyed = {(attr, b, i) for attr, b, i, _fc in curves}
    carried: list[int] = []
    for k, b in enumerate(ahead.posed):
        attr, width = armature.rotation_channel(modes[b])
        n_keyed = sum((attr, b, i) in keyed for i in range(width))
        if n_keyed == 0:
            carried.append(k)  # starts from the frame before's result
        elif n_keyed < width:
            return f"bone '{sk.names[b]}' has a rotation only partly keyed"
    store = fk.Store.read(obj)
    text = obj.get(fk.NAMES_KEY)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if not isinstance(text, str) or held is None or not lean.driven.issuperset(store.names):
        return "no FK store, or one holding bones no chain drives"
    rows = [store.index.get(sk.names[b], -1) for b in ahead.posed]
    if -1 in rows:
        return "a chain bone Reach IK has not written yet"
    base = armature.read_channels(obj, armature.ALL_CHANNELS)
    free = {attr: np.ones(values.shape, dtype=bool) for attr, values in base.items()}
    for attr, b, i in paths:
        free[attr][b, i] = False
    carried_bones = [ahead.posed[k] for k in carried]
    carried_modes = [int(modes_values[b]) for b in carried_bones]
    # The range's first frame starts the carried bones from their FK values (`fk.start_over`): the store's
    # rule on the channels as they are now.
    start = fk.fk_values(obj, sk.names, carried_bones, base)[0]
    fk.put_raw_rotations(base, carried_bones, carried_modes, start)
    for b in carried_bones:
        free[armature.rotation_channel(modes[b])[0]][b] = False  # the frames' own results, checked by `start`
    size = max(1.0, float(np.abs(sk.rest[:, :3, 3]).max()))
    return Entry(
        ahead=ahead,
        first=first,
        last=last_frame,
        frames=[],
        paths=paths,
        keys=_keys([fc for _a, _b, _i, fc in curves]),
        base=base,
        free=free,
        version=cache.settings_version(obj),
        structure=sk.key,
        world=_world(obj),
        modes=modes_values.tobytes(),
        names_text=text,
        held_size=held.shape[0],
        store_rows=np.asarray(rows, dtype=np.int64),
        posed_modes=modes_values[ahead.posed].astype(np.float32),
        carried=carried,
        carried_bones=carried_bones,
        carried_modes=carried_modes,
        start=start,
        near=_NEAR * size,
        frame_map=(scene.render.frame_map_old, scene.render.frame_map_new),
    )


def _keys(curves: list[bpy.types.FCurve]) -> bytes | None:
    """Everything of `curves` that sets their values: keys, handles, interpolation, extrapolation (None when one
    has modifiers, whose settings are not compared)."""
    parts: list[bytes] = []
    for fc in curves:
        if len(fc.modifiers):
            return None
        points = fc.keyframe_points
        n = len(points)
        floats = np.empty(6 * n, dtype=np.float32)
        for k, attr in enumerate(("co", "handle_left", "handle_right")):
            buf = np.empty(2 * n, dtype=np.float32)
            points.foreach_get(attr, buf)
            floats[2 * k * n : 2 * (k + 1) * n] = buf
        ints = np.empty(3 * n, dtype=np.int32)
        for k, attr in enumerate(("interpolation", "easing", "type")):
            points.foreach_get(attr, ints[k * n : (k + 1) * n])
        parts += [floats.tobytes(), ints.tobytes(), fc.extrapolation.encode()]
        if n and any(p.interpolation in _DYNAMIC for p in points):
            parts.append(np.array([(p.back, p.amplitude, p.period) for p in points], dtype=np.float32).tobytes())
    return b"".join(parts)


_DYNAMIC = {"BACK", "ELASTIC"}  # interpolations with settings of their own


def _world(obj: bpy.types.Object) -> tuple[tuple[float, ...], ...]:
    """The armature's world matrix as exact values (its float32 entries), compared as a whole: 0.9 us, against
    10 us to make it an array's bytes."""
    m = obj.matrix_world
    return (m[0][:], m[1][:], m[2][:], m[3][:])


def _rig_holds(obj: bpy.types.Object, entry: Entry, scene: bpy.types.Scene) -> bool:
    """The same rotation modes, world matrix, frame mapping and bones (structure key) as the frames were solved
    for: what every frame change checks besides the frame's own channels and pose. The bones are read on
    every frame change: a script may edit them (a bone's length) and step a frame with no update between."""
    render = scene.render
    return (
        armature.rotation_mode_values(obj).tobytes() == entry.modes
        and _world(obj) == entry.world
        and (render.frame_map_old, render.frame_map_new) == entry.frame_map
        and armature.skeleton(obj).key == entry.structure
    )


def _still(obj: bpy.types.Object, entry: Entry, scene: bpy.types.Scene) -> bool:
    """Whether the frames solved ahead hold after an update listed the rig (it may not have changed it: Play
    lists the scene and every animated object once when it starts)."""
    if not _valid(obj, entry) or (entry.first, entry.last) != frame_range(scene):
        return False
    if obj.parent is not None or len(obj.constraints) or obj.data.pose_position != "POSE":
        return False
    if entry.keys is None or not _rig_holds(obj, entry, scene):
        return False
    if obj.get(fk.NAMES_KEY) != entry.names_text:
        return False
    pose_bones = obj.pose.bones
    if any(len(pose_bones[b].constraints) for b in entry.ahead.checks):
        return False
    curves = anim.pose_curves(obj)
    if isinstance(curves, str) or [(a, b, i) for a, b, i, _fc in curves] != entry.paths:
        return False
    now = armature.read_channels(obj, armature.ALL_CHANNELS)
    if any(now[attr][mask].tobytes() != entry.base[attr][mask].tobytes() for attr, mask in entry.free.items()):
        return False  # a channel no key sets was changed (a control moved and not keyed)
    if entry.carried:
        start = fk.fk_values(obj, armature.skeleton(obj).names, entry.carried_bones, now)[0]
        if start.tobytes() != entry.start.tobytes():
            return False  # a carried bone's FK value changed (posed by hand): the range starts elsewhere
    return _keys([fc for _a, _b, _i, fc in curves]) == entry.keys


def _extend(obj: bpy.types.Object, entry: Entry, deadline: float | None) -> bool:
    """Solve the entry's next frames until `deadline` (None: all); True when its range is done (False also when
    its F-Curves are no longer those it was made for: `_tick` drops it)."""
    curves = anim.pose_curves(obj)
    if isinstance(curves, str) or [(a, b, i) for a, b, i, _fc in curves] != entry.paths:
        entry.stale = True
        return False
    program = entry.ahead.program
    program.forget()  # the live path may have measured the shapes on another frame since
    entry.ahead.reset()
    base = entry.base
    try:
        with search.budget(None), search.deferring(False):
            while len(entry.frames) <= entry.last - entry.first:
                f = entry.first + len(entry.frames)
                channels = {attr: values.copy() for attr, values in base.items()}
                for attr, b, i, fc in curves:
                    channels[attr][b, i] = fc.evaluate(f)
                if entry.carried and entry.frames:
                    # Playback shows the frame before's result on the bones no key sets: this frame starts
                    # from it (the first frame from their FK values, as `base` holds them).
                    done = entry.frames[-1].raw_written[entry.carried]
                    fk.put_raw_rotations(channels, entry.carried_bones, entry.carried_modes, done)
                kept = (entry.carried, entry.start) if entry.carried else None
                entry.frames.append(entry.ahead.solve(channels, kept))
                if deadline is not None and time.monotonic() >= deadline:
                    break
    finally:
        program.forget()  # the live path measures them again on its own frame
    return len(entry.frames) > entry.last - entry.first


def fill(obj: bpy.types.Object, scene: bpy.types.Scene | None = None) -> str | None:
    """Solve `obj`'s playback range ahead now (in the background, where no timer runs); None when done, or
    why it cannot be."""
    scene = scene or bpy.context.scene
    assert scene is not None
    entry = _entry(obj, scene)
    if entry is None:
        return _why[obj.session_uid]
    if not _extend(obj, entry, None):
        cache.ahead.pop(obj.session_uid, None)
        return "its F-Curves changed while it was solved"
    _wanted.discard(obj.session_uid)
    return None


def _valid(obj: bpy.types.Object, entry: Entry) -> bool:
    """The settings the frames were solved for (a setting bumps the version: the plan and program change)."""
    return cache.settings_version(obj) == entry.version


def play(obj: bpy.types.Object, uid: int, scene: bpy.types.Scene) -> bool:
    """Take the current frame's result solved ahead, if Blender shows what it was solved for (the module
    docstring); False (nothing written) otherwise."""
    entry: Entry | None = cache.ahead.get(uid)
    if entry is None:
        return False
    k = scene.frame_current - entry.first
    if not 0 <= k < len(entry.frames) or scene.frame_subframe != 0.0:
        if not entry.stale and (entry.first, entry.last) != frame_range(scene):
            entry.stale = True  # the playback range changed (a scene update, which lists no rig): solved anew
            want(uid)
        return False
    if not _valid(obj, entry):
        return _miss(uid, "settings")
    frame = entry.frames[k]
    channels = armature.read_channels(obj, armature.ALL_CHANNELS)
    if entry.carried:
        # The bones no key sets hold what the frame was solved from: the frame before's result (the range's
        # first frame: their FK values, `fk.start_over`).
        expected = entry.start if k == 0 else entry.frames[k - 1].raw_written[entry.carried]
        bones, modes = entry.carried_bones, entry.carried_modes
        if fk.raw_rotations(channels, bones, modes).tobytes() != expected.tobytes():
            # Shown after another frame than the one before it (scrubbing, a jump): solved as it is shown.
            # Nothing solved ahead is wrong for that, unless the other channels differ too.
            fk.put_raw_rotations(channels, bones, modes, expected)
            return _miss(uid, "order" if digest(channel_bytes(channels)) == frame.channels else "channels")
    if digest(channel_bytes(channels)) != frame.channels:
        return _miss(uid, "channels")  # a channel the action does not give (posed by hand, a key edited unseen)
    if not _rig_holds(obj, entry, scene):
        return _miss(uid, "rig")
    pose = armature.pose_matrices(obj)[entry.ahead.checks]
    d = np.abs(pose - frame.pose)
    if not (d[:, :3, :3].max(initial=0.0) <= _NEAR and d[:, :3, 3].max(initial=0.0) <= entry.near):
        return _miss(uid, "pose")  # Blender posed a bone otherwise than its channels say (a constraint, a driver)
    held = fk.array_of(obj.get(fk.ROWS_KEY))
    if obj.get(fk.NAMES_KEY) != entry.names_text or held is None or held.shape[0] != entry.held_size:
        return _miss(uid, "store")
    rows = held.reshape(-1, fk.WIDTH)
    mine = rows[entry.store_rows]
    # As `fk.Store.fk`: a channel holding exactly what Reach IK last wrote keeps its stored FK value (a bone the
    # last solve left as it was, whose keys did not change since, or a carried bone); otherwise the channel is
    # the FK value. A frame solved ahead assumed the FK values `frame.fk` (the channels, but the carried
    # bones' values the range started from): where the store's rule says otherwise, it is solved as before.
    ours = (
        (mine[:, fk.MODE] == entry.posed_modes)
        & (fk.bits(mine[:, fk.WRITTEN]) == fk.bits(frame.raw)).all(axis=1)
        & (fk.bits(mine[:, fk.WRITTEN_SY]) == fk.bits(frame.scale_y))
    )
    fk_now = np.where(ours[:, None], mine[:, fk.FK], frame.raw)
    sy_now = np.where(ours, mine[:, fk.FK_SY], frame.scale_y)
    if (fk.bits(fk_now) != fk.bits(frame.fk)).any() or (fk.bits(sy_now) != fk.bits(frame.scale_y)).any():
        return _miss(uid, "ours")
    pose_bones = obj.pose.bones
    for attr, values in frame.written.items():
        pose_bones.foreach_set(attr, values.ravel())
    if frame.written:
        obj.update_tag(refresh={"DATA"})
    mine[:, fk.MODE] = entry.posed_modes
    mine[:, fk.FK] = frame.fk
    mine[:, fk.FK_SY] = frame.scale_y
    mine[:, fk.WRITTEN] = frame.raw_written
    mine[:, fk.WRITTEN_SY] = frame.scale_y
    rows[entry.store_rows] = mine  # in place, through the property's buffer (`fk.Store.write`)
    before = cache.outcomes.get(uid, {})
    shown = dict(before)
    shown.update(frame.outcomes)
    cache.outcomes[uid] = shown
    store_status(obj, RigReport(outcomes=shown), before, frame.outcomes)
    cache.ahead_hits[uid] = cache.ahead_hits.get(uid, 0) + 1
    # The last full check no longer describes the rig: the next update checks and solves it afresh.
    cache.fingerprints.pop(uid, None)
    return True


def _miss(uid: int, why: str) -> bool:
    """A frame solved ahead not taken. Blender showing other inputs than predicted (`why`: "channels", "rig",
    "pose", "store") makes the frames be solved again when things are quiet; a changed setting makes them be
    checked; a frame the FK store's rule keeps from them ("ours"), or shown after another frame than the one
    before it ("order": its carried bones start elsewhere), is solved as it is shown, the frames kept."""
    missed[uid] = why
    entry = cache.ahead.get(uid)
    if entry is not None and why not in ("ours", "order"):
        if why == "settings":
            entry.stale = True
        else:
            entry.broken = True
        want(uid)
    return False


def pending(uid: int) -> bool:
    """Whether `uid` has frames solved ahead, is to be solved ahead, or was ruled out (until it changes)."""
    return uid in cache.ahead or uid in _wanted or uid in _why


def touch() -> None:
    """A frame change: the timer solves ahead only once frames stop changing too (scrubbing stays smooth)."""
    global _quiet_since
    _quiet_since = time.monotonic()


def changed(uid: int) -> None:
    """An update listed what `uid` reads: once things are quiet, its frames solved ahead are checked (`_still`)
    and solved again if they no longer hold. Until then a frame change takes them only where Blender shows
    what they were solved for (`play`), as always."""
    global _quiet_since
    _quiet_since = time.monotonic()
    _why.pop(uid, None)  # whatever ruled it out may have changed too
    entry = cache.ahead.get(uid)
    if entry is not None:
        entry.stale = True
        want(uid)
    elif uid in _wanted:
        want(uid)


def want(uid: int) -> None:
    """Solve `uid` ahead once things are quiet (a frame change showed it: it is being played or scrubbed)."""
    entry = cache.ahead.get(uid)
    done = entry is not None and not (entry.stale or entry.broken) and len(entry.frames) > entry.last - entry.first
    if uid in _why or done:
        return  # ruled out until something changes, or solved ahead
    _wanted.add(uid)
    if not bpy.app.background and not bpy.app.timers.is_registered(_tick):
        bpy.app.timers.register(_tick, first_interval=IDLE)


def _playing() -> bool:
    wm = bpy.context.window_manager
    return wm is not None and any(w.screen is not None and w.screen.is_animation_playing for w in wm.windows)


def _tick() -> float | None:
    """Solve wanted rigs ahead, `SLICE` seconds per call, once nothing has changed for `IDLE` seconds."""
    if not _wanted:
        return None
    wait = IDLE - (time.monotonic() - _quiet_since)
    if wait > 0.0:
        return wait
    if _playing():
        return IDLE
    scene = bpy.context.scene
    if scene is None:
        return IDLE
    global _redrawn_at
    now = time.monotonic()
    deadline = now + SLICE
    by_uid = {ob.session_uid: ob for ob in scene.objects if ob.type == "ARMATURE"}
    worked = done = False
    for uid in list(_wanted):
        obj = by_uid.get(uid)
        if obj is None:
            _wanted.discard(uid)
            continue
        if obj.mode == "EDIT":
            continue  # its bones are being edited: solved once it leaves Edit Mode (that update lists it)
        worked = True
        entry = _entry(obj, scene)
        if entry is None or _extend(obj, entry, deadline):
            _wanted.discard(uid)
            done = True
        if time.monotonic() >= deadline:
            break
    if done or now - _redrawn_at > 0.25:
        _redrawn_at = now
        _redraw_sidebars()  # the panel's playback line (`status`)
    if not _wanted:
        return None
    return 0.0 if worked else IDLE


def _redraw_sidebars() -> None:
    wm = bpy.context.window_manager
    for window in wm.windows if wm is not None else ():
        for area in window.screen.areas:
            if area.type == "VIEW_3D":
                for region in area.regions:
                    if region.type == "UI":
                        region.tag_redraw()


def _entry(obj: bpy.types.Object, scene: bpy.types.Scene) -> Entry | None:
    """`obj`'s entry, checked if an update listed the rig since it was made, made anew if it no longer holds
    (None, and `why_not` says why, when the rig cannot be solved ahead)."""
    uid = obj.session_uid
    entry = cache.ahead.get(uid)
    if entry is not None and entry.broken:
        entry = None
    elif entry is not None and entry.stale:
        if _still(obj, entry, scene):
            entry.stale = False
        else:
            entry = None
    if entry is None:
        made = _start(obj, scene)
        if isinstance(made, str):
            _why[uid] = made
            cache.ahead.pop(uid, None)
            return None
        entry = cache.ahead[uid] = made
    _why.pop(uid, None)
    return entry


def clear() -> None:
    """Forget what is wanted (file load, undo: the cache itself is cleared with the others)."""
    _wanted.clear()
    _why.clear()
    if bpy.app.timers.is_registered(_tick):
        bpy.app.timers.unregister(_tick)
