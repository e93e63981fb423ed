"""Solver benchmarks: timings and ratios measured in one run. Prints; asserts nothing.

Run ``.venv/bin/python bench/solvers.py`` (a few minutes) or with ``--quick`` (well under a minute).

First, **before vs after** (:func:`compare`): the solvers of a git revision (``--before REV``, default the
commit before the performance and convergence pass; ``--before none`` skips it) are extracted into a
temporary package and run in the same process, interleaved with the working tree's, on the same inputs:

(i) small live calls, per call in us *including problem construction*, warm-started from the previous
    result while the target follows a smoothly moving pose (``bench/live.py``'s wave): a FABRIK spine
    (K=1, N=3), a CCD tail (K=1, N=6), two-bone arms (K=2, N=2, with poles); tolerance 1e-3, cap 30;
(ii) a 50-bone chain (bones 0.1 long) tracking the same kind of targets: ms and iterations to 1e-4
    (cap 200), and the 3-bone repro of the Blender tier (``chain_rig``, random poses of 0.6 rad, 4e-4
    within 30 iterations);
(iii) FABRIK 1000 chains x 10 bones, batched vs a per-chain loop (goal >= 30x);
(iv) FABRIK vs CCD iterations to 1e-4;
(v) a 17-bone hand tree: iterations and ms to 1e-3.

Then, for the working tree only, all on random rigs built in code with reachable targets (tips of random
poses):

* batched vs a per-chain Python loop of the same solver code, for K = 1, 10, 100, 1000 chains of
  N = 2, 10, 50 bones (the loop is timed on a sample of chains and scaled to K when it would be slow;
  the line says so). The headline ratio is FABRIK, K=1000, N=10, tolerance 1e-4 (goal >= 30x).
* FABRIK vs CCD iterations to 1e-4 on the same targets (the FABRIK paper reports ~15 vs ~26 for 10
  joints);
* random vs uniform targets (per-chain early exit: a batch of random targets should cost about the
  sum of what each chain needs, not K times the slowest);
* two-bone and tree timings;
* the cost of joint limits vs none (:func:`bench_limits_cost`);
* the knee pop (:func:`knee_pop`): the target moving from 0.9 L to 1.1 L in 200 equal steps along a fixed
  line, the largest per-step change of the knee angle over the median one, for Soft 0, 0.05 and 0.1 and for
  Blender's own IK constraint (``bench/knee_pop_blender.py``, run in its own process on the bpy wheel).
  ``--knee-pop`` runs this section alone.

Problems are built before timing; only the solve calls are timed (best of a few repeats).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from solver_fixtures import (  # noqa: E402
    HARSH_STARTS,
    Rig,
    TreeRig,
    comfortable,
    harsh_problem,
    make_rig,
    make_tree,
    quaternion_pose,
    random_rotations,
    reachable_targets,
    wave_pose,
    zigzag_rig,
)

from solvers import (  # noqa: E402
    ChainProblem,
    JointLimits,
    SolveResult,
    solve_ccd,
    solve_fabrik,
    solve_tree,
    solve_two_bone,
)

Solver = Callable[[ChainProblem], SolveResult]

# The last commit before the performance and convergence pass (the "before" of compare()).
BEFORE_REV = "d8604f2"


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls (the least disturbed by other work on the machine)."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return float(best)


def subset(rig: Rig, rows: slice) -> Rig:
    return Rig(
        rig.root[rows], rig.base[rows], rig.ref_local[rows], rig.offsets[rows], rig.positions[rows], rig.frames[rows]
    )


def comfortable_rig(seed: int, k: int, n: int) -> tuple[Rig, np.ndarray]:
    """K chains with reachable targets away from full extension/fold (where every solver crawls)."""
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, k, n)
    targets = reachable_targets(rng, rig)
    for _ in range(50):
        bad = ~comfortable(rig, targets)
        if not bad.any():
            break
        targets[bad] = reachable_targets(rng, rig)[bad]
    return rig, targets


def batched_vs_loop(
    solver: Solver, label: str, ks: list[int], ns: list[int], tol: float, repeats: int, loop_budget: float
) -> dict[tuple[int, int], float]:
    """Print batched vs per-chain-loop times; return the ratios."""
    ratios: dict[tuple[int, int], float] = {}
    print(f"\n{label}: batched vs per-chain Python loop of the same code (tol {tol:g})")
    print(f"{'N':>4} {'K':>6} {'batched ms':>11} {'loop ms':>10} {'ratio':>8}  iters mean/max  note")
    for n in ns:
        for k in ks:
            rig, targets = comfortable_rig(1000 * n + k, k, n)
            problem = rig.problem(targets, tolerance=tol, max_iterations=200)
            result = solver(problem)
            t_batch = best_time(lambda p=problem: solver(p), repeats)
            # The loop runs chain after chain until the time budget is spent, then scales to K: chains are
            # in random order, so the sample is representative.
            singles = [
                subset(rig, slice(i, i + 1)).problem(targets[i : i + 1], tolerance=tol, max_iterations=200)
                for i in range(k)
            ]
            start = time.perf_counter()
            sample = 0
            while sample < k and (sample < 3 or time.perf_counter() - start < loop_budget):
                solver(singles[sample])
                sample += 1
            t_loop = (time.perf_counter() - start) * k / sample
            ratio = t_loop / t_batch
            ratios[(n, k)] = ratio
            note = "" if sample == k else f"loop timed on {sample} chains, scaled to {k}"
            print(
                f"{n:>4} {k:>6} {t_batch * 1e3:>11.2f} {t_loop * 1e3:>10.1f} {ratio:>7.1f}x  "
                f"{result.iterations.mean():6.1f}/{result.iterations.max():<4d}   {note}"
            )
    return ratios


def fabrik_vs_ccd(k: int, n: int) -> None:
    """Iterations to 1e-4 on the same targets."""
    rig, targets = comfortable_rig(7, k, n)
    problem = rig.problem(targets, tolerance=1e-4, max_iterations=2000)
    print(f"\nFABRIK vs CCD: iterations to 1e-4 on the same {k} targets, {n} bones (paper: ~15 vs ~26)")
    for name, solver in (("FABRIK", solve_fabrik), ("CCD", solve_ccd)):
        start = time.perf_counter()
        r = solver(problem)
        dt = time.perf_counter() - start
        it = r.iterations[r.reached]
        print(
            f"  {name:6s} reached {r.reached.mean() * 100:5.1f}%  iterations mean {it.mean():6.1f}  "
            f"median {np.median(it):5.1f}  p90 {np.percentile(it, 90):6.1f}  max {r.iterations.max():5d}  "
            f"time {dt * 1e3:7.1f} ms"
        )


def random_vs_uniform(k: int, n: int, repeats: int) -> None:
    """Per-chain early exit: random targets should cost about the sum of each chain's iterations."""
    rig, targets = comfortable_rig(11, k, n)
    random_problem = rig.problem(targets, tolerance=1e-4, max_iterations=200)
    r = solve_fabrik(random_problem)
    hard = int(np.argmax(r.iterations))
    # Uniform: every chain is the same chain with the same target (the batch's slowest one).
    same = Rig(
        *(
            np.repeat(a[hard : hard + 1], k, axis=0)
            for a in (rig.root, rig.base, rig.ref_local, rig.offsets, rig.positions, rig.frames)
        )
    )
    uniform_problem = same.problem(np.repeat(targets[hard : hard + 1], k, axis=0), tolerance=1e-4, max_iterations=200)
    u = solve_fabrik(uniform_problem)
    t_random = best_time(lambda: solve_fabrik(random_problem), repeats)
    t_uniform = best_time(lambda: solve_fabrik(uniform_problem), repeats)
    print(f"\nRandom vs uniform targets (FABRIK, K={k}, N={n}, tol 1e-4)")
    print(
        f"  random : {t_random * 1e3:7.2f} ms   chain-iterations {r.iterations.sum():6d} "
        f"(max {r.iterations.max()} per chain)"
    )
    print(
        f"  uniform: {t_uniform * 1e3:7.2f} ms   chain-iterations {u.iterations.sum():6d} "
        f"(every chain = the random batch's slowest)"
    )
    print(
        f"  random costs {t_random / t_uniform:4.2f} of K x the slowest chain (uniform) while needing "
        f"{r.iterations.sum() / (k * r.iterations.max()):4.2f} of its chain-iterations; the difference is "
        "the fixed per-iteration cost (numpy calls) of the last few slow chains"
    )
    single = best_time(lambda: solve_fabrik(replace(random_problem, **_rows(random_problem, hard))), repeats)
    print(f"  the slowest chain alone: {single * 1e3:6.2f} ms (the floor for any batch containing it)")


def _rows(problem: ChainProblem, k: int) -> dict[str, object]:
    """Arrays of chain ``k`` alone, for :func:`dataclasses.replace`."""
    s = slice(k, k + 1)
    return {
        "positions": problem.positions[s],
        "frames": problem.frames[s],
        "offsets": problem.offsets[s],
        "ref_local": problem.ref_local[s],
        "base": problem.base[s],
        "targets": problem.targets[s],
    }


def two_bone_and_tree(repeats: int) -> None:
    rig, targets = comfortable_rig(3, 1000, 2)
    problem = rig.problem(targets, tolerance=1e-9)
    t = best_time(lambda: solve_two_bone(problem), repeats)
    print(f"\nTwo-bone analytic, K=1000: {t * 1e3:.2f} ms ({t * 1e6 / 1000:.2f} us per chain)")
    rng = np.random.default_rng(5)
    hand_offsets = [
        np.array(v) for v in ([-0.1, 0.5, 0], [0, 0.55, 0.02], [0.1, 0.5, 0], [0.2, 0.45, 0], [-0.2, 0.3, 0.1])
    ]
    tree = make_tree(
        rng,
        parents=[-1, 0, 1, 2, 3, 1, 5, 6, 1, 8, 9, 1, 11, 12, 12, 1, 15],
        effectors=[4, 7, 10, 13, 14, 16],
        offset_children={1: hand_offsets},
    )
    times, iters, reached = [], [], []
    for _ in range(10):
        _, _, tails = tree.pose(random_rotations(rng, (17,), 1.0))
        p = tree.problem(tails[tree.effectors], tolerance=1e-3, max_iterations=1000)
        start = time.perf_counter()
        res = solve_tree(p)
        times.append(time.perf_counter() - start)
        iters.append(res.iterations)
        reached.append(res.reached.all())
    print(
        f"Tree (hand: 17 bones, 6 effectors, rigid offset fork), tol 1e-3: median {np.median(times) * 1e3:.1f} ms, "
        f"iterations median {np.median(iters):.0f} (max {max(iters)}), all reached in {sum(reached)}/10, "
        f"{np.median(np.array(times) / np.array(iters)) * 1e6:.0f} us per iteration"
    )


def bench_limits_cost(repeats: int) -> None:
    """=== LIMITS COST: per-iteration cost of joint limits vs none (goal <= 2x). ===

    FABRIK and CCD, N=10 bones, 10 fixed iterations, for K=1000 and K=10 chains, three ways: no limits;
    limits that never bind (cones of 178 degrees, full twist range: the cost of the limited code path and of
    the inside test alone); and binding limits (cone [1.2, 0.8, 1.0, 1.0] + twist +-0.5 on every bone).
    The time spent inside ``solvers.limits.apply_joint_limits`` is reported separately (measured by
    wrapping the function the sweep calls), so the solver's frame tracking and the clamp can be told apart.
    Also: ``apply_joint_limits`` alone on rows that all need a search.
    """
    import solvers.frames as frames_module
    from solvers import limits as limits_module

    original = frames_module.apply_joint_limits
    spent = [0.0]

    def timed(*args: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        out = original(*args)
        spent[0] += time.perf_counter() - start
        return out

    def make_limits(k: int, n: int, cone: list[float], twist: list[float]) -> JointLimits:
        return JointLimits(
            cone=np.broadcast_to(cone, (k, n, 4)).copy(),
            use_cone=np.ones((k, n), dtype=bool),
            twist=np.broadcast_to(twist, (k, n, 2)).copy(),
            use_twist=np.ones((k, n), dtype=bool),
        )

    n, iterations = 10, 10
    print(f"\nLimits cost (N={n}, {iterations} fixed iterations, limits on every bone; goal <= 2x)")
    print(
        f"  {'solver':6s} {'K':>5}  {'none':>9}  {'never bind':>22}  {'binding':>22}   ms/iter (in apply_joint_limits)"
    )
    frames_module.apply_joint_limits = timed  # type: ignore[assignment]
    try:
        for k in (1000, 10):
            rig, targets = comfortable_rig(13, k, n)
            # An unreachable tolerance forces exactly `iterations` iterations on every chain.
            base = rig.problem(targets, tolerance=1e-300, max_iterations=iterations)
            loose = ChainProblem(**{**base.__dict__, "limits": make_limits(k, n, [3.1] * 4, [-np.pi, np.pi])})
            binding = ChainProblem(**{**base.__dict__, "limits": make_limits(k, n, [1.2, 0.8, 1.0, 1.0], [-0.5, 0.5])})
            reps = repeats if k > 100 else 5 * repeats
            for name, solver in (("FABRIK", solve_fabrik), ("CCD", solve_ccd)):
                cells = []
                for problem in (base, loose, binding):
                    iters = max(1, int(solver(problem).iterations.max()))
                    spent[0] = 0.0
                    total = best_time(lambda s=solver, p=problem: s(p), reps) / iters
                    inside = spent[0] / reps / iters  # mean over the repeats (best_time keeps the best)
                    cells.append((total, inside))
                none = cells[0][0]
                text = [f"{cells[0][0] * 1e3:9.2f}"]
                text += [f"{t * 1e3:7.2f} ({s * 1e3:6.2f}) {t / none:4.1f}x" for t, s in cells[1:]]
                print(f"  {name:6s} {k:>5}  " + "  ".join(text))
    finally:
        frames_module.apply_joint_limits = original  # type: ignore[assignment]

    rng = np.random.default_rng(5)
    for m in (1, 10, 1000):
        ref = random_rotations(rng, (m,))
        frame = random_rotations(rng, (m,))
        cone = np.broadcast_to([0.5, 0.3, 0.4, 0.6], (m, 4))
        rel_y = np.einsum("mji,mj->mi", ref, frame[:, :, 1])
        outside = ~limits_module.cone_contains(rel_y, cone)
        flags = np.ones(m, dtype=bool)
        twist = np.broadcast_to([-0.5, 0.5], (m, 2))
        clamped = limits_module.apply_joint_limits(ref, frame, cone, flags, twist, flags)
        args = (ref, frame, cone, flags, twist, flags)
        args_inside = (ref, clamped, cone, flags, twist, flags)
        t_clamp = best_time(lambda a=args: limits_module.apply_joint_limits(*a), 5 * repeats)
        t_inside = best_time(lambda a=args_inside: limits_module.apply_joint_limits(*a), 5 * repeats)
        print(
            f"  apply_joint_limits alone, M={m:>4}: {outside.mean():4.0%} outside the cone "
            f"{t_clamp * 1e6:8.0f} us ({t_clamp / m * 1e6:6.1f} us/row); all inside {t_inside * 1e6:6.0f} us"
        )


# ------------------------------------------------------------------------------------------------------
# Before vs after: the solvers of a git revision against the working tree's, in one process
# ------------------------------------------------------------------------------------------------------


def load_solvers(rev: str) -> ModuleType:
    """The ``solvers`` package of git revision ``rev``, imported as a separate package ``solvers_<rev>``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "solvers"], check=True, capture_output=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="reach_ik_solvers_"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(folder)
    name = f"solvers_{rev.replace('-', '_').replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(
        name, folder / "solvers" / "__init__.py", submodule_search_locations=[str(folder / "solvers")]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def chain_problem(pkg: ModuleType, rig: Rig, targets: np.ndarray, **kwargs: Any) -> Any:
    """``rig.problem(targets, ...)`` built with package ``pkg``'s ChainProblem."""
    return pkg.ChainProblem(
        positions=rig.positions,
        frames=rig.frames,
        offsets=rig.offsets,
        ref_local=rig.ref_local,
        base=rig.base,
        targets=targets,
        **kwargs,
    )


def tree_problem(pkg: ModuleType, rig: TreeRig, targets: np.ndarray, **kwargs: Any) -> Any:
    return pkg.TreeProblem(
        parents=rig.parents,
        heads=rig.heads,
        frames=rig.frames,
        head_offsets=rig.head_offsets,
        tail_offsets=rig.tail_offsets,
        ref_local=rig.ref_local,
        base=rig.base,
        effectors=rig.effectors,
        targets=targets,
        **kwargs,
    )


def interleaved(pkgs: list[ModuleType], repeats: int) -> Iterator[tuple[int, ModuleType]]:
    """(index, package) pairs, alternating packages repeat after repeat so both see the same machine load."""
    for r in range(repeats):
        order = range(len(pkgs)) if r % 2 == 0 else reversed(range(len(pkgs)))
        for i in order:
            yield i, pkgs[i]


def track(pkg: ModuleType, solver: str, rig: Rig, rounds: int, amplitude: float, **kwargs: Any) -> dict[str, Any]:
    """Live tracking: each call warm-starts from the previous result; the target is the tip of the wave
    pose at time ``0.35 r`` (K chains follow phase-shifted waves). Times include problem construction."""
    k, n = rig.offsets.shape[:2]
    solve = getattr(pkg, solver)
    goals = []
    for r in range(rounds + 3):
        local = np.concatenate([wave_pose(n, 0.35 * r + 1.7 * c, amplitude) for c in range(k)])
        goals.append(rig.pose(local)[0][:, -1].copy())
    poles = kwargs.pop("poles", None)
    positions, frames = rig.positions, rig.frames
    times, iterations, residuals, reached = [], [], [], []
    for r, goal in enumerate(goals):
        start = time.perf_counter()
        problem = pkg.ChainProblem(
            positions=positions,
            frames=frames,
            offsets=rig.offsets,
            ref_local=rig.ref_local,
            base=rig.base,
            targets=goal,
            poles=poles,
            **kwargs,
        )
        result = solve(problem)
        elapsed = time.perf_counter() - start
        positions, frames = result.positions, result.frames
        if r >= 3:  # warm
            times.append(elapsed)
            iterations.append(float(result.iterations.mean()))
            residuals.append(float(result.residual.max()))
            reached.append(bool(result.reached.all()))
    return {"times": times, "iterations": iterations, "residual": max(residuals), "reached": np.mean(reached)}


def compare(before: ModuleType, after: ModuleType, quick: bool) -> None:
    """Print the before/after table for (i)-(v) (see the module docstring)."""
    import solvers as current

    assert after is current
    pkgs = [before, after]
    rows: list[tuple[str, str, list[float], str]] = []  # label, unit, [before, after], lower/higher better

    def add(label: str, unit: str, values: list[float], better: str = "lower") -> None:
        rows.append((label, unit, values, better))

    # (i) small live calls.
    rounds, reps = (30, 3) if quick else (60, 5)
    cases = [
        ("(i) FABRIK spine K=1 N=3", "solve_fabrik", zigzag_rig(3, 0.2, 0.1), {}),
        ("(i) CCD tail K=1 N=6", "solve_ccd", zigzag_rig(6, 0.13, 0.3), {}),
        (
            "(i) two-bone arms K=2 N=2",
            "solve_two_bone",
            zigzag_rig(2, 0.27, 0.15, k=2),
            {"poles": np.array([[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]])},
        ),
    ]
    for label, solver, rig, extra in cases:
        times: list[list[float]] = [[], []]
        stats: list[dict[str, Any]] = [{}, {}]
        for i, pkg in interleaved(pkgs, reps):
            out = track(pkg, solver, rig, rounds, 0.15, tolerance=1e-3, max_iterations=30, **dict(extra))
            times[i] += out["times"]
            stats[i] = out
        add(f"{label}: us per call", "us", [1e6 * statistics.median(t) for t in times])
        add(f"{label}: mean iterations", "", [float(np.mean(s["iterations"])) for s in stats])
        add(f"{label}: calls reaching 1e-3", "%", [100 * s["reached"] for s in stats], "higher")

    # (ii) 50-bone warm tracking, and the 3-bone repro.
    rig50 = zigzag_rig(50, 0.1, 0.08)
    times, stats = [[], []], [{}, {}]
    for i, pkg in interleaved(pkgs, 1 if quick else 2):
        out = track(pkg, "solve_fabrik", rig50, 15 if quick else 40, 0.06, tolerance=1e-4, max_iterations=200)
        times[i] += out["times"]
        stats[i] = out
    add("(ii) 50 bones tracking, tol 1e-4: ms per call", "ms", [1e3 * statistics.median(t) for t in times])
    add("(ii) 50 bones tracking: mean iterations", "", [float(np.mean(s["iterations"])) for s in stats])
    add("(ii) 50 bones tracking: calls reaching 1e-4", "%", [100 * s["reached"] for s in stats], "higher")
    rig3 = zigzag_rig(3)
    seeds = range(100 if quick else 300)
    for name in ("solve_fabrik", "solve_ccd"):
        reached, iters = [0.0, 0.0], [0.0, 0.0]
        for i, pkg in enumerate(pkgs):
            for seed in seeds:
                goal, _ = rig3.pose(quaternion_pose(np.random.default_rng(seed), (1, 3), 0.6))
                res = getattr(pkg, name)(
                    chain_problem(pkg, rig3, goal[:, -1].copy(), tolerance=4e-4, max_iterations=30)
                )
                reached[i] += float(res.reached[0]) / len(seeds)
                iters[i] += float(res.iterations[0]) / len(seeds)
        label = name.removeprefix("solve_").upper()
        add(f"(ii) 3-bone repro {label}: reached 4e-4 in 30 it", "%", [100 * r for r in reached], "higher")
        add(f"(ii) 3-bone repro {label}: mean iterations", "", iters)

    # (iii) batched vs loop, FABRIK 1000 x 10, tol 1e-4.
    rig, targets = comfortable_rig(42, 1000, 10)
    problems = [chain_problem(pkg, rig, targets, tolerance=1e-4, max_iterations=200) for pkg in pkgs]
    singles = [
        [
            chain_problem(pkg, subset(rig, slice(j, j + 1)), targets[j : j + 1], tolerance=1e-4, max_iterations=200)
            for j in range(1000)
        ]
        for pkg in pkgs
    ]
    t_batch, t_loop = [np.inf, np.inf], [np.inf, np.inf]
    # Minimum over interleaved repeats for both sides: the least disturbed run of each.
    for i, pkg in interleaved(pkgs, 2 if quick else 4):
        t_batch[i] = min(t_batch[i], best_time(lambda p=problems[i], s=pkg.solve_fabrik: s(p), 3))
        t_loop[i] = min(t_loop[i], best_time(lambda ps=singles[i], s=pkg.solve_fabrik: [s(p) for p in ps], 1))
    add("(iii) FABRIK 1000x10 tol 1e-4: batched ms", "ms", [1e3 * t for t in t_batch])
    add("(iii) FABRIK 1000x10: per-chain loop ms", "ms", [1e3 * t for t in t_loop])
    add("(iii) FABRIK 1000x10: loop / batched", "x", [t_loop[i] / t_batch[i] for i in range(2)], "higher")

    # (iv) FABRIK vs CCD iterations to 1e-4.
    rig, targets = comfortable_rig(7, 200 if quick else 1000, 10)
    for name in ("solve_fabrik", "solve_ccd"):
        iters, reached, ms = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
        for i, pkg in enumerate(pkgs):
            problem = chain_problem(pkg, rig, targets, tolerance=1e-4, max_iterations=2000)
            start = time.perf_counter()
            res = getattr(pkg, name)(problem)
            ms[i] = 1e3 * (time.perf_counter() - start)
            iters[i] = float(res.iterations.mean())
            reached[i] = 100 * float(res.reached.mean())
        label = name.removeprefix("solve_").upper()
        add(f"(iv) {label} {len(targets)}x10 to 1e-4: mean iterations", "", iters)
        add(f"(iv) {label} {len(targets)}x10 to 1e-4: reached", "%", reached, "higher")
        add(f"(iv) {label} {len(targets)}x10 to 1e-4: ms", "ms", ms)

    # (v) the hand tree.
    rng = np.random.default_rng(5)
    hand_offsets = [
        np.array(v) for v in ([-0.1, 0.5, 0], [0, 0.55, 0.02], [0.1, 0.5, 0], [0.2, 0.45, 0], [-0.2, 0.3, 0.1])
    ]
    tree = make_tree(
        rng,
        parents=[-1, 0, 1, 2, 3, 1, 5, 6, 1, 8, 9, 1, 11, 12, 12, 1, 15],
        effectors=[4, 7, 10, 13, 14, 16],
        offset_children={1: hand_offsets},
    )
    goals = [tree.pose(random_rotations(rng, (17,), 1.0))[2][tree.effectors] for _ in range(10 if quick else 30)]
    tree_ms: list[list[float]] = [[], []]
    tree_it: list[list[float]] = [[], []]
    tree_ok = [0.0, 0.0]
    for i, pkg in interleaved(pkgs, 1 if quick else 2):
        tree_ms[i], tree_it[i], tree_ok[i] = [], [], 0.0
        for goal in goals:
            problem = tree_problem(pkg, tree, goal, tolerance=1e-3, max_iterations=1000)
            start = time.perf_counter()
            res = pkg.solve_tree(problem)
            tree_ms[i].append(1e3 * (time.perf_counter() - start))
            tree_it[i].append(res.iterations)
            tree_ok[i] += 100 * float(res.reached.all()) / len(goals)
    add("(v) hand tree 17 bones, tol 1e-3: median ms", "ms", [statistics.median(t) for t in tree_ms])
    add("(v) hand tree: median iterations", "", [statistics.median(t) for t in tree_it])
    add("(v) hand tree: all effectors reached", "%", tree_ok, "higher")

    print(f"\nBEFORE ({before.__name__}) vs AFTER (working tree), same run; ratio = how many times better")
    print(f"  {'':58s} {'before':>10} {'after':>10} {'ratio':>8}")
    for label, unit, (b, a), better in rows:
        if better == "lower":
            ratio_text = f"{b / a:7.2f}x" if a > 0 else "    inf"
        else:
            ratio_text = f"{a / b:7.2f}x" if b > 0 else "      -"
        print(f"  {label + (f' [{unit}]' if unit else ''):58s} {b:10.3g} {a:10.3g} {ratio_text}")


def in_package(pkg: ModuleType, problem: ChainProblem) -> Any:
    """``problem`` rebuilt with package ``pkg``'s ChainProblem and JointLimits."""
    lim = problem.limits
    assert lim is not None
    return pkg.ChainProblem(
        positions=problem.positions,
        frames=problem.frames,
        offsets=problem.offsets,
        ref_local=problem.ref_local,
        base=problem.base,
        targets=problem.targets,
        limits=pkg.JointLimits(cone=lim.cone, use_cone=lim.use_cone, twist=lim.twist, use_twist=lim.use_twist),
        tolerance=problem.tolerance,
        max_iterations=problem.max_iterations,
    )


def harsh(before: ModuleType, after: ModuleType, quick: bool) -> None:
    """Reach under harsh limits (issue 28), before vs after in one run.

    Random chains of 3-6 bones (two-bone: 2) with a ball-like first joint, then hinges, half-cones and narrow
    cones, twist locked (``solver_fixtures.harsh_limits``); each target the tip of a random pose inside the
    limits; starting from rest and from another random pose inside the limits; tolerance 1e-3, cap 30. The
    rate is the fraction of targets reached; the time per solve is measured batched (all chains of one
    length in one call, total over chains) and in single calls (K=1, as a live update of one chain: mean and
    95th percentile, which is what the chains that need the global stage cost).
    """
    k = 60 if quick else 150
    singles = 30 if quick else 60
    solvers = [("FABRIK", "solve_fabrik", (3, 4, 5, 6)), ("CCD", "solve_ccd", (3, 4, 5, 6))]
    solvers.append(("two-bone", "solve_two_bone", (2,)))
    print(f"\nHARSH LIMITS: {k} chains per length, before ({before.__name__}) vs after, same run (measured under load)")
    print(f"  {'':20s} {'reached':>17} {'ms/solve batched':>19} {'ms/call K=1 mean':>19} {'K=1 p95':>15}")
    for label, name, sizes in solvers:
        for start in HARSH_STARTS:
            problems = [harsh_problem(4200 + 10 * j + n, k, n, start, tolerance=1e-3) for j, n in enumerate(sizes)]
            rate, batched, mean, p95 = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
            for i, pkg in interleaved([before, after], 1):
                solve = getattr(pkg, name)
                hit = total = 0
                elapsed = 0.0
                calls = []
                for problem in problems:
                    mine = in_package(pkg, problem)
                    t0 = time.perf_counter()
                    res = solve(mine)
                    elapsed += time.perf_counter() - t0
                    hit += int(res.reached.sum())
                    total += problem.n_chains
                    for row in range(singles // len(problems) + 1):
                        one = in_package(pkg, harsh_problem(4300 + 10 * row + len(calls), 1, problem.n_bones, start))
                        t0 = time.perf_counter()
                        solve(one)
                        calls.append(time.perf_counter() - t0)
                rate[i] = 100.0 * hit / total
                batched[i] = 1e3 * elapsed / total
                mean[i] = 1e3 * float(np.mean(calls))
                p95[i] = 1e3 * float(np.percentile(calls, 95))
            print(
                f"  {label + ' from ' + start:20s} {rate[0]:6.1f}% -> {rate[1]:5.1f}%"
                f" {batched[0]:7.2f} -> {batched[1]:6.2f} {mean[0]:8.2f} -> {mean[1]:6.2f}"
                f" {p95[0]:6.2f} -> {p95[1]:5.2f}"
            )


def knee_pop() -> None:
    """The knee pop: largest over median per-step change of the knee angle as the target crosses full extension.

    The leg of ``bench/knee_pop_blender.py`` (thigh and shin 1.0 each, knee bent forward, a pole in front),
    the target from 0.9 L to 1.1 L in 200 equal steps along a fixed line from the hip. 1.0 would be a knee
    turning at a constant rate; the hard law of cosines (two-bone at Soft 0) turns ever faster up to full
    extension and then not at all.
    """
    steps = 200
    head1, tail1, tail2 = np.zeros(3), np.array([0.0, 0.1, 0.995]), np.array([0.0, 0.0, 1.99])
    up = np.array([1.0, 0.0, 0.0])

    def frame(y: np.ndarray) -> np.ndarray:
        y = y / np.linalg.norm(y)
        z = np.cross(up, y)
        return np.stack([np.cross(y, z), y, z], axis=1)

    f1, f2 = frame(tail1 - head1), frame(tail2 - tail1)
    l1, l2 = np.linalg.norm(tail1 - head1), np.linalg.norm(tail2 - tail1)
    length = l1 + l2
    k = steps + 1
    direction = np.array([0.0, 0.25, 1.0]) / np.linalg.norm([0.0, 0.25, 1.0])
    targets = np.linspace(0.9 * length, 1.1 * length, k)[:, None] * direction
    base = dict(
        positions=np.tile(np.stack([head1, tail1, tail2]), (k, 1, 1)),
        frames=np.tile(np.stack([f1, f2]), (k, 1, 1, 1)),
        offsets=np.tile(np.array([[0.0, l1, 0.0], [0.0, l2, 0.0]]), (k, 1, 1)),
        ref_local=np.tile(np.stack([f1, f1.T @ f2]), (k, 1, 1, 1)),
        base=np.tile(np.eye(3), (k, 1, 1)),
        targets=targets,
        poles=np.tile(np.array([0.0, 2.0, 1.0]), (k, 1)),
        tolerance=1e-6,
        max_iterations=100,
    )

    def measure(result: SolveResult) -> tuple[float, float]:
        a = result.positions[:, 1] - result.positions[:, 0]
        b = result.positions[:, 2] - result.positions[:, 1]
        cos = np.einsum("ki,ki->k", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        change = np.abs(np.diff(np.arccos(np.clip(cos, -1.0, 1.0))))
        return float(change.max() / np.median(change)), math.degrees(float(change.max()))

    print("\nKNEE POP: target 0.9 L -> 1.1 L in 200 equal steps; largest / median per-step knee change (1 = even)")
    print(f"  {'':22s} {'soft 0':>16} {'soft 0.05':>16} {'soft 0.1':>16}")
    for label, solver in (("two-bone", solve_two_bone), ("FABRIK", solve_fabrik), ("CCD", solve_ccd)):
        cells = []
        for soft in (0.0, 0.05, 0.1):
            ratio, worst = measure(solver(ChainProblem(**base, soft=np.full(k, soft))))  # type: ignore[arg-type]
            cells.append(f"{ratio:6.2f} ({worst:4.2f} deg)")
        print(f"  {label:22s} " + " ".join(f"{c:>16}" for c in cells))
    try:
        out = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "knee_pop_blender.py")],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        blender = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        print(f"  Blender's IK constraint: not measured ({exc})")
        return
    label = "Blender IK " + blender["blender"].split()[0]
    cell = f"{blender['pop']:6.2f} ({blender['max_step_deg']:4.2f} deg)"
    print(f"  {label:22s} {cell:>16}  (its IK constraint has no soft option)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (well under a minute)")
    parser.add_argument(
        "--before", default=BEFORE_REV, help=f"git revision to compare against (default {BEFORE_REV}; 'none' to skip)"
    )
    parser.add_argument("--compare-only", action="store_true", help="only the before/after table")
    parser.add_argument("--knee-pop", action="store_true", help="only the knee pop (soft IK vs Blender's IK)")
    parser.add_argument("--harsh", action="store_true", help="only the harsh-limits reach, before vs after")
    args = parser.parse_args()
    if args.knee_pop:
        knee_pop()
        return
    if args.harsh:
        import solvers

        harsh(load_solvers(args.before), solvers, args.quick)
        return
    repeats = 2 if args.quick else 3
    ks = [1, 10, 100, 1000]
    ns = [10] if args.quick else [2, 10, 50]
    budget = 0.5 if args.quick else 2.0
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}")
    if args.before != "none":
        import solvers

        before = load_solvers(args.before)
        compare(before, solvers, args.quick)
        harsh(before, solvers, args.quick)
    if args.compare_only:
        return

    # Headline first: FABRIK K=1000, N=10, tol 1e-4, full per-chain loop (no sampling).
    rig, targets = comfortable_rig(42, 1000, 10)
    problem = rig.problem(targets, tolerance=1e-4, max_iterations=200)
    singles = [
        subset(rig, slice(i, i + 1)).problem(targets[i : i + 1], tolerance=1e-4, max_iterations=200)
        for i in range(1000)
    ]
    # Best of several runs for both sides: the machine may be busy, and the minimum is the least disturbed.
    t_batch = best_time(lambda: solve_fabrik(problem), 3 * repeats)
    t_loop = best_time(lambda: [solve_fabrik(p) for p in singles], 1 if args.quick else 2)
    print(
        f"\nHEADLINE FABRIK 1000 chains x 10 bones, random reachable targets, tol 1e-4: batched "
        f"{t_batch * 1e3:.1f} ms, per-chain loop {t_loop * 1e3:.0f} ms -> batched is "
        f"{t_loop / t_batch:.1f}x faster (goal >= 30x)"
    )

    batched_vs_loop(solve_fabrik, "FABRIK", ks, ns, 1e-4, repeats, budget)
    batched_vs_loop(solve_ccd, "CCD", ks, [10] if args.quick else [2, 10], 1e-4, repeats, budget)
    batched_vs_loop(solve_two_bone, "Two-bone", ks, [2], 1e-9, repeats, budget)
    fabrik_vs_ccd(200 if args.quick else 1000, 10)
    random_vs_uniform(1000, 10, repeats)
    two_bone_and_tree(repeats)
    bench_limits_cost(repeats)
    knee_pop()


if __name__ == "__main__":
    main()
