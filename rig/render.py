"""Renders show the live pose of every frame: a temporary bake of the render range, removed afterwards.

Why not the live handlers: while a render runs, Blender evaluates the scene in the render's own depsgraph
(`render_init`, then per frame `render_pre`, `frame_change_pre`, `frame_change_post` given the render's
depsgraph, `render_post`, `render_write`; `render_complete` or `render_cancel` at the end, also when the render
fails; measured on bpy 4.5.4 and the 4.3 binary).
The original objects, which live solving reads, stay where the viewport's depsgraph last put them, so each
rendered frame showed the pose solved for the frame the render started on. Solving against the render's
depsgraph from `frame_change_post` would work (a pose written there reaches that frame: Blender evaluates
again after the handlers) but it writes data from the render thread on every frame, which Blender says can
crash the interface unless Render > Lock Interface is on.

So at `render_init` (once, before the render builds its depsgraph) the render range is played through with
live solving on, in frame order, and what it wrote on the chain bones is keyed (`rig/record.py`; or, with
`method = 'bake'`, the batched bake of `rig/bake.py`) into a *copy* of each live rig's action, swapped in
for the render; live solving is suspended for those rigs while the render runs. At `render_complete` or
`render_cancel` the user's own action (and slot), pose channels, FK store and stretch record go back exactly
as they were and the copy is deleted. No key of the user's action is touched (only its Fake User, and for
exports its name, change while the copy is in use, and come back). In the GUI, Blender calls
`render_init` and `render_complete` on the render job's thread: both hand their work to the main thread
(`on_render_init`, `_poll`), so Reach IK never writes data from the render thread.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import bpy
import numpy as np
from bpy.app.handlers import persistent
from numpy.typing import NDArray

from . import armature, bake, cache, fk, live, record
from . import body as rig_body
from .props import rig_settings
from .snapshot import prepare as validate

_PROPS = (fk.ROWS_KEY, fk.NAMES_KEY, rig_body.KEY, rig_body.BONE_KEY)
_STATUS = ("is_valid", "message", "iterations", "residual")  # a chain's read-only status properties


@dataclass
class _Rig:
    """What one rig held before the render, to put back exactly."""

    obj: bpy.types.Object
    had_animation_data: bool
    action: bpy.types.Action | None
    slot_handle: int | None
    channels: dict[str, NDArray[np.float32]]
    props: dict[str, Any]  # the FK store's ID properties as they were (absent keys: not stored)
    cache: tuple[dict[int, Any], bool]  # its live-solving caches: its last solve still holds afterwards
    status: list[dict[str, object]]  # each chain's status as shown, set values only (solving sets them again)
    temporary: bpy.types.Action | None = None  # the copy (or new action) rendered from, deleted afterwards
    name: str | None = None  # the user's action's name while its copy carries it (exports), else None
    fake_user: bool | None = None  # the user's action's Fake User before the render
    done: bool = False  # the render plays its recorded (or baked) pose


@dataclass
class _Render:
    scene: bpy.types.Scene
    frames: tuple[int, int]
    rigs: list[_Rig] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # one message per rig that renders its pose unbaked
    main_thread: bool = True  # where it was prepared (always the main thread: see `on_render_init`)
    watch: bool = False  # a render (not an export) is under way: `_over` may find it ended without a word
    now: tuple[int, float] = (0, 0.0)  # the scene's frame and subframe when it was prepared


_active: _Render | None = None


def active() -> bool:
    """Whether a render is being prepared or runs with its temporary bake in place."""
    return _active is not None


def baked() -> list[str]:
    """The rigs the render in progress plays from a temporary bake."""
    return [] if _active is None else [r.obj.name for r in _active.rigs if r.done]


def prepared_on_main_thread() -> bool | None:
    return None if _active is None else _active.main_thread


def render_rigs(scene: bpy.types.Scene) -> list[bpy.types.Object]:
    """The scene's rigs that live solving poses now (Live on, an enabled chain), leaders first."""
    out = []
    for ob in live.scene_rigs(scene):
        settings = rig_settings(ob)
        if settings.live and any(ch.enabled for ch in settings.chains) and ob.mode != "EDIT":
            out.append(ob)
    return out


def _save(obj: bpy.types.Object) -> _Rig:
    ad = obj.animation_data
    props: dict[str, Any] = {}
    for key in _PROPS:
        value = obj.get(key)
        if value is None:
            continue
        arr = fk.array_of(value)
        props[key] = arr.copy() if arr is not None else value
    return _Rig(
        obj=obj,
        had_animation_data=ad is not None,
        action=ad.action if ad is not None else None,
        slot_handle=getattr(ad, "action_slot_handle", None) if ad is not None else None,
        channels=armature.read_channels(obj, armature.ALL_CHANNELS),
        props=props,
        cache=cache.take(obj.session_uid),
        status=[{k: getattr(ch, k) for k in _STATUS if ch.is_property_set(k)} for ch in rig_settings(obj).chains],
    )


# Appended to the user's action's name while an export's copy carries the name (`prepare(names=True)`).
_ASIDE = " (Reach IK: exporting)"


def _valid_chains(obj: bpy.types.Object) -> set[int]:
    """The enabled chains live solving poses: an invalid chain (or tree) leaves its bones alone, live and
    in the render alike, and must not keep the others from being baked."""
    only = bake.select_chains(obj, "ALL")
    report, sk, plan = validate(obj, only)
    if sk is None or plan is None:
        raise bake.BakeError(report.rig_error or f"'{obj.name}' cannot be baked")
    return only - set(plan.errors)


def _use_copy(saved: _Rig, names: bool) -> None:
    """Render from a copy of the rig's action (the bake writes into it), never from the user's own.

    `names`: the copy takes the action's name for the time being (the user's action gets a suffix), so an
    exporter that writes action names writes the user's.
    """
    if saved.action is None:
        return  # the bake creates an action; `_put_back` deletes it
    ad = saved.obj.animation_data
    # A file saved while a GUI render runs must still hold the user's action, unassigned meanwhile.
    saved.fake_user = saved.action.use_fake_user
    saved.action.use_fake_user = True
    copy = saved.action.copy()
    copy.use_fake_user = False
    saved.temporary = copy
    if names:
        saved.name = saved.action.name
        saved.action.name = saved.name[: 63 - len(_ASIDE)] + _ASIDE
        copy.name = saved.name
    ad.action = copy
    if saved.slot_handle is not None and ad.action_slot_handle != saved.slot_handle:
        ad.action_slot_handle = saved.slot_handle  # a copy keeps its slots and their handles


def _put_back(saved: _Rig) -> None:
    """Everything of `saved.obj` as it was before the render; the temporary action deleted."""
    obj = saved.obj
    ad = obj.animation_data
    temporary = saved.temporary
    if temporary is None and ad is not None and ad.action is not None and ad.action != saved.action:
        temporary = ad.action  # created by the bake for a rig that had no action
    if ad is not None:
        if ad.action != saved.action:
            ad.action = saved.action
        if saved.slot_handle is not None and ad.action_slot_handle != saved.slot_handle:
            ad.action_slot_handle = saved.slot_handle
    if temporary is not None and temporary != saved.action:
        bpy.data.actions.remove(temporary)
    saved.temporary = None
    if saved.name is not None and saved.action is not None:
        saved.action.name = saved.name  # the copy that carried the name is gone: the name is free again
        saved.name = None
    if saved.fake_user is not None and saved.action is not None:
        saved.action.use_fake_user = saved.fake_user
        saved.fake_user = None
    if not saved.had_animation_data and obj.animation_data is not None:
        obj.animation_data_clear()
    for key in _PROPS:
        before = saved.props.get(key)
        if before is None:
            if obj.get(key) is not None:
                del obj[key]
            continue
        now = fk.array_of(obj.get(key))
        if isinstance(before, np.ndarray) and now is not None and len(now) == len(before):
            now[:] = before  # in place: keeps the property's library-overridable flag
        else:
            was_overridable = obj.get(key) is not None and obj.is_property_overridable_library(f'["{key}"]')
            if obj.get(key) is not None:
                del obj[key]
            obj[key] = before.tolist() if isinstance(before, np.ndarray) else before
            if was_overridable:
                obj.property_overridable_library_set(f'["{key}"]', True)
    cache.put(obj.session_uid, saved.cache)
    for ch, status in zip(rig_settings(obj).chains, saved.status, strict=False):
        for key in _STATUS:
            if key not in status:
                if ch.is_property_set(key):
                    ch.property_unset(key)  # never set before: not stored, as before
            elif getattr(ch, key) != status[key]:
                setattr(ch, key, status[key])  # only when different, as live solving: no redraw storms
    pbs = obj.pose.bones
    for attr, values in saved.channels.items():
        pbs.foreach_set(attr, values.ravel())
    obj.update_tag()


# How the render's keys are made: 'playback' records what live playback shows, frame after frame (default);
# 'bake' runs the batched bake (`rig/bake.py`), ~20x faster but redundant chains with Start From Current can
# end with other inner joints than playback (README, Rendering). bench/render.py measures both.
method = "playback"


def _by_bake(state: _Render, names: bool) -> None:
    # Every rig is suspended before the first bake: a bake steps through frames, and a rig still solving live
    # meanwhile would end on another pose than the one it showed.
    for saved in state.rigs:
        live.suspend(saved.obj)
    for saved in state.rigs:
        obj = saved.obj
        try:
            chains = _valid_chains(obj)
            if not chains:
                continue  # nothing of it is posed live: nothing to bake (`finally` keeps it suspended)
            _use_copy(saved, names)
            opts = bake.BakeOptions(state.frames[0], state.frames[1], chains=chains, disable_after=False)
            bake.bake_rig(obj, opts)
            saved.done = True
        except Exception as exc:  # a BakeError, or anything Blender raised: this rig renders unbaked
            _put_back(saved)
            text = exc if isinstance(exc, bake.BakeError) else traceback.format_exc()
            state.failed.append(f"'{obj.name}': {text}")
        finally:
            # The bake resumes live solving of the rig it baked when it ends: keep it off until the render
            # ends. Rigs that follow this one bake next, stepping frames: this one plays its baked copy.
            live.suspend(obj)


def _by_playback(state: _Render, names: bool, now: int, subframe: float) -> None:
    scene = state.scene
    todo: list[tuple[_Rig, list[int]]] = []
    for saved in state.rigs:
        try:
            chains = _valid_chains(saved.obj)
        except bake.BakeError as exc:
            state.failed.append(f"'{saved.obj.name}': {exc}")
            continue
        if chains:
            todo.append((saved, record.chain_bones(saved.obj, chains)))
    frames = list(range(state.frames[0], state.frames[1] + 1))
    try:
        for saved, _bones in todo:
            _use_copy(saved, names)
            ad = saved.obj.animation_data or saved.obj.animation_data_create()
            if ad.action is None:
                ad.action = saved.temporary = bpy.data.actions.new(f"{saved.obj.name}Action")
        # All rigs in one pass, in frame order, as playback solves them (rigs that follow rigs included).
        recordings = record.record(scene, [(saved.obj, bones) for saved, bones in todo], frames)
        for (saved, _bones), rec in zip(todo, recordings, strict=True):
            action = saved.obj.animation_data.action
            assert action is not None  # the copy, or the new action, assigned above
            record.write(rec, frames, saved.channels, action)
            saved.done = True
    except Exception:
        text = traceback.format_exc()
        for saved, _bones in todo:
            _put_back(saved)
            saved.done = False
            state.failed.append(f"'{saved.obj.name}': recording live playback failed:\n{text}")
    finally:
        for saved in state.rigs:
            live.suspend(saved.obj)
            # The channels as the user left them: the keys drive the chain bones, the rest stays as it was.
            pbs = saved.obj.pose.bones
            for attr, values in saved.channels.items():
                pbs.foreach_set(attr, values.ravel())
            saved.obj.update_tag()
        scene.frame_set(now, subframe=subframe)


def prepare(scene: bpy.types.Scene, names: bool = False) -> _Render:
    """Bake every live rig of `scene` over the render range into a temporary action; suspend live solving.

    A rig that cannot be baked (an invalid chain, a library action, NLA tweak mode) is left as it is and
    renders the pose live solving left: the message says so, on the console and in `failed`.
    """
    global _active
    if _active is not None:
        restore()  # a render that never reported its end: put that one back first
    now = scene.frame_current
    frames = (min(scene.frame_start, now), max(scene.frame_end, now))
    state = _Render(scene, frames, main_thread=_on_main_thread(), now=(now, scene.frame_subframe))
    _active = state
    if scene != bpy.context.scene:
        # Frames are stepped in the context's scene: a scene rendered through another one's compositor is not it.
        for ob in render_rigs(scene):
            print(f"Reach IK: rendering without a bake of '{ob.name}': its scene '{scene.name}' is not the active one")
        return state
    for obj in render_rigs(scene):
        ad = obj.animation_data
        if ad is not None and ad.use_tweak_mode:
            state.failed.append(f"'{obj.name}': its NLA is in tweak mode; leave tweak mode (or bake) to render it")
            continue
        state.rigs.append(_save(obj))
    try:
        if method == "bake":
            _by_bake(state, names)
        else:
            _by_playback(state, names, now, scene.frame_subframe)
    finally:
        live.paused = True  # until `restore`: no rig is solved while the render plays the keys
    for line in state.failed:
        print(f"Reach IK: rendering without a bake of {line}; it renders the pose shown at frame {now}")
    return state


def restore() -> None:
    """Put every rig prepared for the render back as it was and resume live solving (idempotent)."""
    global _active, _frame_open
    state = _active
    _active = None
    _frame_open = False
    live.paused = False
    if state is None:
        return
    _settle.clear()
    for saved in reversed(state.rigs):
        try:
            _put_back(saved)
            _settle[saved.obj.session_uid] = (saved.obj, state.now, saved.channels)
        except ReferenceError:
            pass  # the object was deleted while rendering: nothing of it to put back
        finally:
            try:
                live.resume(saved.obj)
            except ReferenceError:
                pass


# How long the render thread waits for the main thread to prepare (it normally takes a few milliseconds plus
# the bake); past that the render goes on without the bake and says so.
HANDOVER_SECONDS = 120.0


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# Work the render thread hands to the main thread. Blender's timer list is not meant to be changed from another
# thread (`bpy.app.timers.register` appends to a list the main loop walks without the GIL), so in the GUI one
# timer, registered from the main thread when the add-on registers, polls this list ten times a second
# (0.24 µs of Python when it is empty, measured).
_requests: list[Callable[[], None]] = []
_requests_lock = threading.Lock()
POLL_SECONDS = 0.1
_polling = False


def _poll() -> float:
    if _over():
        restore()
    while True:
        with _requests_lock:
            if not _requests:
                return POLL_SECONDS
            work = _requests.pop(0)
        work()


def _to_main(work: Callable[[], None]) -> bool:
    """Run `work` on the main thread soon; False when nothing polls (background: renders run on the main
    thread there, so this does not happen)."""
    if not _polling:
        return False
    with _requests_lock:
        _requests.append(work)
    return True


def _over() -> bool:
    """A render prepared for has ended without `render_complete` or `render_cancel` (a failure Blender does
    not report through them): the GUI runs no render job, or in background a viewport frame change came."""
    return _active is not None and _active.watch and (bpy.app.background or not bpy.app.is_job_running("RENDER"))


def _prepare_or_say(scene: bpy.types.Scene) -> None:
    try:
        state = prepare(scene)
        state.watch = True
    except Exception:
        print(f"Reach IK: preparing the render failed, the render shows the current pose:\n{traceback.format_exc()}")
        restore()


@persistent
def on_render_init(scene: bpy.types.Scene, *_args: object) -> None:
    """Prepare on the main thread, always.

    `blender -b -a`, `render.render()` from a script and F12 with a script's EXEC call run the render on the
    main thread: prepare at once. The GUI's Render / Render Animation run it as a job whose thread calls
    `render_init` (measured on the 4.3 binary) while the interface may be drawing the same data: the render
    thread then hands the work to the main thread (`_poll`) and waits for it, before it builds its own
    depsgraph, so no data is written from the render thread, Lock Interface or not.
    """
    if _on_main_thread():
        _prepare_or_say(scene)
        return
    done = threading.Event()
    abandoned = threading.Event()

    def on_main() -> None:
        if not abandoned.is_set():
            _prepare_or_say(scene)
        done.set()

    if not _to_main(on_main):
        _prepare_or_say(scene)  # nothing polls (should not happen): better than rendering frozen chains
        return
    if not done.wait(HANDOVER_SECONDS):
        abandoned.set()
        print(f"Reach IK: the interface did not answer within {HANDOVER_SECONDS:.0f} s: rendering without a bake")


@persistent
def on_render_end(*_args: object) -> None:
    # The GUI's render job ends on its own thread: put the data back from the main thread, at its next poll
    # (live solving stays suspended until then, so nothing is solved on the baked copy).
    if _on_main_thread() or not _to_main(restore):
        restore()


_frame_open = False  # between render_pre and render_post: the render's own frame change


@persistent
def on_render_pre(*_args: object) -> None:
    global _frame_open
    _frame_open = True


@persistent
def on_render_post(*_args: object) -> None:
    global _frame_open
    _frame_open = False


@persistent
def on_frame_change_pre(*_args: object) -> None:
    """In background, a frame change outside a render's frames while its keys are in place: the render ended
    without `render_complete` or `render_cancel`. Put everything back before Blender evaluates the frame, so
    the user's action and live solving pose it as usual. (The GUI's poll checks the render job instead.)"""
    if _active is not None and not _frame_open and bpy.app.background and _over():
        restore()


# Rigs just put back after a render (session uid -> the object, the frame it was prepared on, its channels as
# they were). Blender ends a render by setting that frame again, which applies the action's keys to the chain
# bones once more: live solving would then solve the frame again from another start than the one it solved
# from before the render (a chain bone with keys takes its key, one without keeps the solved value), and with
# Start From Current land a few 1e-5 elsewhere. The rig was showing that very frame's solved pose, and nothing
# else changed: its channels are written back before live solving looks (`on_frame_settle` runs first), so
# the pose and the status stay exactly as they were. One-shot: any other update or frame drops it.
_settle: dict[int, tuple[bpy.types.Object, tuple[int, float], dict[str, NDArray[np.float32]]]] = {}


@persistent
def on_frame_settle(scene: bpy.types.Scene, *_args: object) -> None:
    if not _settle or _active is not None:
        return
    todo = list(_settle.values())
    _settle.clear()
    here = (scene.frame_current, scene.frame_subframe)
    for obj, now, channels in todo:
        if here != now:
            continue
        try:
            pbs = obj.pose.bones
            for attr, values in channels.items():
                pbs.foreach_set(attr, values.ravel())
            obj.update_tag()
            # Its evaluated pose is still the render's until Blender evaluates this write (right after the
            # handlers): a check now would take that for a change and solve again.
            live.skip_next(obj)
        except ReferenceError:
            pass  # deleted meanwhile


@persistent
def on_depsgraph_settle(*_args: object) -> None:
    _settle.clear()  # something else happened first: live solving decides as usual


_warned: set[str] = set()  # files already warned about (once per file and session)


@persistent
def on_frame_change_post(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph | None = None) -> None:
    """Say so when a depsgraph of its own steps through frames outside a render (Alembic, USD exports).

    Those evaluate the scene in a 'RENDER'-mode depsgraph of their own, as a render does, but with no
    render_init to prepare on: live chains are exported still (measured with Alembic). One attribute test
    per frame change when nothing is wrong.
    """
    if depsgraph is None:
        return
    if _active is not None:
        return
    if depsgraph.mode != "RENDER":
        return
    key = bpy.data.filepath
    if key in _warned or not render_rigs(scene):
        return
    _warned.add(key)
    print(
        "Reach IK: the scene is evaluated in a depsgraph of its own outside a render (an Alembic or USD export?):"
        " live chains are written still. Bake first (reach.bake, `blender -c reach_ik bake`) or export inside"
        " `rig.export.baked(scene)`."
    )


@persistent
def on_load(*_args: object) -> None:
    # A file is about to be loaded (or an undo step): never leave a temporary action behind.
    restore()


_HANDLERS = (
    ("render_init", on_render_init),
    ("render_complete", on_render_end),
    ("render_cancel", on_render_end),
    ("load_pre", on_load),
    ("frame_change_post", on_frame_change_post),
    ("frame_change_pre", on_frame_change_pre),
    ("render_pre", on_render_pre),
    ("render_post", on_render_post),
)


def register() -> None:
    global _polling
    for kind, fn in _HANDLERS:
        getattr(bpy.app.handlers, kind).append(fn)
    # Before live solving's own frame handler (registered earlier): it must see the channels put back.
    bpy.app.handlers.frame_change_post.insert(0, on_frame_settle)
    bpy.app.handlers.depsgraph_update_post.append(on_depsgraph_settle)
    if not bpy.app.background:
        bpy.app.timers.register(_poll, first_interval=POLL_SECONDS, persistent=True)
        _polling = True


def unregister() -> None:
    global _polling
    restore()
    if _polling and bpy.app.timers.is_registered(_poll):
        bpy.app.timers.unregister(_poll)
    _polling = False
    _settle.clear()
    for kind, fn in (("depsgraph_update_post", on_depsgraph_settle), ("frame_change_post", on_frame_settle)):
        handlers = getattr(bpy.app.handlers, kind)
        while fn in handlers:
            handlers.remove(fn)
    for kind, fn in reversed(_HANDLERS):
        handlers = getattr(bpy.app.handlers, kind)
        while fn in handlers:
            handlers.remove(fn)
