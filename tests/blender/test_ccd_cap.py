"""CCD's Step Cap (`ReachChain.ccd_max_step`): no joint turns by more than the cap in one iteration, and a
capped chain still reaches with enough iterations. Measured on Blender's evaluated pose."""

from __future__ import annotations

import math

import bpy
import numpy as np
import rigs


def _directions(rig: bpy.types.Object, names: list[str]) -> list[np.ndarray]:
    return [rigs.world_tail(rig, n) - rigs.world_head(rig, n) for n in names]


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    return math.atan2(float(np.linalg.norm(np.cross(a, b))), float(np.dot(a, b)))


def _joint_turns(rig: bpy.types.Object, names: list[str], rest: list[np.ndarray]) -> list[float]:
    """What one CCD step can change by at most its cap, measured on the evaluated pose against `rest`: the
    first bone's turn, and at each joint below the change of the angle between the bone and its parent.

    A step turns joint j about its head by a rotation R_j, carrying the bones below rigidly, so the bend
    angle at joint j changes by at most the angle of R_j (and the bones above j do not change it).
    """
    now = _directions(rig, names)
    out = [_angle(now[0], rest[0])]
    out += [abs(_angle(now[j - 1], now[j]) - _angle(rest[j - 1], rest[j])) for j in range(1, len(names))]
    return out


def _rig(cap: float, iterations: int, target: tuple[float, float, float]) -> tuple[bpy.types.Object, object]:
    rig = rigs.chain_rig(4)
    rigs.update()
    rig["rest"] = np.concatenate(_directions(rig, NAMES)).tolist()
    rig.reach_ik.max_iterations = iterations
    ch = rigs.add_chain(rig, "b3", 4, rigs.empty("T", target), solver="CCD")
    ch.ccd_max_step = cap
    rigs.update()
    return rig, ch


NAMES = ["b0", "b1", "b2", "b3"]


def _rest(rig: bpy.types.Object) -> list[np.ndarray]:
    return list(np.array(rig["rest"]).reshape(-1, 3))


TARGETS = [(1.5, 0.5, 2.5), (-2.0, 1.0, 1.5), (0.5, -2.5, 1.0)]


def test_one_capped_iteration_turns_no_joint_past_the_cap() -> None:
    cap = math.radians(5.0)
    for target in TARGETS:
        rig, ch = _rig(cap, 1, target)
        capped = _joint_turns(rig, NAMES, _rest(rig))
        assert ch.is_valid, ch.message
        assert max(capped) <= cap * (1.0 + 1e-5), f"target {target}: turns {np.degrees(capped)} degrees"
        assert max(capped) >= 0.5 * cap, f"target {target}: the chain hardly moved ({np.degrees(capped)} degrees)"
        bpy.data.objects.remove(rig)
        bpy.data.objects.remove(bpy.data.objects["T"])
        # The same iteration without a cap turns some joint much further: the cap is what held it.
        rig, ch = _rig(0.0, 1, target)
        free = _joint_turns(rig, NAMES, _rest(rig))
        assert max(free) > 3.0 * cap, f"target {target}: uncapped turns only {np.degrees(free)} degrees"
        bpy.data.objects.remove(rig)
        bpy.data.objects.remove(bpy.data.objects["T"])


def test_a_capped_chain_still_reaches() -> None:
    for target in TARGETS:
        rig, ch = _rig(math.radians(5.0), 300, target)
        miss = float(np.linalg.norm(rigs.world_tail(rig, "b3") - np.array(target)))
        assert ch.is_valid and not ch.message, ch.message
        assert miss <= 1e-3, f"target {target}: capped CCD stops {miss:.3g} away ({ch.message!r})"
        bpy.data.objects.remove(rig)
        bpy.data.objects.remove(bpy.data.objects["T"])


def test_a_nan_cap_is_refused_with_a_message() -> None:
    rig, ch = _rig(0.0, 30, TARGETS[0])
    before = rigs.pose_snapshot(rig)
    ch["ccd_max_step"] = math.nan  # only a script can store it (the property's range keeps typed values in)
    rig.reach_ik.chains[0].solver = "CCD"  # any setting change re-plans
    rigs.update()
    assert not ch.is_valid and "Step Cap" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before
