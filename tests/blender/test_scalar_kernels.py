"""The scalar (mathutils) chain solvers against the batched numpy ones, on thousands of random chains.

``solvers.scalar`` needs ``mathutils``, which the bpy wheel provides after ``import bpy``: this tier. Every
example builds a batch of random chains (1-12 bones, connected or not, with or without joint limits and
poles, each roll mode, reachable and unreachable targets), solves it both ways and checks, independently
of both solvers, what the scalar result must share with the batched one: the end effector, the status,
segment lengths, joint limits (measured from the output frames by a brute-force geodesic search, not by
``solvers.limits``) and the roll.

mathutils is float32 inside, so agreement is held to float32 accuracy (1e-5 of the chain's size), not to
the batched solvers' float64 one.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import bpy  # noqa: F401  (mathutils is importable once bpy is)
import mathutils  # noqa: F401
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from solver_fixtures import (  # noqa: E402
    HARSH_STARTS,
    forward_kinematics,
    harsh_problem,
    make_rig,
    random_rotations,
    reachable_targets,
    wave_pose,
    zigzag_rig,
)

from solvers import (  # noqa: E402
    CONVERGED,
    UNREACHABLE,
    ChainProblem,
    JointLimits,
    SolveResult,
    solve_ccd,
    solve_fabrik,
    solve_two_bone,
)
from solvers.limits import clamp_cone  # noqa: E402
from solvers.scalar import (  # noqa: E402
    SCALAR_MAX_CHAINS,
    _cone,
    solve_ccd_scalar,
    solve_fabrik_scalar,
    solve_two_bone_scalar,
)

F64 = npt.NDArray[np.float64]
Solver = Callable[[ChainProblem], SolveResult]
PAIRS: dict[str, tuple[Solver, Solver]] = {
    "two_bone": (solve_two_bone, solve_two_bone_scalar),
    "fabrik": (solve_fabrik, solve_fabrik_scalar),
    "ccd": (solve_ccd, solve_ccd_scalar),
}
MODES = ("KEEP", "REST", "NATURAL")
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
_DEG = math.pi / 180.0
K = 12  # chains per example
# float32 accuracy, relative to a chain's size.
FLOAT32 = 1e-5
LIMIT_VIOLATION = 1e-5  # radians, measured from the output frames


# --------------------------------------------------------------------------------------------------------
# Random problems
# --------------------------------------------------------------------------------------------------------


def random_limits(rng: np.random.Generator, k: int, n: int) -> JointLimits:
    """Elliptical cones with sides in [0, 2.6] rad (some zero: half-cones and hinges), twist ranges around 0."""
    cone = rng.uniform(0.05, 2.6, size=(k, n, 4))
    cone[rng.random((k, n, 4)) < 0.12] = 0.0
    hinge = rng.random((k, n)) < 0.1
    cone[hinge, LEFT] = 0.0
    cone[hinge, RIGHT] = 0.0
    lo = -rng.uniform(0.0, 1.5, size=(k, n))
    hi = rng.uniform(0.0, 1.5, size=(k, n))
    return JointLimits(cone, rng.random((k, n)) < 0.9, np.stack((lo, hi), axis=-1), rng.random((k, n)) < 0.8)


def swing_to(direction: F64) -> F64:
    """Minimal rotations taking +Y onto unit ``direction`` ``(..., 3)``."""
    y = np.zeros_like(direction)
    y[..., 1] = 1.0
    axis = np.cross(y, direction)
    s = np.linalg.norm(axis, axis=-1)
    k = np.where(s[..., None] > 1e-12, axis / np.maximum(s, 1e-300)[..., None], [1.0, 0.0, 0.0])
    kx, ky, kz = k[..., 0], k[..., 1], k[..., 2]
    zero = np.zeros_like(kx)
    km = np.stack((np.stack((zero, -kz, ky), -1), np.stack((kz, zero, -kx), -1), np.stack((-ky, kx, zero), -1)), -2)
    ang = np.arctan2(s, direction[..., 1])[..., None, None]
    return np.asarray(np.eye(3) + np.sin(ang) * km + (1 - np.cos(ang)) * (km @ km), dtype=np.float64)


def allowed_local(rng: np.random.Generator, limits: JointLimits, twist: bool) -> F64:
    """Random local rotations inside the limits (swing in the shrunk ellipse; twist in range, or none)."""
    shape = limits.use_cone.shape
    phi = rng.uniform(0, 2 * np.pi, size=shape)
    r = 0.9 * np.sqrt(rng.random(shape))
    c, s = np.cos(phi), np.sin(phi)
    a = np.where(limits.use_cone, np.where(c >= 0, limits.cone[..., RIGHT], limits.cone[..., LEFT]), 1.0)
    b = np.where(limits.use_cone, np.where(s >= 0, limits.cone[..., UP], limits.cone[..., DOWN]), 1.0)
    tx, tz = r * a * c, r * b * s
    th, az = np.hypot(tx, tz), np.arctan2(tz, tx)
    swing = swing_to(np.stack((np.sin(th) * np.cos(az), np.cos(th), np.sin(th) * np.sin(az)), axis=-1))
    if not twist:
        return swing
    lo = np.where(limits.use_twist, limits.twist[..., 0], -1.0)
    hi = np.where(limits.use_twist, limits.twist[..., 1], 1.0)
    tau = lo + (hi - lo) * rng.random(shape)
    ct, st_ = np.cos(tau), np.sin(tau)
    z, o = np.zeros_like(tau), np.ones_like(tau)
    rot_y = np.stack((np.stack((ct, z, st_), -1), np.stack((z, o, z), -1), np.stack((-st_, z, ct), -1)), -2)
    return np.asarray(swing @ rot_y, dtype=np.float64)


def make_problem(
    seed: int, n: int, connected: bool, mode: str, poles: bool, limited: bool, tolerance: float
) -> ChainProblem:
    """K random chains: 2/3 reachable targets (tips of random poses, inside the limits when limited), the
    rest out of reach or next to the root."""
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, K, n, connected=connected, bend=0.8)
    limits = None
    if limited:
        limits = random_limits(rng, K, n)
        goal, _ = forward_kinematics(rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, False), rig.offsets)
        rig.positions, rig.frames = forward_kinematics(
            rig.root, rig.base, rig.ref_local, allowed_local(rng, limits, True), rig.offsets
        )
    else:
        goal, _ = rig.pose(random_rotations(rng, (K, n)))
    targets = goal[:, -1].copy()
    direction = rng.normal(size=(K, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    total = rig.lengths.sum(axis=1)
    kind = rng.random(K)
    far = kind < 0.2
    near = (kind >= 0.2) & (kind < 0.3)
    targets[far] = rig.root[far] + direction[far] * (total[far] * rng.uniform(1.05, 2.0, K)[far])[:, None]
    targets[near] = rig.root[near] + direction[near] * (total[near] * rng.uniform(0.0, 0.1, K)[near])[:, None]
    pole = None
    if poles:
        pole = rig.root + rng.normal(size=(K, 3)) * 2.0
        pole[rng.random(K) < 0.3] = np.nan
    return rig.problem(
        targets,
        limits=limits,
        poles=pole,
        roll_mode=mode,
        tolerance=tolerance,
        max_iterations=30,
        exact_rotations=False,
    )


# --------------------------------------------------------------------------------------------------------
# Independent measures
# --------------------------------------------------------------------------------------------------------


def references(problem: ChainProblem, frames: F64) -> F64:
    """``(K, N, 3, 3)`` reference frames: each bone's parent's output frame (base for bone 0) @ ref_local."""
    parents = np.concatenate([problem.base[:, None], frames[:, :-1]], axis=1)
    return np.asarray(np.einsum("knij,knjl->knil", parents, problem.ref_local), dtype=np.float64)


def twist_angles(rel: F64) -> F64:
    """Twist about Y of rotations ``rel`` (``(..., 3, 3)``), from the matrix: ``atan2(R02 - R20, R00 + R22)``."""
    return np.asarray(np.arctan2(rel[..., 0, 2] - rel[..., 2, 0], rel[..., 0, 0] + rel[..., 2, 2]), dtype=np.float64)


def _arc_points(psi: F64, a: F64, b: F64, sx: F64, sz: F64) -> F64:
    """Boundary directions at parameters ``psi`` of quadrant arcs with semi-axes a (x), b (z), signs sx, sz
    (all broadcast together)."""
    tx = a * sx * np.abs(np.cos(psi))
    tz = b * sz * np.abs(np.sin(psi))
    th = np.hypot(tx, tz)
    sinc = np.sin(th) / np.maximum(th, 1e-300)
    return np.stack((sinc * tx, np.cos(th) * np.ones_like(tx), sinc * tz), axis=-1)


def _angle(u: F64, v: F64) -> F64:
    return np.asarray(np.arctan2(np.linalg.norm(np.cross(u, v), axis=-1), np.einsum("...i,...i", u, v)))


def cone_distance(d: F64, cone: F64) -> F64:
    """Geodesic distance from unit directions ``d`` (M, 3) to their cones (M, 4), by brute force.

    Inside (the ellipse test on the swing coordinates): 0. Outside: every quadrant arc is sampled densely,
    and the best sample's neighbourhood is refined by golden-section search on the arc parameter (the
    corners are the arcs' end points, kept as candidates). Shares no code with ``solvers.limits`` or
    ``solvers.cone_floats``.
    """
    th = np.arctan2(np.hypot(d[:, 0], d[:, 2]), d[:, 1])
    az = np.arctan2(d[:, 2], d[:, 0])
    tx, tz = th * np.cos(az), th * np.sin(az)
    a = np.where(tx >= 0, cone[:, RIGHT], cone[:, LEFT])
    b = np.where(tz >= 0, cone[:, UP], cone[:, DOWN])
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(tx == 0, 0.0, (tx / a) ** 2) + np.where(tz == 0, 0.0, (tz / b) ** 2)
    out = np.zeros(d.shape[0])
    outside = np.flatnonzero(~((q <= 1.0) & (th < math.pi)))
    if not outside.size:
        return out
    do = d[outside][:, None, None]  # (M, 1, 1, 3)
    # Quadrant arcs (right/up, left/up, left/down, right/down): semi-axes (M, 4, 1) and signs (4, 1).
    sa = cone[outside][:, [RIGHT, LEFT, LEFT, RIGHT], None]
    sb = cone[outside][:, [UP, UP, DOWN, DOWN], None]
    sx = np.array([1.0, -1.0, -1.0, 1.0])[:, None]
    sz = np.array([1.0, 1.0, -1.0, -1.0])[:, None]
    psi = np.linspace(0.0, math.pi / 2, 1025)
    dist = _angle(_arc_points(psi, sa, sb, sx, sz), do)  # (M, 4, S)
    j = np.argmin(dist, axis=2)
    h = psi[1] - psi[0]
    lo = np.maximum(psi[j] - h, 0.0)[..., None]
    hi = np.minimum(psi[j] + h, math.pi / 2)[..., None]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
        f1 = _angle(_arc_points(m1, sa, sb, sx, sz), do)
        f2 = _angle(_arc_points(m2, sa, sb, sx, sz), do)
        left = f1 < f2
        hi = np.where(left, m2, hi)
        lo = np.where(left, lo, m1)
    refined = _angle(_arc_points(0.5 * (lo + hi), sa, sb, sx, sz), do)
    out[outside] = np.minimum(dist.min(axis=(1, 2)), refined.min(axis=(1, 2)))
    return out


def limit_violations(problem: ChainProblem, frames: F64) -> tuple[F64, F64]:
    """Per bone: geodesic distance of the Y axis to its cone, and twist beyond its range (radians)."""
    lim = problem.limits
    assert lim is not None
    rel = np.einsum("knji,knjl->knil", references(problem, frames), frames).reshape(-1, 3, 3)
    y = rel[:, :, 1] / np.linalg.norm(rel[:, :, 1], axis=1, keepdims=True)
    use_cone = lim.use_cone.reshape(-1)
    cone_v = np.zeros(y.shape[0])
    cone_v[use_cone] = cone_distance(y[use_cone], lim.cone.reshape(-1, 4)[use_cone])
    tw = twist_angles(rel)
    lo, hi = lim.twist.reshape(-1, 2).T
    u = np.mod(tw - lo, 2 * np.pi)
    twist_v = np.where(lim.use_twist.reshape(-1), np.maximum(np.minimum(u - (hi - lo), 2 * np.pi - u), 0.0), 0.0)
    return cone_v, twist_v


def check_scalar_result(problem: ChainProblem, result: SolveResult) -> None:
    """The SolveResult contract, at float32 accuracy for the pose."""
    k, n = problem.n_chains, problem.n_bones
    assert result.positions.shape == (k, n + 1, 3) and result.frames.shape == (k, n, 3, 3)
    assert result.iterations.shape == result.residual.shape == result.reached.shape == result.status.shape == (k,)
    assert result.status.dtype == np.int8 and result.iterations.dtype == np.int64
    assert np.isfinite(result.positions).all() and np.isfinite(result.frames).all()
    gram = np.einsum("...ji,...jl->...il", result.frames, result.frames)
    assert np.abs(gram - np.eye(3)).max() < 1e-9, "frames are rotations (rebuilt in float64)"
    assert np.abs(np.linalg.det(result.frames) - 1).max() < 1e-9
    assert np.array_equal(result.positions[:, 0], problem.positions[:, 0]), "the root moved"
    lengths = np.linalg.norm(problem.offsets, axis=-1)
    seg = np.linalg.norm(np.diff(result.positions, axis=1), axis=-1)
    assert np.abs(seg / lengths - 1).max() <= 1e-5, "segment lengths preserved"
    fk = result.positions[:, :1] + np.cumsum(np.einsum("knij,knj->kni", result.frames, problem.offsets), axis=1)
    assert np.abs(fk - result.positions[:, 1:]).max() < 1e-9 * max(1.0, float(lengths.sum(axis=1).max()))
    assert np.allclose(np.linalg.norm(fk[:, -1] - problem.targets, axis=1), result.residual, rtol=1e-9, atol=1e-12)
    assert np.array_equal(result.reached, result.residual <= problem.tolerance)
    assert (result.status[result.reached] == CONVERGED).all()


def half_turn_condition(problem: ChainProblem, batch: SolveResult) -> F64:
    """``(K, N)`` how close each bone's roll rotation is to a half turn: ``|a + b|`` for the start
    direction ``a`` (the problem's frame for 'KEEP', the reference for the others) and the solved one ``b``.

    A minimal rotation between nearly opposite directions is ill-conditioned: its twist moves by about
    ``eps / |a + b|`` for an error ``eps`` in the directions, and float32 positions carry ~1e-7.
    """
    local = problem.offsets / np.linalg.norm(problem.offsets, axis=-1, keepdims=True)
    start = problem.frames if problem.roll_mode == "KEEP" else references(problem, batch.frames)
    a = np.einsum("knij,knj->kni", start, local)
    b = np.einsum("knij,knj->kni", batch.frames, local)
    return np.asarray(np.linalg.norm(a + b, axis=-1), dtype=np.float64)


# --------------------------------------------------------------------------------------------------------
# Agreement with the batched solvers
# --------------------------------------------------------------------------------------------------------

TOTALS: dict[str, list[int]] = {}


@pytest.mark.parametrize("name", sorted(PAIRS))
@settings(derandomize=True, max_examples=45, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 12),
    connected=st.booleans(),
    mode=st.sampled_from(MODES),
    poles=st.booleans(),
    limited=st.booleans(),
    tolerance=st.sampled_from([1e-3, 1e-4]),
)
def test_scalar_agrees_with_batch(
    name: str, seed: int, n: int, connected: bool, mode: str, poles: bool, limited: bool, tolerance: float
) -> None:
    batch_solver, scalar_solver = PAIRS[name]
    if name == "two_bone":
        n = 2
    problem = make_problem(seed, n, connected, mode, poles, limited, tolerance)
    batch, scalar = batch_solver(problem), scalar_solver(problem)
    check_scalar_result(problem, scalar)
    scale = np.linalg.norm(problem.offsets, axis=-1).sum(axis=1)
    counts = TOTALS.setdefault(name, [0, 0, 0, 0])
    counts[0] += problem.n_chains
    counts[1] += int(batch.reached.sum())
    counts[2] += int(scalar.reached.sum())

    # End effectors: together when both reach the target; equally far when both say it is out of reach.
    both = batch.reached & scalar.reached
    tip = np.linalg.norm(batch.positions[:, -1] - scalar.positions[:, -1], axis=1)
    bound = np.maximum(problem.tolerance, FLOAT32 * scale)
    # Two tips within the tolerance of one target can be up to twice it apart: a chain the batched loop
    # stopped at 0.9 tol on one side may find the scalar one, an iteration later, on the other. So at
    # most one chain per example lies between the bound and twice it.
    apart = both & (tip > bound)
    assert (tip[both] <= 2.0 * bound[both]).all(), f"{name}: reached tips {tip[both].max():.3g} apart"
    assert apart.sum() <= 1, f"{name}: {apart.sum()} reached tips more than max(tol, 1e-5 scale) apart"
    counts[3] += int(apart.sum())
    gone = (batch.status == UNREACHABLE) & (scalar.status == UNREACHABLE)
    off = np.abs(batch.residual - scalar.residual) / np.maximum(batch.residual, FLOAT32 * scale)
    assert (off[gone] <= 1e-4).all(), f"{name}: unreachable residuals differ by {off[gone].max():.3g} (relative)"
    # Out of reach (too far) is decided the same way: the chain lies straight toward the target.
    far = np.linalg.norm(problem.targets - problem.positions[:, 0], axis=1) >= 1.01 * scale
    assert (scalar.status[far] == UNREACHABLE).all() and (batch.status[far] == UNREACHABLE).all()
    if name == "two_bone":
        # Analytic: the same pose and the same answer, to float32 (and to the conditioning of a roll
        # rotation next to a half turn, see half_turn_condition).
        assert np.array_equal(batch.reached, scalar.reached), "two-bone: reached differs"
        assert np.array_equal(batch.status, scalar.status), "two-bone: status differs"
        frames = np.abs(batch.frames - scalar.frames).max(axis=(2, 3))
        allowed = 1e-5 + 2e-7 / np.maximum(half_turn_condition(problem, batch), 1e-12)
        assert (frames <= allowed).all(), f"two-bone: frames differ by {frames.max():.3g}"

    # Roll: twist of each output frame relative to its roll reference.
    local = problem.offsets / np.linalg.norm(problem.offsets, axis=-1, keepdims=True)
    along_y = np.abs(local[..., 1]) > 1.0 - 1e-15
    if mode in ("KEEP", "REST"):
        start = problem.frames if mode == "KEEP" else None
        tw_scalar = twist_angles(
            np.einsum("knji,knjl->knil", references(problem, scalar.frames) if start is None else start, scalar.frames)
        )
        tw_batch = twist_angles(
            np.einsum("knji,knjl->knil", references(problem, batch.frames) if start is None else start, batch.frames)
        )
        if name == "two_bone":
            diff = np.abs(np.angle(np.exp(1j * (tw_scalar - tw_batch))))
            allowed = 1e-4 + 2e-7 / np.maximum(half_turn_condition(problem, batch), 1e-12)
            assert (diff <= allowed).all(), f"two-bone: twist differs by {diff.max():.3g} rad"
        elif not limited:
            # The roll modes never twist a connected bone relative to their reference.
            assert np.abs(tw_scalar[along_y]).max(initial=0.0) <= 1e-5, "a roll mode twisted a connected bone"
    if limited:
        cone_v, twist_v = limit_violations(problem, scalar.frames)
        assert cone_v.max() <= LIMIT_VIOLATION, f"{name}: cone limit violated by {cone_v.max():.3g} rad"
        assert twist_v.max() <= LIMIT_VIOLATION, f"{name}: twist limit violated by {twist_v.max():.3g} rad"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_scalar_reaches_as_often_as_batch(name: str) -> None:
    # Over fixed random suites (limited and not, every roll mode): the scalar path reaches reachable
    # targets as reliably as the batched one (within a few chains: float32 can tip a chain into another
    # local minimum under limits, either way).
    batch_solver, scalar_solver = PAIRS[name]
    chains = batch_hits = scalar_hits = 0
    for seed in range(12):
        n = 2 if name == "two_bone" else 1 + seed % 10
        problem = make_problem(500 + seed, n, seed % 3 != 0, MODES[seed % 3], seed % 2 == 0, seed % 4 < 2, 1e-4)
        batch, scalar = batch_solver(problem), scalar_solver(problem)
        chains += problem.n_chains
        batch_hits += int(batch.reached.sum())
        scalar_hits += int(scalar.reached.sum())
    assert scalar_hits >= batch_hits - max(1, chains // 100), f"{name}: scalar {scalar_hits}, batch {batch_hits}"


@pytest.mark.parametrize("start", HARSH_STARTS)
@pytest.mark.parametrize("name", sorted(PAIRS))
def test_scalar_reaches_under_harsh_limits(name: str, start: str) -> None:
    """Hinges, half-cones and narrow cones after a ball-like first joint (issue 28): the live kernels reach
    at least 99 % of the limit-reachable targets, as the batched solvers do (both hand their results to
    the same global stage, solvers/search.py), and every bone stays inside its limits."""
    batch_solver, scalar_solver = PAIRS[name]
    chains = batch_hits = scalar_hits = 0
    for j, n in enumerate((2, 2) if name == "two_bone" else (3, 4, 5, 6)):
        problem = harsh_problem(3300 + 10 * j + n, 40, n, start, tolerance=1e-3)
        batch, scalar = batch_solver(problem), scalar_solver(problem)
        cone_v, twist_v = limit_violations(problem, scalar.frames)
        assert cone_v.max() <= LIMIT_VIOLATION and twist_v.max() <= LIMIT_VIOLATION
        fk = problem.positions[:, 0] + np.einsum("knij,knj->ki", scalar.frames, problem.offsets)
        scalar_hits += int(np.count_nonzero(np.linalg.norm(fk - problem.targets, axis=-1) <= problem.tolerance))
        batch_hits += int(batch.reached.sum())
        chains += problem.n_chains
    assert scalar_hits >= 0.99 * chains, f"{name} from {start}: scalar reached {scalar_hits} of {chains}"
    assert batch_hits >= 0.99 * chains, f"{name} from {start}: batch reached {batch_hits} of {chains}"


# --------------------------------------------------------------------------------------------------------
# The contract's edges
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_edges(name: str) -> None:
    _, scalar_solver = PAIRS[name]
    rng = np.random.default_rng(3)
    rig = make_rig(rng, 4, 2)
    # A target on the root: the current pose, not reached, UNREACHABLE.
    problem = rig.problem(rig.root.copy())
    result = scalar_solver(problem)
    assert np.array_equal(result.positions, problem.positions) and np.array_equal(result.frames, problem.frames)
    assert not result.reached.any() and (result.status == UNREACHABLE).all()
    # No chains.
    empty = ChainProblem(
        rig.positions[:0], rig.frames[:0], rig.offsets[:0], rig.ref_local[:0], rig.base[:0], np.zeros((0, 3))
    )
    assert scalar_solver(empty).positions.shape == (0, 3, 3)
    # Same input, bit-identical output.
    targets = rig.positions[:, -1] + 0.1
    first, second = scalar_solver(rig.problem(targets)), scalar_solver(rig.problem(targets))
    assert all(np.array_equal(getattr(first, f), getattr(second, f)) for f in ("positions", "frames", "status"))
    if name == "two_bone":
        with pytest.raises(ValueError, match="2 bones"):
            solve_two_bone_scalar(make_rig(rng, 1, 3).problem(np.zeros((1, 3))))
    if name == "ccd":
        with pytest.raises(ValueError, match="max_angle"):
            solve_ccd_scalar(problem, max_angle=-1.0)


@pytest.mark.parametrize("name", ["fabrik", "ccd"])
def test_uniform_iterations(name: str) -> None:
    # Every chain runs as many iterations as the slowest (the batched meaning), for bakes.
    rig = zigzag_rig(6, 0.2, 0.15)
    goals = np.concatenate([rig.pose(wave_pose(6, 0.3 * f, 0.25))[0][:, -1] for f in range(8)])

    def tile(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, 8, axis=0)

    problem = ChainProblem(
        tile(rig.positions), tile(rig.frames), tile(rig.offsets), tile(rig.ref_local), tile(rig.base), goals
    )
    _, scalar_solver = PAIRS[name]
    early = scalar_solver(replace(problem, tolerance=1e-5))
    uniform = scalar_solver(replace(problem, tolerance=1e-5, uniform_iterations=True))
    assert len(set(early.iterations.tolist())) > 1
    assert (uniform.iterations == early.iterations.max()).all()
    assert uniform.reached.all()


def test_ccd_max_angle_caps_each_step() -> None:
    rng = np.random.default_rng(1)
    rig = make_rig(rng, 10, 5)
    problem = rig.problem(reachable_targets(rng, rig), max_iterations=1)
    damped = solve_ccd_scalar(problem, max_angle=0.05)
    batch = solve_ccd(problem, max_angle=0.05)
    rel = np.einsum("knji,knjl->knil", rig.frames, damped.frames)
    angle = np.arccos(np.clip((np.trace(rel, axis1=2, axis2=3) - 1) / 2, -1, 1))
    assert (angle <= 0.05 * np.arange(1, 6) + 1e-5).all(), "max_angle caps each joint's step"
    assert np.abs(damped.positions - batch.positions).max() < 1e-5 * rig.lengths.sum(axis=1).max()


def test_long_chain_tracks_a_moving_target() -> None:
    # bench/live.py's 50-bone chain: every warm-started call reaches 1e-4 within the default cap.
    n = 50
    rig = zigzag_rig(n, 0.1, 0.08)
    positions, frames = rig.positions, rig.frames
    for r in range(8):
        goal, _ = rig.pose(wave_pose(n, 0.35 * r, 0.06))
        problem = ChainProblem(
            positions, frames, rig.offsets, rig.ref_local, rig.base, goal[:, -1].copy(), tolerance=1e-4
        )
        result = solve_fabrik_scalar(problem)
        check_scalar_result(problem, result)
        assert result.reached[0] and result.iterations[0] <= 10, (result.residual, result.iterations)
        positions, frames = result.positions, result.frames


def test_cone_clamp_matches_limits() -> None:
    # The scalar cone search is the batched one, row by row: same nearest directions to rounding.
    rng = np.random.default_rng(0)
    m = 3000
    cone = rng.uniform(0.0, 2.6, (m, 4))
    cone[rng.random((m, 4)) < 0.12] = 0.0
    cone[: m // 10] = cone[: m // 10, :1]  # circular cones (the closed-form path)
    d = rng.normal(size=(m, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    expected = clamp_cone(d, cone)
    got = np.array([_cone.clamp_cone(*d[i].tolist(), tuple(cone[i].tolist())) or d[i] for i in range(m)])
    assert np.abs(got - expected).max() < 1e-12


def test_solvers_package_does_not_import_scalar() -> None:
    # The unit tier imports solvers without bpy: nothing there may pull in mathutils.
    code = "import sys, solvers; assert 'mathutils' not in sys.modules and 'solvers.scalar' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    assert SCALAR_MAX_CHAINS >= 1


def test_reach_totals_printed() -> None:
    # A record of how often each path reached its targets over the agreement examples (printed with -s).
    for name, (chains, batch_hits, scalar_hits, apart) in sorted(TOTALS.items()):
        print(f"{name}: {chains} chains, batch reached {batch_hits}, scalar {scalar_hits}; tips apart > bound: {apart}")


def test_independent_cone_distance_is_the_geodesic_distance() -> None:
    # The brute-force measure of the limit checks, against solvers.limits' own (a check of the check).
    from solvers.limits import cone_violation

    rng = np.random.default_rng(5)
    cone = rng.uniform(0.0, 2.6, (400, 4))
    cone[rng.random((400, 4)) < 0.12] = 0.0
    d = rng.normal(size=(400, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    assert np.abs(cone_distance(d, cone) - cone_violation(d, cone)).max() < 1e-9
    # A direction just outside a clamped one measures as just outside.
    on = clamp_cone(d, cone)
    assert cone_distance(on, cone).max() < 1e-9


@pytest.mark.parametrize("name", sorted(PAIRS))
@pytest.mark.parametrize("mode", MODES)
def test_straight_chain_toward_a_nearer_target_bends(name: str, mode: str) -> None:
    # A straight chain on the line to a nearer target (the pre-bend and the fallback bends), as in
    # tests/unit/test_chain_solvers.py.
    k, n = 3, 2 if name == "two_bone" else 4
    offsets = np.zeros((k, n, 3))
    offsets[..., 1] = 1.0
    eye = np.broadcast_to(np.eye(3), (k, n, 3, 3)).copy()
    positions = np.zeros((k, n + 1, 3))
    positions[..., 1] = np.arange(n + 1)
    targets = np.array([[0.0, n * 0.5, 0.0], [0.0, n * 0.99, 0.0], [0.0, -n * 0.5, 0.0]])
    base = np.broadcast_to(np.eye(3), (k, 3, 3)).copy()
    problem = ChainProblem(
        positions, eye, offsets, eye, base, targets, tolerance=1e-5, max_iterations=500, roll_mode=mode
    )
    result = PAIRS[name][1](problem)
    check_scalar_result(problem, result)
    assert result.reached.all(), f"straight chains must reach nearer targets; residual {result.residual}"
    batch = PAIRS[name][0](problem)
    assert np.abs(result.positions - batch.positions).max() < 1e-3, "the same bend as the batched solver"


@pytest.mark.parametrize("name", ["fabrik", "ccd"])
def test_target_on_a_joint(name: str) -> None:
    # The target on the last bone's head: FABRIK's backward pass lands that joint on its successor (the
    # careful fallback); CCD's lever of that joint is zero.
    heads = np.array([[[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [2, 1, 0]]])
    frames = np.zeros((1, 3, 3, 3))
    z = np.array([0.0, 0.0, 1.0])
    for i in range(3):
        y = heads[0, i + 1] - heads[0, i]
        frames[0, i] = np.stack([np.cross(y, z), y, z], axis=1)
    parents = np.concatenate([np.eye(3)[None, None], frames[:, :-1]], axis=1)
    ref_local = np.einsum("knji,knjl->knil", parents, frames)
    problem = ChainProblem(
        heads, frames, np.array([[[0.0, 1, 0]] * 3]), ref_local, np.eye(3)[None], heads[:, 2].copy(), tolerance=1e-5
    )
    result = PAIRS[name][1](problem)
    check_scalar_result(problem, result)
    assert result.reached.all(), f"{name}: residual {result.residual}"


def test_an_analytic_pose_whose_limits_moved_its_elbow_does_not_count_in_the_scalar_solver() -> None:
    """The scalar side of tests/unit/test_two_bone_limits.py's test of `two_bone.elbow_moved`: the coincidence
    limb's analytic pose does not count as reaching in `solvers.scalar` either, and both solvers give the
    closed form's pose."""
    from solver_fixtures import coincidence_limb

    from solvers import scalar as scalar_module

    problem, axis, moved, half = coincidence_limb()
    analytic = scalar_module._solve_two_bone(problem)
    assert analytic.residual[0] <= problem.tolerance, "the analytic pose should land on the target"
    assert np.linalg.norm(analytic.positions[0, 1] - moved) < 1e-5, "the clamp should move the elbow there"
    assert not analytic.reached[0], "an analytic pose whose limits moved its elbow counted as reaching"
    batched, scalar = solve_two_bone(problem), solve_two_bone_scalar(problem)
    assert scalar.reached[0]
    assert np.arccos(min(1.0, scalar.positions[0, 1] @ axis)) <= half + 1e-5, "the elbow left the upper cone"
    assert np.abs(batched.frames - scalar.frames).max() < 1e-5


@pytest.mark.parametrize("seed", [5, 6])
def test_the_live_sweep_stops_only_where_the_full_sweep_misses(seed: int) -> None:
    """`solvers.scalar._chain.sweep` with ``miss`` and ``slack`` (the live program's analytic pose) stops
    before a clamp only where the full sweep then moves the elbow more than ``slack`` or leaves the tip more
    than ``miss`` from the target; elsewhere it gives the full sweep's frames. Limbs with both bones under
    cones (the lower a hinge), targets from poses inside the limits and all around."""
    from test_two_bone_limits import limb_problems

    from solvers import scalar as scalar_module
    from solvers.scalar._chain import aimed_elbow, sweep

    problem, _ = limb_problems(seed, 300, True, upper_twist=True)
    # Each limb starts from the pose the solver finds for its target (a pose inside the limits): the first
    # half keep about those targets (the analytic pose then reaches, or clamps a little) under a wide upper
    # cone; the second half reach all around under a tight one.
    solved = solve_two_bone(problem)
    problem = replace(problem, positions=solved.positions, frames=solved.frames)
    lim = problem.limits
    assert lim is not None
    cone = lim.cone.copy()
    cone[:150, 0] = 179.0 * _DEG
    cone[150:, 0] = (40.0 * _DEG, 60.0 * _DEG, 30.0 * _DEG, 50.0 * _DEG)
    use_cone = lim.use_cone.copy()
    use_cone[:, 0] = True
    rng = np.random.default_rng(seed)
    root = problem.positions[:, 0]
    reach = np.linalg.norm(problem.offsets, axis=2).sum(axis=1)
    targets = problem.targets.copy()
    targets[:150] += rng.normal(size=(150, 3)) * (0.03 * reach[:150])[:, None]  # a little off the poses
    targets[150:] = root[150:] + rng.normal(size=(150, 3)) * (0.6 * reach[150:])[:, None]
    problem = replace(problem, limits=JointLimits(cone, use_cone, lim.twist, lim.use_twist), targets=targets)
    chains = scalar_module._chains(problem, True)
    elbows = (problem.positions[:, 1] - problem.positions[:, 0]).tolist()
    stopped = reached = clamped = 0
    for c, now in zip(chains, elbows, strict=True):
        # Wide enough that a bone a little outside its cone still counts (so a shortcut that stopped at every
        # clamp would fail here).
        miss = slack = 0.02 * c.total
        aims = [c.root, aimed_elbow(c, now), c.target]
        full_positions, full_frames = sweep(c, aims)
        _, frames = sweep(c, aims, miss, slack)
        if frames:
            assert all(
                abs(a - b) < 1e-7 for f, g in zip(frames, full_frames, strict=True) for a, b in zip(f, g, strict=True)
            )
            reached += (full_positions[2] - c.target).length <= miss
            # A clamp moved the elbow or the tip, by less than the thresholds: the shortcut had to go on.
            clamped += max((full_positions[1] - aims[1]).length, (full_positions[2] - c.target).length) > 1e-6
        else:
            stopped += 1
            elbow_off = (full_positions[1] - aims[1]).length
            tip_off = (full_positions[2] - c.target).length
            assert elbow_off > slack or tip_off > miss, f"stopped, but the full sweep moves the elbow {elbow_off}"
    assert stopped > 50, f"the shortcut stopped only {stopped} of 300 sweeps"
    assert reached > 50, f"only {reached} of 300 sweeps reached their targets: the test needs both kinds"
    assert clamped > 10, f"only {clamped} sweeps went on past a clamp that moved the elbow or the tip"
