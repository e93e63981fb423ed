"""Scalar (mathutils) vs batched (numpy) chain solvers: us per chain by batch size, and the crossover.

Run ``.venv/bin/python bench/scalar.py`` (about a minute; ``--quick`` for fewer repeats). It imports bpy
first, which makes ``mathutils`` importable in the bpy wheel. Prints; asserts nothing.

For two-bone (2 bones), FABRIK (4 and 10 bones) and CCD (8 bones), without and with joint limits: the
time of one solve call divided by the number of chains K, for K = 1, 3, 10, 30, 100, scalar and batched
on the same problems (random rigs, reachable targets, the default tolerance 1e-3 and cap 30; with limits,
moderate random cones and twist ranges, targets and warm starts inside them). Problems are built before
timing; each time is the best of a few calls. The crossover is the K from which the batched solver is
faster per chain (interpolated in log K between the measured sizes). Then a 50-bone chain (bones 0.1
long) tracking a moving target, warm-started from the previous result, to 1e-4: ms per call.

``--harsh [REV]``: the scalar solvers on harsh limits (``solver_fixtures.harsh_problem``: 3-6 bones, a
ball-like first joint then hinges, half-cones and narrow cones), one chain per call as live posing calls
them, before (git revision REV, default the commit before the global stage) vs after in one run: reach,
and ms per call (median, mean, 95th percentile).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import bpy  # noqa: F401  (mathutils is importable once bpy is)
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from solver_fixtures import forward_kinematics, make_rig, random_rotations, wave_pose, zigzag_rig  # noqa: E402

from solvers import ChainProblem, JointLimits, SolveResult, solve_ccd, solve_fabrik, solve_two_bone  # noqa: E402
from solvers.scalar import (  # noqa: E402
    SCALAR_MAX_CHAINS,
    SCALAR_MAX_TWO_BONE_CHAINS,
    solve_ccd_scalar,
    solve_fabrik_scalar,
    solve_two_bone_scalar,
)

Solver = Callable[[ChainProblem], SolveResult]
KS = (1, 3, 10, 30, 100)
CASES: list[tuple[str, int, Solver, Solver]] = [
    ("two-bone", 2, solve_two_bone, solve_two_bone_scalar),
    ("FABRIK", 4, solve_fabrik, solve_fabrik_scalar),
    ("CCD", 8, solve_ccd, solve_ccd_scalar),
    ("FABRIK", 10, solve_fabrik, solve_fabrik_scalar),
]


def best_time(fn: Callable[[], object], repeats: int, budget: float = 0.5) -> float:
    """Best wall time of up to ``repeats`` calls (fewer when they exceed ``budget`` seconds in all)."""
    best = math.inf
    spent = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best = min(best, elapsed)
        spent += elapsed
        if spent > budget:
            break
    return best


def moderate_limits(rng: np.random.Generator, k: int, n: int) -> JointLimits:
    """Cones with sides of 0.3-1.2 rad and twist ranges of +-0.2-0.6 rad on every bone."""
    cone = rng.uniform(0.3, 1.2, size=(k, n, 4))
    twist = np.stack((-rng.uniform(0.2, 0.6, (k, n)), rng.uniform(0.2, 0.6, (k, n))), axis=-1)
    return JointLimits(cone, np.ones((k, n), dtype=bool), twist, np.ones((k, n), dtype=bool))


def inside_pose(rng: np.random.Generator, limits: JointLimits, twist: bool) -> np.ndarray:
    """Local rotations inside the limits: swing at most 0.8 of the cone's half-angle toward a random side,
    twist within the range (or none)."""
    shape = limits.use_cone.shape
    phi = rng.uniform(0.0, 2.0 * np.pi, shape)
    r = 0.8 * np.sqrt(rng.random(shape))
    c, s = np.cos(phi), np.sin(phi)
    a = np.where(c >= 0, limits.cone[..., 3], limits.cone[..., 2])
    b = np.where(s >= 0, limits.cone[..., 0], limits.cone[..., 1])
    angle = r * np.hypot(a * c, b * s)
    axis = np.stack((b * s, np.zeros(shape), -a * c), axis=-1)  # +Y tilted toward (a c, 0, b s)
    axis /= np.maximum(np.linalg.norm(axis, axis=-1, keepdims=True), 1e-300)
    from solvers.rotations import axis_angle_matrix

    swing = axis_angle_matrix(axis, angle)
    if not twist:
        return np.asarray(swing)
    tau = limits.twist[..., 0] + (limits.twist[..., 1] - limits.twist[..., 0]) * rng.random(shape)
    y = np.broadcast_to(np.array([0.0, 1.0, 0.0]), (*shape, 3))
    return np.asarray(swing @ axis_angle_matrix(y, tau))


def problem_for(seed: int, k: int, n: int, limited: bool) -> ChainProblem:
    """K random chains of N bones with reachable targets (within the limits when limited)."""
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, k, n)
    if not limited:
        goal, _ = rig.pose(random_rotations(rng, (k, n), 1.2))
        return rig.problem(goal[:, -1].copy())
    limits = moderate_limits(rng, k, n)
    goal, _ = forward_kinematics(rig.root, rig.base, rig.ref_local, inside_pose(rng, limits, False), rig.offsets)
    positions, frames = forward_kinematics(
        rig.root, rig.base, rig.ref_local, inside_pose(rng, limits, True), rig.offsets
    )
    return ChainProblem(positions, frames, rig.offsets, rig.ref_local, rig.base, goal[:, -1].copy(), limits=limits)


def crossover(scalar: list[float], batch: list[float]) -> str:
    """The K (interpolated in log K) from which the batched solver is faster per chain."""
    for i, k in enumerate(KS):
        if batch[i] <= scalar[i]:
            if i == 0:
                return f"<= {k}"
            # log-linear interpolation of the ratio scalar/batch between KS[i-1] and KS[i]
            r0 = math.log(scalar[i - 1] / batch[i - 1])
            r1 = math.log(scalar[i] / batch[i])
            t = r0 / (r0 - r1) if r0 != r1 else 1.0
            return f"~{math.exp(math.log(KS[i - 1]) + t * (math.log(k) - math.log(KS[i - 1]))):.0f}"
    return f"> {KS[-1]}"


def chain_table(repeats: int) -> None:
    print(
        f"us per chain (one solve call / K); default tolerance 1e-3, cap 30; SCALAR_MAX_CHAINS = {SCALAR_MAX_CHAINS}, "
        f"SCALAR_MAX_TWO_BONE_CHAINS = {SCALAR_MAX_TWO_BONE_CHAINS}"
    )
    header = "  ".join(f"K={k:<4d}" for k in KS)
    print(f"{'case':24s} {'path':7s} {header}  crossover  reached s/b")
    for label, n, batch_solver, scalar_solver in CASES:
        for limited in (False, True):
            times = {"scalar": [], "batch": []}
            reached = [0, 0, 0]
            for k in KS:
                problem = problem_for(1000 * n + k + (7 if limited else 0), k, n, limited)
                for path, solver in (("scalar", scalar_solver), ("batch", batch_solver)):
                    times[path].append(best_time(lambda s=solver, p=problem: s(p), repeats) / k * 1e6)
                rs, rb = scalar_solver(problem), batch_solver(problem)
                reached[0] += k
                reached[1] += int(rs.reached.sum())
                reached[2] += int(rb.reached.sum())
            name = f"{label} {n} bones" + (" limits" if limited else "")
            cross = crossover(times["scalar"], times["batch"])
            for path in ("scalar", "batch"):
                cells = "  ".join(f"{t:6.1f}" for t in times[path])
                tail = f"  {cross:9s}  {reached[1]}/{reached[2]} of {reached[0]}" if path == "scalar" else ""
                print(f"{name if path == 'scalar' else '':24s} {path:7s} {cells}{tail}")


def long_chain(rounds: int) -> None:
    """bench/live.py's 50-bone chain tracking a moving target to 1e-4, warm-started from the last result."""
    n = 50
    rig = zigzag_rig(n, 0.1, 0.08)
    print(f"\n50-bone chain (bones 0.1 long) tracking a moving target to 1e-4, warm-started ({rounds} calls)")
    for name, solver in (
        ("FABRIK scalar", solve_fabrik_scalar),
        ("FABRIK batch", solve_fabrik),
        ("CCD scalar", solve_ccd_scalar),
        ("CCD batch", solve_ccd),
    ):
        positions, frames = rig.positions, rig.frames
        times, iterations, reached = [], [], 0
        for r in range(rounds):
            goal, _ = rig.pose(wave_pose(n, 0.35 * r, 0.06))
            problem = ChainProblem(
                positions, frames, rig.offsets, rig.ref_local, rig.base, goal[:, -1].copy(), tolerance=1e-4
            )
            start = time.perf_counter()
            result = solver(problem)
            times.append(time.perf_counter() - start)
            iterations.append(int(result.iterations[0]))
            reached += int(result.reached[0])
            positions, frames = result.positions, result.frames
        warm = np.array(times[1:]) * 1e3
        print(
            f"  {name:14s} ms per call: median {np.median(warm):6.2f}  max {warm.max():6.2f}   "
            f"iterations mean {np.mean(iterations):4.1f} max {max(iterations):3d}   reached {reached}/{rounds}"
        )


HARSH_BEFORE = "19a84e9"  # the last commit before the global stage under limits (solvers/search.py)


def harsh(rev: str, per_size: int) -> None:
    """Reach and ms per call of the scalar solvers on harsh limits, one chain per call, before vs after."""
    import importlib
    import importlib.util

    from solver_fixtures import harsh_problem

    import solvers

    # bench/solvers.py's helpers (its file name is the package's, so it is loaded by path).
    spec = importlib.util.spec_from_file_location("bench_solvers", ROOT / "bench" / "solvers.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = bench.load_solvers(rev)
    packages = [
        (before, importlib.import_module(f"{before.__name__}.scalar")),
        (solvers, importlib.import_module("solvers.scalar")),
    ]
    print(f"HARSH LIMITS, scalar solvers, one chain per call: before ({rev}) vs after, same run (under load)")
    for label, name, sizes in (
        ("FABRIK", "solve_fabrik_scalar", (3, 4, 5, 6)),
        ("CCD", "solve_ccd_scalar", (3, 4, 5, 6)),
        ("two-bone", "solve_two_bone_scalar", (2, 2, 2, 2)),
    ):
        for start in ("rest", "pose"):
            out = []
            for pkg, scalar in packages:
                calls, hits = [], 0
                for j, n in enumerate(sizes):
                    for row in range(per_size):
                        problem = bench.in_package(pkg, harsh_problem(7000 + 1000 * j + 10 * n + row, 1, n, start))
                        t0 = time.perf_counter()
                        result = getattr(scalar, name)(problem)
                        calls.append(time.perf_counter() - t0)
                        hits += int(result.reached[0])
                ms = 1e3 * np.array(calls)
                out.append((100.0 * hits / len(calls), np.median(ms), ms.mean(), np.percentile(ms, 95)))
            (b, a) = out
            print(
                f"  {label} from {start}: reached {b[0]:.1f} -> {a[0]:.1f} %; ms per call median {b[1]:.2f} -> "
                f"{a[1]:.2f}, mean {b[2]:.2f} -> {a[2]:.2f}, p95 {b[3]:.2f} -> {a[3]:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--harsh", nargs="?", const=HARSH_BEFORE, help="only harsh limits, before REV vs after")
    args = parser.parse_args()
    if args.harsh:
        harsh(args.harsh, 10 if args.quick else 40)
        return
    chain_table(3 if args.quick else 7)
    long_chain(10 if args.quick else 30)


if __name__ == "__main__":
    main()
