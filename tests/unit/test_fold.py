"""The lower bone's fold range under its cone (`solvers.fold`), checked by brute force over the cone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solvers.fold import boundary, circle_outside, contains, settle_fold
from solvers.limits import cone_contains


def _inside_directions(cone: tuple[float, float, float, float], n: int = 200_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1)[:, None]
    return d[cone_contains(d, np.broadcast_to(np.asarray(cone), (n, 4)))]


CONES = [
    (math.radians(150.0), math.radians(13.0), math.radians(90.0), math.radians(90.0)),  # the set-up's elbow
    (math.radians(8.0), math.radians(150.0), math.radians(2.0), math.radians(2.0)),  # a knee-like hinge
    (math.radians(40.0), math.radians(40.0), math.radians(25.0), math.radians(60.0)),
]


@pytest.mark.parametrize("cone", CONES)
def test_extreme_folds_match_a_brute_force_over_the_cone(cone: tuple[float, float, float, float]) -> None:
    c = np.array([0.3, 0.9, -0.2])
    c /= np.linalg.norm(c)
    inside = _inside_directions(cone)
    folds = np.arccos(np.clip(inside @ c, -1.0, 1.0))
    cc = (float(c[0]), float(c[1]), float(c[2]))
    n = (1.0, 0.0, 0.0)
    far = settle_fold(cc, n, math.pi, cone)
    near = settle_fold(cc, n, 0.0, cone)
    assert far is not None and near is not None
    assert far[2] and near[2], "a fold beyond the range is clamped"
    # The brute force samples lie inside: the exact extremes are at least as far / near, and close to them.
    assert folds.max() - 1e-9 <= far[1] <= folds.max() + 0.02
    assert folds.min() - 0.02 <= near[1] <= folds.min() + 1e-9
    for u, fold in ((far[0], far[1]), (near[0], near[1])):
        assert contains(u, cone)
        # abs 1e-8: the cache rounds c to 1e-9.
        assert math.acos(max(-1.0, min(1.0, float(np.dot(u, c))))) == pytest.approx(fold, abs=1e-8)


@pytest.mark.parametrize("cone", CONES)
def test_a_fold_inside_the_range_is_found_on_the_boundary(cone: tuple[float, float, float, float]) -> None:
    c = (0.0, 1.0, 0.0)
    lo = settle_fold(c, (0.0, 0.0, 1.0), 0.0, cone)
    hi = settle_fold(c, (0.0, 0.0, 1.0), math.pi, cone)
    assert lo is not None and hi is not None
    fold = 0.5 * (lo[1] + hi[1])
    got = settle_fold(c, (0.0, 0.0, 1.0), fold, cone)
    assert got is not None
    u, taken, clamped = got
    assert not clamped and taken == fold
    assert math.acos(max(-1.0, min(1.0, u[1]))) == pytest.approx(fold, abs=1e-9)
    assert cone_contains(np.array([u]), np.array([cone]), 1e-9)[0]


def test_boundary_lies_on_the_cones_edge() -> None:
    cone = CONES[2]
    for psi in np.linspace(0.0, 2.0 * math.pi, 37):
        b = np.array(boundary(float(psi), cone))
        assert cone_contains(b[None], np.array([cone]), 1e-9)[0]
        assert not cone_contains(b[None], np.array([cone]), -1e-6)[0]


@pytest.mark.parametrize(
    "cone",
    [*CONES, (math.radians(100.0), math.radians(100.0), math.radians(70.0), math.radians(70.0))],  # the shoulder
)
def test_a_circle_proven_outside_has_no_direction_inside(cone: tuple[float, float, float, float]) -> None:
    """`circle_outside` against a brute force: wherever it proves a circle (and every direction within the
    slack of it) outside the widened cone, 4000 points of the circle, each moved by up to the slack, are all
    outside; and it proves a fair share of random circles that miss the cone."""
    rng = np.random.default_rng(11)
    tol, slack = 3e-7, 4e-5
    widened = np.asarray(cone) + tol
    t = np.linspace(0.0, 2.0 * math.pi, 4000, endpoint=False)
    proven = missed = 0
    for _ in range(300):
        c = rng.normal(size=3)
        c /= np.linalg.norm(c)
        e1 = np.cross(c, rng.normal(size=3))
        e1 /= np.linalg.norm(e1)
        e2 = np.cross(c, e1)
        a = rng.uniform(0.0, math.pi)
        points = math.cos(a) * c + math.sin(a) * (np.cos(t)[:, None] * e1 + np.sin(t)[:, None] * e2)
        jitter = rng.normal(size=points.shape)
        jitter -= points * np.einsum("ki,ki->k", jitter, points)[:, None]
        jitter *= slack * rng.uniform(0.0, 1.0, size=(len(t), 1)) / np.linalg.norm(jitter, axis=1, keepdims=True)
        moved = points + jitter
        moved /= np.linalg.norm(moved, axis=1, keepdims=True)
        hit = cone_contains(np.concatenate((points, moved)), np.broadcast_to(widened, (2 * len(t), 4))).any()
        ok = circle_outside(tuple(c), tuple(e1), tuple(e2), math.cos(a), math.sin(a), cone, tol, slack)
        assert not (ok and hit), "a circle proven outside has a direction inside the cone"
        missed += not hit
        proven += ok
    assert proven >= 0.5 * missed, f"proved {proven} of {missed} circles that miss the cone"
