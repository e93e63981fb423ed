"""Live solving is incremental: an update solves only the chains whose inputs changed, and those below them.

Counted with the live module's per-chain solve counter; every result is measured from Blender's
evaluated pose (the chains not solved must still be where their targets are).
"""

from __future__ import annotations

import bpy
import bpy_session
import numpy as np
import rigs

from demo import rigs as demo_rigs

TOL = 1e-3


def _counts(obj: bpy.types.Object) -> dict[str, int]:
    live = bpy_session.submodule("rig.live")
    return {ch.name: live.chain_solve_count(obj, i) for i, ch in enumerate(obj.reach_ik.chains)}


def _misses(obj: bpy.types.Object) -> dict[str, float]:
    out = {}
    for ch in obj.reach_ik.chains:
        tip = rigs.world_tail(obj, ch.tip_bone)
        out[ch.name] = float(np.linalg.norm(tip - np.array(ch.target.matrix_world.translation)))
    return out


def _character() -> bpy.types.Object:
    rig = demo_rigs.character()
    demo_rigs.use_reach(rig)
    rigs.update()
    rigs.update()
    return rig.obj


def test_dragging_one_hand_solves_one_chain() -> None:
    obj = _character()
    before = _counts(obj)
    hand = obj.reach_ik.chains["arm.L"].target
    for k in range(4):
        hand.location.x -= 0.03  # toward the body: the straight arm bends to follow
        hand.location.z -= 0.01 * k
        rigs.update()
    after = _counts(obj)
    solved = {name: after[name] - before[name] for name in after}
    assert solved["arm.L"] == 4, solved
    assert all(v == 0 for name, v in solved.items() if name != "arm.L"), f"only the dragged arm is solved: {solved}"
    misses = _misses(obj)
    assert misses["arm.L"] <= TOL and misses["leg.R"] <= TOL, misses


def test_moving_the_spine_target_solves_the_arms_below_it() -> None:
    obj = _character()
    before = _counts(obj)
    spine = obj.reach_ik.chains["spine"].target
    spine.location.x += 0.03
    rigs.update()
    after = _counts(obj)
    solved = {name for name in after if after[name] > before[name]}
    # The arms hang from the chest (the spine's tip): they follow in the same update; legs and tail do not.
    assert {"spine", "arm.L", "arm.R"} <= solved and not solved & {"leg.L", "leg.R", "tail"}, solved
    misses = _misses(obj)
    for ch in obj.reach_ik.chains:  # the arms may now be out of reach: their status must say so exactly
        assert abs(ch.residual - misses[ch.name]) <= 1e-4 + 1e-3 * misses[ch.name], (ch.name, ch.residual, misses)


def test_posing_a_bone_above_a_chain_solves_that_chain() -> None:
    obj = _character()
    before = _counts(obj)
    obj.pose.bones["hips"].rotation_quaternion = (0.99, 0.0, 0.1, 0.0)  # above every chain
    rigs.update()
    after = _counts(obj)
    assert all(after[n] > before[n] for n in after), (before, after)
    for name, miss in _misses(obj).items():
        assert miss <= 2e-2, f"{name} misses by {miss:.3g}"  # the pose may put some targets out of reach
    assert all(ch.is_valid for ch in obj.reach_ik.chains)
    # Status matches the evaluated pose for every chain, solved in this update or not.
    for ch in obj.reach_ik.chains:
        assert abs(ch.residual - _misses(obj)[ch.name]) <= 1e-4 + 1e-3 * ch.residual, ch.name
