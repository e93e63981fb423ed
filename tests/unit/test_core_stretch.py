"""Stretch in the rig core, without Blender: solved rotations and Y scales checked by forward kinematics.

The forward kinematics here is written out from Blender's rules for a bone's pose (parent pose @ rest
relative to the parent @ basis, the basis being rotation and scale), with Inherit Scale 'Aligned' (the
parent's rotation, and its per-axis scale on the child's own axes) and 'None' (the parent's rotation only);
the head always follows the whole parent matrix. It does not call the core's own `child_pose`.
"""

from __future__ import annotations

import numpy as np
import pytest
from solver_fixtures import addon_module

core = addon_module("core.solve")
model = addon_module("core.model")

# Bones along +Z, Blender's bone convention: Y along the bone, X = world X, Z = world -Y.
_ROT = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
N = 3


def _skeleton(mode: int):  # type: ignore[no-untyped-def]
    """One chain of N unit bones along +Z; every bone below the first inherits scale as `mode`."""
    names = [f"b{i}" for i in range(N)]
    parent = np.array([-1, *range(N - 1)], dtype=np.int64)
    rest = np.array([np.eye(4) for _ in range(N)])
    for i in range(N):
        rest[i, :3, :3] = _ROT
        rest[i, :3, 3] = (0.0, 0.0, float(i))
    rest_rel = rest[:, :3, :3].copy()
    rest_rel4 = rest.copy()
    for b in range(1, N):
        rest_rel[b] = rest[b - 1, :3, :3].T @ rest[b, :3, :3]
        rest_rel4[b] = np.linalg.inv(rest[b - 1]) @ rest[b]
    return model.Skeleton(
        names=tuple(names),
        index={nm: i for i, nm in enumerate(names)},
        parent=parent,
        depth=np.arange(N, dtype=np.int64),
        rest=rest,
        rest_rel=rest_rel,
        rest_rel4=rest_rel4,
        data_order=np.arange(N),
        connected=parent >= 0,
        inherits=np.array([True] + [mode == model.FULL] * (N - 1)),
        inherit_scale=np.array([model.FULL] + [mode] * (N - 1), dtype=np.int64),
    )


def _snapshot(sk, carriers: list[int], soft: float, stretch: float, start: str = "CURRENT"):  # type: ignore[no-untyped-def]
    plan = model.ChainPlan(
        0, "arm", "FABRIK", list(range(N)), "T", None, 1.0, False, soft=soft, stretch=stretch, carriers=carriers
    )
    return model.Snapshot(
        sk=sk,
        plan=model.Plan(groups=[model.Group([plan], list(range(N)))]),
        settings=model.Settings("Rig", 1e-5, 100, "KEEP", start),
        limits=model.BoneLimits.none(N),
        lengths=np.ones(N),
    )


def _pose(sk, basis_rot: np.ndarray, scale_y: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(F, N, 4, 4) Blender's pose of the chain for basis rotations (F, N, 3, 3) and Y scale channels (F, N)."""
    f = basis_rot.shape[0]
    modes = sk.inherit_scale
    out = np.zeros((f, N, 4, 4))
    for fi in range(f):
        for b in range(N):
            local = np.eye(4)
            local[:3, :3] = basis_rot[fi, b] @ np.diag([1.0, scale_y[fi, b], 1.0])
            rel = sk.rest_rel4[b] @ local
            if b == 0:
                out[fi, b] = rel
                continue
            parent = out[fi, b - 1]
            full = parent @ rel
            scale = np.linalg.norm(parent[:3, :3], axis=0)
            rot = parent[:3, :3] / scale
            m = full.copy()
            if modes[b] == model.ALIGNED:
                m[:3, :3] = rot @ rel[:3, :3] @ np.diag(scale)
            elif modes[b] == model.NONE:
                m[:3, :3] = rot @ rel[:3, :3]
            out[fi, b] = m
    return out


def _inputs(sk, goals: np.ndarray, channel_y: np.ndarray, rest_start: bool = False):  # type: ignore[no-untyped-def]
    f = goals.shape[0]
    bent = np.array([np.eye(3) for _ in range(N)])
    c, s = np.cos(0.2), np.sin(0.2)
    bent[1] = [[1, 0, 0], [0, c, -s], [0, s, c]]  # a slight bend at the second joint
    basis = np.broadcast_to(bent, (f, N, 3, 3)).copy()
    pose = _pose(sk, basis, channel_y)
    target = np.tile(np.eye(4), (f, 1, 1))
    target[:, :3, 3] = goals
    scale = np.ones((f, N, 3))
    scale[..., 1] = channel_y
    inputs = model.Inputs(pose=pose, world=np.tile(np.eye(4), (f, 1, 1)), targets={0: target}, poles={}, scale=scale)
    if rest_start:
        b4 = np.tile(np.eye(4), (f, N, 1, 1))
        b4[..., :3, :3] = basis * scale[..., None, :]
        inputs.basis, inputs.location = b4, np.zeros((f, N, 3))
    return inputs


def _solve_and_measure(sk, snap, inputs, channel_y: np.ndarray):  # type: ignore[no-untyped-def]
    report = model.RigReport()
    solved = core.solve(snap, inputs, report)
    assert solved.bones == list(range(N))
    # The Y scale channels after writing what the solve returns (the others keep their value).
    y = channel_y.copy()
    for j, b in enumerate(solved.scale_bones):
        y[:, b] = solved.scale_y[:, j]
    pose = _pose(sk, solved.basis, y)
    tips = pose[:, -1, :3, 3] + pose[:, -1, :3, 1] * 1.0  # tail = head + Y axis * rest length
    return report.outcomes[0], solved, pose, tips


@pytest.mark.parametrize("mode", ["ALIGNED", "NONE"])
@pytest.mark.parametrize("start", ["CURRENT", "REST"])
def test_stretch_reaches_and_scales_every_bone_alike(mode: str, start: str) -> None:
    code = getattr(model, mode)
    sk = _skeleton(code)
    carriers = [0, 0, 0] if mode == "ALIGNED" else [0, 1, 2]
    snap = _snapshot(sk, carriers, soft=0.0, stretch=1.5, start=start)
    d = np.array([2.0, 3.3, 3.9, 4.4, 6.0])
    goals = d[:, None] * np.array([0.6, 0.0, 0.8])
    # A stretch left from an earlier solve (1.3): divided out, whatever the start.
    channel_y = np.full((d.size, N), 1.0)
    channel_y[:, carriers] = 1.3
    outcome, solved, pose, tips = _solve_and_measure(
        sk, snap, _inputs(sk, goals, channel_y, start == "REST"), channel_y
    )
    assert sorted(solved.scale_bones) == sorted(set(carriers)), "the carriers' Y scale channels are written"
    miss = np.linalg.norm(tips - goals, axis=1)
    want = np.clip(d / N, 1.0, 1.5)
    assert np.abs(np.linalg.norm(pose[..., :3, 1], axis=-1) - want[:, None]).max() < 1e-9, "every bone's Y"
    assert np.abs(np.linalg.norm(pose[..., :3, 0], axis=-1) - 1.0).max() < 1e-9, "X unchanged"
    assert np.abs(np.linalg.norm(pose[..., :3, 2], axis=-1) - 1.0).max() < 1e-9, "Z unchanged"
    assert (miss[:4] <= 1e-5).all(), f"reached up to Stretch x L: {miss}"
    assert abs(miss[4] - (6.0 - 4.5)) < 1e-6, "beyond, the chain stops at Stretch x L"
    assert outcome.valid and not outcome.reached and outcome.status == "UNREACHABLE"
    assert abs(outcome.residual - miss[4]) < 1e-9 and abs(outcome.stretch - 1.5) < 1e-12


def test_soft_and_stretch_reach_with_the_soft_shape() -> None:
    sk = _skeleton(model.ALIGNED)
    snap = _snapshot(sk, [0, 0, 0], soft=0.1, stretch=2.0)
    d = np.linspace(2.5, 4.0, 7)
    goals = d[:, None] * np.array([0.0, 0.6, 0.8])
    channel_y = np.ones((d.size, N))
    outcome, solved, _, tips = _solve_and_measure(sk, snap, _inputs(sk, goals, channel_y), channel_y)
    assert np.linalg.norm(tips - goals, axis=1).max() <= 1e-5 and outcome.reached
    soft_reach = 3.0 - 0.3 * np.exp(-(d - 2.7) / 0.3)
    expected = np.where(d > 2.7, d / soft_reach, 1.0)
    assert np.abs(solved.scale_y[:, 0] - expected).max() < 1e-9, "the stretch is d / soft(d)"


def test_no_stretch_no_scale_written() -> None:
    sk = _skeleton(model.ALIGNED)
    snap = _snapshot(sk, [0, 0, 0], soft=0.0, stretch=1.5)
    goals = np.array([[0.5, 0.0, 2.0], [1.0, 0.0, 2.5]])
    channel_y = np.ones((2, N))
    outcome, solved, _, tips = _solve_and_measure(sk, snap, _inputs(sk, goals, channel_y), channel_y)
    assert solved.scale_bones == [] and outcome.reached
    assert np.linalg.norm(tips - goals, axis=1).max() <= 1e-5


def test_a_chain_that_cannot_stretch_is_refused_when_it_would() -> None:
    sk = _skeleton(model.FULL)
    plan = model.ChainPlan(
        0, "arm", "FABRIK", list(range(N)), "T", None, 1.0, False, soft=0.0, stretch=1.0, stretch_problem="no: reason"
    )
    snap = model.Snapshot(
        sk=sk,
        plan=model.Plan(groups=[model.Group([plan], list(range(N)))]),
        settings=model.Settings("Rig", 1e-5, 100, "KEEP", "CURRENT"),
        limits=model.BoneLimits.none(N),
        lengths=np.ones(N),
    )
    goals = np.array([[0.0, 0.0, 2.5], [0.0, 0.0, 4.0]])
    inputs = _inputs(sk, goals, np.ones((2, N)))
    inputs.stretch = {0: np.array([1.0, 1.2])}  # animated: stretching in the second frame
    report = model.RigReport()
    solved = core.solve(snap, inputs, report)
    assert not report.outcomes[0].valid and report.outcomes[0].message == "no: reason"
    assert solved.bones == []
