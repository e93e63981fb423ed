"""Every per-session cache of the add-on, in one place, with one invalidation rule.

What is cached, keyed by the armature object's `session_uid` (or its data's pointer for skeletons):
settings versions, live fingerprints and solve counters, the chains' outside parents, cached plans, the
objects each rig depends on, and skeletons. None of it is saved with the file.

The rule: an entry lives as long as the object (or armature data) it describes. `prune()` drops entries of
objects that no longer exist (on structure updates: objects added, deleted, linked or unlinked) and
`clear()` drops everything (file load, undo, unregister). Whatever reads a cache must tolerate a miss: a
miss only costs a rebuild. Nothing here imports bpy, so every module of `rig/` can use it without cycles.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# session_uid -> settings version, bumped by every Reach IK setting change (cached plans compare it).
versions: dict[int, int] = {}
# session_uid -> inputs of the armature's last live solve (live.py decides what is in it).
fingerprints: dict[int, Any] = {}
# session_uid -> number of live solves of the armature (tests prove unchanged inputs cost nothing).
stats: dict[int, int] = {}
# session_uid -> number of live checks (inputs read and compared), solved or not.
checks: dict[int, int] = {}
# session_uid -> number of live solves that took the compiled program (live._lean).
program_solves: dict[int, int] = {}
# session_uid -> number of those that solved many chains in numpy batches (live._lean_batch).
batch_solves: dict[int, int] = {}
# session_uid -> number of full-path live solves taken by the compiled program (live._program_full).
full_program_solves: dict[int, int] = {}
# session_uid -> {chain index: number of live solves of that chain} (dragging one hand solves one chain).
chain_solves: dict[int, dict[int, int]] = {}
# session_uid -> {chain index: outcome} shown now (chains not re-solved keep theirs).
outcomes: dict[int, Any] = {}
# session_uid -> ((world matrix bytes, system override?), armature-wide problem or None) of the last live check.
rig_checks: dict[int, Any] = {}
# session_uid -> last unexpected error printed for the armature (each distinct error printed once).
reported: dict[int, str] = {}
# session_uid -> (skeleton, chain key, outside parents): the bones above the chains' roots.
roots: dict[int, Any] = {}
# session_uid -> (plan key, plan), live solving only.
plans: dict[int, Any] = {}
# session_uid -> (fingerprint it was built for, core.live.Program or why there is none): the rig compiled for
# live updates that move only its targets and poles (live.py).
programs: dict[int, Any] = {}
# session_uid -> (fingerprint, what `rig.live_pre` needs to solve the rig before an evaluation, or None: it cannot).
guess_ready: dict[int, Any] = {}
# session_uid -> the guess `rig.live_pre.solve_before` made, for the next post update to check.
guesses: dict[int, Any] = {}
# session_uid -> (fingerprint, {row: (control bone, its pose as Blender showed it)}): what accepted guesses leave
# for the fingerprint (`rig.live_pre.note`).
notes: dict[int, Any] = {}
# session_uid -> number of live solves made before the evaluation (`rig.live_pre`).
guessed: dict[int, int] = {}
# Playback solved ahead (`rig.lookahead.Entry`), and how many frame changes took it.
ahead: dict[int, Any] = {}
ahead_hits: dict[int, int] = {}
# session_uid -> set of session_uids of the IDs whose change can change this rig's solve.
depends: dict[int, tuple[object, frozenset[int]]] = {}  # (chain state it was worked out for, uids)
# session_uid -> ((armature object session_uid, bone name, object), ...): the targets and poles of this rig
# that hang from a bone of an armature (through any chain of object parents).
hangs: dict[int, Any] = {}
# armature data pointer -> (structure key, skeleton).
skeletons: dict[int, Any] = {}
# scene session_uid -> the rigged armature objects of that scene (rebuilt on structure updates).
scene_rigs: dict[int, Any] = {}
# session_uid of armatures whose settings changed since their last live check.
dirty: set[int] = set()
# session_uid -> {bone name: float32 Y scale}: the stretch live solving last wrote into each bone's Y scale
# channel (so a chain whose Stretch goes back to 1 can undo its own stretch, and only its own).
stretched: dict[int, dict[str, float]] = {}
# session_uid -> (names JSON as stored, names, name -> row): the FK store's bone names parsed (rig/fk.py).
fk_names: dict[int, Any] = {}
# session_uid -> {chain index: chains.Refusal}: the chains the last validation refused for bone settings
# Reach IK can change itself (the panel's fix button; `reach.fix_chain` validates afresh before it changes any).
fixes: dict[int, dict[int, Any]] = {}
# armature data pointer -> {old bone name: new name}: bones renamed in this session, found by comparing the
# skeleton before and after (same place in the bone list, same rest matrix); the FK store follows them.
renamed: dict[int, dict[str, str]] = {}
# session_uid -> {chain index: message}: chains whose status says they are one update behind a rig they follow
# in a way live solving cannot predict, until their rig is checked again (rig/follow.py, `settle`).
behind: dict[int, dict[int, str]] = {}

# Derived from an armature's inputs: dropped when it must be checked afresh (`forget`).
_DERIVED: tuple[dict[int, Any], ...] = (
    fingerprints,
    outcomes,
    rig_checks,
    roots,
    plans,
    programs,
    guess_ready,
    guesses,
    notes,
    depends,
    hangs,
    fk_names,
    fixes,
    behind,
)
# Counters kept across file loads (the demo and the tests count solves over a whole session).
_COUNTERS: tuple[dict[int, Any], ...] = (
    stats,
    checks,
    chain_solves,
    program_solves,
    batch_solves,
    full_program_solves,
    guessed,
    ahead_hits,
)
# Everything keyed by an armature object's session_uid.
# Playback solved ahead (`ahead`) is not derived in that sense: each frame change checks what it was solved for
# (`rig.lookahead.play`), and a structure update (Play lists the scene when it starts) must not drop it.
_PER_OBJECT: tuple[dict[int, Any], ...] = (versions, reported, stretched, ahead, *_DERIVED, *_COUNTERS)
_TABLES: dict[str, dict[int, Any]] = {
    "versions": versions,
    "fingerprints": fingerprints,
    "stats": stats,
    "checks": checks,
    "chain_solves": chain_solves,
    "program_solves": program_solves,
    "batch_solves": batch_solves,
    "full_program_solves": full_program_solves,
    "outcomes": outcomes,
    "rig_checks": rig_checks,
    "reported": reported,
    "roots": roots,
    "plans": plans,
    "programs": programs,
    "guess_ready": guess_ready,
    "guesses": guesses,
    "notes": notes,
    "guessed": guessed,
    "depends": depends,
    "hangs": hangs,
    "skeletons": skeletons,
    "scene_rigs": scene_rigs,
    "stretched": stretched,
    "fk_names": fk_names,
    "renamed": renamed,
    "fixes": fixes,
    "behind": behind,
    "ahead": ahead,
    "ahead_hits": ahead_hits,
}


# What `take` saves and `put` gives back: all an armature's live solving relies on between two updates.
_STATE: tuple[dict[int, Any], ...] = (versions, stretched, *_DERIVED)


def take(uid: int) -> tuple[dict[int, Any], bool]:
    """One armature's entries (a render bakes it and puts it back as it was: its last solve stays valid)."""
    return {i: table[uid] for i, table in enumerate(_STATE) if uid in table}, uid in dirty


def put(uid: int, saved: tuple[dict[int, Any], bool]) -> None:
    """Give back what `take` saved, replacing whatever the armature's entries became since."""
    entries, was_dirty = saved
    for i, table in enumerate(_STATE):
        table.pop(uid, None)
        if i in entries:
            table[uid] = entries[i]
    if was_dirty:
        dirty.add(uid)
    else:
        dirty.discard(uid)


def forget(uid: int) -> None:
    """Drop everything derived from one armature's inputs (it is solved again on its next check)."""
    for table in _DERIVED:
        table.pop(uid, None)


def prune(alive_objects: Iterable[int], alive_data: Iterable[int]) -> None:
    """Drop entries of objects (session uids) and armature data (pointers) that no longer exist.

    Derived inputs of the surviving armatures are dropped too: a structure update (an object linked,
    unlinked or deleted) can change what a chain reaches for without changing any number we compare.
    """
    keep = set(alive_objects)
    for table in _PER_OBJECT:
        for uid in [u for u in table if u not in keep]:
            del table[uid]
    for uid in list(fingerprints):
        forget(uid)
    keep_data = set(alive_data)
    for table in (skeletons, renamed):
        for ptr in [p for p in table if p not in keep_data]:
            del table[ptr]
    scene_rigs.clear()
    dirty.intersection_update(keep)


def clear(keep_stats: bool = True) -> None:
    """Drop every cache (file load, undo/redo: session uids and pointers may now mean other objects)."""
    for table in _TABLES.values():
        if keep_stats and any(table is counter for counter in _COUNTERS):
            continue
        table.clear()
    dirty.clear()


def sizes() -> dict[str, int]:
    """Number of entries per cache (tests check that nothing grows without bound)."""
    return {name: len(table) for name, table in _TABLES.items()}


def mark_dirty(obj: Any) -> None:
    """A Reach IK setting of the armature object `obj` (or of its bones' limits) changed: check it on the next
    live update. Here rather than in `live`, so the properties (`props`) can call it without importing `live`."""
    uid = obj.session_uid
    # The version is part of the fingerprint and of the plan key, so the next check re-solves and rebuilds.
    versions[uid] = versions.get(uid, 0) + 1
    dirty.add(uid)
    # A chain added or removed can make an armature a rig (or not): list the scene's rigs again.
    scene_rigs.clear()


def settings_version(obj: Any) -> int:
    """Bumped by every Reach IK setting change on the armature object `obj` (and its bones' limits)."""
    return versions.get(obj.session_uid, 0)
