"""Full Body (#34): the body stage's method against the alternatives the issue names, on one body, one process.

The body: hips at 1 m, three spine bones, shoulders, hip joints and neck as anchors (arm 0.6, leg 0.9 with
the feet planted under straight legs, neck 0.2; the proportions of `demo/humanoids.py`), spine cones of 25
degrees. Each case pulls the left hand (or both hands) a distance past the straight arm in a seeded random
direction of the front half-space; feet pinned, the head and the other hand following. Methods:

- ``dls``: `solvers.body.solve_body` (the chosen one: damped least squares over the hips' move and turn and
  the spine's turns, pins as hard bounds, followers in the null space);
- ``fabrik``: a FABRIK-style body pass with a sub-base at the hips: the hips move by the weighted mean of
  what the pulls ask, then are projected back into every pin's reach sphere (alternating projections),
  repeated; the trunk is rigid;
- ``fabrik_turn``: the same, and the trunk also turns about the hips toward the anchors' proposals (the
  tree solver's weighted Kabsch fit of a rigid fork), pins projected after each pass;
- ``pbd``: position-based constraints as in Unreal's PBIK: particles at the hips, the chest and the anchors,
  rigid distance constraints between them, pulls and pins as distance bounds (pins with infinite mass
  ratio), Gauss-Seidel projections.

Reported per method: cases whose pulled hands reach (the target within the arm's reach after the body
moved, to 1e-4; all, one hand pulled, both hands pulled), the worst pin violation (distance past the leg's
reach), the median distance the chains that were not pulled (the head, the other hand) end beyond their
reach, the median time, and the largest hips jump for a 5 mm step of the target (continuity).

    .venv/bin/python bench/body_methods.py [--cases 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solvers.body import BodyProblem, solve_body  # noqa: E402
from solvers.limits import JointLimits  # noqa: E402

_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
ARM, LEG, NECK = 0.6, 0.9, 0.2
Result = tuple[np.ndarray, np.ndarray]  # anchor positions (A, 3) after the body moved, hips head (3,)


def problem(left: np.ndarray, right: np.ndarray | None = None) -> tuple[BodyProblem, np.ndarray]:
    heads = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.1], [0.0, 0.0, 1.25], [0.0, 0.0, 1.4]])
    frames = np.repeat(_UP[None], 4, axis=0)
    bones = np.array([3, 3, 0, 0, 3])
    offsets = np.array([[0.2, 0.15, 0.0], [-0.2, 0.15, 0.0], [0.1, -0.05, 0.0], [-0.1, -0.05, 0.0], [0.0, 0.2, 0.0]])
    points = heads[bones] + np.einsum("aij,aj->ai", frames[bones], offsets)
    feet = points[2:4] - np.array([0.0, 0.0, LEG])
    r = points[1] + np.array([-0.3, -0.2, -0.3]) if right is None else right
    targets = np.array([left, r, feet[0], feet[1], points[4] + np.array([0.0, 0.0, 0.1])])
    cone = np.full((1, 4, 4), np.radians(25.0))
    limits = JointLimits(cone, np.array([[False, True, True, True]]), np.zeros((1, 4, 2)), np.zeros((1, 4), bool))
    p = BodyProblem(
        np.array([-1, 0, 1, 2]),
        heads,
        frames,
        np.repeat(np.eye(3)[None], 4, axis=0),
        bones,
        offsets,
        np.array([ARM, ARM, LEG, LEG, NECK]),
        targets,
        np.ones(5),
        np.array([False, False, True, True, False]),
        limits,
    )
    return p, points


def dls(p: BodyProblem, points: np.ndarray) -> Result:
    r = solve_body(p)
    b = np.asarray(p.anchor_bones)
    return r.heads[b] + np.einsum("aij,aj->ai", r.frames[b], p.anchor_offsets), r.heads[0]


def _pins(p: BodyProblem, pts: np.ndarray, hips: np.ndarray, bound: np.ndarray) -> None:
    """Alternating projections of the whole (rigid) body into every pin's reach sphere."""
    for _ in range(10):
        worst = 0.0
        for a in np.flatnonzero(p.pinned):
            d = pts[a] - p.targets[a]
            n = float(np.linalg.norm(d))
            if n > bound[a]:
                shift = -d / n * (n - bound[a])
                pts += shift
                hips += shift
                worst = max(worst, n - bound[a])
        if worst < 1e-12:
            break


def _fabrik(p: BodyProblem, points: np.ndarray, turn: bool) -> Result:
    pts = points.copy()
    hips = np.array(p.heads[0], dtype=float)
    reach = np.asarray(p.reach)
    dist0 = np.linalg.norm(p.targets - pts, axis=1)
    bound = np.where(p.pinned, np.maximum(reach, dist0), reach)
    lead = ~np.asarray(p.pinned) & (dist0 > reach)
    for _ in range(30):
        d = p.targets - pts
        n = np.linalg.norm(d, axis=1)
        over = np.where(lead, np.maximum(n - reach, 0.0), 0.0)
        if over.max() < 1e-5:
            break
        want = pts + d / n[:, None] * over[:, None]  # each leader's proposal; the others stay
        if turn:
            # Weighted Kabsch about the hips: the trunk turns toward the proposals (a rigid fork, as trees do).
            w = np.where(lead, 1.0, 0.1)
            a, b = pts - hips, want - hips
            ca, cb = (w[:, None] * a).sum(0) / w.sum(), (w[:, None] * b).sum(0) / w.sum()
            h = ((a - ca) * w[:, None]).T @ (b - cb)
            u, _s, vt = np.linalg.svd(h)
            rot = vt.T @ np.diag([1.0, 1.0, np.sign(np.linalg.det(vt.T @ u.T))]) @ u.T
            pts = hips + (pts - hips) @ rot.T
            shift = (cb - ca) * 0.0
        else:
            shift = (want - pts)[lead].mean(axis=0)
        pts += shift
        hips += shift
        _pins(p, pts, hips, bound)
    return pts, hips


def fabrik(p: BodyProblem, points: np.ndarray) -> Result:
    return _fabrik(p, points, False)


def fabrik_turn(p: BodyProblem, points: np.ndarray) -> Result:
    return _fabrik(p, points, True)


def pbd(p: BodyProblem, points: np.ndarray) -> Result:
    """Particles: the anchors, the hips and the chest; every pair of the rigid trunk's particles keeps its
    distance (a rigid body as distance constraints); the chest-hips pair may bend by 25 degrees' worth."""
    pts = np.vstack([points, p.heads[0], p.heads[3]]).astype(float)
    hips, chest = len(points), len(points) + 1
    upper = [0, 1, 4, chest]
    lower = [2, 3, hips]
    pairs = [(i, j) for g in (upper, lower) for k, i in enumerate(g) for j in g[k + 1 :]]
    pairs += [(chest, hips)] + [(i, hips) for i in upper if i != chest] + [(i, chest) for i in lower if i != hips]
    rest = {pr: float(np.linalg.norm(pts[pr[0]] - pts[pr[1]])) for pr in pairs}
    reach = np.asarray(p.reach)
    dist0 = np.linalg.norm(p.targets - points, axis=1)
    bound = np.where(p.pinned, np.maximum(reach, dist0), reach)
    mass = np.ones(len(pts))
    mass[[2, 3]] = 1e-9  # pinned anchors: (nearly) infinite mass
    for _ in range(60):
        for a in range(len(points)):
            d = p.targets[a] - pts[a]
            n = float(np.linalg.norm(d))
            if n > bound[a]:
                pts[a] += d / n * (n - bound[a])
        for (i, j), length in rest.items():
            d = pts[j] - pts[i]
            n = float(np.linalg.norm(d))
            corr = d / n * (n - length)
            # Stiffer across the trunk than along the spine: the spine (chest-hips) gives a little.
            k = 0.3 if (i, j) == (chest, hips) else 1.0
            wi, wj = mass[i], mass[j]
            pts[i] += k * corr * wi / (wi + wj)
            pts[j] -= k * corr * wj / (wi + wj)
    return pts[: len(points)], pts[hips]


def run(cases: int) -> None:
    rng = np.random.default_rng(34)
    methods: dict[str, Callable[[BodyProblem, np.ndarray], Result]] = {
        "dls": dls,
        "fabrik": fabrik,
        "fabrik_turn": fabrik_turn,
        "pbd": pbd,
    }
    _p0, points = problem(np.zeros(3))
    shoulder_l, shoulder_r = points[0], points[1]
    setups = []
    for k in range(cases):
        beyond = (0.05, 0.15, 0.3)[k % 3]
        v = rng.normal(size=3)
        v[1] = -abs(v[1])  # the front half-space (-Y)
        v /= np.linalg.norm(v)
        both = k % 4 == 3
        right = shoulder_r + np.array([-v[0], v[1], v[2]]) * (ARM + beyond) if both else None
        setups.append((shoulder_l + v * (ARM + beyond), right))
    print(f"bench/body_methods.py: {cases} pulls past the straight arm (0.05/0.15/0.3 m), feet pinned, seeded")
    print(
        f"{'method':12} {'reached':>8} {'one hand':>9} {'two hands':>9} {'worst pin':>10} {'followers':>9} "
        f"{'median ms':>10} {'hips jump/5mm':>14}"
    )
    for name, method in methods.items():
        reached, pin, times, follow = [], 0.0, [], []
        for left, right in setups:
            p, points = problem(left, right)
            start = time.perf_counter()
            pts, _hips = method(p, points)
            times.append(time.perf_counter() - start)
            dist = np.linalg.norm(p.targets - pts, axis=1)
            reached.append(dist[0] <= ARM + 1e-4 and (right is None or dist[1] <= ARM + 1e-4))
            pin = max(pin, float((dist[2:4] - LEG).max()))
            # How far the chains that were not pulled (the head; the right hand when only the left pulls)
            # end beyond their reach: what the pull cost them.
            others = [4] if right is not None else [1, 4]
            follow.append(float(np.maximum(dist[others] - np.asarray(p.reach)[others], 0.0).max()))
        one = [r for r, (_l, right) in zip(reached, setups, strict=True) if right is None]
        two = [r for r, (_l, right) in zip(reached, setups, strict=True) if right is not None]
        # Continuity: a drag in 5 mm steps from inside reach to 0.3 past it, straight ahead.
        way = np.array([0.3, -0.9, 0.1]) / np.linalg.norm([0.3, -0.9, 0.1])
        hips_path = [method(*problem(shoulder_l + way * (ARM - 0.05 + 0.005 * i)))[1] for i in range(71)]
        jump = float(np.linalg.norm(np.diff(np.array(hips_path), axis=0), axis=1).max())
        print(
            f"{name:12} {100.0 * sum(reached) / len(reached):7.1f}% {100.0 * sum(one) / len(one):8.1f}% "
            f"{100.0 * sum(two) / len(two):8.1f}% {pin:10.2e} {statistics.median(follow):9.4f} "
            f"{1e3 * statistics.median(times):10.3f} {jump:14.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    run(parser.parse_args().cases)


if __name__ == "__main__":
    main()
