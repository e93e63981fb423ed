"""Bake IK to keyframes: read every frame's inputs, solve all frames in one batched call, write keys in bulk.

Atomic: nothing is written until every frame has been read and solved. If anything fails (a target deleted
by a driver, a NaN at some frame), the action, the pose and the current frame are left exactly as they were
and the error names the frame. Keys go into each bone's own rotation-mode channels; every other channel and
every key outside the baked range stays as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import bpy
import numpy as np
from numpy.typing import NDArray

from ..core import convert
from ..core.model import Plan
from ..core.sequence import solve_in_order
from . import anim, armature, bake_order, cache, fastread, fk, live
from . import body as rig_body
from .chains import ChainChoiceError, choose_chains
from .props import rig_settings
from .snapshot import check_inputs, prepare, read_inputs, stretch_release, target_entries
from .snapshot import snapshot as rig_snapshot
from .solve import WRITTEN_CHANNELS, Inputs, solve_inputs, stack_inputs

F64 = NDArray[np.float64]
Progress = Callable[[float, str], None]
# bl_rna.properties[...] is typed as the base Property; interpolation is an EnumProperty.
_LINEAR = bpy.types.Keyframe.bl_rna.properties["interpolation"].enum_items["LINEAR"].value  # type: ignore[attr-defined]


class BakeError(RuntimeError):
    """The bake could not run or failed part-way; nothing was changed."""


@dataclass
class BakeOptions:
    frame_start: int
    frame_end: int
    step: int = 1
    chains: str | set[int] = "ALL"  # 'ALL' (enabled), 'ACTIVE', 'SELECTED' (tip bone selected), or indices
    replace: bool = True  # replace every key in the range on the baked channels (else: only baked frames)
    reduce: bool = False  # drop keys that straight interpolation reproduces within `reduce_tolerance`
    reduce_tolerance: float = 1e-4  # in channel units (quaternion components, radians)
    disable_after: bool = True  # disable the baked chains so the keys play back


@dataclass
class ChainStats:
    name: str
    frames: int
    max_residual: float
    mean_residual: float
    mean_iterations: float
    reached_all: bool
    frames_missed: int = 0  # frames whose tip ended farther than the Tolerance from its target
    worst_frame: int | None = None  # the frame of `max_residual`


@dataclass
class BakeResult:
    rig: str
    frames: list[int]
    chains: list[ChainStats] = field(default_factory=list)
    bones: list[str] = field(default_factory=list)
    keys_written: int = 0
    read_path: str = ""  # 'fcurves' (targets' F-Curves evaluated), 'pose' (the armature's, posed by FK) or 'frame_set'
    warnings: list[str] = field(default_factory=list)
    seconds_read: float = 0.0
    seconds_solve: float = 0.0
    seconds_write: float = 0.0

    @property
    def seconds(self) -> float:
        return self.seconds_read + self.seconds_solve + self.seconds_write

    def as_dict(self) -> dict[str, object]:
        return {
            "rig": self.rig,
            "frames": [self.frames[0], self.frames[-1]] if self.frames else [],
            "frames_baked": len(self.frames),
            "bones": self.bones,
            "keys_written": self.keys_written,
            "read_path": self.read_path,
            "warnings": self.warnings,
            "seconds": round(self.seconds, 4),
            "seconds_read": round(self.seconds_read, 4),
            "seconds_solve": round(self.seconds_solve, 4),
            "seconds_write": round(self.seconds_write, 4),
            "chains": [
                {
                    "name": c.name,
                    "frames": c.frames,
                    "max_residual": c.max_residual,
                    "mean_residual": c.mean_residual,
                    "mean_iterations": c.mean_iterations,
                    "reached_all": c.reached_all,
                    "frames_missed": c.frames_missed,
                    "worst_frame": c.worst_frame,
                }
                for c in self.chains
            ],
        }


def frame_list(start: int, end: int, step: int) -> list[int]:
    """Frames from start to end by step, always including the last frame so the whole range is covered."""
    if step < 1:
        raise BakeError(f"step must be 1 or more, got {step}")
    if end < start:
        raise BakeError(f"the frame range {start}-{end} is empty: the end must not come before the start")
    frames = list(range(start, end + 1, step))
    if frames[-1] != end:
        frames.append(end)
    return frames


def select_chains(obj: bpy.types.Object, which: str | set[int]) -> set[int]:
    """The chains to bake (`chains.choose_chains`), as a `BakeError` when there are none."""
    try:
        return choose_chains(obj, which, "bake")
    except ChainChoiceError as exc:
        raise BakeError(str(exc)) from None


def _values(mode: str, basis: F64, previous: F64) -> F64:
    """(F,n,3,3) basis rotations of n bones sharing `mode` -> (F,n,width) channel values.

    Continuous in time, starting from `previous` (n,width): quaternions keep their sign, Eulers stay
    compatible (Blender's rule), axis-angle keeps its axis side. Vectorized over bones and, but for
    axis-angle, over frames.
    """
    f, n = basis.shape[:2]
    flat = basis.reshape(f * n, 3, 3)
    if mode == "QUATERNION":
        q = convert.matrix_to_quaternion(flat).reshape(f, n, 4)
        flips = np.einsum("fni,fni->fn", q[1:], q[:-1]) < 0.0
        first = np.where(np.einsum("ni,ni->n", q[0], previous) < 0.0, -1.0, 1.0)
        signs = first[None] * np.cumprod(np.where(np.concatenate([np.zeros((1, n), bool), flips]), -1.0, 1.0), axis=0)
        signed: F64 = q * signs[..., None]
        return signed
    if mode == "AXIS_ANGLE":
        q = convert.matrix_to_quaternion(flat).reshape(f, n, 4)
        out = np.empty((f, n, 4))
        prev = previous
        for i in range(f):
            prev = out[i] = convert.quaternion_to_axis_angle(q[i], prev)
        return out
    e1, e2 = (e.reshape(f, n, 3) for e in convert.euler_pair(flat, mode))
    return convert.compatible_sequence(e1, e2, previous)


def _reduce(times: F64, values: F64, tol: float) -> NDArray[np.bool_]:
    """Which samples to keep so straight lines between kept ones stay within `tol` of every sample."""
    n = len(times)
    keep = np.zeros(n, dtype=bool)
    keep[0] = keep[-1] = True
    i = 0
    while i < n - 1:
        j = i + 1
        while j + 1 < n:
            t = (times[i + 1 : j + 2] - times[i]) / (times[j + 1] - times[i])
            line = values[i] + t[:, None] * (values[j + 1] - values[i])
            if np.abs(line - values[i + 1 : j + 2]).max() > tol:
                break
            j += 1
        keep[j] = True
        i = j
    return keep


_SET_BY_BAKE = ("co", "handle_left", "handle_right")
"""The key fields a bake gives values of its own; every other field of a new key is Blender's default."""

MERGE_IN_PLACE = True
"""Whether a re-key of the very frames a curve already has a key on rewrites those keys in place (tests turn
it off to check that both ways write the same keys)."""


def _merge_keys(
    fc: bpy.types.FCurve,
    frames: F64,
    values: F64,
    opts: BakeOptions,
    linear: bool,
    defaults: dict[str, NDArray[np.generic]],
) -> int:
    """Replace the keys the bake owns on `fc` with new ones; keys outside keep every field.

    `defaults`: the fields Blender gives a new key (other than `_SET_BY_BAKE`), learnt from the first merge
    of the bake that adds keys. Once known, a curve whose replaced keys sit on exactly the baked frames (a
    re-key of animation keyed on every frame, as motion capture is) is rewritten in place: one read of its
    keys and a write of the fields that changed, instead of adding, reading again, clearing and rewriting."""
    kp = fc.keyframe_points
    n_old = len(kp)
    if n_old:
        co = np.empty(2 * n_old, dtype=np.float32)
        kp.foreach_get("co", co)
        t_old = co[0::2].astype(np.float64)
        if opts.replace:
            drop = (t_old >= opts.frame_start - 1e-4) & (t_old <= opts.frame_end + 1e-4)
        else:
            drop = np.isin(np.round(t_old, 3), np.round(frames, 3))
        if drop.all():
            # A re-bake of the same range: nothing to merge, the curve is written as a fresh one.
            kp.clear()
            n_old = 0
    if not n_old:
        # A fresh curve (the common case): no merge, just the new keys in time order.
        kp.add(len(frames))
        co = np.empty((len(frames), 2), dtype=np.float32)
        co[:, 0], co[:, 1] = frames, values
        # New keys keep every default of `add` (selected, like keys Blender inserts), as in the merge below.
        kp.foreach_set("co", co.ravel())
        if linear:
            kp.foreach_set("interpolation", np.full(len(frames), _LINEAR, dtype=np.int32))
        fc.update()
        return len(frames)
    old = anim.read_keys(fc)
    if MERGE_IN_PLACE and defaults and _in_place(old, drop, frames):
        merged = {k: v.copy() for k, v in old.items()}
        rows = np.flatnonzero(drop)
        merged["co"][rows, 0] = frames
        merged["co"][rows, 1] = values
        merged["handle_left"][rows] = merged["co"][rows]
        merged["handle_right"][rows] = merged["co"][rows]
        for name, value in defaults.items():
            merged[name][rows] = value
        if linear:
            merged["interpolation"][rows] = _LINEAR
        anim.update_keys(fc, merged, old)
        return len(frames)
    kp.add(len(frames))  # new keys get Blender's defaults for everything but their values
    fresh = anim.read_keys(fc)
    if not defaults:
        defaults.update({k: v[n_old].copy() for k, v in fresh.items() if k not in _SET_BY_BAKE})
    new = {k: v[n_old:].copy() for k, v in fresh.items()}
    new["co"][:, 0] = frames
    new["co"][:, 1] = values
    new["handle_left"][:] = new["co"]
    new["handle_right"][:] = new["co"]
    if linear:
        new["interpolation"][:] = _LINEAR
    merged = {k: np.concatenate([old[k][~drop], new[k]]) for k in old}
    order = np.argsort(merged["co"][:, 0], kind="stable")
    anim.write_keys(fc, {k: v[order] for k, v in merged.items()}, recalc=True)
    return len(frames)


def _in_place(old: anim.Keys, drop: NDArray[np.bool_], frames: F64) -> bool:
    """Whether the keys `drop` of a curve (its keys `old`, in time order) sit on exactly `frames`: then the
    merge keeps every key where it is and only rewrites those."""
    t_old = old["co"][:, 0].astype(np.float64)
    if int(drop.sum()) != len(frames) or (len(t_old) > 1 and bool((np.diff(t_old) <= 0.0).any())):
        return False
    return bool(np.array_equal(np.round(t_old[drop], 3), np.round(frames, 3)))


def bake_rig(obj: bpy.types.Object, opts: BakeOptions, progress: Progress | None = None) -> BakeResult:
    """Bake the chosen chains of `obj` over the frame range. Raises `BakeError` having changed nothing."""
    scene = bpy.context.scene
    if scene is None:
        raise BakeError("there is no active scene to bake in")
    frames = frame_list(opts.frame_start, opts.frame_end, opts.step)
    only = select_chains(obj, opts.chains)
    report, sk, plan = prepare(obj, only)
    if sk is None or plan is None:
        raise BakeError(report.rig_error or f"'{obj.name}' cannot be baked")
    if plan.errors:
        chains = rig_settings(obj).chains
        lines = "; ".join(f"chain '{chains[i].name}': {m}" for i, m in sorted(plan.errors.items()))
        raise BakeError(f"'{obj.name}' has invalid chains, nothing was baked: {lines}")
    ad = obj.animation_data
    if ad is not None and ad.action is not None and ad.action.library is not None:
        raise BakeError(f"the action '{ad.action.name}' is linked from a library: make it local to bake into it")

    result = BakeResult(rig=obj.name, frames=frames)
    original_frame = scene.frame_current, scene.frame_subframe
    channels_before = armature.read_channels(obj, armature.ALL_CHANNELS)
    leaders = _Leaders.take(obj)
    result.warnings = leaders.warnings(obj)
    snapshot = anim.ActionSnapshot.take(obj)
    t0 = time.perf_counter()
    try:
        with live.suspended(obj):
            fast = fastread.read_all(obj, plan, frames)
            posed = None if fast is not None else fastread.read_posed(obj, plan, frames)
            read = fast if fast is not None else posed
            inputs = read if read is not None else stack_inputs(_read_frames(obj, plan, frames, scene, progress))
            result.read_path = "fcurves" if fast is not None else "pose" if posed is not None else "frame_set"
            result.seconds_read = time.perf_counter() - t0
            broken = check_inputs(obj, sk, plan, inputs)
            if broken:
                f = _frame_of(broken, frames)
                raise BakeError(f"frame {f}: {broken.split(': ', 1)[-1]}" if f is not None else broken)
            t1 = time.perf_counter()
            inputs.release, inputs.release_bones = stretch_release(
                obj, sk, plan, channels_before["scale"].astype(np.float64)
            )
            solved = None
            full_body = rig_settings(obj).full_body
            if full_body and rig_settings(obj).start_from == "CURRENT":
                # Full Body starts the spine from its FK pose in every frame, as live (rig/body.py), the root
                # from its home.
                inputs.preset = {**inputs.preset, **rig_body.bake_fk_start(obj, sk, plan, channels_before, len(frames))}
            if rig_settings(obj).start_from == "CURRENT" and len(frames) > 1:
                # Each frame from the previous one's result, as live playback from the first frame. With Full
                # Body the limbs so (their twist follows the pose they start from), carried by the body as live.
                first, carried = bake_order.first_start(obj, sk.names, plan, channels_before)
                if full_body:
                    carried -= set(rig_body.carrier_bones(sk, plan)) | set(inputs.preset)
                snap = rig_snapshot(obj, sk, plan)
                if carried:
                    every = carried == set(first)
                    if full_body:
                        # The body in one batched solve, the limbs again in frame order on it (the live program).
                        batched = solve_inputs(obj, sk, plan, inputs, report, smooth=True)
                        solved = bake_order.body_limbs_in_order(
                            obj, snap, inputs, batched, report, carried, channels_before
                        )
                    elif every:
                        solved = bake_order.solve_live_order(obj, snap, inputs, report, channels_before)
                    if solved is None:
                        solved = solve_in_order(snap, inputs, report, first, carried, repose=full_body)
            if solved is None:
                solved = solve_inputs(obj, sk, plan, inputs, report, smooth=True)
            result.seconds_solve = time.perf_counter() - t1
            bad = {i: o for i, o in report.outcomes.items() if not o.valid}
            if bad:
                chains = rig_settings(obj).chains
                i, o = next(iter(sorted(bad.items())))
                raise BakeError(f"chain '{chains[i].name}' could not be solved: {o.message}")
            if progress:
                progress(0.9, "writing keys")
            t2 = time.perf_counter()
            result.keys_written = _write(obj, solved.bones, solved.basis, frames, channels_before, opts, snapshot)
            result.keys_written += _write_scale(obj, solved.scale_bones, solved.scale_y, frames, opts, snapshot)
            result.keys_written += _write_location(obj, solved.location_bones, solved.location, frames, opts, snapshot)
            result.seconds_write = time.perf_counter() - t2
    except BaseException as exc:
        if _gone(obj):
            # Deleted during the bake (a script's frame handler, say): nothing of it to put back, the rest is.
            try:
                scene.frame_set(original_frame[0], subframe=original_frame[1])
                leaders.restore()
            except ReferenceError:
                pass
            raise BakeError(f"'{result.rig}' was deleted during the bake; nothing was baked") from exc
        snapshot.restore()
        scene.frame_set(original_frame[0], subframe=original_frame[1])
        leaders.restore()
        _restore_pose(obj, channels_before)
        if isinstance(exc, (BakeError, KeyboardInterrupt, SystemExit)):
            raise
        if isinstance(exc, ReferenceError):
            raise BakeError(f"an object the bake needs was deleted during the bake ({exc}); nothing was baked") from exc
        raise BakeError(f"baking '{obj.name}' failed, nothing was baked: {exc}") from exc
    finally:
        snapshot.release()

    settings = rig_settings(obj)
    result.bones = [sk.names[b] for b in solved.bones]
    # The keys hold the baked bones' pose now: their FK pose is what the keys play (the FK rule), and a
    # chain disabled after the bake has nothing of its own to give back.
    store = fk.Store.read(obj)
    store.drop(result.bones)
    store.write(obj)
    if solved.location_bones:
        rig_body.forget(obj)  # Full Body: the body root's keys are its home now
    # The keys hold the baked bones' stretch now: live solving has no stretch of its own left to undo there.
    written = cache.stretched.get(obj.session_uid, {})
    for b in solved.scale_bones:
        written.pop(sk.names[b], None)
    tolerance = float(settings.tolerance)
    for i in sorted(only):
        out = report.outcomes[i]
        res = out.residuals if out.residuals is not None else np.zeros(1)
        its = out.iteration_counts if out.iteration_counts is not None else np.zeros(1)
        missed = int(np.count_nonzero(res > tolerance * (1.0 + 1e-6)))
        worst_at = frames[int(np.argmax(res))] if len(res) == len(frames) else None
        stats = ChainStats(
            settings.chains[i].name,
            len(frames),
            float(res.max()),
            float(res.mean()),
            float(its.mean()),
            out.reached,
            missed,
            worst_at,
        )
        result.chains.append(stats)
        if missed:
            at = f" at frame {worst_at}" if worst_at is not None else ""
            result.warnings.append(
                f"chain '{stats.name}' missed its target on {missed} of {len(frames)} frame(s): worst "
                f"{stats.max_residual:.3g}{at} (Tolerance {tolerance:.3g}); the keys hold the pose the IK reached"
            )
    if opts.disable_after:
        for i in only:
            settings.chains[i].enabled = False
    # Show the baked pose at the current frame; bones we did not bake keep any unkeyed tweak they had.
    scene.frame_set(original_frame[0], subframe=original_frame[1])
    leaders.restore()
    baked = set(solved.bones)
    keep = [b for b in range(len(sk.names)) if b not in baked]
    _restore_pose(obj, channels_before, only_bones=keep)
    return result


def _gone(ob: bpy.types.Object) -> bool:
    """Whether `ob` was deleted (its Python object outlives it)."""
    try:
        ob.name  # noqa: B018  (reading it is the test)
    except ReferenceError:
        return True
    return False


@dataclass
class _Leaders:
    """The live rigs whose bones the baked rig's targets and poles hang from, as they were before the bake.

    Stepping frames solves them live (that is how the bake reads the targets where playback puts them). A
    leader whose chains start from the current pose ends such a pass elsewhere than it started (its twist
    drifts along a closed path of its targets), so the bake puts each one back as it found it: a replay
    from here plays the pass the bake read, and the bake changes nothing but the baked rig's keys.
    """

    rigs: list[bpy.types.Object]
    channels: list[dict[str, NDArray[np.float32]]]
    stores: list[fk.Store]
    stretched: list[dict[str, float] | None]

    @classmethod
    def take(cls, obj: bpy.types.Object) -> _Leaders:
        rigs = [ob for ob in live.leaders_of(obj) if rig_settings(ob).live and len(rig_settings(ob).chains)]
        stretched = [cache.stretched.get(ob.session_uid) for ob in rigs]
        return cls(
            rigs,
            [armature.read_channels(ob, armature.ALL_CHANNELS) for ob in rigs],
            [fk.Store.read(ob) for ob in rigs],
            [None if s is None else dict(s) for s in stretched],
        )

    def warnings(self, obj: bpy.types.Object) -> list[str]:
        out = []
        for ob in self.rigs:
            s = rig_settings(ob)
            if s.start_from == "CURRENT" and any(ch.enabled for ch in s.chains):
                out.append(
                    f"'{obj.name}' follows the live rig '{ob.name}', whose chains start from the current pose: "
                    f"its pose on a frame depends on the frames played before, so these keys match a replay "
                    f"from here but drift from later passes; bake '{ob.name}' too, or set its Start From to "
                    f"Rest, for keys that always match"
                )
        return out

    def restore(self) -> None:
        for ob, channels, store, stretched in zip(self.rigs, self.channels, self.stores, self.stretched, strict=True):
            try:
                ob.name  # noqa: B018  (deleted during the bake: nothing to put back)
            except ReferenceError:
                continue
            _restore_pose(ob, channels)
            store.changed, store.names_text = True, None
            store.write(ob)
            uid = ob.session_uid
            cache.forget(uid)  # solved afresh from the restored pose at its next check
            cache.dirty.add(uid)
            if stretched is None:
                cache.stretched.pop(uid, None)
            else:
                cache.stretched[uid] = stretched


def _frame_of(message: str, frames: list[int]) -> int | None:
    if message.startswith("frame #"):
        return frames[int(message[len("frame #") :].split(":", 1)[0])]
    return frames[0] if len(frames) == 1 else None


def _settings_animated(obj: bpy.types.Object) -> bool:
    """Whether an F-Curve or driver may change a Reach IK setting of `obj` from frame to frame (NLA strips
    count as may)."""
    ad = obj.animation_data
    if ad is None:
        return False
    if any(d.data_path.startswith("reach_ik") for d in ad.drivers):
        return True
    if len(ad.nla_tracks):
        return True
    return ad.action is not None and any(fc.data_path.startswith("reach_ik") for fc in anim.all_fcurves(ad.action, obj))


def _read_frames(
    obj: bpy.types.Object, plan: Plan, frames: list[int], scene: bpy.types.Scene, progress: Progress | None
) -> list[Inputs]:
    stack = []
    every = max(1, len(frames) // 20)
    # The FK pose of each frame, by the live rule (rig/fk.py): a channel the frame's animation set is FK, one
    # still holding what live solving wrote has the stored FK value. Worked out on a copy: a bake stores
    # nothing.
    read_fk: list[tuple[Inputs, armature.Channels, dict[int, float]]] = []
    # The bones' structure cannot change while frames step (no edit happens between them): read once, not
    # per frame (its key is a few bulk reads and a comparison, 5% of a frame's read).
    sk = armature.skeleton(obj)
    # Chain settings nothing animates or drives hold on every frame: the plan's Soft and Stretch, and an
    # Influence of 1 everywhere needs no FK pose (each frame's channels are read only for blending).
    keyed = _settings_animated(obj)
    blends = keyed or any(w < 1.0 for w in fk.influences(obj, plan).values())
    # Targets, poles and pole angles as set now, read once when nothing animates them.
    entries = None if keyed else target_entries(obj, plan)
    chains = rig_settings(obj).chains
    angles = None if keyed else {c.index: chains[c.index].pole_angle for g in plan.groups for c in g.chains}
    for n, f in enumerate(frames):
        scene.frame_set(f)
        try:
            inputs = read_inputs(obj, plan, settings_now=keyed, sk_now=sk, angles_now=angles, entries_now=entries)
            if blends:
                read_fk.append((inputs, armature.read_channels(obj, WRITTEN_CHANNELS), fk.influences(obj, plan)))
            stack.append(inputs)
        except ReferenceError as exc:
            raise BakeError(f"frame {f}: a target or pole was deleted during the bake ({exc})") from exc
        except AttributeError as exc:
            raise BakeError(f"frame {f}: a target or pole went missing during the bake ({exc})") from exc
        if progress and (n % every == 0 or n == len(frames) - 1):
            progress(0.8 * (n + 1) / len(frames), f"frame {f} ({n + 1}/{len(frames)})")
    if any(w < 1.0 for _i, _c, weights in read_fk for w in weights.values()):
        # Some chain blends with its FK pose in some frame: every frame gets its FK pose, in frame order.
        store = fk.Store.read(obj)
        names = armature.skeleton(obj).names
        modes = armature.rotation_mode_values(obj)
        for inputs, channels, weights in read_fk:
            fk.fill(plan, names, modes, channels, store, weights, inputs, every=True)
    return stack


def _restore_pose(
    obj: bpy.types.Object,
    channels: dict[str, NDArray[np.float32]],
    only_bones: list[int] | None = None,
) -> None:
    pbs = obj.pose.bones
    for attr, saved in ((k, v.ravel()) for k, v in channels.items()):
        width = saved.size // max(len(pbs), 1)
        if only_bones is None:
            pbs.foreach_set(attr, saved)
            continue
        now = np.empty_like(saved)
        pbs.foreach_get(attr, now)
        rows = now.reshape(len(pbs), width)
        rows[only_bones] = saved.reshape(len(pbs), width)[only_bones]
        pbs.foreach_set(attr, rows.ravel())
    obj.update_tag()


def _key_bone(
    obj: bpy.types.Object,
    action: bpy.types.Action,
    pb: bpy.types.PoseBone,
    attr: str,
    indices: Sequence[int],
    times: F64,
    values: F64,
    opts: BakeOptions,
    snapshot: anim.ActionSnapshot,
    curves: dict[tuple[str, int], bpy.types.FCurve],
) -> int:
    """Keys of one bone's channel `attr`: curve `indices[c]` takes column c of (F, k) `values` (reduced
    together, so a bone's curves keep the same frames). The keys written."""
    keep = _reduce(times, values, opts.reduce_tolerance) if opts.reduce else np.ones(len(times), dtype=bool)
    path = pb.path_from_id(attr)
    count = 0
    for c, index in enumerate(indices):
        fc = curves.get((path, index))
        snapshot.remember((path, index), fc)
        if fc is None:
            fc = anim.new_fcurve(action, obj, path, index, pb.name)
        count += _merge_keys(fc, times[keep], values[keep, c], opts, opts.reduce, snapshot.new_key_fields)
    return count


def _write(
    obj: bpy.types.Object,
    bones: list[int],
    basis: F64,
    frames: list[int],
    channels_before: dict[str, NDArray[np.float32]],
    opts: BakeOptions,
    snapshot: anim.ActionSnapshot,
) -> int:
    pbs = obj.pose.bones
    action = anim.ensure_action(obj, snapshot)
    curves = anim.fcurve_map(action, obj)
    times = np.asarray(frames, dtype=np.float64)
    by_mode: dict[str, list[int]] = {}
    for j, b in enumerate(bones):
        by_mode.setdefault(pbs[b].rotation_mode, []).append(j)
    count = 0
    for mode, cols in by_mode.items():
        attr, width = armature.rotation_channel(mode)
        previous = channels_before[attr][[bones[j] for j in cols]].astype(np.float64)
        values = _values(mode, basis[:, cols], previous)  # (F, n, width)
        for c, j in enumerate(cols):
            count += _key_bone(
                obj, action, pbs[bones[j]], attr, range(width), times, values[:, c], opts, snapshot, curves
            )
    return count


def _write_scale(
    obj: bpy.types.Object,
    bones: list[int],
    values: F64,
    frames: list[int],
    opts: BakeOptions,
    snapshot: anim.ActionSnapshot,
) -> int:
    """Y scale keys (the `scale` curve's index 1) of the bones stretching chains set, (F, n) `values`.

    Only the bones of chains that stretch in some baked frame (or held a stretch to undo) are listed: the
    scale curves of every other bone, and the X and Z curves of these, are never touched.
    """
    if not bones:
        return 0
    pbs = obj.pose.bones
    action = anim.ensure_action(obj, snapshot)
    curves = anim.fcurve_map(action, obj)
    times = np.asarray(frames, dtype=np.float64)
    return sum(
        _key_bone(obj, action, pbs[b], "scale", (1,), times, values[:, j : j + 1], opts, snapshot, curves)
        for j, b in enumerate(bones)
    )


def _write_location(
    obj: bpy.types.Object,
    bones: list[int],
    values: F64,
    frames: list[int],
    opts: BakeOptions,
    snapshot: anim.ActionSnapshot,
) -> int:
    """Location keys of the bones a full-body solve moves (the body root), (F, n, 3) `values`."""
    if not bones:
        return 0
    pbs = obj.pose.bones
    action = anim.ensure_action(obj, snapshot)
    curves = anim.fcurve_map(action, obj)
    times = np.asarray(frames, dtype=np.float64)
    return sum(
        _key_bone(obj, action, pbs[b], "location", range(3), times, values[:, j], opts, snapshot, curves)
        for j, b in enumerate(bones)
    )
