"""Widening joint limits to hold rotations (`core.limit_fit`), checked with the solver's own limit tests."""

from __future__ import annotations

import math

import numpy as np

from core.limit_fit import fit, swing_twist
from core.presets import preset_values
from solvers.limits import cone_contains, twist_angle


def rotation(swing_deg: float, azimuth_deg: float, twist_deg: float) -> np.ndarray:
    """A rotation whose +Y swings `swing_deg` toward azimuth `azimuth_deg` (0: +X, 90: +Z), twisted first."""
    t, p, w = (math.radians(a) for a in (swing_deg, azimuth_deg, twist_deg))
    d = np.array([math.sin(t) * math.cos(p), math.cos(t), math.sin(t) * math.sin(p)])
    twist = np.array([[math.cos(w), 0.0, math.sin(w)], [0.0, 1.0, 0.0], [-math.sin(w), 0.0, math.cos(w)]])
    axis = np.cross([0.0, 1.0, 0.0], d)
    s = float(np.linalg.norm(axis))
    if s < 1e-12:
        return twist
    k = axis / s
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    swing = np.eye(3) + math.sin(t) * kx + (1 - math.cos(t)) * kx @ kx
    return swing @ twist


def cone_of(values: dict[str, float | bool]) -> np.ndarray:
    return np.array([[values["cone_up"], values["cone_down"], values["cone_left"], values["cone_right"]]], dtype=float)


def test_swing_and_twist_read_as_the_solver_reads_them() -> None:
    r = rotation(40.0, 90.0, 25.0)
    tx, tz, tw = swing_twist(r[None])
    assert abs(math.degrees(float(tz[0])) - 40.0) < 1e-9 and abs(float(tx[0])) < 1e-9
    assert abs(float(tw[0]) - float(twist_angle(r[None])[0])) < 1e-12


def test_rotations_inside_change_nothing() -> None:
    knee = preset_values("KNEE", [0.0, 1.0, 0.0], bend="up")
    out, grew = fit(knee, np.array([rotation(60.0, 90.0, 0.0)]), math.radians(5.0))
    assert grew.most == 0.0 and out == knee


def test_a_knee_a_little_off_its_plane_widens_the_across_side_not_the_bend() -> None:
    knee = preset_values("KNEE", [0.0, 1.0, 0.0], bend="up")
    rels = np.array([rotation(70.0, 80.0, 0.0), rotation(2.0, -90.0, 0.0)])  # 10 degrees off-plane; hyperextended
    out, grew = fit(knee, rels, math.radians(3.0))
    assert float(out["cone_up"]) == float(knee["cone_up"]), "the bend side already holds the bend"
    assert float(out["cone_right"]) > float(knee["cone_right"]) and float(out["cone_right"]) < math.radians(30.0)
    assert float(out["cone_down"]) >= math.radians(5.0) - 1e-9, "the hyperextension and its margin"
    assert bool(cone_contains(rels[:, :, 1], np.repeat(cone_of(out), len(rels), axis=0)).all())
    assert grew.cone > 0.0


def test_a_swing_past_a_cone_and_a_twist_past_its_range_are_taken_in_with_the_margin() -> None:
    hip = preset_values("BALL", [0.0, 1.0, 0.0])
    hip["use_twist"], hip["twist_min"], hip["twist_max"] = True, -math.radians(45.0), math.radians(45.0)
    rels = np.array([rotation(130.0, 90.0, 60.0), rotation(20.0, 200.0, -70.0)])
    out, grew = fit(hip, rels, math.radians(5.0))
    assert bool(cone_contains(rels[:, :, 1], np.repeat(cone_of(out), len(rels), axis=0)).all())
    assert math.isclose(float(out["twist_max"]), math.radians(65.0)) and math.isclose(
        float(out["twist_min"]), -math.radians(75.0)
    )
    assert math.degrees(grew.cone) > 70.0 - 1e-6 and math.isclose(math.degrees(grew.twist), 30.0)
    # With the margin: a direction 4 degrees further out is still inside.
    assert bool(cone_contains(rotation(134.0, 90.0, 0.0)[None, :, 1], cone_of(out))[0])
