"""Convert IK Constraints: Blender's `IK` constraints on an armature become Reach IK chains.

Each enabled IK constraint becomes one chain with the same tip (the constraint's bone, or its parent with
Use Tail off), length (Chain Length, 0 = up to the root), target and pole (object or bone), target rotation
and weight; the constraint is muted (not deleted: unmute it to go back). Per-bone IK settings become joint
limits where they map. What could not be converted is reported, constraint by constraint.

Blender's Pole Angle is not copied as a number: Blender turns the chain so that the root bone's X axis,
rotated by the angle about its Y axis, points at the pole; a Reach IK chain bends toward the pole, turned
by its own Pole Angle about the root -> target axis. The conversion measures the angle between the pole
and the bend Blender's constraint produces at the current frame (the pose is evaluated with the constraint
on), so the converted chain bends exactly the same way there. For a chain that is straight in that pose it
is worked out from the rest bend instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import bpy
import numpy as np
from bpy.types import Context, Object, Operator, PoseBone
from mathutils import Vector
from numpy.typing import NDArray

from ..rig.compat import classes_factory
from ..rig.props import ReachChain, bone_limits, rig_settings
from .chains import _parent_line, _poll_armature, _unique_name, armature_data, pose_bones

F64 = NDArray[np.float64]
# Reach IK's cone sides go up to 179.9 degrees (the property's range): a free axis is approximated by it.
_FREE = math.radians(179.9)


@dataclass
class Conversion:
    """What happened to one IK constraint."""

    bone: str
    constraint: str
    chain: str = ""  # the chain created ("" when the constraint was left alone)
    converted: list[str] = field(default_factory=list)
    approximated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: str = ""  # why the constraint was left alone

    def text(self) -> str:
        head = f"'{self.bone}' / '{self.constraint}'"
        if self.skipped:
            return f"{head}: left alone: {self.skipped}"
        parts = [f"{head} -> chain '{self.chain}'"]
        if self.converted:
            parts.append("converted: " + ", ".join(self.converted))
        if self.approximated:
            parts.append("approximated: " + "; ".join(self.approximated))
        if self.dropped:
            parts.append("not converted: " + "; ".join(self.dropped))
        return ". ".join(parts)


def _perp(v: F64, axis: F64) -> F64:
    out: F64 = v - axis * float(v @ axis)
    return out


def _signed_angle(a: F64, b: F64, axis: F64) -> float:
    """The right-handed angle about unit `axis` that turns `a` toward `b` (both perpendicular to it)."""
    return math.atan2(float(np.cross(a, b) @ axis), float(a @ b))


def _bend(points: F64, root: F64, axis: F64) -> F64:
    """The chain's bend: the interior joints' offsets perpendicular to the root -> target line, summed
    (the solvers' own definition: `solvers.frames.chain_bend`)."""
    rel = points[1:-1] - root
    out: F64 = (rel - np.outer(rel @ axis, axis)).sum(axis=0)
    return out


def _driver(obj: Object, con: bpy.types.Constraint, prop: str) -> bpy.types.FCurve | None:
    """The driver on the constraint's `prop` ('mute', 'influence'), if the rig has one."""
    ad = obj.animation_data
    return ad.drivers.find(con.path_from_id(prop)) if ad is not None else None


def _driven_by(fcu: bpy.types.FCurve) -> str:
    paths = [t.data_path for v in fcu.driver.variables for t in v.targets if t.data_path] if fcu.driver else []
    return "a driver on " + ", ".join(paths) if paths else "a driver"


def _xyz(v: Vector) -> tuple[float, float, float]:
    return (float(v.x), float(v.y), float(v.z))


def _pole_angle(
    ev: Object, chain: list[PoseBone], goal: F64, pole: F64, blender_angle: float
) -> tuple[float, str | None]:
    """The Reach IK pole angle that bends the chain as Blender's constraint does, and a note when estimated.

    `ev` is the evaluated armature (the constraint's result), `chain` root first, `goal` and `pole` in
    armature space.
    """
    names = [pb.name for pb in chain]
    bones = ev.pose.bones
    points = np.array([_xyz(bones[n].head) for n in names] + [_xyz(bones[names[-1]].tail)], dtype=np.float64)
    root = points[0]
    total = float(np.linalg.norm(np.diff(points, axis=0), axis=1).sum())
    axis = goal - root
    if np.linalg.norm(axis) > 1e-9 * max(total, 1e-9):
        axis = axis / np.linalg.norm(axis)
        bend = _bend(points, root, axis)
        to_pole = _perp(pole - root, axis)
        if np.linalg.norm(bend) > 1e-3 * total and np.linalg.norm(to_pole) > 1e-9:
            return _signed_angle(to_pole, bend, axis), None
    # Straight in Blender's pose: the rest bend, seen from the root bone, against Blender's rule (the root
    # bone's X axis turned by the angle about its Y axis points at the pole).
    rest = armature_data(ev).bones
    rp = np.array([_xyz(rest[n].head_local) for n in names] + [_xyz(rest[names[-1]].tail_local)], dtype=np.float64)
    rot = np.array(rest[names[0]].matrix_local.to_3x3(), dtype=np.float64)
    local = (rp - rp[0]) @ rot  # rest joints in the root bone's rest frame
    chord = local[-1] / max(float(np.linalg.norm(local[-1])), 1e-12)
    bend = _bend(local, local[0], chord)
    up = _perp(np.array([math.cos(blender_angle), 0.0, math.sin(blender_angle)]), chord)
    if np.linalg.norm(bend) <= 1e-3 * total or np.linalg.norm(up) < 1e-9:
        return 0.0, "the chain is straight at rest and in Blender's pose, so the bend side is a guess"
    return _signed_angle(up, bend, chord), "measured on the rest bend (the chain is straight in Blender's pose)"


def _head(ob: Object, bone: str) -> F64:
    """World position of a target or pole: a bone's head, or the object's origin (as Blender's IK aims)."""
    m = ob.matrix_world
    if bone and ob.type == "ARMATURE" and ob.pose is not None and bone in ob.pose.bones:
        return np.array(m @ ob.pose.bones[bone].head, dtype=np.float64)
    return np.array(m.translation, dtype=np.float64)


def _limits(pb: PoseBone, entry: Conversion, stretch: bool) -> None:
    """Blender's per-bone IK settings of `pb` as Reach IK joint limits (Blender's X -> up/down, Z -> left/right
    (+X rotation swings +Y toward +Z: up; +Z rotation swings it toward -X: left), Y -> twist)."""
    lim = bone_limits(pb)
    name = pb.name

    def side(axis: str) -> tuple[float, float] | None:
        """(rotation toward +, rotation toward -) allowed about `axis`, or None when free."""
        if getattr(pb, f"lock_ik_{axis}"):
            return 0.0, 0.0
        if getattr(pb, f"use_ik_limit_{axis}"):
            return max(float(getattr(pb, f"ik_max_{axis}")), 0.0), max(-float(getattr(pb, f"ik_min_{axis}")), 0.0)
        return None

    x, y, z = side("x"), side("y"), side("z")
    if x is not None or z is not None:
        up, down = x if x is not None else (_FREE, _FREE)
        left, right = z if z is not None else (_FREE, _FREE)
        lim.cone_up, lim.cone_down = min(up, _FREE), min(down, _FREE)
        lim.cone_left, lim.cone_right = min(left, _FREE), min(right, _FREE)
        lim.use_cone = True
        entry.converted.append(f"'{name}' IK limits/locks on X and Z -> cone")
        if x is None or z is None:
            entry.approximated.append(f"'{name}': one free swing axis is a 179.9° cone side")
    if y is not None:
        lim.twist_min, lim.twist_max = -min(y[1], math.pi), min(y[0], math.pi)
        lim.use_twist = True
        entry.converted.append(f"'{name}' IK limit/lock on Y -> twist")
    if any(float(getattr(pb, f"ik_stiffness_{a}")) > 0.0 for a in "xyz"):
        entry.dropped.append(f"'{name}' IK stiffness (Reach IK has none yet)")
    if stretch and float(pb.ik_stretch) > 0.0:
        entry.dropped.append(
            f"'{name}' IK stretch {pb.ik_stretch:.3g} (not converted: Reach IK stretches only to reach a target, "
            "by the chain's Stretch)"
        )


def convert_constraints(obj: Object, context: Context | None = None) -> list[Conversion]:
    """Convert every enabled IK constraint on the pose bones of armature `obj` (see the module docstring)."""
    context = context or bpy.context
    depsgraph = context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(depsgraph)
    inv_world = np.linalg.inv(np.array(obj.matrix_world, dtype=np.float64))
    settings = rig_settings(obj)
    bones = pose_bones(obj)
    out: list[Conversion] = []
    todo: list[tuple[PoseBone, bpy.types.KinematicConstraint, Conversion]] = []
    for pb in bones:
        for con in pb.constraints:
            if con.type != "IK":
                continue
            assert isinstance(con, bpy.types.KinematicConstraint)
            entry = Conversion(pb.name, con.name)
            out.append(entry)
            if con.mute:
                entry.skipped = "it is muted (disabled)"
                fcu = _driver(obj, con, "mute")
                if fcu is not None and not fcu.mute:
                    entry.skipped += (
                        f"; {_driven_by(fcu)} sets its Mute and can turn it on again (a rig switch, e.g. "
                        "Rigify's pole toggle): on bones of a converted chain it would then run on top of the chain"
                    )
            elif con.target is None:
                entry.skipped = "it has no target (targetless / Auto IK): Reach IK chains need a target"
            elif con.ik_type == "DISTANCE":
                entry.skipped = "it is an iTaSC Distance constraint, which Reach IK does not have"
            elif not con.use_location:
                entry.skipped = "its Position is off (rotation-only IK), which Reach IK does not have"
            elif not con.use_tail and pb.parent is None:
                entry.skipped = "Use Tail is off and the bone has no parent: the chain would be empty"
            else:
                todo.append((pb, con, entry))
    used_tips = {ch.tip_bone for ch in settings.chains}
    made: list[tuple[Conversion, list[str], ReachChain]] = []
    iterations = 0
    for pb, con, entry in todo:
        tip = pb if con.use_tail else pb.parent
        assert tip is not None
        if tip.name in used_tips:
            entry.skipped = f"a chain already ends at bone '{tip.name}'"
            continue
        line = _parent_line(tip)
        count = int(con.chain_count)
        chain = list(reversed(line if count == 0 else line[:count]))
        target, pole = con.target, con.pole_target
        assert target is not None  # checked when the constraint was picked
        target_bone = con.subtarget if target.type == "ARMATURE" else ""
        pole_bone = con.pole_subtarget if pole is not None and pole.type == "ARMATURE" else ""
        angle = 0.0
        if pole is not None:
            goal = (inv_world @ np.append(_head(target, target_bone), 1.0))[:3]
            pole_at = (inv_world @ np.append(_head(pole, pole_bone), 1.0))[:3]
            angle, note = _pole_angle(ev, chain, goal, pole_at, float(con.pole_angle))
            entry.converted.append(
                f"pole '{pole.name}'"
                + (f" bone '{pole_bone}'" if pole_bone else "")
                + f", Pole Angle {math.degrees(con.pole_angle):.4g}° -> {math.degrees(angle):.4g}° "
                "(Reach IK turns the bend plane, Blender the root bone)"
            )
            if note:
                entry.approximated.append(f"Pole Angle: {note}")
            elif abs(math.remainder(float(con.pole_angle), math.pi / 2)) > 1e-4:
                entry.approximated.append(
                    "Pole Angle: matched at the current pose; an angle that is not a multiple of 90° turns "
                    "Blender's bend plane slightly with the bend, Reach IK's does not"
                )
        ch: ReachChain = settings.chains.add()
        ch.name = _unique_name(settings, con.name if con.name not in ("IK", "") else tip.name)
        entry.chain = ch.name
        ch.tip_bone = tip.name
        ch.chain_length = 0 if count == 0 else len(chain)
        ch.solver = "TWO_BONE" if len(chain) == 2 and not con.use_rotation else "FABRIK"
        ch.target = target
        ch.target_bone = target_bone
        if pole is not None:
            ch.pole = pole
            ch.pole_bone = pole_bone
            ch.pole_angle = angle
        ch.use_target_rotation = bool(con.use_rotation)
        ch.weight = float(con.weight)
        used_tips.add(tip.name)
        entry.converted.append(
            f"tip '{tip.name}'"
            + ("" if con.use_tail else " (Use Tail off: the owner's parent)")
            + f", length {'0 (to the root)' if count == 0 else len(chain)}, {ch.solver}"
        )
        entry.converted.append(f"target '{target.name}'" + (f" bone '{target_bone}'" if target_bone else ""))
        if con.use_rotation:
            entry.converted.append("Rotation -> Use Target Rotation")
            if float(con.orient_weight) != 1.0:
                entry.approximated.append(f"rotation weight {con.orient_weight:.3g}: Reach IK takes the rotation fully")
        if not con.use_tail and (np.array(pb.bone.head_local) - np.array(tip.bone.tail_local)).any():
            entry.approximated.append(
                f"Use Tail off: '{pb.name}' is not connected, the tail of '{tip.name}' reaches the target"
            )
        if float(con.influence) != 1.0:
            ch.influence = float(con.influence)
            entry.approximated.append(
                f"influence {con.influence:.3g} -> Influence (Blender blends the pose-space matrices, Reach IK each "
                "bone's rotation from its FK pose: the same at 0 and 1)"
            )
        fcu = _driver(obj, con, "influence")
        if fcu is not None and not fcu.mute:
            entry.dropped.append(
                f"influence set by {_driven_by(fcu)} (not carried over: key or drive the chain's Influence)"
            )
        for b in chain:
            _limits(b, entry, bool(con.use_stretch))
        iterations = max(iterations, int(con.iterations))
        made.append((entry, [b.name for b in chain], ch))
    # Chains that share bones are solved as one FABRIK tree (a two-bone chain cannot share).
    owners: dict[str, list[int]] = {}
    for k, (_entry, names, _ch) in enumerate(made):
        for n in names:
            owners.setdefault(n, []).append(k)
    shared = {k for ks in owners.values() if len(ks) > 1 for k in ks}
    for k in sorted(shared):
        entry, _names, ch = made[k]
        if ch.solver != "FABRIK":
            ch.solver = "FABRIK"
            entry.approximated.append("shares bones with another IK chain: FABRIK (solved together as a tree)")
    if made:
        settings.max_iterations = max(iterations, 1)
    # Mute last, once every chain exists: the constraints' result above was measured with them on.
    for _pb, con, entry in todo:
        if entry.chain:
            con.mute = True
            entry.converted.append("the constraint is muted (unmute it and disable the chain to go back)")
            # A driver on Mute (Rigify drives it from the limb's pole toggle) would unmute the constraint at the
            # next update and Blender's IK would run on top of the chain: mute the driver too (its F-Curve).
            fcu = _driver(obj, con, "mute")
            if fcu is not None and not fcu.mute:
                fcu.mute = True
                entry.converted.append(
                    f"its Mute was set by {_driven_by(fcu)}, which would unmute it: that driver is muted too "
                    "(unmute it as well to go back)"
                )
    return out


class REACH_OT_convert_constraints(Operator):
    """Convert the active armature's IK constraints into Reach IK chains (the constraints are muted)"""

    bl_idname = "reach.convert_constraints"
    bl_label = "Convert IK Constraints"
    bl_description = (
        "Turn every enabled IK constraint of the active armature into a Reach IK chain with the same tip, "
        "length, target, pole and limits; the constraints are muted, not deleted (unmute to go back)"
    )
    bl_options = {"REGISTER", "UNDO"}

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        obj = context.active_object
        if obj is None or obj.type != "ARMATURE":
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        entries = convert_constraints(obj, context)
        if not entries:
            self.report({"WARNING"}, f"Reach IK: '{obj.name}' has no IK constraints to convert")
            return {"CANCELLED"}
        for e in entries:
            level = "WARNING" if e.skipped or e.dropped else "INFO"
            self.report({level}, f"Reach IK: {e.text()}")  # type: ignore[arg-type]
        done = sum(1 for e in entries if e.chain)
        self.report(
            {"INFO"}, f"Reach IK: converted {done} of {len(entries)} IK constraint(s) of '{obj.name}' (details above)"
        )
        return {"FINISHED"} if done else {"CANCELLED"}


classes = (REACH_OT_convert_constraints,)
register, unregister = classes_factory(classes)
