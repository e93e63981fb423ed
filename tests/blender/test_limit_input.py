"""Joint limits as Blender stores them: the whole range the UI offers solves, and a limit the solver
cannot take invalidates only the chain (or tree) it belongs to."""

from __future__ import annotations

import math

import numpy as np
import rigs

TOL = 1e-3  # the rig's default tolerance (world units)


def _miss(rig: object, tip: str, target: object) -> float:
    """Tip-to-target distance measured on Blender's evaluated pose."""
    return float(np.linalg.norm(rigs.world_tail(rig, tip) - np.array(target.location)))  # type: ignore[attr-defined]


def test_twist_full_ui_range_solves() -> None:
    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.7, 0.3, 2.1))
    rigs.add_chain(rig, "b2", 3, target)
    for name in ("b0", "b1", "b2"):
        lim = rig.pose.bones[name].reach_ik
        lim.use_twist = True
        lim.twist_min = math.radians(-180.0)  # the UI's own minimum and maximum
        lim.twist_max = math.radians(180.0)
    # Stored as float32: pi rounds up to 3.1415927, a hair outside [-pi, pi] (the case under test).
    assert lim.twist_max > math.pi and lim.twist_min < -math.pi
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert ch.is_valid, ch.message
    assert ch.message == ""
    assert _miss(rig, "b2", target) <= TOL
