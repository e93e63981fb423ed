"""Joint limits through the solvers: large randomized suites, checked from the output frames only.

Every bone of every chain carries a random elliptical cone (zero sides, hinges and > 90 degree sides
included) and a random twist range. The reference frame of each bone is recomputed here from ``base``,
``ref_local`` and the solver's output frames, and the violation is measured with an independent formula
(swing angle against the ellipse, twist from the matrix) rather than the solver's own numbers. Targets
that the limits allow are made by forward kinematics of random poses that satisfy the limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from solver_fixtures import forward_kinematics, make_rig, make_tree

from solvers import ChainProblem, JointLimits, solve_ccd, solve_fabrik, solve_tree, solve_two_bone
from solvers.limits import limit_violation

F64 = npt.NDArray[np.float64]
# Rounding must never reach numpy as an invalid value (NaN from arccos of 1 + 1e-16 and the like).
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3

# Violation allowed in the output frames (the contract); the limits module itself is exact to ~1e-9.
MAX_VIOLATION = 1e-6


# ------------------------------------------------------------------------------------------------------
# Limits, poses that satisfy them, and an independent violation measure
# ------------------------------------------------------------------------------------------------------


def random_limits(rng: np.random.Generator, k: int, n: int) -> JointLimits:
    """Cones with sides in [0, 2.6] rad (some zero: half-cones and hinges), twist ranges around 0."""
    cone = rng.uniform(0.05, 2.6, size=(k, n, 4))
    cone[rng.random((k, n, 4)) < 0.12] = 0.0
    hinge = rng.random((k, n)) < 0.1
    cone[hinge, LEFT] = 0.0
    cone[hinge, RIGHT] = 0.0
    lo = -rng.uniform(0.0, 1.5, size=(k, n))
    hi = rng.uniform(0.0, 1.5, size=(k, n))
    return JointLimits(
        cone=cone,
        use_cone=rng.random((k, n)) < 0.9,
        twist=np.stack((lo, hi), axis=-1),
        use_twist=rng.random((k, n)) < 0.8,
    )


def rot_y(t: F64) -> F64:
    c, s = np.cos(t), np.sin(t)
    z, o = np.zeros_like(t), np.ones_like(t)
    return np.stack((np.stack((c, z, s), -1), np.stack((z, o, z), -1), np.stack((-s, z, c), -1)), axis=-2)


def swing_to(direction: F64) -> F64:
    """Minimal rotations taking +Y to unit ``direction`` (..., 3), by Rodrigues about Y x d."""
    y = np.zeros_like(direction)
    y[..., 1] = 1.0
    axis = np.cross(y, direction)
    s = np.linalg.norm(axis, axis=-1)
    c = direction[..., 1]
    k = np.where(s[..., None] > 1e-12, axis / np.maximum(s, 1e-300)[..., None], [1.0, 0.0, 0.0])
    kx, ky, kz = k[..., 0], k[..., 1], k[..., 2]
    zero = np.zeros_like(kx)
    km = np.stack(
        (np.stack((zero, -kz, ky), -1), np.stack((kz, zero, -kx), -1), np.stack((-ky, kx, zero), -1)), axis=-2
    )
    ang = np.arctan2(s, c)[..., None, None]
    return np.asarray(np.eye(3) + np.sin(ang) * km + (1 - np.cos(ang)) * (km @ km), dtype=np.float64)


def allowed_local(rng: np.random.Generator, limits: JointLimits, shrink: float = 0.9, twist: bool = True) -> F64:
    """Random local rotations (``ref^T @ frame``) inside the limits: swing uniform in the (shrunk) ellipse
    quadrants, twist uniform in the range (or none, when ``twist`` is False: the rotations the 'REST' roll
    produces). Unlimited bones get a moderate random swing and twist."""
    shape = limits.use_cone.shape
    phi = rng.uniform(0, 2 * np.pi, size=shape)
    r = shrink * np.sqrt(rng.random(shape))
    c, s = np.cos(phi), np.sin(phi)
    cone = limits.cone
    a = np.where(c >= 0, cone[..., RIGHT], cone[..., LEFT])
    b = np.where(s >= 0, cone[..., UP], cone[..., DOWN])
    a = np.where(limits.use_cone, a, 1.0)
    b = np.where(limits.use_cone, b, 1.0)
    tx, tz = r * a * c, r * b * s
    th = np.hypot(tx, tz)
    az = np.arctan2(tz, tx)
    direction = np.stack((np.sin(th) * np.cos(az), np.cos(th), np.sin(th) * np.sin(az)), axis=-1)
    lo = np.where(limits.use_twist, limits.twist[..., 0], -1.0)
    hi = np.where(limits.use_twist, limits.twist[..., 1], 1.0)
    tau = lo + (hi - lo) * (0.05 + 0.9 * rng.random(shape))
    return swing_to(direction) @ rot_y(tau) if twist else swing_to(direction)


def independent_check(
    ref: F64, frames: F64, cone: F64, use_cone: F64, twist: F64, use_twist: F64, tol: float = MAX_VIOLATION
) -> tuple[F64, F64]:
    """Whether each frame is within ``tol`` of its cone and of its twist range, by the issue's formulas,
    without solvers.limits.

    Cone: the Y axis's swing coordinates must lie in the ellipse quadrant with every half-angle widened by
    ``tol``; that region lies within ``tol`` (geodesic) of the cone, because the widened ellipse lies in
    the tol-neighbourhood of the ellipse in the swing plane and the sphere's exponential map does not
    lengthen distances. Twist: ``atan2(R02 - R20, R00 + R22)`` against the range, around the circle.
    """
    rel = np.einsum("mji,mjk->mik", ref, frames)
    y = rel[:, :, 1] / np.linalg.norm(rel[:, :, 1], axis=1, keepdims=True)
    th = np.arctan2(np.hypot(y[:, 0], y[:, 2]), y[:, 1])
    az = np.arctan2(y[:, 2], y[:, 0])
    tx, tz = th * np.cos(az), th * np.sin(az)
    a = np.where(tx >= 0, cone[:, RIGHT], cone[:, LEFT]) + tol
    b = np.where(tz >= 0, cone[:, UP], cone[:, DOWN]) + tol
    cone_ok = ((tx / a) ** 2 + (tz / b) ** 2 <= 1.0) | ~use_cone.astype(bool)
    tw = np.arctan2(rel[:, 0, 2] - rel[:, 2, 0], rel[:, 0, 0] + rel[:, 2, 2])
    lo, hi = twist[:, 0], twist[:, 1]
    past = np.mod(tw - lo, 2 * np.pi) - (hi - lo)  # how far past the max, going forward from the min
    short = 2 * np.pi - np.mod(tw - lo, 2 * np.pi)  # how far short of the min
    twist_ok = (past <= tol) | (short <= tol) | ~use_twist.astype(bool)
    return cone_ok, twist_ok


def chain_violations(problem: ChainProblem, frames: F64) -> tuple[F64, F64, F64, F64]:
    """(cone, twist) violations by limits.limit_violation, and the independent within-tolerance checks,
    per bone, with each bone's reference frame recomputed from base, ref_local and the output frames."""
    lim = problem.limits
    assert lim is not None
    parents = np.concatenate([problem.base[:, None], frames[:, :-1]], axis=1)
    ref = np.einsum("knij,knjl->knil", parents, problem.ref_local).reshape(-1, 3, 3)
    f = frames.reshape(-1, 3, 3)
    args = (lim.cone.reshape(-1, 4), lim.use_cone.reshape(-1), lim.twist.reshape(-1, 2), lim.use_twist.reshape(-1))
    cv, tv = limit_violation(ref, f, *args)
    cone_ok, twist_ok = independent_check(ref, f, *args)
    return cv, tv, cone_ok, twist_ok


@dataclass
class Suite:
    problem: ChainProblem
    groups: str


def chain_suite(seed: int, n: int, k: int, roll_mode: str, poles: bool = False, **kw: Any) -> ChainProblem:
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, k, n, connected=rng.random() < 0.7, bend=0.8)
    limits = random_limits(rng, k, n)
    # Reachable within the limits: tips of random poses that satisfy them. The poses have no twist (the
    # random twist ranges all contain 0), so they are also poses the 'REST'/'NATURAL' roll can produce: a
    # twisted parent would turn its child's cone, and no roll mode searches over twist.
    target_pos, _ = forward_kinematics(
        rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, twist=False), rig.offsets
    )
    # Warm start: another allowed pose (the rig as the user left it, inside its limits).
    rig.positions, rig.frames = forward_kinematics(
        rig.root, rig.base, rig.ref_local, allowed_local(rng, limits), rig.offsets
    )
    pole = None
    if poles:
        pole = rig.root + rng.normal(size=(k, 3)) * 2.0
        pole[rng.random(k) < 0.5] = np.nan
    return rig.problem(target_pos[:, -1].copy(), limits=limits, poles=pole, roll_mode=roll_mode, **kw)


# Groups of chains per solver: (bones, chains, roll mode, poles). 2 000+ chains per solver.
CHAIN_GROUPS = [
    (2, 400, "KEEP", False),
    (3, 400, "REST", True),
    (4, 400, "NATURAL", False),
    (6, 400, "KEEP", True),
    (8, 400, "REST", False),
]
TWO_BONE_GROUPS = [(2, 700, "KEEP", False), (2, 700, "REST", True), (2, 700, "NATURAL", False)]

REACH: dict[str, list[float]] = {}


def run_suite(
    name: str, solver: Any, groups: list[tuple[int, int, str, bool]], tol: float, iterations: int
) -> tuple[float, float, list[float]]:
    worst_cone = worst_twist = 0.0
    reached = []
    for g, (n, k, mode, poles) in enumerate(groups):
        problem = chain_suite(1000 + 17 * g + n, n, k, mode, poles, tolerance=tol, max_iterations=iterations)
        result = solver(problem)
        cv, tv, cone_ok, twist_ok = chain_violations(problem, result.frames)
        assert cone_ok.all(), f"{name}: {np.count_nonzero(~cone_ok)} bones outside their cones (independent)"
        assert twist_ok.all(), f"{name}: {np.count_nonzero(~twist_ok)} bones outside their twist ranges"
        worst_cone = max(worst_cone, float(cv.max()))
        worst_twist = max(worst_twist, float(tv.max()))
        reached.append(float(result.reached.mean()))
        # Positions follow from the frames (so the limited frames are what the chain really does).
        tips = result.positions[:, :1] + np.cumsum(np.einsum("knij,knj->kni", result.frames, problem.offsets), axis=1)
        assert np.abs(tips - result.positions[:, 1:]).max() < 1e-9
    REACH[name] = reached
    return worst_cone, worst_twist, reached


def moderate_limits(rng: np.random.Generator, k: int, n: int) -> JointLimits:
    """Cones of 17-86 degrees per side and +-29 degrees of twist on every bone (the 'moderate' suite)."""
    return JointLimits(
        cone=rng.uniform(0.3, 1.5, size=(k, n, 4)),
        use_cone=np.ones((k, n), dtype=bool),
        twist=np.tile([-0.5, 0.5], (k, n, 1)),
        use_twist=np.ones((k, n), dtype=bool),
    )


@pytest.mark.parametrize(
    ("name", "solver", "groups", "iterations"),
    [
        ("FABRIK", solve_fabrik, CHAIN_GROUPS, 100),
        ("CCD", solve_ccd, CHAIN_GROUPS, 100),
        ("two-bone", solve_two_bone, TWO_BONE_GROUPS, 1),
    ],
)
def test_solvers_respect_limits(
    name: str, solver: Any, groups: list[tuple[int, int, str, bool]], iterations: int
) -> None:
    cone_v, twist_v, reached = run_suite(name, solver, groups, 1e-3, iterations)
    assert cone_v <= MAX_VIOLATION, f"{name}: output frames violate a cone by {cone_v:.3g} rad"
    assert twist_v <= MAX_VIOLATION, f"{name}: output frames violate a twist range by {twist_v:.3g} rad"
    print(
        f"{name}: worst cone violation {cone_v:.2g} rad, twist {twist_v:.2g} rad; reached per group "
        + ", ".join(f"{r:.1%}" for r in reached)
    )
    if name in REACH_FLOOR:
        # Every target is reachable within the limits, which are harsh (hinges, half-cones, zero and 150
        # degree sides): the local solvers with restarts reached 88-90 % (two-bone, clamped: 44-51 %);
        # the global stage (solvers/search.py) takes what they miss.
        assert min(reached) >= REACH_FLOOR[name], (
            f"{name} reached only {min(reached):.1%} of limit-reachable targets in a group "
            f"(floor {REACH_FLOOR[name]:.0%})"
        )


# Measured (seeded) per group: FABRIK 99.5-100 %, CCD 99.5-100 %, two-bone 99.0-99.3 % (before the global
# stage, with restarts from rest and from a straight line instead: FABRIK 88-99.5 %, CCD 89.5-100 %,
# two-bone 44-51 %).
REACH_FLOOR = {"FABRIK": 0.99, "CCD": 0.99, "two-bone": 0.985}


@pytest.mark.parametrize(("name", "solver", "floor"), [("FABRIK", solve_fabrik, 0.995), ("CCD", solve_ccd, 0.995)])
def test_reach_with_moderate_limits(name: str, solver: Any, floor: float) -> None:
    """Moderate cones (17-86 degree sides) and twist +-0.5 rad on every bone, 'REST' roll, targets from
    twist-free poses inside the limits (so inside the family of poses the solver explores).

    Measured (seeded, N=2, 4, 8): FABRIK and CCD 100, 100, 100 % (with the global stage of
    solvers/search.py; with restarts in its place FABRIK reached 99.3, 99.3, 99.7 %). Before the fixes in
    solvers/loop.py and solvers/ccd.py (CCD's tracked frames kept, and rolled by the roll mode; restarts
    from the rest pose and from straight toward the target for chains that stall short) FABRIK reached
    93-99 % and CCD 79-89 %: the final sweep rebuilt CCD's frames from positions with the roll mode,
    re-rolling each bone and turning its child's cone, which moved the tip off the target.
    """
    fractions = []
    for n in (2, 4, 8):
        rng = np.random.default_rng(500 + n)
        k = 300
        rig = make_rig(rng, k, n, connected=True, bend=0.8)
        limits = moderate_limits(rng, k, n)
        targets, _ = forward_kinematics(
            rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, twist=False), rig.offsets
        )
        rig.positions, rig.frames = forward_kinematics(
            rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, twist=False), rig.offsets
        )
        problem = rig.problem(
            targets[:, -1].copy(), limits=limits, roll_mode="REST", tolerance=1e-3, max_iterations=300
        )
        result = solver(problem)
        cv, tv, cone_ok, twist_ok = chain_violations(problem, result.frames)
        assert cone_ok.all() and twist_ok.all() and cv.max() <= MAX_VIOLATION and tv.max() <= MAX_VIOLATION
        fractions.append(float(result.reached.mean()))
    print(f"{name} reached (moderate limits, N=2, 4, 8): " + ", ".join(f"{f:.1%}" for f in fractions))
    assert min(fractions) >= floor, f"{name} reached only {min(fractions):.1%} of limit-reachable targets"


def test_trees_respect_limits() -> None:
    rng = np.random.default_rng(77)
    shapes = [
        ([-1, 0, 1, 1, 2, 3], [4, 5]),
        ([-1, 0, 0, 1, 2, 3, 4], [5, 6]),
        ([-1, 0, 1, 2, 2, 2, 3, 4, 5], [6, 7, 8]),
    ]
    worst_c = worst_t = 0.0
    for t in range(30):
        parents, effectors = shapes[t % len(shapes)]
        rig = make_tree(rng, parents=parents, effectors=effectors)
        b = len(parents)
        limits = random_limits(rng, 1, b)
        local = allowed_local(rng, limits)[0]
        _, _, tails = rig.pose(local)
        rig.heads, rig.frames, _ = rig.pose(allowed_local(rng, limits)[0])
        problem = rig.problem(tails[rig.effectors], limits=limits, roll_mode=("KEEP", "REST")[t % 2], max_iterations=60)
        result = solve_tree(problem)
        parent_frames = np.array([problem.base if p < 0 else result.frames[p] for p in problem.parents])
        ref = np.einsum("bij,bjk->bik", parent_frames, problem.ref_local)
        args = (limits.cone[0], limits.use_cone[0], limits.twist[0], limits.use_twist[0])
        cv, tv = limit_violation(ref, result.frames, *args)
        cone_ok, twist_ok = independent_check(ref, result.frames, *args)
        assert cone_ok.all() and twist_ok.all(), f"tree {t}: bones outside their limits (independent check)"
        worst_c = max(worst_c, float(cv.max()))
        worst_t = max(worst_t, float(tv.max()))
    assert worst_c <= MAX_VIOLATION, f"tree output frames violate a cone by {worst_c:.3g} rad"
    assert worst_t <= MAX_VIOLATION, f"tree output frames violate a twist range by {worst_t:.3g} rad"


@pytest.mark.parametrize("solver", [solve_ccd, solve_fabrik])
def test_result_keeps_what_the_loop_reached(solver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With limits, the result's tip is where the loop's best pose put it: the final frames must not be
    rebuilt from positions with the roll mode, which re-rolls each bone, turns its child's cone and moved
    CCD's tip off the target (8-bone chains, moderate cones: the loop reached 99 %, the result 79 %)."""
    import solvers.loop as loop

    seen: list[tuple[Any, Any]] = []
    run = loop.iterate  # the loop: the best pose of the solve

    def spy(batch: Any, *args: Any, **kwargs: Any) -> Any:
        outcome = run(batch, *args, **kwargs)
        seen.append((batch, outcome))
        return outcome

    monkeypatch.setattr(loop, "iterate", spy)
    rng = np.random.default_rng(508)
    k, n = 200, 8
    rig = make_rig(rng, k, n, connected=True, bend=0.8)
    limits = moderate_limits(rng, k, n)
    targets, _ = forward_kinematics(
        rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, twist=False), rig.offsets
    )
    start = allowed_local(rng, limits, twist=False)
    rig.positions, rig.frames = forward_kinematics(rig.root, rig.base, rig.ref_local, start, rig.offsets)
    problem = rig.problem(targets[:, -1].copy(), limits=limits, roll_mode="REST", max_iterations=100)
    result = solver(problem)
    assert len(seen) == 1 and seen[0][0].size == k, "every chain should have gone through the loop"
    batch, outcome = seen[0]
    loop_residual = np.linalg.norm(outcome.positions[:, -1] - batch.targets, axis=1)
    # Independently: the tip by forward kinematics of the returned frames.
    tips = problem.positions[:, 0] + np.einsum("knij,knj->ki", result.frames, problem.offsets)
    residual = np.linalg.norm(tips - problem.targets, axis=1)
    # Within tolerance the final sweep may restore a pole's bend plane at the cost of some of the margin.
    worse = residual > np.maximum(loop_residual, problem.tolerance) + 1e-9
    assert not worse.any(), (
        f"{np.count_nonzero(worse)} chains end farther from the target than the loop's best pose "
        f"(worst {float((residual - loop_residual).max()):.3g})"
    )
    lost = (loop_residual <= problem.tolerance) & ~result.reached
    assert not lost.any(), f"{np.count_nonzero(lost)} chains reached by the loop are not reached in the result"
    gram = np.einsum("knji,knjl->knil", result.frames, result.frames)
    assert np.abs(gram - np.eye(3)).max() < 1e-10, "output frames must stay rotations (no drift over iterations)"
