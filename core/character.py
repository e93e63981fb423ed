"""What the one-click character set-up creates for a recognised humanoid: chains, controls, poles, limits.

bpy-free: `plan` takes a `humanoid.Humanoid` with the skeleton's rest and current pose matrices (armature
space) and returns a `SetupPlan`; `operators/setup.py` makes it real. Decisions made here:

- Arms and legs are two-bone chains (CCD when a segment is split into bend and twist bones, as Daz does:
  with the twist bones held in line, FABRIK stalls 5-19 cm short on the test rig where CCD reaches), with
  a pole in the limb's current bend plane; a straight limb bends as a person does: knees forward, elbows
  back, "forward" read from the feet (or from left x up when there are no feet).
- The spine is one FABRIK chain from the first bone above the hips to the chest, the neck one from the first
  bone above the chest to the head; both take their control's rotation (the chest and head turn with it).
- Controls sit where the pose puts each chain's tip now (so nothing moves) and are named after the role
  and side (``IK-hand.L``, ``Pole-arm.L``, ``IK-chest``, ``IK-head``). A limb's control is oriented like
  its hand or foot, which then takes the control's rotation (a Copy Rotation constraint on that bone, as
  IK rigs do: a planted foot stays flat when the knee bends).
- Limits: Knee/Elbow hinges bending the way found above, a shoulder ellipse, a hip cone that lets the thigh
  swing forward (sitting) further than back, the Spine preset on spine and neck bones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .humanoid import Humanoid, Limb
from .limit_fit import Widened, fit, relative_rotations, swing_twist
from .presets import preset_values, side_toward

F64 = NDArray[np.float64]
Limits = dict[str, float | bool]

#: A bend (degrees) below which a limb counts as straight: its bend plane is then taken from the facing.
STRAIGHT_DEG = 2.0


@dataclass(frozen=True)
class ChainSpec:
    """One chain to create. Positions and matrices are in armature space."""

    name: str
    tip: int
    length: int
    solver: str
    target_name: str
    target_matrix: F64  # (4,4) where the control goes: at the tip's tail, oriented like the posed tip
    pole_name: str = ""
    pole_at: F64 | None = None  # (3,)
    use_target_rotation: bool = False
    end: int = -1  # the hand or foot below a limb's tip, which takes its control's rotation (-1: none)


@dataclass(frozen=True)
class SetupPlan:
    chains: tuple[ChainSpec, ...]
    limits: dict[int, Limits] = field(default_factory=dict)
    # Bones whose limits were widened to hold the pose the set-up ran on, and by how much (after the fit to
    # the animation, when there was one): the report names them.
    widened: dict[int, Widened] = field(default_factory=dict)
    # Bones whose limits were widened to hold every frame of the animation (`SetupOptions.fit_animation`).
    fitted: dict[int, Widened] = field(default_factory=dict)
    # Bones left without a limit the set-up could not justify, with why (for the report).
    unlimited: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SetupOptions:
    neck: bool = True
    fingers: bool = False
    limits: bool = True
    end_follow: bool = True  # hands and feet take their control's rotation (a Copy Rotation constraint)
    fit_animation: bool = False  # widen the limits to hold every frame of `motion` (the armature's action)
    margin: float = math.radians(5.0)  # room left beyond the animation's (and the pose's) rotations


#: Room (radians) left beyond the pose the set-up runs on when a limit is widened to hold it.
POSE_MARGIN = math.radians(1.0)
#: A limb bent less than this (degrees) is straight to float precision: its control goes a hair beyond its
#: reach (`FULL_STRETCH_NUDGE` of it), so the solve keeps it straight.
FULL_STRETCH_DEG = 0.05
FULL_STRETCH_NUDGE = 2e-6
#: A limb bent less than this (degrees) in the pose says nothing about which way it bends.
BENT_DEG = 10.0


def _unit(v: F64) -> F64:
    n = float(np.linalg.norm(v))
    return v / n if n > 1e-12 else np.zeros(3)


def facing(h: Humanoid, pose: F64) -> tuple[F64, F64, F64]:
    """(up, left, forward) of the character in armature space, read in `pose` (B,4,4: rest or posed)."""
    up, left, forward, _known = body_frame(h, pose)
    return up, left, forward


def body_frame(h: Humanoid, pose: F64) -> tuple[F64, F64, F64, bool]:
    """(up, left, forward, known) of the character in `pose` (armature-space matrices of every bone).

    Up runs from the hips to the chest, left from the right thigh to the left one; left x up is forward for a
    character whose "L" bones are on its left, and the feet (toes forward) and bent knees (in front of the
    line from hip to ankle) overrule that sign when they clearly say the other, for skeletons whose sides
    came from a guess (topology). `known` is False when the pose cannot tell (a skeleton lying along one
    axis: the thighs not apart across the spine)."""
    up_raw = pose[h.chest, :3, 3] - pose[h.hips, :3, 3]
    up = _unit(up_raw)
    left_raw = pose[h.legs["L"].upper[0], :3, 3] - pose[h.legs["R"].upper[0], :3, 3]
    left_raw = left_raw - up * float(left_raw @ up)
    known = float(np.linalg.norm(up_raw)) > 1e-9 and float(np.linalg.norm(left_raw)) > 0.05 * float(
        np.linalg.norm(up_raw)
    )
    left = _unit(left_raw)
    forward = _unit(np.cross(left, up))
    votes = 0.0
    count = 0
    for s in ("L", "R"):
        leg = h.legs[s]
        if leg.end >= 0:
            votes += float(_unit(pose[leg.end, :3, 1]) @ forward)
            count += 1
        root, middle = pose[leg.upper[0], :3, 3], pose[leg.lower[0], :3, 3]
        tip = pose[leg.lower[-1], :3, 3] + pose[leg.lower[-1], :3, 1]
        if _bend_angle(root, middle, tip) >= BENT_DEG:
            axis = _unit(tip - root)
            off = (middle - root) - axis * float((middle - root) @ axis)
            votes += float(_unit(off) @ forward)
            count += 1
    if count and votes < -0.3 * count:
        forward = -forward
    return up, left, forward, known


def _tip_matrix(pose: F64, tip: int, length: float) -> F64:
    m = np.array(pose[tip], dtype=np.float64)
    rot = m[:3, :3] / np.maximum(np.linalg.norm(m[:3, :3], axis=0), 1e-12)
    out = np.eye(4)
    out[:3, :3] = rot
    out[:3, 3] = m[:3, 3] + m[:3, 1] * length
    return out


def _end_matrix(pose: F64, tip: int, end: int, length: float) -> F64:
    """A limb control: at the tip's tail, oriented like the hand or foot below it (like the tip without one),
    so the end bone can take the control's rotation without moving."""
    out = _tip_matrix(pose, tip, length)
    if end >= 0:
        out[:3, :3] = _tip_matrix(pose, end, 0.0)[:3, :3]
    return out


def _bend_angle(a: F64, b: F64, c: F64) -> float:
    u, v = _unit(b - a), _unit(c - b)
    return math.degrees(math.acos(max(-1.0, min(1.0, float(u @ v)))))


def pole_position(joints: tuple[F64, F64, F64], bend_dir: F64) -> F64:
    """A pole for a limb through `joints` (root, middle, tip): in its current bend plane, or along `bend_dir`.

    Out from the middle joint by half the limb's length, so the two-bone solver keeps the bend it has.
    """
    root, middle, tip = joints
    reach = float(np.linalg.norm(middle - root) + np.linalg.norm(tip - middle))
    axis = _unit(tip - root)
    if _bend_angle(root, middle, tip) >= STRAIGHT_DEG:
        side = (middle - root) - axis * float((middle - root) @ axis)
    else:
        side = bend_dir - axis * float(bend_dir @ axis)
        if float(np.linalg.norm(side)) < 1e-6 * max(float(np.linalg.norm(bend_dir)), 1e-12):
            # No facing to go by (a skeleton lying along one axis): any side, away from the limb's own axis.
            side = np.cross(axis, np.eye(3)[int(np.argmin(np.abs(axis)))])
    return middle + _unit(side) * 0.5 * reach


def _rest_parent_dir(rest: F64, parent: int, b: int) -> F64:
    if parent < 0:
        return np.array([0.0, 1.0, 0.0])
    rel = rest[b, :3, :3].T @ rest[parent, :3, :3]
    return np.asarray(rel[:, 1], dtype=np.float64)


def reference_frames(rest: F64, parents: tuple[int, ...], pose: F64) -> F64:
    """(B,3,3) each bone's reference frame in `pose`: its rest frame carried by its parent's pose (where its
    limits are measured, `solvers/limits.py`), armature space, unit columns."""

    def unit(m: F64) -> F64:
        return np.asarray(m / np.maximum(np.linalg.norm(m, axis=-2, keepdims=True), 1e-12), dtype=np.float64)

    rest_rot, pose_rot = unit(rest[:, :3, :3]), unit(pose[:, :3, :3])
    out = rest_rot.copy()
    for b, q in enumerate(parents):
        if q >= 0:
            out[b] = pose_rot[q] @ rest_rot[q].T @ rest_rot[b]
    return out


def _in_bone(ref: F64, b: int, direction: F64) -> F64:
    """`direction` (armature space) in bone `b`'s reference frame (`reference_frames`)."""
    return np.asarray(ref[b].T @ direction, dtype=np.float64)


def _cone_by_direction(ref: F64, b: int, angles: list[tuple[F64, float]], twist: float) -> Limits:
    """Cone sides of bone `b` from angles given per armature-space direction (each side takes the nearest)."""
    out: Limits = {}
    for side, axis in (("right", 0), ("left", 0), ("up", 2), ("down", 2)):
        sign = 1.0 if side in {"right", "up"} else -1.0
        vec = ref[b, :, axis] * sign
        vec = _unit(vec)
        best = max(angles, key=lambda da: float(_unit(da[0]) @ vec))
        out[f"cone_{side}"] = math.radians(best[1])
    out["use_cone"] = True
    out["use_twist"] = True
    out["twist_min"], out["twist_max"] = -math.radians(twist), math.radians(twist)
    return out


#: The bend (degrees) up to which a hinge whose plane is tilted from the bone's axes still bends freely.
HINGE_FREE_DEG = 120.0


def widen_hinge(values: Limits, bend_dir: F64) -> Limits:
    """A Knee/Elbow hinge whose across sides let the limb bend in its own plane, `bend_dir` (bone frame).

    Cone sides lie on the bone's X and Z axes; a limb whose bend plane is tilted from them by some angle
    (a rolled forearm: 12.5 degrees on Rigify's metarig) leaves a 2-degree hinge after a few degrees of
    bend. The across sides are widened so the elliptical cone holds the tilted plane up to
    `HINGE_FREE_DEG` of bend, and no wider.
    """
    x, z = abs(float(bend_dir[0])), abs(float(bend_dir[2]))
    along_z = z >= x
    major, minor = (z, x) if along_z else (x, z)
    tilt = math.atan2(minor, max(major, 1e-12))
    theta = math.radians(HINGE_FREE_DEG)
    wide = max(float(v) for k, v in values.items() if k.startswith("cone_"))
    t_major, t_minor = theta * math.cos(tilt), theta * math.sin(tilt)
    room = 1.0 - (t_major / wide) ** 2
    across = t_minor / math.sqrt(room) if room > 1e-6 else math.radians(90.0)
    across = min(max(across * 1.05, math.radians(2.0)), math.radians(90.0))
    out = dict(values)
    for side in ("left", "right") if along_z else ("up", "down"):
        out[f"cone_{side}"] = max(float(values[f"cone_{side}"]), across)
    return out


def _bend_seen(rel: F64 | None) -> F64 | None:
    """The direction (bone frame) a lower limb bone bends toward in the rotations `rel` (N,3,3): its swing
    where it is bent the most, if that is `BENT_DEG` or more; None when it never bends that far."""
    if rel is None or not len(rel):
        return None
    tx, tz, _tw = swing_twist(rel)
    theta = np.hypot(tx, tz)
    k = int(np.argmax(theta))
    if math.degrees(float(theta[k])) < BENT_DEG:
        return None
    return np.array([float(tx[k]), 0.0, float(tz[k])])


def _limb_limits(
    limb: Limb,
    rest: F64,
    parents: tuple[int, ...],
    frame: tuple[F64, F64, bool],
    ref: F64,
    now: F64,
    motion: F64 | None,
    unlimited: dict[int, str],
) -> dict[int, Limits]:
    """Limits of one limb's bones: `frame` is the body's (up, forward, known), `ref` every bone's reference
    frame in the pose the set-up runs on, `now` (1,B,3,3) and `motion` (F,B,3,3) (or None) every bone's
    rotation in its reference frame, in that pose and on every frame of the animation."""
    up, forward, known = frame
    out: dict[int, Limits] = {}
    upper, lower = limb.upper[0], limb.lower[0]
    # The hinge bends the way the limb bends: as modelled (a limb modelled bent says it itself: its +Y moves
    # away from its parent's direction), else as the pose bends it, else as the animation does, else the way
    # the body says (the lower bone's +Y swings backward when a knee bends and forward when an elbow does).
    swing = forward if limb.kind == "arm" else -forward
    p = _rest_parent_dir(rest, parents[lower], lower)
    bent = math.degrees(math.atan2(math.hypot(p[0], p[2]), p[1])) >= STRAIGHT_DEG
    seen = _bend_seen(now[:, lower]) if not bent else None
    if not bent and seen is None and motion is not None:
        seen = _bend_seen(motion[:, lower])
    if bent:
        d = -p
    elif seen is not None:
        d = seen
    elif known:
        d = _in_bone(ref, lower, swing)
    else:
        d = None
    if d is None:
        unlimited[lower] = "straight, and neither the pose nor an animation says which way it bends"
    else:
        values = preset_values("KNEE", p, bend=side_toward(d.tolist()))
        out[lower] = widen_hinge(values, d)
    if limb.kind == "arm":
        out[upper] = preset_values("SHOULDER", _rest_parent_dir(rest, parents[upper], upper))
    elif known:
        outward = _unit(np.cross(up, forward)) * (1.0 if limb.side == "L" else -1.0)
        out[upper] = _cone_by_direction(
            ref, upper, [(forward, 110.0), (-forward, 40.0), (outward, 60.0), (-outward, 30.0)], 45.0
        )
    else:
        unlimited[upper] = "the pose does not show which way the body faces"
    # Twist bones in line (Daz): they only twist, as the rig means them to.
    for b in (*limb.upper[1:], *limb.lower[1:]):
        out[b] = {
            "use_cone": True,
            "cone_up": math.radians(1.0),
            "cone_down": math.radians(1.0),
            "cone_left": math.radians(1.0),
            "cone_right": math.radians(1.0),
            "use_twist": False,
        }
    return out


def _fit_all(
    limits: dict[int, Limits], now: F64, motion: F64 | None, margin: float
) -> tuple[dict[int, Widened], dict[int, Widened]]:
    """Widen `limits` in place to hold every frame of `motion` (F,B,3,3) (if given) and the pose `now`
    (1,B,3,3): (bones widened for the animation, bones widened for the pose), with how much."""
    fitted: dict[int, Widened] = {}
    widened: dict[int, Widened] = {}
    for b in sorted(limits):
        if motion is not None:
            limits[b], grew = fit(limits[b], motion[:, b], margin)
            if grew.most > 1e-9:
                fitted[b] = grew
        limits[b], grew = fit(limits[b], now[:, b], POSE_MARGIN)
        if grew.most > 1e-9:
            widened[b] = grew
    return fitted, widened


def plan(
    h: Humanoid,
    names: tuple[str, ...],
    parents: tuple[int, ...],
    rest: F64,
    bone_len: F64,
    pose: F64,
    options: SetupOptions,
    motion: F64 | None = None,
) -> SetupPlan:
    """Every chain, control, pole and limit the set-up creates for `h` (see the module's decisions).

    `rest` (B,4,4) are the bones' rest matrices, `bone_len` (B,) their lengths and `pose` (B,4,4) their
    current pose matrices, all in armature space (`Bone.matrix_local`, `Bone.length`, `PoseBone.matrix`).
    `motion` (F,B,3,3): every bone's rotation in its reference frame on each frame of the armature's
    animation (its basis rotation), read when `options.fit_animation` is on.
    """
    up, _left, forward, known = body_frame(h, pose)
    ref = reference_frames(rest, parents, pose)
    now = relative_rotations(rest, parents, pose, list(range(len(names))))
    fit_to = motion if options.fit_animation and motion is not None and len(motion) else None
    unlimited: dict[int, str] = {}
    chains: list[ChainSpec] = []
    limits: dict[int, Limits] = {}
    for kind, limbs, end_word, limb_word in (("arm", h.arms, "hand", "arm"), ("leg", h.legs, "foot", "leg")):
        for side in ("L", "R"):
            limb = limbs[side]
            tip = limb.lower[-1]
            root_head = pose[limb.upper[0], :3, 3]
            middle = pose[limb.lower[0], :3, 3]
            tip_tail = pose[tip, :3, 3] + pose[tip, :3, 1] * bone_len[tip]
            bend_dir = -forward if kind == "arm" else forward
            target_matrix = _end_matrix(pose, tip, limb.end, bone_len[tip])
            if _bend_angle(root_head, middle, tip_tail) < FULL_STRETCH_DEG:
                # A limb straight to float precision: a control exactly at its reach (float32 in Blender) may
                # lie a hair inside it, and the two-bone solve bends the limb by sqrt(rounding) (0.17 mm on a
                # 0.9 m leg). A control a hair beyond keeps it straight; the tip misses by far below Tolerance.
                axis = _unit(tip_tail - root_head)
                reach = float(np.linalg.norm(middle - root_head) + np.linalg.norm(tip_tail - middle))
                target_matrix[:3, 3] += axis * reach * FULL_STRETCH_NUDGE
            chains.append(
                ChainSpec(
                    name=f"{limb_word}.{side}",
                    tip=tip,
                    length=len(limb.bones),
                    solver="TWO_BONE" if limb.two_bone else "CCD",
                    target_name=f"IK-{end_word}.{side}",
                    target_matrix=target_matrix,
                    end=limb.end if options.end_follow else -1,
                    pole_name=f"Pole-{limb_word}.{side}",
                    pole_at=pole_position((root_head, middle, tip_tail), bend_dir),
                )
            )
            if options.limits:
                limits.update(_limb_limits(limb, rest, parents, (up, forward, known), ref, now, fit_to, unlimited))
    # The spine and the neck: FABRIK up to the chest / head, which turns with its control; limited below it.
    for name, tip, bones, limited, wanted in (
        ("spine", h.chest, h.spine, h.spine, True),
        ("neck", h.head, h.neck, h.neck[:-1], options.neck and h.head >= 0),
    ):
        if not wanted or len(bones) < 2:
            continue
        chains.append(
            ChainSpec(
                name=name,
                tip=tip,
                length=len(bones),
                solver="FABRIK",
                target_name="IK-chest" if name == "spine" else "IK-head",
                target_matrix=_tip_matrix(pose, tip, bone_len[tip]),
                use_target_rotation=True,
            )
        )
        if options.limits:
            for b in limited:
                limits[b] = preset_values("SPINE", _rest_parent_dir(rest, parents[b], b))
    if options.fingers:
        for side, fingers in sorted(h.fingers.items()):
            for k, bones in enumerate(fingers):
                tip = bones[-1]
                chains.append(
                    ChainSpec(
                        name=f"finger{k + 1}.{side}",
                        tip=tip,
                        length=len(bones),
                        solver="FABRIK",
                        target_name=f"IK-{names[tip]}",
                        target_matrix=_tip_matrix(pose, tip, bone_len[tip]),
                    )
                )
    fitted, widened = _fit_all(limits, now, fit_to, options.margin) if options.limits else ({}, {})
    return SetupPlan(tuple(chains), limits, widened, fitted, unlimited)
