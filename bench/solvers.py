"""Solver benchmarks: timings and ratios measured in one run. Prints; asserts nothing.

Run ``.venv/bin/python bench/solvers.py`` (about a minute) or with ``--quick`` (a few seconds).

What it measures, all on random rigs built in code with reachable targets (tips of random poses):

* batched vs a per-chain Python loop of the same solver code, for K = 1, 10, 100, 1000 chains of
  N = 2, 10, 50 bones (the loop is timed on a sample of chains and scaled to K when it would be slow;
  the line says so). The headline ratio is FABRIK, K=1000, N=10, tolerance 1e-4 (goal >= 30x).
* FABRIK vs CCD iterations to 1e-4 on the same targets (the FABRIK paper reports ~15 vs ~26 for 10
  joints);
* random vs uniform targets (per-chain early exit: a batch of random targets should cost about the
  sum of what each chain needs, not K times the slowest);
* two-bone and tree timings;
* the cost of joint limits vs none (:func:`bench_limits_cost`).

Problems are built before timing; only the solve calls are timed (best of a few repeats).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from solver_fixtures import (  # noqa: E402
    Rig,
    comfortable,
    make_rig,
    make_tree,
    random_rotations,
    reachable_targets,
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


def best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls (the least disturbed by other work on the machine)."""
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return float(best)


def subset(rig: Rig, rows: slice) -> Rig:
    return Rig(rig.root[rows], rig.base[rows], rig.ref_local[rows], rig.offsets[rows], rig.positions[rows],
               rig.frames[rows])


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
            # Time the loop on a sample when the whole loop would take long; scale to K.
            per_chain_guess = t_batch  # a chain alone costs at least what one batch call costs
            sample = k if per_chain_guess * k <= loop_budget else max(1, int(loop_budget / per_chain_guess))
            sample = min(sample, k)
            singles = [subset(rig, slice(i, i + 1)).problem(targets[i : i + 1], tolerance=tol,
                                                            max_iterations=200) for i in range(sample)]

            def run_loop(ps: list[ChainProblem] = singles) -> None:
                for p in ps:
                    solver(p)

            t_loop = best_time(run_loop, 1 if sample > 100 else repeats) * k / sample
            ratio = t_loop / t_batch
            ratios[(n, k)] = ratio
            note = "" if sample == k else f"loop timed on {sample} chains, scaled to {k}"
            print(f"{n:>4} {k:>6} {t_batch * 1e3:>11.2f} {t_loop * 1e3:>10.1f} {ratio:>7.1f}x  "
                  f"{result.iterations.mean():6.1f}/{result.iterations.max():<4d}   {note}")
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
        print(f"  {name:6s} reached {r.reached.mean() * 100:5.1f}%  iterations mean {it.mean():6.1f}  "
              f"median {np.median(it):5.1f}  p90 {np.percentile(it, 90):6.1f}  max {r.iterations.max():5d}  "
              f"time {dt * 1e3:7.1f} ms")


def random_vs_uniform(k: int, n: int, repeats: int) -> None:
    """Per-chain early exit: random targets should cost about the sum of each chain's iterations."""
    rig, targets = comfortable_rig(11, k, n)
    random_problem = rig.problem(targets, tolerance=1e-4, max_iterations=200)
    r = solve_fabrik(random_problem)
    hard = int(np.argmax(r.iterations))
    # Uniform: every chain is the same chain with the same target (the batch's slowest one).
    same = Rig(*(np.repeat(a[hard : hard + 1], k, axis=0) for a in (rig.root, rig.base, rig.ref_local,
                                                                    rig.offsets, rig.positions, rig.frames)))
    uniform_problem = same.problem(np.repeat(targets[hard : hard + 1], k, axis=0), tolerance=1e-4,
                                   max_iterations=200)
    u = solve_fabrik(uniform_problem)
    t_random = best_time(lambda: solve_fabrik(random_problem), repeats)
    t_uniform = best_time(lambda: solve_fabrik(uniform_problem), repeats)
    print(f"\nRandom vs uniform targets (FABRIK, K={k}, N={n}, tol 1e-4)")
    print(f"  random : {t_random * 1e3:7.2f} ms   chain-iterations {r.iterations.sum():6d} "
          f"(max {r.iterations.max()} per chain)")
    print(f"  uniform: {t_uniform * 1e3:7.2f} ms   chain-iterations {u.iterations.sum():6d} "
          f"(every chain = the random batch's slowest)")
    print(f"  random/uniform time {t_random / t_uniform:5.2f}; sum/(K x max) iterations "
          f"{r.iterations.sum() / (k * r.iterations.max()):5.2f} (early exit works when these are close)")


def two_bone_and_tree(repeats: int) -> None:
    rig, targets = comfortable_rig(3, 1000, 2)
    problem = rig.problem(targets, tolerance=1e-9)
    t = best_time(lambda: solve_two_bone(problem), repeats)
    print(f"\nTwo-bone analytic, K=1000: {t * 1e3:.2f} ms ({t * 1e6 / 1000:.2f} us per chain)")
    rng = np.random.default_rng(5)
    hand_offsets = [np.array(v) for v in ([-0.1, 0.5, 0], [0, 0.55, 0.02], [0.1, 0.5, 0], [0.2, 0.45, 0],
                                          [-0.2, 0.3, 0.1])]
    tree = make_tree(rng, parents=[-1, 0, 1, 2, 3, 1, 5, 6, 1, 8, 9, 1, 11, 12, 12, 1, 15],
                     effectors=[4, 7, 10, 13, 14, 16], offset_children={1: hand_offsets})
    times, iters, reached = [], [], []
    for _ in range(10):
        _, _, tails = tree.pose(random_rotations(rng, (17,), 1.0))
        p = tree.problem(tails[tree.effectors], tolerance=1e-3, max_iterations=1000)
        start = time.perf_counter()
        res = solve_tree(p)
        times.append(time.perf_counter() - start)
        iters.append(res.iterations)
        reached.append(res.reached.all())
    print(f"Tree (hand: 17 bones, 6 effectors, rigid offset fork), tol 1e-3: median {np.median(times) * 1e3:.1f} ms, "
          f"iterations median {np.median(iters):.0f} (max {max(iters)}), all reached in {sum(reached)}/10, "
          f"{np.median(np.array(times) / np.array(iters)) * 1e6:.0f} us per iteration")


def bench_limits_cost(repeats: int) -> None:
    """=== LIMITS COST: per-iteration cost of joint limits vs none (goal <= 2x). ===

    Placeholder measurement by the solver side (FABRIK and CCD, K=1000, N=10, cone + twist on every
    bone, 10 fixed iterations); the limits helper may refine it.
    """
    k, n, iterations = 1000, 10, 10
    rig, targets = comfortable_rig(13, k, n)
    # An unreachable tolerance forces exactly `iterations` iterations on every chain (no early exit).
    base = rig.problem(targets, tolerance=1e-300, max_iterations=iterations)
    limits = JointLimits(
        cone=np.broadcast_to([1.2, 0.8, 1.0, 1.0], (k, n, 4)).copy(),
        use_cone=np.ones((k, n), dtype=bool),
        twist=np.broadcast_to([-0.5, 0.5], (k, n, 2)).copy(),
        use_twist=np.ones((k, n), dtype=bool),
    )
    limited = ChainProblem(**{**base.__dict__, "limits": limits})
    print(f"\nLimits cost (K={k}, N={n}, {iterations} fixed iterations, cone + twist on every bone; goal <= 2x)")
    for name, solver in (("FABRIK", solve_fabrik), ("CCD", solve_ccd)):
        r_free, r_lim = solver(base), solver(limited)
        t_free = best_time(lambda s=solver: s(base), repeats) / max(1, int(r_free.iterations.max()))
        t_lim = best_time(lambda s=solver: s(limited), repeats) / max(1, int(r_lim.iterations.max()))
        print(f"  {name:6s} none {t_free * 1e3:7.2f} ms/iter   limits {t_lim * 1e3:7.2f} ms/iter   "
              f"ratio {t_lim / t_free:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a few seconds)")
    args = parser.parse_args()
    repeats = 2 if args.quick else 3
    ks = [1, 10, 100, 1000]
    ns = [10] if args.quick else [2, 10, 50]
    budget = 0.5 if args.quick else 2.0
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}")

    # Headline first: FABRIK K=1000, N=10, tol 1e-4, full per-chain loop (no sampling).
    rig, targets = comfortable_rig(42, 1000, 10)
    problem = rig.problem(targets, tolerance=1e-4, max_iterations=200)
    singles = [subset(rig, slice(i, i + 1)).problem(targets[i : i + 1], tolerance=1e-4, max_iterations=200)
               for i in range(1000)]
    t_batch = best_time(lambda: solve_fabrik(problem), repeats)
    t_loop = best_time(lambda: [solve_fabrik(p) for p in singles], 1)
    print(f"\nHEADLINE FABRIK 1000 chains x 10 bones, random reachable targets, tol 1e-4: batched "
          f"{t_batch * 1e3:.1f} ms, per-chain loop {t_loop * 1e3:.0f} ms -> batched is "
          f"{t_loop / t_batch:.1f}x faster (goal >= 30x)")

    batched_vs_loop(solve_fabrik, "FABRIK", ks, ns, 1e-4, repeats, budget)
    batched_vs_loop(solve_ccd, "CCD", ks, [10] if args.quick else [2, 10], 1e-4, repeats, budget)
    batched_vs_loop(solve_two_bone, "Two-bone", ks, [2], 1e-9, repeats, budget)
    fabrik_vs_ccd(200 if args.quick else 1000, 10)
    random_vs_uniform(1000, 10, repeats)
    two_bone_and_tree(repeats)
    bench_limits_cost(repeats)


if __name__ == "__main__":
    main()
