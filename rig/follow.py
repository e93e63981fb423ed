"""Objects that follow another armature's bone through a constraint, as live solving carries them.

A target or pole parented to a bone of a rig solved in the same update is carried with that bone's solution
(`live._carry`), since Blender cannot evaluate it again inside the handler. The same holds for one that
follows the bone through a constraint, when what the constraint does can be predicted from the bone's move:
Child Of with every channel and Copy Transforms move it rigidly with the bone, Copy Location moves it with
the point on the bone it copies (keeping its rotation). Other constraints (partial influence, local spaces,
some axes) are not followed in the same update: their target is reached at the next one.
"""

from __future__ import annotations

import traceback
from typing import Any

import bpy

from ..core.model import RigReport
from . import cache
from .props import rig_settings
from .solve import store_status


def constraint_leaders(node: bpy.types.Object) -> list[tuple[int, str]]:
    """(armature session uid, bone) for each bone `node` follows through a constraint (`followed`)."""
    out = []
    for con in node.constraints:
        arm = followed(con)
        if arm is not None:
            out.append((arm.session_uid, str(getattr(con, "subtarget", ""))))
    return out


def followed(con: bpy.types.Constraint) -> bpy.types.Object | None:
    """The armature whose bone `con` makes its owner follow in a way `live._carry` can predict, or None: rigidly
    (Child Of with every channel, Copy Transforms in world space), or by a point on the bone (Copy Location
    in world space, every axis, none inverted, an offset or not); at full influence."""
    if con.mute or not con.enabled or con.influence != 1.0:
        return None
    arm = getattr(con, "target", None)
    if arm is None or arm.type != "ARMATURE" or not getattr(con, "subtarget", ""):
        return None
    c: Any = con
    if con.type == "CHILD_OF":
        flags = ("use_location_x", "use_location_y", "use_location_z", "use_rotation_x", "use_rotation_y")
        ok = all(getattr(c, f) for f in (*flags, "use_rotation_z", "use_scale_x", "use_scale_y", "use_scale_z"))
    elif con.type in ("COPY_TRANSFORMS", "COPY_LOCATION"):
        ok = c.target_space == "WORLD" and c.owner_space == "WORLD"
        if ok and con.type == "COPY_TRANSFORMS":
            ok = c.mix_mode == "REPLACE" and not c.use_bbone_shape
        elif ok:
            axes = (c.use_x, c.use_y, c.use_z, not c.invert_x, not c.invert_y, not c.invert_z)
            ok = all(axes) and not c.use_bbone_shape
    else:
        ok = False
    return arm if ok else None


def point_follower(ob: bpy.types.Object, arm_uid: int, bone: str) -> tuple[float, float] | None:
    """For an object that copies only the location of a point on the bone (itself, or an object it hangs
    from, through Copy Location): the point's head-to-tail place and the bone's length. None: it follows
    the bone rigidly."""
    node: bpy.types.Object | None = ob
    depth = 0
    while node is not None and depth < 1000:
        for con in node.constraints:
            arm = followed(con)
            c: Any = con
            if arm is not None and arm.session_uid == arm_uid and c.subtarget == bone:
                if con.type != "COPY_LOCATION":
                    return None
                bones = arm.data.bones
                return float(c.head_tail), float(bones[bone].length) if bone in bones else 0.0
        node, depth = node.parent, depth + 1
    return None


# Follow-ups Reach IK cannot predict. A target that follows a bone of a rig written in this update through a
# constraint `followed` does not accept, a driver, or a control bone constrained to it, moves only when
# Blender evaluates that write, after the handler: Blender calls depsgraph handlers in the first of its two
# evaluation passes only, and asking it to evaluate again from inside one crashed bpy 4.5 (BLENDER_NOTES).
# Such a chain is solved again at the next update (a timer makes one at once in the GUI); meanwhile its
# status says so instead of "reached" (`settle`).

_timer_on = False


def pending() -> dict[int, dict[int, str]]:
    """The chains whose status says they are one update behind, by rig session uid (tests, scripts)."""
    return {uid: dict(marks) for uid, marks in cache.behind.items()}


def begin() -> dict[int, int]:
    """What `settle` compares with to tell which rigs this update solved: their solve counts now."""
    return dict(cache.stats)


def settle(rigs: list[bpy.types.Object], counts: dict[int, int], skip: set[int]) -> None:
    """After an update's rigs were checked (`counts`: `begin`'s): give the chains marked one update behind
    at an earlier update their own status back (their rig has been checked since), and mark the valid chains
    whose target or pole follows a bone of a rig solved in this update in a way not carried with its solve.
    `skip`: rigs live solving leaves alone (baked, rendered)."""
    if len(rigs) < 2 and not cache.behind:
        return  # one rig follows no other, and no chain waits for its status back (every drag of one rig)
    try:
        _settle(rigs, counts, skip)
    except Exception:
        # Never let this stop live solving (a rig deleted under us, a constraint of an unexpected kind): the
        # rigs are solved already; print each distinct failure once, as the handler does for a rig.
        text = traceback.format_exc()
        if cache.reported.get(0) != text:
            cache.reported[0] = text
            print(f"Reach IK: checking rigs that follow other rigs failed:\n{text}")


def _settle(rigs: list[bpy.types.Object], counts: dict[int, int], skip: set[int]) -> None:
    written = {uid for uid, n in cache.stats.items() if counts.get(uid) != n}
    marks: dict[int, dict[int, str]] = {}
    if written:
        by_uid = {ob.session_uid: ob for ob in rigs}
        for ob in rigs:
            uid = ob.session_uid
            if uid in skip or ob.mode == "EDIT" or written <= {uid} or not rig_settings(ob).live:
                continue  # a rig only follows others (a scene with one rig walks nothing)
            found = _unpredicted(ob, written, by_uid)
            if found:
                marks[uid] = found
    for uid, old in list(cache.behind.items()):
        if uid in cache.dirty:
            continue  # not checked in this update (the handler was not called for it): still behind
        del cache.behind[uid]
        back = _rig(rigs, uid)
        again = [i for i in old if i not in marks.get(uid, {})]
        if back is not None and again:
            # `shown=None`: write every field, as the outcome stored at its last solve says.
            store_status(back, RigReport(outcomes=dict(cache.outcomes.get(uid, {}))), None, again)
    for uid, found in marks.items():
        marked = _rig(rigs, uid)
        if marked is None:
            continue
        chains = rig_settings(marked).chains
        for i, message in found.items():
            if chains[i].message != message:
                chains[i].message = message
        cache.behind[uid] = found
        cache.dirty.add(uid)  # the next update checks it whatever Blender lists
    if marks and not bpy.app.background:
        _schedule()


def _rig(rigs: list[bpy.types.Object], uid: int) -> bpy.types.Object | None:
    for ob in rigs:
        try:
            if ob.session_uid == uid:
                return ob
        except ReferenceError:
            continue
    return None


def _schedule() -> None:
    global _timer_on
    if not _timer_on:
        _timer_on = True
        bpy.app.timers.register(_on_timer, first_interval=0.0)


def cancel() -> None:
    """Drop a scheduled re-solve (the add-on is unregistered)."""
    global _timer_on
    if bpy.app.timers.is_registered(_on_timer):
        bpy.app.timers.unregister(_on_timer)
    _timer_on = False


def _on_timer() -> None:
    global _timer_on
    _timer_on = False
    poke()


def poke() -> None:
    """Tag every rig with chains one update behind, so Blender's next evaluation (at once in the GUI, after
    a timer) calls the live handler, which solves them on the targets Blender now shows."""
    uids = set(cache.behind)
    if not uids:
        return
    for ob in bpy.data.objects:
        if ob.type == "ARMATURE" and ob.session_uid in uids:
            ob.update_tag()


def _unpredicted(rig: bpy.types.Object, written: set[int], by_uid: dict[int, bpy.types.Object]) -> dict[int, str]:
    """{chain index: message} for the valid chains of `rig` whose target or pole (or the rig itself, or a
    bone above the chain) follows a bone of a rig in `written` in a way `live._carry` did not carry."""
    shown = cache.outcomes.get(rig.session_uid, {})
    carried = cache.hangs.get(rig.session_uid, ())
    uid = rig.session_uid
    own = _leaders_of_object(rig, carried, written, uid)
    own.discard(uid)
    out: dict[int, str] = {}
    for i, ch in enumerate(rig_settings(rig).chains):
        outcome = shown.get(i)
        if not ch.enabled or outcome is None or not outcome.valid:
            continue  # a refused chain's message says more than this one
        found = set(own)
        pb = rig.pose.bones.get(ch.tip_bone)
        if pb is not None:
            found |= _leaders_of_bones(rig, pb, written, uid)
        for ob, bone in ((ch.target, ch.target_bone), (ch.pole, ch.pole_bone)):
            if ob is None:
                continue
            found |= _leaders_of_object(ob, carried, written, uid)
            if ob.type == "ARMATURE" and bone and (ob.session_uid, bone, ob) not in carried:
                target_pb = ob.pose.bones.get(bone)
                if target_pb is not None:
                    found |= _leaders_of_bones(ob, target_pb, written, uid)
        found.discard(uid)
        if found:
            names = ", ".join(sorted(f"'{by_uid[u].name}'" for u in found if u in by_uid))
            out[i] = (
                f"one update behind: its target or pole follows a bone of {names} through a constraint or "
                "driver Reach IK cannot predict, so it is solved again at the next update (Blender shows the "
                "target's new place only after this one)"
            )
    return out


def _armature_targets(con: bpy.types.Constraint) -> list[tuple[bpy.types.Object, str]]:
    """The (armature, bone) pairs `con` reads, bones only (a rig's solve never moves its object)."""
    c: Any = con
    pairs = [(t.target, t.subtarget) for t in c.targets] if con.type == "ARMATURE" else []
    pairs.append((getattr(c, "target", None), str(getattr(c, "subtarget", "") or "")))
    pairs.append((getattr(c, "pole_target", None), str(getattr(c, "pole_subtarget", "") or "")))
    return [(ob, bone) for ob, bone in pairs if ob is not None and ob.type == "ARMATURE" and bone]


def _driver_armatures(owner: bpy.types.ID, prefix: str = "") -> set[int]:
    """Armatures the drivers of `owner` read (those on paths starting `prefix`)."""
    out: set[int] = set()
    ad = getattr(owner, "animation_data", None)
    if ad is None:
        return out
    for fc in ad.drivers:
        if prefix and not fc.data_path.startswith(prefix):
            continue
        for var in fc.driver.variables:
            for t in var.targets:
                ident = t.id
                if isinstance(ident, bpy.types.Object) and ident.type == "ARMATURE":
                    out.add(ident.session_uid)
    return out


def _leaders_of_object(
    ob: bpy.types.Object, carried: tuple[tuple[int, str, bpy.types.Object], ...], written: set[int], uid: int
) -> set[int]:
    """Rigs in `written` that `ob` (or an object it hangs from) follows in a way not carried."""
    out: set[int] = set()
    node: bpy.types.Object | None = ob
    depth = 0
    while node is not None and depth < 1000:
        for con in node.constraints:
            if con.mute:
                continue
            for arm, bone in _armature_targets(con):
                leader = arm.session_uid
                if leader in written and leader != uid:
                    if followed(con) is not None and (leader, bone, ob) in carried:
                        continue
                    out.add(leader)
        out |= _driver_armatures(node) & written
        parent = node.parent
        if parent is not None and parent.type == "ARMATURE" and parent.session_uid in written:
            if node.parent_type == "BONE" and (parent.session_uid, node.parent_bone, ob) not in carried:
                out.add(parent.session_uid)
        node, depth = parent, depth + 1
    return out


def _leaders_of_bones(arm: bpy.types.Object, pb: bpy.types.PoseBone, written: set[int], uid: int) -> set[int]:
    """Rigs in `written` (other than `uid`) that bone `pb` of `arm` or a bone above it follows through a
    constraint or a driver."""
    out: set[int] = set()
    node: bpy.types.PoseBone | None = pb
    esc = bpy.utils.escape_identifier
    while node is not None:
        for con in node.constraints:
            if not con.mute:
                out.update(a.session_uid for a, _b in _armature_targets(con) if a.session_uid in written)
        out |= _driver_armatures(arm, f'pose.bones["{esc(node.name)}"]') & written
        node = node.parent
    out.discard(uid)
    return out
