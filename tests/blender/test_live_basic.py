from __future__ import annotations

import numpy as np
import pytest
import rigs


@pytest.mark.parametrize("solver", ["FABRIK", "CCD"])
def test_moving_target_moves_tip(solver: str) -> None:
    rig = rigs.chain_rig(4)
    target = rigs.empty("T", (1.5, 0.5, 2.5))
    rigs.add_chain(rig, "b3", 4, target, solver=solver)
    rigs.update()
    tip = rigs.world_tail(rig, "b3")
    assert np.linalg.norm(tip - np.array(target.location)) <= 1e-3, (
        f"{solver}: tip {tip} vs target {target.location[:]}"
    )
    target.location = (-1.0, 1.0, 3.0)
    rigs.update()
    tip = rigs.world_tail(rig, "b3")
    assert np.linalg.norm(tip - np.array(target.location)) <= 1e-3, (
        f"{solver}: tip {tip} vs target {target.location[:]}"
    )
