"""The rig core without Blender: a snapshot of a small rig in, solved rotations and chain outcomes out.

Results are checked by forward kinematics of the returned basis rotations (as Blender poses a bone:
parent pose @ rest relative to the parent @ basis), not by the solver's own numbers.
"""

from __future__ import annotations

import math

import numpy as np
from solver_fixtures import addon_module

core = addon_module("core.solve")
_model = addon_module("core.model")
BoneLimits, ChainPlan, Group, Inputs = _model.BoneLimits, _model.ChainPlan, _model.Group, _model.Inputs
Plan, RigReport, Settings, Skeleton, Snapshot = (
    _model.Plan,
    _model.RigReport,
    _model.Settings,
    _model.Skeleton,
    _model.Snapshot,
)

# Bones along +Z, Blender's bone convention: Y along the bone, X = world X, Z = world -Y.
_ROT = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


def _skeleton(chains: int, n: int) -> Skeleton:
    """`chains` separate chains of `n` unit bones along +Z, side by side in X."""
    names, parent, rest = [], [], []
    for c in range(chains):
        for i in range(n):
            names.append(f"c{c}b{i}")
            parent.append(-1 if i == 0 else len(names) - 2)
            m = np.eye(4)
            m[:3, :3] = _ROT
            m[:3, 3] = (2.0 * c, 0.0, float(i))
            rest.append(m)
    rest_a = np.array(rest)
    par = np.array(parent, dtype=np.int64)
    depth = np.array([0 if p < 0 else 1 for p in parent], dtype=np.int64)
    for b in range(len(par)):
        d, p = 0, par[b]
        while p >= 0:
            d, p = d + 1, par[p]
        depth[b] = d
    rest_rel = rest_a[:, :3, :3].copy()
    rest_rel4 = rest_a.copy()
    for b, p in enumerate(par):
        if p >= 0:
            rest_rel[b] = rest_a[p, :3, :3].T @ rest_a[b, :3, :3]
            rest_rel4[b] = np.linalg.inv(rest_a[p]) @ rest_a[b]
    k = len(names)
    return Skeleton(
        names=tuple(names),
        index={nm: i for i, nm in enumerate(names)},
        parent=par,
        depth=depth,
        rest=rest_a,
        rest_rel=rest_rel,
        rest_rel4=rest_rel4,
        data_order=np.arange(k),
        connected=par >= 0,
        inherits=np.ones(k, dtype=bool),
    )


def _snapshot(sk: Skeleton, chains: int, n: int, solver: str, limits: BoneLimits | None = None) -> Snapshot:
    groups = []
    for c in range(chains):
        bones = list(range(c * n, (c + 1) * n))
        plan = ChainPlan(c, f"chain{c}", solver, bones, f"T{c}", None, 1.0, False)
        groups.append(Group([plan], bones))
    b = len(sk.names)
    return Snapshot(
        sk=sk,
        plan=Plan(groups=groups),
        settings=Settings("Rig", 1e-4, 60, "KEEP", "CURRENT"),
        limits=limits if limits is not None else BoneLimits.none(b),
        lengths=np.ones(b),
    )


def _inputs(sk: Skeleton, goals: list[tuple[float, float, float]]) -> Inputs:
    targets = {}
    for i, g in enumerate(goals):
        m = np.eye(4)
        m[:3, 3] = g
        targets[i] = m[None]
    return Inputs(pose=sk.rest[None].copy(), world=np.eye(4)[None], targets=targets, poles={})


def _tips(sk: Skeleton, bones: list[int], basis: np.ndarray, chains: int, n: int) -> list[np.ndarray]:
    """Forward kinematics from the solved basis rotations (unsolved bones stay at rest)."""
    rot = {b: basis[0, k] for k, b in enumerate(bones)}
    tips = []
    for c in range(chains):
        frame, head = np.eye(3), sk.rest[c * n, :3, 3].copy()
        for i in range(n):
            b = c * n + i
            frame = frame @ sk.rest_rel[b] @ rot.get(b, np.eye(3))
            head = head + frame @ np.array([0.0, 1.0, 0.0])
        tips.append(head)
    return tips


def test_core_solves_a_snapshot_without_blender() -> None:
    sk = _skeleton(3, 3)
    goals = [(0.6, 0.3, 2.5), (2.3, -0.8, 2.2), (4.0, 0.9, 1.4)]
    for solver in ("FABRIK", "CCD"):
        snap = _snapshot(sk, 3, 3, solver)
        report = RigReport()
        solved = core.solve(snap, _inputs(sk, goals), report)
        tips = _tips(sk, solved.bones, solved.basis, 3, 3)
        for c, (tip, goal) in enumerate(zip(tips, goals, strict=True)):
            d = float(np.linalg.norm(tip - np.array(goal)))
            assert d <= 1e-4, f"{solver} chain {c}: the tip is {d:.3g} from its target"
            out = report.outcomes[c]
            assert out.valid and out.reached and abs(out.residual - d) <= 1e-6, out


def test_core_refuses_one_chains_bad_limit_and_solves_the_others() -> None:
    sk = _skeleton(2, 3)
    limits = BoneLimits.none(len(sk.names))
    limits.use_cone[4] = True
    limits.cone[4] = (math.nan, 0.5, 0.5, 0.5)
    snap = _snapshot(sk, 2, 3, "FABRIK", limits)
    report = RigReport()
    goals = [(0.6, 0.3, 2.5), (2.3, -0.8, 2.2)]
    solved = core.solve(snap, _inputs(sk, goals), report)
    assert report.outcomes[0].valid and report.outcomes[0].reached, report.outcomes[0]
    assert not report.outcomes[1].valid and "'c1b1'" in report.outcomes[1].message, report.outcomes[1].message
    assert not set(solved.bones) & {3, 4, 5}, "the refused chain's bones must not be solved"
    tip = _tips(sk, solved.bones, solved.basis, 2, 3)[0]
    assert np.linalg.norm(tip - np.array(goals[0])) <= 1e-4


def _rotation(axis: tuple[float, float, float], angle: float) -> np.ndarray:
    a = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    k = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def _angle_between(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.arccos(np.clip((np.trace(a.T @ b) - 1.0) / 2.0, -1.0, 1.0)))


def test_influence_blends_each_bone_from_fk_toward_ik_and_the_chain_reports_the_blend() -> None:
    """Influence w: basis = slerp(FK, IK, w) per bone; 0 gives the FK basis; 1 the IK solution. The outcome
    of a blended chain is measured on the blended pose (forward kinematics here, not solver numbers)."""
    sk = _skeleton(1, 3)
    goal = [(0.8, 0.4, 2.2)]
    snap = _snapshot(sk, 1, 3, "FABRIK")
    fk = {0: _rotation((1, 0, 0), 0.3), 1: _rotation((0, 0, 1), -0.4), 2: _rotation((1, 1, 0), 0.2)}

    def run(w: float) -> tuple[np.ndarray, object]:
        inputs = _inputs(sk, goal)
        inputs.influence = {0: np.array([w])}
        inputs.fk = {b: m[None] for b, m in fk.items()}
        report = RigReport()
        solved = core.solve(snap, inputs, report)
        basis = np.stack([solved.basis[0, solved.bones.index(b)] for b in range(3)])
        return basis, report.outcomes[0]

    at_zero, out0 = run(0.0)
    for b in range(3):
        assert _angle_between(at_zero[b], fk[b]) < 1e-9
    _at_one, out1 = run(1.0)
    assert out1.reached and out1.message == "", out1
    # A blended chain's IK solution starts from its FK pose (w = 1 starts from the pose as read): the IK part
    # of the blend is the solution at w just below 1.
    ik, _ = run(1.0 - 1e-12)
    half, out_half = run(0.5)
    for b in range(3):
        want = _angle_between(fk[b], ik[b]) / 2.0
        assert abs(_angle_between(fk[b], half[b]) - want) < 1e-7
        assert abs(_angle_between(half[b], ik[b]) - want) < 1e-7
    tip = _tips(sk, list(range(3)), half[None], 1, 3)[0]
    far = float(np.linalg.norm(tip - np.array(goal[0])))
    assert not out_half.reached and out_half.message.startswith("blended") and abs(out_half.residual - far) < 1e-9
    tip0 = _tips(sk, list(range(3)), at_zero[None], 1, 3)[0]
    assert abs(out0.residual - float(np.linalg.norm(tip0 - np.array(goal[0])))) < 1e-9
    assert out0.message.startswith("FK: Influence is 0"), out0.message


def test_reposed_gives_the_bones_their_rotations_keeps_their_scale_and_carries_the_bones_below() -> None:
    """`core.sequence.reposed` (a frame-order bake's start): the pose of bones given new basis rotations, each
    keeping its location and scale channels, the bones below following, equals forward kinematics of the
    channels (Blender's parent pose @ rest relative to the parent @ basis) with those rotations put in."""
    sequence = addon_module("core.sequence")
    sk = _skeleton(1, 4)
    rng = np.random.default_rng(7)

    def rot(axis: np.ndarray, angle: float) -> np.ndarray:
        a = axis / np.linalg.norm(axis)
        k = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
        return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * k @ k

    def forward(basis: list[np.ndarray]) -> np.ndarray:
        pose = np.empty((1, 4, 4, 4))
        for b in range(4):
            rel = sk.rest_rel4[b] @ basis[b]
            pose[0, b] = rel if sk.parent[b] < 0 else pose[0, sk.parent[b]] @ rel
        return pose

    basis = []
    for b in range(4):
        m = np.eye(4)
        m[:3, :3] = rot(rng.normal(size=3), rng.uniform(-1.0, 1.0)) @ np.diag([1.0, 1.0 + 0.1 * b, 1.0])
        m[:3, 3] = rng.normal(size=3) * 0.1 * (b == 0)
        basis.append(m)
    pose = forward(basis)
    new = {1: rot(np.array([0.3, 1.0, -0.2]), 0.7)[None], 3: rot(np.array([1.0, 0.0, 0.5]), -0.4)[None]}
    want = [m.copy() for m in basis]
    for b, r in new.items():
        want[b][:3, :3] = r[0] @ np.diag(np.linalg.norm(basis[b][:3, :3], axis=0))
    got = sequence.reposed(sk, pose, new)
    np.testing.assert_allclose(got, forward(want), atol=1e-12)
    np.testing.assert_allclose(got[0, 0], pose[0, 0], atol=0.0)  # above the bones given: as it was
