"""Every message a chain can show names the bone (or object) and the value in the panel's terms, and gives
advice that can help: no solver internals (`JointLimits.cone[0, 1]`), no numpy reprs (`np.float64(...)`)."""

from __future__ import annotations

import math

import bpy
import bpy_session
import numpy as np
import pytest
import rigs


def _plain(message: str) -> None:
    assert "np.float" not in message and "np.int" not in message, f"a numpy repr in {message!r}"


def _chain(n: int = 3, target: tuple[float, float, float] = (0.7, 0.3, 2.1)) -> tuple[bpy.types.Object, object]:
    rig = rigs.chain_rig(n)
    ch = rigs.add_chain(rig, f"b{n - 1}", n, rigs.empty("T", target))
    return rig, ch


def test_bad_cone_limit_names_bone_side_and_range() -> None:
    rig, ch = _chain()
    lim = rig.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_right = math.nan
    rigs.update()
    assert not ch.is_valid
    msg = ch.message
    _plain(msg)
    assert "JointLimits" not in msg and "'b1'" in msg and "Cone Right" in msg, msg
    assert "179.9°" in msg and "Joint Limits" in msg, f"says what to set: {msg!r}"


def test_bad_twist_limit_names_bone_side_and_range() -> None:
    rig, ch = _chain()
    lim = rig.pose.bones["b2"].reach_ik
    lim.use_twist = True
    lim.twist_min = math.inf  # clamped to the property's range: a valid 180 degrees
    lim.twist_min = math.nan
    rigs.update()
    assert not ch.is_valid
    msg = ch.message
    _plain(msg)
    assert "JointLimits" not in msg and "'b2'" in msg and "Twist Min" in msg, msg
    assert "-180°" in msg and "180°" in msg, msg


def test_iteration_cap_says_raise_max_iterations() -> None:
    rig, ch = _chain(target=(-1.2, 0.9, 1.6))
    rig.reach_ik.max_iterations = 1
    rigs.update()
    assert ch.is_valid and ch.message, "one iteration does not reach this target"
    msg = ch.message
    _plain(msg)
    assert "'b2'" in msg and "Max Iterations" in msg, msg


def test_out_of_reach_says_move_the_target() -> None:
    _rig, ch = _chain(target=(1.0, 0.5, 5.0))  # beyond the chain's 3.03 length
    rigs.update()
    assert ch.is_valid and ch.message
    msg = ch.message
    _plain(msg)
    assert "out of reach" in msg and "'b2'" in msg and "Max Iterations" not in msg and "move the target" in msg, msg


def test_blocked_by_limits_does_not_suggest_more_iterations() -> None:
    # b1 and b2 cannot bend at all: only b0 turns, so the tip moves on a sphere about the root and a target
    # well inside the chain's length cannot be reached however long the solver runs.
    rig, ch = _chain(target=(0.3, 0.2, 1.2))
    for name in ("b1", "b2"):
        lim = rig.pose.bones[name].reach_ik
        lim.use_cone = True
        lim.cone_up = lim.cone_down = lim.cone_left = lim.cone_right = 0.0
    rig.reach_ik.max_iterations = 200
    rigs.update()
    assert ch.is_valid and ch.message, "the limits hold the tip off the target"
    msg = ch.message
    _plain(msg)
    assert "'b2'" in msg and "Max Iterations" not in msg and "limit" in msg.lower(), msg


def test_one_bone_target_rotation_says_why_and_what_to_do() -> None:
    rig, ch = _chain(1, target=(0.8, 0.4, 0.5))
    ch.use_target_rotation = True
    rigs.update()
    assert ch.is_valid and ch.message, "the tip's orientation is the target's: its tail is not on the target"
    miss = float(np.linalg.norm(rigs.world_tail(rig, "b0") - np.array(ch.target.location)))
    assert miss > 0.1 and abs(ch.residual - miss) < 1e-4, f"the reported miss is the one Blender shows ({miss})"
    msg = ch.message
    _plain(msg)
    assert "'b0'" in msg and "Max Iterations" not in msg, msg
    assert "Use Target Rotation" in msg and "lengthen the chain" in msg, msg


def test_nan_tolerance_names_the_setting() -> None:
    rig, ch = _chain()
    rig.reach_ik.tolerance = math.nan
    rigs.update()
    assert not ch.is_valid
    msg = ch.message
    _plain(msg)
    assert "'Rig'" in msg and "Tolerance" in msg and "tolerance must be" not in msg, msg


def test_solver_refusal_names_the_bones(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands for any number the rig's own checks do not foresee: the solver's refusal still names the bones.
    monkeypatch.setattr(bpy_session.submodule("core.checks"), "_limit_problem", lambda *args: None)
    rig, ch = _chain()
    lim = rig.pose.bones["b1"].reach_ik
    lim.use_cone = True
    lim.cone_up = math.nan
    rigs.update()
    assert not ch.is_valid
    msg = ch.message
    _plain(msg)
    assert "'b0'" in msg and "'b2'" in msg and "Joint Limits" in msg, msg


@pytest.mark.parametrize("solver", ["FABRIK", "CCD", "TWO_BONE"])
@pytest.mark.parametrize("scale", [1e12, 1e13, 1e20, 1e29])
def test_absurd_armature_scale_never_reads_nan(scale: float, solver: str) -> None:
    """Up to 1e12 the chain is solved and its miss said as a number; beyond, the rig says its scale is out
    of range (before, from 1e13 the messages read "stops inf short", from 1e20 "stops nan short")."""
    n = 2 if solver == "TWO_BONE" else 3
    rig = rigs.chain_rig(n)
    rig.scale = (scale, scale, scale)
    t = rigs.empty("T", (0.6 * scale, 0.2 * scale, 5.0 * scale))  # out of reach
    ch = rigs.add_chain(rig, f"b{n - 1}", n, t, solver=solver)
    rigs.update()
    before = rigs.pose_snapshot(rig)
    messages = [ch.message]
    for _k in range(3):  # moving the target takes the live program's path too
        t.location.x += 0.1 * scale
        rigs.update()
        messages.append(ch.message)
    t.location = (0.3 * scale, 0.2 * scale, 1.0 * scale)  # within reach
    rigs.update()
    messages.append(ch.message)
    for m in messages:
        words = m.replace(",", " ").replace("(", " ").split()
        assert "nan" not in words and "inf" not in words, m
    if scale > 1e12:
        assert not ch.is_valid and "out of the range" in ch.message and f"{scale:.4g}" in ch.message, ch.message
        assert rigs.pose_snapshot(rig) == before, "nothing written"
    else:
        assert ch.is_valid and all("short" in m for m in messages[:4]), messages
        miss = float(np.linalg.norm(rigs.world_tail(rig, f"b{n - 1}") - np.array(t.matrix_world.translation)))
        # Single precision at this scale: within reach the tip lands about 1e-7 of the scale off, said as a number.
        assert miss <= 1e-6 * scale, f"{ch.message}: {miss:.4g}"
