"""The plain-float closed form (`solvers.two_bone_floats`) decides and poses as the numpy one (`solve_limited`).

Both run on the same chains as `solvers.two_bone.settle` hands them over (one at a time, as the live path
does, and a whole batch), on seeded random limited limbs: the hinged limbs of `test_two_bone_limits` (targets
from poses inside the limits, inside the fold limit, beyond the reach; with and without an upper twist range),
the harsh limits of `solver_fixtures` (zero-width hinges, half-cones, narrow cones, locked twists), and mixed
limbs below (zero-width hinge sides either way, upper cones and twist ranges that refuse the pole's plane or
every elbow, targets anywhere), in every roll mode. The settled and clamped flags must be identical and the
poses equal to float64 rounding.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from solver_fixtures import harsh_problem, make_rig, random_rotations
from test_two_bone_limits import limb_problems

import solvers.two_bone as two_bone_module
from solvers import solve_two_bone
from solvers.frames import ChainBatch
from solvers.limits import JointLimits
from solvers.rotations import normalize, norms
from solvers.two_bone import bend_directions
from solvers.two_bone_floats import solve_limited_floats
from solvers.two_bone_limits import ALONG_Y, solve_limited
from solvers.types import ZERO_LENGTH, ChainProblem

DEG = np.pi / 180.0
ROLL_MODES = ("KEEP", "REST", "NATURAL")
POSE_TOL = 1e-10
"""Largest difference of a joint coordinate or a frame entry between the two forms."""


def mixed_problems(seed: int, k: int, roll_mode: str) -> ChainProblem:
    """``k`` random two-bone limbs under every kind of limit the closed form meets.

    Lower bone: a zero-width hinge about X (left = right = 0) or about Z (up = down = 0), the Knee/Elbow
    preset's 2-degree hinge, a half-cone, a narrow or a wide cone, or no cone; its twist locked or free.
    Upper bone: no limit, a cone (wide, narrow or half), a twist range, or both. Targets: the tip of a random
    pose (often outside the limits), beyond the reach, nearer than the fold allows, or at a random place.
    """
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, k, 2, connected=bool(rng.integers(0, 2)), bend=rng.uniform(0.0, 1.2))
    # The closed form takes lower bones whose segment runs along Y: a connected lower bone.
    offsets = rig.offsets.copy()
    offsets[:, 1] = 0.0
    offsets[:, 1, 1] = rng.uniform(0.2, 1.2, size=k)
    rig = dataclasses.replace(rig, offsets=offsets)
    rig.positions, rig.frames = rig.pose(random_rotations(rng, (k, 2), rng.uniform(0.0, 1.0)))
    cone = np.zeros((k, 2, 4))
    use_cone = np.zeros((k, 2), dtype=bool)
    twist = np.zeros((k, 2, 2))
    use_twist = np.zeros((k, 2), dtype=bool)
    lower = rng.integers(0, 7, size=k)
    for i, kind in enumerate(lower):
        if kind == 0:  # zero-width hinge bending about X
            cone[i, 1] = (rng.uniform(0.5, 2.6), rng.uniform(0.0, 0.4), 0.0, 0.0)
        elif kind == 1:  # zero-width hinge bending about Z
            cone[i, 1] = (0.0, 0.0, rng.uniform(0.0, 0.4), rng.uniform(0.5, 2.6))
        elif kind == 2:  # the preset's hinge
            cone[i, 1] = (150.0 * DEG, rng.uniform(0.0, 20.0) * DEG, 2.0 * DEG, 2.0 * DEG)
        elif kind == 3:  # half-cone
            sides = rng.uniform(0.35, 1.5, size=4)
            sides[rng.integers(0, 4)] = 0.0
            cone[i, 1] = sides
        elif kind == 4:
            cone[i, 1] = rng.uniform(0.05, 0.3, size=4)
        elif kind == 5:
            cone[i, 1] = rng.uniform(0.8, 2.8, size=4)
        use_cone[i, 1] = kind != 6
        use_twist[i, 1] = bool(rng.integers(0, 2))
    upper = rng.integers(0, 4, size=k)
    for i, kind in enumerate(upper):
        if kind in (1, 3):
            shape = rng.integers(0, 3)
            sides = rng.uniform(0.6, 1.5, size=4) if shape == 0 else rng.uniform(0.05, 0.4, size=4)
            if shape == 2:
                sides = rng.uniform(0.35, 1.5, size=4)
                sides[rng.integers(0, 4)] = 0.0
            cone[i, 0] = sides
            use_cone[i, 0] = True
        if kind in (2, 3):
            lo = rng.uniform(-np.pi, 0.5)
            twist[i, 0] = (lo, min(lo + rng.uniform(0.0, 2.0), np.pi))
            use_twist[i, 0] = True
    limits = JointLimits(cone, use_cone, twist, use_twist)
    tips = rig.pose(random_rotations(rng, (k, 2)))[0][:, -1]
    root = rig.root
    chord = tips - root
    total = rig.lengths.sum(axis=1)
    where = rng.integers(0, 4, size=k)
    scale = np.select(
        [where == 1, where == 2, where == 3],
        [rng.uniform(1.05, 1.6, size=k), rng.uniform(0.02, 0.3, size=k), rng.uniform(0.1, 1.4, size=k)],
        1.0,
    )
    direction = chord / np.linalg.norm(chord, axis=1, keepdims=True)
    distance = np.where(where == 0, np.linalg.norm(chord, axis=1), scale * total)
    random_dir = rng.normal(size=(k, 3))
    random_dir /= np.linalg.norm(random_dir, axis=1, keepdims=True)
    direction = np.where((where == 3)[:, None], random_dir, direction)
    targets = root + direction * distance[:, None]
    poles = root + rng.normal(size=(k, 3))
    poles[rng.random(k) < 0.4] = np.nan
    return rig.problem(targets, limits=limits, poles=poles, roll_mode=roll_mode, tolerance=1e-6)


def _inputs(problem: ChainProblem) -> tuple[ChainBatch, np.ndarray, np.ndarray, np.ndarray]:
    """The chains and arguments `settle` hands the closed form (every chain it takes, reached or not)."""
    batch = ChainBatch.from_problem(problem)
    distance = norms(batch.targets - batch.root)
    along_y = np.abs(batch.directions[:, 1] - (0.0, 1.0, 0.0)).max(axis=1) <= ALONG_Y
    rows = np.flatnonzero(along_y & (distance > ZERO_LENGTH * np.maximum(batch.total_length, 1.0)))
    sub = batch.take(rows)
    chord = normalize(sub.targets - sub.root, sub.keep_directions[:, 0])
    return sub, chord, bend_directions(sub, chord), distance[rows]


def _compare(problem: ChainProblem, one_at_a_time: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """Run both forms, assert they agree; the number of chains, and the settled and clamped flags."""
    batch, chord, bend, distance = _inputs(problem)
    assert batch.size, "no chain for the closed form"
    groups = [np.array([r]) for r in range(batch.size)] if one_at_a_time else [np.arange(batch.size)]
    settled, clamped = [], []
    for rows in groups:
        sub = batch.take(rows)
        args = (chord[rows], bend[rows], distance[rows])
        ref = solve_limited(sub, *args)
        got = solve_limited_floats(sub, *args)
        for name, a, b in zip(("settled", "clamped"), ref[2:], got[2:], strict=True):
            assert np.array_equal(a, b), f"chains {rows[a != b].tolist()}: {name} {a[a != b]} (numpy) vs {b[a != b]}"
        gap_p = np.abs(ref[0] - got[0]).max()
        gap_f = np.abs(ref[1] - got[1]).max()
        assert gap_p <= POSE_TOL and gap_f <= POSE_TOL, (
            f"chains {rows.tolist()}: joints {gap_p:.2e}, frames {gap_f:.2e}"
        )
        settled.append(ref[2])
        clamped.append(ref[3])
    return batch.size, np.concatenate(settled), np.concatenate(clamped)


@pytest.mark.parametrize("mode", ROLL_MODES)
@pytest.mark.parametrize("where", ["pose", "near", "far"])
def test_hinged_limbs(mode: str, where: str) -> None:
    for bent in (False, True):
        for upper_twist in (False, True):
            problem, _ = limb_problems(40 + bent + 2 * upper_twist, 25, bent, upper_twist=upper_twist, where=where)
            _compare(dataclasses.replace(problem, roll_mode=mode), one_at_a_time=True)


@pytest.mark.parametrize("mode", ROLL_MODES)
@pytest.mark.parametrize("start", ["rest", "pose"])
def test_harsh_limits(mode: str, start: str) -> None:
    _compare(harsh_problem(60 + len(mode), 40, 2, start, roll_mode=mode), one_at_a_time=True)


@pytest.mark.parametrize("mode", ROLL_MODES)
def test_mixed_limbs(mode: str) -> None:
    counts = np.zeros(3, dtype=int)
    for seed in range(8):
        n, settled, clamped = _compare(mixed_problems(900 + seed, 30, mode), one_at_a_time=True)
        counts += (n, int(settled.sum()), int(clamped.sum()))
    # Both outcomes of each decision occur (the problems reach every branch, not only the easy one).
    assert 0 < counts[1] < counts[0], f"settled {counts[1]} of {counts[0]}"
    assert 0 < counts[2] < counts[0], f"clamped {counts[2]} of {counts[0]}"


def test_whole_batches() -> None:
    """A batch of many chains (the numpy cone search then takes its general path, not its few-row one)."""
    for mode in ROLL_MODES:
        _compare(mixed_problems(990, 60, mode), one_at_a_time=False)


@pytest.mark.parametrize("mode", ROLL_MODES)
def test_solver_results_do_not_depend_on_the_form(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`solve_two_bone` (`settle`, then the global stage) gives the same result with either form."""
    problem = mixed_problems(777, 12, mode)
    monkeypatch.setattr(two_bone_module, "FLOATS_MAX_ROWS", 0)
    numpy_only = solve_two_bone(problem)
    monkeypatch.setattr(two_bone_module, "FLOATS_MAX_ROWS", 10**6)
    floats = solve_two_bone(problem)
    assert np.array_equal(numpy_only.reached, floats.reached)
    assert np.abs(numpy_only.positions - floats.positions).max() <= 1e-9


def test_minimal_rotation_of_nearly_opposite_directions() -> None:
    """The half-turn branch of `rotations.minimal_rotation` (which random limbs seldom reach), as the floats
    take it: directions within 1e-4 of opposite, about the fallback axis."""
    from solvers.frames_floats import minimal_rotation as _minimal_rotation
    from solvers.rotations import minimal_rotation

    rng = np.random.default_rng(5)
    a = rng.normal(size=(50, 3))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = -a + rng.normal(size=(50, 3)) * rng.choice([0.0, 1e-9, 1e-6, 3e-5], size=(50, 1))
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    axis = rng.normal(size=(50, 3))
    ref = minimal_rotation(a, b, fallback_axis=axis)
    got = np.array([_minimal_rotation(tuple(u), tuple(v), tuple(w)) for u, v, w in zip(a, b, axis, strict=True)])
    assert np.abs(ref - got).max() <= 1e-12
