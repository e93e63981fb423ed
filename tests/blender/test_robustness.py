"""Robustness, round 3 (issue 35): each test reproduces one fault found by a seeded random-edit run or by
trying the README's promises one by one, measured from Blender's evaluated pose."""

from __future__ import annotations

import bpy_session
import pytest
import rigs


def _no_escape() -> None:
    cache = bpy_session.submodule("rig.cache")
    assert not cache.reported, f"an exception escaped the add-on:\n{next(iter(cache.reported.values()))}"


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-13])
def test_tiny_armature_scale_refused_with_the_number(scale: float) -> None:
    """Issue 35 item 4: at scale 1e-30 the fast live path divided by a float32 determinant that underflowed."""
    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.7, 0.3, 2.1))
    rigs.add_chain(rig, "b2", 3, target)
    rigs.update()
    rig.scale = (scale, scale, scale)
    rigs.update()
    before = rigs.pose_snapshot(rig)
    target.location = (0.5 * scale, 0.2 * scale, 2.0 * scale)
    rigs.update()
    target.location = (0.4 * scale, 0.1 * scale, 1.9 * scale)
    rigs.update()
    _no_escape()
    ch = rig.reach_ik.chains[0]
    assert not ch.is_valid, f"scale {scale}: the chain should be refused"
    assert "scale of" in ch.message and f"{scale:.4g}" in ch.message, ch.message
    assert rigs.pose_snapshot(rig) == before, "a refused rig keeps its pose byte-identical"
