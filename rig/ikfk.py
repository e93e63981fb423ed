"""IK <-> FK for animators: snap a chain's target and pole to the pose, make the pose its FK pose, switch.

Three operations on chosen chains of one armature (the operators in `operators/ikfk.py` wrap them):

- `snap` ("Snap IK to Pose"): move each chain's target (and pole) so that the IK solution *is* the pose the
  bones show now. The target goes to the tip's tail (with Use Target Rotation also to the tip's orientation,
  which the tip then takes as it is); the pole keeps its distance from the root -> target axis and turns
  about it into the chain's bend plane, on the bend side, its Pole Angle taken off (the solve turns the pole
  by it). The placement is then checked by a dry solve through the rig layer (`prepare`, `read_inputs`,
  `solve_inputs`: exactly what live solving would do, nothing written) and corrected where the solve
  disagrees: the pole turned by the bend angle the solve still misses, the target moved by the tip's miss
  (Soft eases a tip short of its target). What remains is reported (a pose outside the joint limits, a roll
  that Roll 'Rest' would not keep).
- `apply_fk` ("Apply IK to FK"): the pose the chain bones show becomes their FK pose (`fk.apply_current`).
- `switch` ("Switch IK/FK"): to IK, snap and set Influence to 1; to FK, apply to FK and set Influence to 0.
  Either way the bones show the pose they showed before.

Each runs as one transaction (`_Transaction`): a failure part-way (a control that a constraint holds
elsewhere, a key Blender refuses) puts every control, Influence, FK store and action it touched back as it
was, and raises `IkFkError`. Invalid chains are refused before anything is touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace

import bpy
import numpy as np
from mathutils import Matrix
from numpy.typing import NDArray

from ..core import convert
from ..core.model import ChainPlan, Group, Inputs, Plan, RigReport, Skeleton
from ..core.trees import branch
from . import anim, armature, fk, ikfk_follow, live
from .chains import ChainChoiceError, choose_chains
from .ikfk_base import (
    Control,
    _Transaction,
    _transaction,
    bone_path,
    chain_controls,
    influence_path,
    rotation_path,
)
from .ikfk_base import (
    IkFkError as IkFkError,  # re-exported: the operators and tests use them from here
)
from .ikfk_base import (
    Outcome as Outcome,
)
from .props import ReachChain, rig_settings
from .snapshot import prepare, read_inputs, stretch_release
from .solve import solve_inputs

F64 = NDArray[np.float64]

# Dry solves per chain group while correcting a snap: the first is the check, the others correct (one is
# usually enough; Soft near full extension takes a few more, and a pose no target gives stops at the best).
ROUNDS = 16
# ---------------------------------------------------------------------------------------------------------
# Choosing and validating chains
# ---------------------------------------------------------------------------------------------------------


def _chosen(obj: bpy.types.Object, which: str | set[int], doing: str) -> tuple[list[int], Skeleton, Plan]:
    """The chosen chains, all valid, with the whole rig's skeleton and plan (chains above and trees count)."""
    if obj.type != "ARMATURE":
        raise IkFkError(f"'{obj.name}' is not an armature: select the armature whose chains to {doing}")
    try:
        picked = choose_chains(obj, which, doing)
    except ChainChoiceError as exc:
        raise IkFkError(str(exc)) from None
    # What the bones show now: pending edits evaluated (and solved, when Live is on) first.
    bpy.context.view_layer.update()
    report, sk, plan = prepare(obj)
    if sk is None or plan is None:
        raise IkFkError(f"{report.rig_error or 'the armature cannot be solved'}; nothing was changed")
    chains = rig_settings(obj).chains
    planned = {c.index for g in plan.groups for c in g.chains}
    problems = []
    for i in sorted(picked):
        if not 0 <= i < len(chains):
            problems.append(f"there is no chain #{i}")
        elif i in plan.errors:
            problems.append(f"chain '{chains[i].name}': {plan.errors[i]}")
        elif i not in planned:
            problems.append(f"chain '{chains[i].name}' is disabled: enable it to {doing} it")
    if problems:
        raise IkFkError(f"cannot {doing} on '{obj.name}', nothing was changed: " + "; ".join(problems))
    return sorted(picked), sk, plan


def _chain_settings(obj: bpy.types.Object, index: int) -> ReachChain:
    chain: ReachChain = rig_settings(obj).chains[index]
    return chain


def _plans(plan: Plan, picked: Sequence[int]) -> dict[int, ChainPlan]:
    return {c.index: c for g in plan.groups for c in g.chains if c.index in picked}


def _animated(ob: bpy.types.Object, path: str) -> bool:
    """Whether `ob`'s action has an F-Curve on `path` (the animation sets it again at a frame change)."""
    ad = ob.animation_data
    return ad is not None and ad.action is not None and anim.find_fcurve(ad.action, ob, path, 0) is not None


def _warn_animated(outcome: Outcome, ob: bpy.types.Object, paths: Sequence[str], what: str, key: bool) -> None:
    if not key and any(_animated(ob, p) for p in paths):
        outcome.warnings.append(
            f"{what} is animated: the animation sets it back at the next frame change (turn on Key to keep it)"
        )


# ---------------------------------------------------------------------------------------------------------
# Snap IK to Pose
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Placement:
    """Where a chain's target and pole go (armature space of the rig), and how close the IK then comes."""

    chain: ChainPlan
    target: Control
    target_at: F64  # (4,4)
    pole: Control | None = None
    pole_at: F64 | None = None  # (4,4)
    miss: float = math.inf  # world units: the largest distance of a chain bone's axes from the pose
    worst: str = ""  # the bone where
    oriented: bool = False  # the target's orientation is placed too (Use Target Rotation, or a follower)


class _Pose:
    """The pose the bones show now, in the rig's armature space, and its world transform."""

    def __init__(self, obj: bpy.types.Object, sk: Skeleton) -> None:
        self.world = np.array(obj.matrix_world, dtype=np.float64)
        self.to_rig = np.linalg.inv(self.world)
        self.scale = float(np.cbrt(abs(np.linalg.det(self.world[:3, :3]))))
        self.matrices = armature.pose_matrices(obj)
        self.lengths = armature.bone_lengths(obj, sk)

    def head(self, b: int, pose: F64 | None = None) -> F64:
        out: F64 = (self.matrices if pose is None else pose)[b, :3, 3]
        return out

    def tail(self, b: int, pose: F64 | None = None) -> F64:
        m = self.matrices if pose is None else pose
        out: F64 = m[b, :3, 3] + m[b, :3, 1] * self.lengths[b]
        return out

    def local(self, control: Control) -> F64:
        # np.asarray: numpy 1.26's stubs type this product as floating[Any].
        return np.asarray(self.to_rig @ np.array(control.world(), dtype=np.float64), dtype=np.float64)

    def miss(self, bones: Sequence[int], solved: F64) -> tuple[float, int]:
        """The largest distance (world units) between the ends of the bones' X, Y (tail) and Z axes, each as
        long as the bone, in the pose and in `solved`: position, direction and roll in one number."""
        b = np.asarray(bones, dtype=np.int64)
        length = self.lengths[b][:, None, None]
        ends = [m[b, :3, :3] * length + m[b, :3, 3][:, :, None] for m in (self.matrices, solved)]
        dist = np.linalg.norm(ends[0] - ends[1], axis=1).max(axis=1) * self.scale
        k = int(np.argmax(dist))
        return float(dist[k]), int(b[k])


def _unit(v: F64) -> F64:
    n = float(np.linalg.norm(v))
    return v / n if n > 1e-300 else v


def _perpendicular(v: F64, axis: F64) -> F64:
    out: F64 = v - np.dot(v, axis) * axis
    return out


def _turned(p: F64, origin: F64, axis: F64, angle: float) -> F64:
    """Point `p` turned by `angle` about the line through `origin` along unit `axis` (Rodrigues)."""
    v = p - origin
    cos, sin = math.cos(angle), math.sin(angle)
    out: F64 = origin + v * cos + np.cross(axis, v) * sin + axis * np.dot(axis, v) * (1.0 - cos)
    return out


def _bend(pose: _Pose, c: ChainPlan, solved: F64 | None = None) -> tuple[F64, F64, F64]:
    """The chain's root, unit root -> aim axis and bend vector (the solvers' `chain_bend`: the sum of the
    interior joints' offsets from that axis) in a pose. The aim is the tip's tail, or with Use Target
    Rotation the tip's head (the bones above the tip reach for it)."""
    rows = c.bones[:-1] if c.use_target_rotation else c.bones
    root = pose.head(c.bones[0], solved)
    aim = pose.head(c.bones[-1], solved) if c.use_target_rotation else pose.tail(c.bones[-1], solved)
    axis = _unit(aim - root)
    joints = [pose.head(b, solved) for b in rows[1:]]
    bend = sum((_perpendicular(j - root, axis) for j in joints), np.zeros(3))
    return root, axis, bend


def _reach(pose: _Pose, c: ChainPlan) -> float:
    return float(sum(pose.lengths[b] for b in c.bones))


def _initial(obj: bpy.types.Object, pose: _Pose, c: ChainPlan, group: Group) -> Placement:
    """The geometric placement: target at the tip's tail (and orientation), pole in the bend plane (in a
    tree, the plane of the chain's branch: its bones no other chain shares, which its pole turns)."""
    target, pole = chain_controls(obj, c.index)
    tip = c.bones[-1]
    at = pose.local(target)
    # A hand that follows the control's rotation (Set Up Character's follow constraint) keeps the orientation
    # it shows now: the control takes it (Copy Rotation copies the world rotation).
    hand = ikfk_follow.follower(obj, c.index)
    if c.use_target_rotation or hand:
        shown = pose.matrices[tip if c.use_target_rotation else sk_index(obj, hand), :3, :3]
        rot, _ = convert.rotation_parts(shown)
        at[:3, :3] = rot * np.linalg.norm(at[:3, :3], axis=0)[None, :]  # the target keeps its scale
    at[:3, 3] = pose.tail(tip)
    place = Placement(c, target, at, oriented=c.use_target_rotation or bool(hand))
    if pole is None:
        return place
    if group.is_tree:
        own = branch(group.chains, c)
        if len(own) < (3 if c.use_target_rotation else 2):
            return place  # a branch of one bone has no bend plane: the pole stays where it is
        c = replace(c, bones=own)
    place.pole, place.pole_at = pole, pose.local(pole)
    root, _axis, bend = _bend(pose, c)
    reach = _reach(pose, c)
    if float(np.linalg.norm(bend)) <= 1e-6 * reach:
        return place  # a straight chain: every pole gives it; the pole stays where it is
    goal_axis = _unit(at[:3, 3] - root)
    # The solve turns the pole by the Pole Angle about the root -> target axis: take it off here.
    side = _turned(_unit(_perpendicular(bend, goal_axis)), np.zeros(3), goal_axis, -_pole_angle(obj, c))
    rel = place.pole_at[:3, 3] - root
    along = float(np.dot(rel, goal_axis))
    radius = float(np.linalg.norm(_perpendicular(rel, goal_axis)))
    if radius < 0.05 * reach:  # a pole (nearly) on the axis: put it half a chain out, beside the middle
        along, radius = float(np.dot(pose.tail(c.bones[0]) - root, goal_axis)), 0.5 * reach
    place.pole_at[:3, 3] = root + goal_axis * along + _unit(side) * radius
    return place


def sk_index(obj: bpy.types.Object, bone: str) -> int:
    """The pose-bone index of `bone` (the order `_Pose.matrices` has)."""
    return int(obj.pose.bones.find(bone))


def _pole_angle(obj: bpy.types.Object, c: ChainPlan) -> float:
    return float(_chain_settings(obj, c.index).pole_angle)


def _dry_solve(
    obj: bpy.types.Object, sk: Skeleton, view: Plan, inputs: Inputs, pose: _Pose, places: Sequence[Placement]
) -> tuple[F64, RigReport]:
    """Solve `view` (one group) with the placements' targets and poles; nothing is written. The solved
    armature-space pose (B,4,4), and the report."""
    targets, poles = dict(inputs.targets), dict(inputs.poles)
    matrices = inputs.pose.copy()
    for p in places:
        c = p.chain
        targets[c.index] = (pose.world @ p.target_at)[None]
        if c.target_local >= 0:
            matrices[0, c.target_local] = p.target_at  # a control bone of this rig: read from the pose
        if p.pole_at is not None:
            poles[c.index] = (pose.world @ p.pole_at)[None]
            if c.pole_local >= 0:
                matrices[0, c.pole_local] = p.pole_at
    run = replace(inputs, pose=matrices, targets=targets, poles=poles, objects=None)
    report = RigReport()
    solved = solve_inputs(obj, sk, view, run, report, final_pose=True)
    return (solved.pose if solved.pose is not None else matrices)[0], report


@dataclass
class _Reach:
    """The search for where a chain's target must be for the tip to end where it is in the pose.

    A target at the tip's tail is right unless the solve eases the tip short of it: Soft does, along the
    root -> target line, the more the nearer full extension (exponentially), so the target must go out along
    that line. `t` is how far, along the line the first dry solve missed by: the step at least doubles until
    the tip passes its place, then regula falsi (Illinois) closes in. Any miss across the line is added as is.
    """

    start: F64  # (3,) the target at t = 0
    reach: float  # the chain's length: the search goes no further out than ten of them
    line: F64 | None = None  # (3,) unit direction, from the first miss
    t: float = 0.0
    lo: tuple[float, float] = (0.0, 0.0)  # (t, miss along the line) with the tip short of its place
    hi: tuple[float, float] | None = None  # ... with the tip past it
    last: int = 0  # which end regula falsi moved last (Illinois halves the other's miss)

    def next(self, miss: F64) -> F64:
        """The target position after a dry solve whose tip missed its place by `miss` (pose - solved)."""
        if self.line is None:
            if float(np.linalg.norm(miss)) <= 1e-12:
                return self.start.copy()  # the tip is in place (another bone missed: the pole's business)
            self.line = _unit(miss)
        along = float(np.dot(miss, self.line))
        across: F64 = miss - along * self.line
        if along >= 0.0:
            if self.last == -1 and self.hi is not None:
                self.hi = (self.hi[0], 0.5 * self.hi[1])
            self.lo, self.last = (self.t, along), -1
        else:
            if self.last == 1:
                self.lo = (self.lo[0], 0.5 * self.lo[1])
            self.hi, self.last = (self.t, along), 1
        if self.hi is None:
            t0 = self.lo[0]
            grow = max(2.0 * t0, t0 + along)  # the fixed-point step first, then at least doubling
            self.t = min(grow if t0 > 0.0 else along, 10.0 * self.reach)
        else:
            (t0, m0), (t1, m1) = self.lo, self.hi
            self.t = t0 + m0 * (t1 - t0) / (m0 - m1)
        self.start = self.start + across
        out: F64 = self.start + self.line * self.t
        return out


def _turn_pole(pose: _Pose, p: Placement, solved: F64) -> None:
    """Turn the pole about the root -> target axis by the angle between the pose's bend and the solve's."""
    if p.pole_at is None:
        return
    root, axis, bend = _bend(pose, p.chain)
    _root, _axis, got = _bend(pose, p.chain, solved)
    want, have = _perpendicular(bend, axis), _perpendicular(got, axis)
    if np.linalg.norm(want) > 0.0 and np.linalg.norm(have) > 0.0:
        angle = math.atan2(float(np.dot(axis, np.cross(have, want))), float(np.dot(have, want)))
        p.pole_at[:3, 3] = _turned(p.pole_at[:3, 3], root, _unit(p.target_at[:3, 3] - root), angle)


def _place_group(
    obj: bpy.types.Object, sk: Skeleton, plan: Plan, g: Group, picked: set[int], pose: _Pose, tol: float
) -> list[Placement]:
    """Placements for the picked chains of group `g`, checked and corrected by dry solves; each keeps the
    best one tried."""
    view = replace(plan, groups=[g])
    inputs = read_inputs(obj, view, pose_now=pose.matrices)
    assert inputs.scale is not None  # read_inputs reads the scale channels
    inputs.release, inputs.release_bones = stretch_release(obj, sk, view, inputs.scale[0])
    places = [_initial(obj, pose, c, g) for c in g.chains if c.index in picked]
    best = [Placement(p.chain, p.target, p.target_at.copy(), p.pole, p.pole_at) for p in places]
    reach = [_Reach(p.target_at[:3, 3].copy(), _reach(pose, p.chain)) for p in places]
    for _round in range(ROUNDS):
        solved, report = _dry_solve(obj, sk, view, inputs, pose, places)
        done = True
        for k, p in enumerate(places):
            out = report.outcomes.get(p.chain.index)
            if out is None or not out.valid:
                raise IkFkError(f"chain '{p.chain.name}' cannot be solved: {out.message if out else 'not solved'}")
            miss, worst = pose.miss(p.chain.bones, solved)
            if miss < best[k].miss:
                pole_at = p.pole_at.copy() if p.pole_at is not None else None
                best[k] = Placement(p.chain, p.target, p.target_at.copy(), p.pole, pole_at, miss, sk.names[worst])
            if miss <= tol:
                continue
            done = False
            tip = p.chain.bones[-1]
            p.target_at[:3, 3] = reach[k].next(pose.tail(tip) - pose.tail(tip, solved))
            _turn_pole(pose, p, solved)
        if done:
            break
    return best


def _write(obj: bpy.types.Object, places: Sequence[Placement], pose: _Pose, tx: _Transaction, tol: float) -> None:
    """Give the controls their placements, live solving held off the rigs involved (so no solve runs on
    half-moved controls), one evaluation after each (a control may hang below another), then check that
    each stayed where it was put (a constraint or driver would move it)."""
    wanted: list[tuple[Control, Matrix, bool]] = []
    seen: dict[tuple[int, str], str] = {}
    for p in places:
        items = [(p.target, p.target_at, p.oriented)]
        if p.pole is not None and p.pole_at is not None:
            items.append((p.pole, p.pole_at, False))
        for control, at, oriented in items:
            key = (control.ob.session_uid, control.bone)
            if key in seen:
                raise IkFkError(
                    f"the {control.label()} of chain '{control.chain}' is also the {seen[key]}: snap the chains "
                    "one at a time, each with its own controls"
                )
            seen[key] = f"{control.label()} of chain '{control.chain}'"
            wanted.append((control, Matrix((pose.world @ at).tolist()), oriented))
    for control, _m, _o in wanted:
        tx.save_transform(control)
    rigs = {obj.session_uid: obj} | {c.ob.session_uid: c.ob for c, _m, _o in wanted if c.ob.type == "ARMATURE"}
    with ExitStack() as stack:
        for rig in rigs.values():
            stack.enter_context(live.suspended(rig))
        off: list[str] = []
        for _attempt in range(2):  # a control that hangs below one written after it lands on the second pass
            for control, m, _o in wanted:
                control.put(m)
                bpy.context.view_layer.update()
            off = [_landing(control, m, oriented, tol) for control, m, oriented in wanted]
            off = [text for text in off if text]
            if not off:
                return
    raise IkFkError(
        f"the {off[0]}: a constraint, a driver or its parent moves it; snap the control it follows instead, "
        "or mute what moves it. Nothing was changed"
    )


def _landing(control: Control, wanted: Matrix, oriented: bool, tol: float) -> str:
    """'' when `control` is where it was put, else what is off."""
    now = control.world()
    gap = (now.translation - wanted.translation).length
    if gap > max(0.1 * tol, 1e-6 * (1.0 + wanted.translation.length)):
        return f"{control.label()} of chain '{control.chain}' did not stay where snapped ({gap:.4g} away)"
    if oriented:
        angle = now.to_quaternion().rotation_difference(wanted.to_quaternion()).angle
        if min(angle, 2 * math.pi - angle) > 1e-4:
            turn = math.degrees(min(angle, 2 * math.pi - angle))
            return f"{control.label()} of chain '{control.chain}' did not keep the tip's orientation ({turn:.3g}°)"
    return ""


def _snap(
    obj: bpy.types.Object, sk: Skeleton, plan: Plan, picked: Sequence[int], key: bool, tx: _Transaction
) -> Outcome:
    chosen = set(picked)
    tol = float(rig_settings(obj).tolerance)
    pose = _Pose(obj, sk)
    groups = [g for g in plan.groups if any(c.index in chosen for c in g.chains)]
    places = [p for g in groups for p in _place_group(obj, sk, plan, g, chosen, pose, tol)]
    outcome = Outcome([p.chain.name for p in places])
    for p in places:
        if p.miss > tol:
            outcome.warnings.append(
                f"chain '{p.chain.name}': the IK solution differs from the pose by {p.miss:.4g} at bone '{p.worst}' "
                "(a pose outside the joint limits, Roll 'Rest' or 'Natural', Soft at full extension, or Start From "
                "'Rest' on a chain of more than two bones)"
            )
    _write(obj, places, pose, tx, tol)
    for p in places:
        controls = [p.target] + ([p.pole] if p.pole is not None else [])
        for control in controls:
            group = control.bone or "Object Transforms"
            if key:
                for path in control.key_paths():
                    tx.key(control.ob, path, group)
            else:
                _warn_animated(outcome, control.ob, control.key_paths(), f"the {control.label()}", key)
    return outcome


# ---------------------------------------------------------------------------------------------------------
# Apply IK to FK
# ---------------------------------------------------------------------------------------------------------


def _apply_fk(
    obj: bpy.types.Object, sk: Skeleton, plan: Plan, picked: Sequence[int], key: bool, tx: _Transaction
) -> Outcome:
    chains = _plans(plan, picked)
    names = list(dict.fromkeys(sk.names[b] for i in picked for b in chains[i].bones))
    tx.save_fk()
    fk.apply_current(obj, names)
    outcome = Outcome([chains[i].name for i in picked])
    pbs = obj.pose.bones
    for i in picked:
        # A hand that follows the control: the rotation it shows becomes its own, for FK (Influence 0 turns
        # its follow constraint off).
        hand = ikfk_follow.follower(obj, i)
        if hand:
            tx.save_transform(Control(obj, hand, "hand", chains[i].name))
            ikfk_follow.apply_visual(obj, hand)
            path = bone_path(hand, rotation_path(pbs[hand].rotation_mode))
            if key:
                tx.key(obj, path, hand)
            else:
                _warn_animated(outcome, obj, [path], f"bone '{hand}'", key)
    for i in picked:
        stretching = float(_chain_settings(obj, i).stretch) > 1.0
        for b in chains[i].bones:
            name = sk.names[b]
            paths = [(bone_path(name, rotation_path(pbs[name].rotation_mode)), -1)]
            if stretching:
                paths.append((bone_path(name, "scale"), 1))
            if key:
                for path, index in paths:
                    tx.key(obj, path, name, index)
            else:
                _warn_animated(outcome, obj, [p for p, _i in paths], f"bone '{name}'", key)
    return outcome


# ---------------------------------------------------------------------------------------------------------
# The operations
# ---------------------------------------------------------------------------------------------------------


def snap(obj: bpy.types.Object, which: str | set[int], key: bool = False) -> Outcome:
    """Snap IK to Pose (see the module docstring). Raises `IkFkError` having changed nothing."""
    picked, sk, plan = _chosen(obj, which, "snap IK to the pose")
    with _transaction(obj) as tx:
        return _snap(obj, sk, plan, picked, key, tx)


def apply_fk(obj: bpy.types.Object, which: str | set[int], key: bool = False) -> Outcome:
    """Apply IK to FK: the chain bones' pose becomes their FK pose. Raises `IkFkError` having changed nothing."""
    picked, sk, plan = _chosen(obj, which, "apply IK to FK")
    with _transaction(obj) as tx:
        return _apply_fk(obj, sk, plan, picked, key, tx)


def switch(obj: bpy.types.Object, which: str | set[int], mode: str, key: bool = False) -> Outcome:
    """Switch to IK (snap, Influence 1) or to FK (apply to FK, Influence 0) without moving a bone."""
    if mode not in ("IK", "FK"):
        raise IkFkError(f"unknown mode {mode!r}: use 'IK' or 'FK'")
    picked, sk, plan = _chosen(obj, which, f"switch to {mode}")
    ad = obj.animation_data
    chains = rig_settings(obj).chains
    for i in picked:
        if ad is not None and ad.drivers.find(influence_path(i)) is not None:
            raise IkFkError(
                f"the Influence of chain '{chains[i].name}' is driven, so a switch would not hold: remove the "
                "driver, or snap and apply to FK without switching; nothing was changed"
            )
    with _transaction(obj) as tx:
        # The follow constraints of hands and feet go with the chain's Influence (rigs set up before had none).
        for bone in ikfk_follow.drive_all(obj, picked):
            tx.undo.append(lambda bone=bone: ikfk_follow.undrive(obj, bone))  # type: ignore[misc]
        outcome = (_snap if mode == "IK" else _apply_fk)(obj, sk, plan, picked, key, tx)
        value = 1.0 if mode == "IK" else 0.0
        for i in picked:
            tx.set_influence(i, value)
            if key:
                tx.key(obj, influence_path(i), "Reach IK")
            else:
                _warn_animated(outcome, obj, [influence_path(i)], f"the Influence of chain '{chains[i].name}'", key)
    return outcome
