"""Joint limits (solvers/limits.py) against independent references.

The nearest-boundary reference here shares nothing with the module's search: it samples the boundary
densely through the spherical-coordinate formula (theta, phi -> direction), then refines the best two
sampled basins by bisection on the sign of a central difference. Fixed seeds throughout.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from solvers import limits as lim
from solvers.limits import (
    JointLimits,
    apply_joint_limits,
    clamp_cone,
    clamp_twist,
    cone_contains,
    cone_fan,
    cone_ring,
    cone_violation,
    limit_violation,
    twist_angle,
)

F64 = npt.NDArray[np.float64]
# Rounding must never reach numpy as an invalid value (NaN from arccos of 1 + 1e-16 and the like).
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3


# ------------------------------------------------------------------------------------------------------
# Independent helpers
# ------------------------------------------------------------------------------------------------------


def unit(v: F64) -> F64:
    return np.asarray(v / np.linalg.norm(v, axis=-1, keepdims=True), dtype=np.float64)


def angle(u: F64, v: F64) -> F64:
    c = np.cross(u, v)
    return np.asarray(np.arctan2(np.linalg.norm(c, axis=-1), np.sum(u * v, axis=-1)), dtype=np.float64)


def rotations(rng: np.random.Generator, m: int) -> F64:
    """Uniform random rotations from unit quaternions (columns = axes)."""
    q = unit(rng.normal(size=(m, 4)))
    w, x, y, z = q.T
    return np.stack(
        (
            np.stack((1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)), -1),
            np.stack((2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)), -1),
            np.stack((2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)), -1),
        ),
        axis=1,
    )


def rot_y(t: F64) -> F64:
    c, s = np.cos(t), np.sin(t)
    z, o = np.zeros_like(t), np.ones_like(t)
    return np.stack((np.stack((c, z, s), -1), np.stack((z, o, z), -1), np.stack((-s, z, c), -1)), axis=1)


def axis_angle(axis: F64, ang: F64) -> F64:
    """Rodrigues, built independently of the module."""
    k = unit(axis)
    kx, ky, kz = k.T
    z = np.zeros_like(kx)
    kk = np.stack((np.stack((z, -kz, ky), -1), np.stack((kz, z, -kx), -1), np.stack((-ky, kx, z), -1)), 1)
    s, c = np.sin(ang)[:, None, None], np.cos(ang)[:, None, None]
    return np.asarray(np.eye(3) + s * kk + (1 - c) * (kk @ kk), dtype=np.float64)


def swing_direction(tx: F64, tz: F64) -> F64:
    """Direction with swing coordinates (theta_x, theta_z), via theta and phi (the issue's definition)."""
    th = np.hypot(tx, tz)
    phi = np.arctan2(tz, tx)
    return np.stack((np.sin(th) * np.cos(phi), np.cos(th), np.sin(th) * np.sin(phi)), axis=-1)


def boundary(cone: F64, psi: F64) -> F64:
    """Boundary directions of cones (M, 4) at parameters psi (M, P) or (P,): quadrant arcs A cos, B sin."""
    c, s = np.cos(psi), np.sin(psi)
    c = np.where(np.abs(c) < 1e-15, 0.0, c)
    s = np.where(np.abs(s) < 1e-15, 0.0, s)
    a = np.where(c >= 0, cone[:, RIGHT, None], cone[:, LEFT, None])
    b = np.where(s >= 0, cone[:, UP, None], cone[:, DOWN, None])
    return swing_direction(a * c, b * s)


def reference_nearest(d: F64, cone: F64, samples: int = 4096, chunk: int = 500) -> tuple[F64, F64]:
    """Brute-force nearest boundary directions, and the gap (rad) to the runner-up basin.

    Dense samples over the whole boundary; the two best sampled local maxima of ``d . b`` are refined by
    bisection on the sign of ``f(psi + e) - f(psi - e)`` inside +-1 sample.
    """
    psi = np.arange(samples) * (2 * np.pi / samples)
    h = 2 * np.pi / samples
    best = np.empty_like(d)
    gap = np.empty(len(d))
    for i0 in range(0, len(d), chunk):
        dd, cc = d[i0 : i0 + chunk], cone[i0 : i0 + chunk]
        m = len(dd)
        f = np.einsum("mpj,mj->mp", boundary(cc, psi), dd)
        is_max = (f >= np.roll(f, 1, axis=1)) & (f >= np.roll(f, -1, axis=1))
        top = np.argsort(np.where(is_max, -f, np.inf), axis=1)[:, :2]
        pts, vals = [], []
        for k in range(2):
            lo = psi[top[:, k]] - h
            hi = psi[top[:, k]] + h

            def fval(x: F64, dd: F64 = dd, cc: F64 = cc) -> F64:
                return np.asarray(np.einsum("mj,mj->m", boundary(cc, x[:, None])[:, 0], dd))

            for _ in range(60):
                mid = 0.5 * (lo + hi)
                e = 1e-6 * (hi - lo) / (2 * h) + 1e-9
                rising = fval(mid + e) > fval(mid - e)
                lo, hi = np.where(rising, mid, lo), np.where(rising, hi, mid)
            x = 0.5 * (lo + hi)
            cand = np.stack((boundary(cc, x[:, None])[:, 0], boundary(cc, psi[top[:, k]][:, None])[:, 0]), 1)
            cf = np.einsum("mcj,mj->mc", cand, dd)
            j = np.argmax(cf, axis=1)
            pts.append(cand[np.arange(m), j])
            vals.append(cf[np.arange(m), j])
        first = vals[0] >= vals[1]
        best[i0 : i0 + chunk] = np.where(first[:, None], pts[0], pts[1])
        d0, d1 = angle(dd, pts[0]), angle(dd, pts[1])
        far = angle(pts[0], pts[1]) > 1e-6
        gap[i0 : i0 + chunk] = np.where(far, np.abs(d0 - d1), np.inf)
    return best, gap


def random_cones(rng: np.random.Generator, m: int) -> F64:
    """Half-angles in [0, pi): uniform, with zero sides, tiny sides and wide (> 90 degree) sides mixed in."""
    cone = rng.uniform(0.0, 0.999 * np.pi, size=(m, 4))
    kind = rng.random((m, 4))
    cone[kind < 0.15] = 0.0
    tiny = (kind >= 0.15) & (kind < 0.22)
    cone[tiny] = 10.0 ** rng.uniform(-4, -1, size=int(tiny.sum()))
    return cone


# ------------------------------------------------------------------------------------------------------
# Swing cone: exactness against the brute-force reference
# ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_case() -> tuple[F64, F64, F64, F64, F64]:
    rng = np.random.default_rng(20240611)
    m = 10_000
    cone = random_cones(rng, m)
    d = unit(rng.normal(size=(m, 3)))
    # A third of the directions just outside the boundary, where the nearest point matters most.
    near = rng.random(m) < 0.33
    psi = rng.uniform(0, 2 * np.pi, size=(m, 1))
    b = boundary(cone, psi)[:, 0]
    d[near] = unit(b[near] + 0.05 * unit(rng.normal(size=(m, 3)))[near])
    out = clamp_cone(d, cone)
    inside = cone_contains(d, cone)
    ref, gap = reference_nearest(d[~inside], cone[~inside])
    return d, cone, out, ref, gap


def test_clamp_is_the_nearest_boundary_direction(random_case: tuple[F64, F64, F64, F64, F64]) -> None:
    d, cone, out, ref, gap = random_case
    inside = cone_contains(d, cone)
    assert 1000 < (~inside).sum() < len(d) - 1000, "the sample should mix inside and outside directions"
    do, oo = d[~inside], out[~inside]
    ours_dist, ref_dist = angle(do, oo), angle(do, ref)
    # Never farther than the reference's answer (the reference is exact to ~1e-9 here).
    assert (ours_dist - ref_dist).max() <= 1e-9, (
        f"clamp is farther than the brute-force nearest point by {(ours_dist - ref_dist).max():.3g} rad "
        f"for cone {cone[~inside][np.argmax(ours_dist - ref_dist)]}"
    )
    # And the same point, except where two basins tie (the medial axis): none expected in random data.
    clear = gap > 1e-7
    assert clear.mean() > 0.999
    err = angle(oo, ref)[clear]
    worst = int(np.argmax(err))
    assert err.max() <= 1e-6, (
        f"clamped direction {err.max():.3g} rad from the true nearest boundary direction "
        f"(d={do[clear][worst]}, cone={cone[~inside][clear][worst]})"
    )


def test_clamp_is_the_nearest_on_wide_cones() -> None:
    """All sides wider than 86 degrees: long arcs near -Y, where one arc can hold several basins."""
    rng = np.random.default_rng(31337)
    m = 4000
    cone = rng.uniform(1.5, 0.999 * np.pi, size=(m, 4))
    cone[rng.random((m, 4)) < 0.1] = 0.0
    d = unit(rng.normal(size=(m, 3)))
    d[: m // 2, 1] = -np.abs(d[: m // 2, 1])  # half of them from behind, where the cone wraps around
    d = unit(d)
    inside = cone_contains(d, cone)
    out = clamp_cone(d[~inside], cone[~inside])
    ref, gap = reference_nearest(d[~inside], cone[~inside])
    worse = angle(d[~inside], out) - angle(d[~inside], ref)
    assert worse.max() <= 1e-9, f"clamp farther than the nearest boundary point by {worse.max():.3g} rad"
    clear = gap > 1e-7
    assert angle(out, ref)[clear].max() <= 1e-6


def test_farther_is_a_lower_bound_on_the_distance(random_case: tuple[F64, F64, F64, F64, F64]) -> None:
    """`cone_floats.farther` (the scalar solvers' shortcut before a clamp) never says a direction is farther
    than a gap from its cone when the exact nearest boundary direction lies within it, and says so for most
    directions well outside (it would save nothing otherwise)."""
    from solvers import cone_floats

    d, cone, _out, ref, _gap = random_case
    inside = cone_contains(d, cone)
    do, co = d[~inside], cone[~inside]
    dist = angle(do, ref)
    rng = np.random.default_rng(7)
    told = 0
    for k in range(len(do)):
        x, y, z = (float(v) for v in do[k])
        c4 = tuple(float(v) for v in co[k])
        for gap in (0.5 * dist[k], dist[k] - 1e-6, dist[k] + 1e-9, dist[k] * float(rng.uniform(1.0, 3.0))):
            says = cone_floats.farther(x, y, z, c4, gap)  # type: ignore[arg-type]
            assert not (says and dist[k] <= gap + 1e-9), (
                f"farther() by {gap:.6g} rad, but the cone is {dist[k]:.6g} rad away (d={do[k]}, cone={co[k]})"
            )
        told += cone_floats.farther(x, y, z, c4, 0.25 * dist[k])  # type: ignore[arg-type]
    assert told > 0.5 * len(do), f"farther() proved a quarter of the distance for only {told} of {len(do)}"
    # Inside the cone (or on +Y) nothing is farther than 0.
    for x, y, z in ((0.0, 1.0, 0.0), (1e-3, 1.0, 0.0)):
        assert not cone_floats.farther(x, y, z, (0.5, 0.5, 0.5, 0.5), 0.0)


def test_inside_unchanged_and_output_inside(random_case: tuple[F64, F64, F64, F64, F64]) -> None:
    d, cone, out, _, _ = random_case
    inside = cone_contains(d, cone)
    assert np.array_equal(out[inside], d[inside]), "directions inside the cone must come back bit-identical"
    assert np.abs(np.linalg.norm(out, axis=1) - 1).max() < 1e-14, "clamped directions must be unit vectors"
    v = cone_violation(out, cone)
    assert v.max() <= 1e-9, f"clamped direction is {v.max():.3g} rad outside its cone"
    assert cone_contains(out, cone, tol=1e-9).all()


def test_violation_matches_distance(random_case: tuple[F64, F64, F64, F64, F64]) -> None:
    d, cone, _, ref, _ = random_case
    inside = cone_contains(d, cone)
    v = cone_violation(d, cone)
    assert np.all(v[inside] == 0.0)
    assert np.all(v[~inside] > 0.0)
    assert np.abs(v[~inside] - angle(d[~inside], ref)).max() <= 1e-9


def test_contains_with_tolerance_is_sound() -> None:
    rng = np.random.default_rng(7)
    cone = random_cones(rng, 5000)
    d = unit(rng.normal(size=(5000, 3)))
    for tol in (1e-6, 1e-3, 0.05):
        ok = cone_contains(d, cone, tol=tol)
        assert cone_violation(d[ok], cone[ok]).max(initial=0.0) <= tol + 1e-12
    assert np.array_equal(cone_contains(d, cone), cone_violation(d, cone) == 0.0)


def test_circular_cone_clamps_radially() -> None:
    rng = np.random.default_rng(8)
    m = 2000
    a = rng.uniform(0.01, 3.1, size=m)
    cone = np.repeat(a[:, None], 4, axis=1)
    d = unit(rng.normal(size=(m, 3)))
    out = clamp_cone(d, cone)
    theta = np.arctan2(np.hypot(d[:, 0], d[:, 2]), d[:, 1])
    outside = theta > a
    phi = np.arctan2(d[:, 2], d[:, 0])
    expect = swing_direction(a * np.cos(phi), a * np.sin(phi))
    assert angle(out[outside], expect[outside]).max() < 1e-9


def test_straight_backward_is_deterministic_and_goes_to_the_widest_side() -> None:
    back = np.array([[0.0, -1.0, 0.0]])
    for cone in (
        [0.3, 0.5, 0.4, 2.0],
        [2.5, 0.1, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [3.1, 3.1, 3.1, 3.1],
    ):
        c = np.array([cone])
        out = clamp_cone(back, c)
        assert np.all(np.isfinite(out))
        assert np.array_equal(out, clamp_cone(back, c)), "the answer at -Y must be deterministic"
        assert cone_violation(out, c)[0] <= 1e-12
        assert angle(out, back)[0] == pytest.approx(np.pi - max(cone), abs=1e-9)
    # Continuous approach to -Y from the widest side's direction lands near the same answer.
    c = np.array([[0.3, 0.5, 0.4, 2.0]])
    eps = unit(np.array([[1e-9, -1.0, 0.0]]))
    assert angle(clamp_cone(eps, c), clamp_cone(back, c))[0] < 1e-6


def test_zero_cone_is_the_rest_direction() -> None:
    rng = np.random.default_rng(9)
    d = unit(rng.normal(size=(100, 3)))
    out = clamp_cone(d, np.zeros((100, 4)))
    assert np.array_equal(out, np.tile([0.0, 1.0, 0.0], (100, 1)))


def test_hinge_projects_onto_its_arc() -> None:
    """left = right = 0: the cone is the arc of the Y-Z plane from `down` to `up`."""
    rng = np.random.default_rng(10)
    m = 3000
    up, down = rng.uniform(0, 3.1, m), rng.uniform(0, 3.1, m)
    cone = np.stack((up, down, np.zeros(m), np.zeros(m)), axis=1)
    d = unit(rng.normal(size=(m, 3)))
    out = clamp_cone(d, cone)
    assert np.all(out[:, 0] == 0.0), "a hinge must allow exactly no swing toward X"
    # Closed form: the angle in the Y-Z plane (toward +Z) of d's projection, clipped to [-down, up], or the
    # nearer end of the arc when the projection falls outside it.
    alpha = np.arctan2(d[:, 2], d[:, 1])
    ends = np.stack((swing_direction(0 * up, up), swing_direction(0 * down, -down)), 1)
    in_arc = (alpha <= up) & (alpha >= -down)
    proj = swing_direction(0 * alpha, alpha)
    end = ends[np.arange(m), np.argmax(np.einsum("mcj,mj->mc", ends, d), axis=1)]
    expect = np.where(in_arc[:, None], proj, end)
    assert angle(out, expect).max() < 1e-9


def test_half_cone_stays_on_its_side() -> None:
    rng = np.random.default_rng(11)
    m = 3000
    cone = rng.uniform(0.05, 2.5, size=(m, 4))
    cone[:, RIGHT] = 0.0
    d = unit(rng.normal(size=(m, 3)))
    out = clamp_cone(d, cone)
    assert np.all(out[:, 0] <= 0.0), "right = 0 allows no swing toward +X"
    ref, gap = reference_nearest(d, cone)
    inside = cone_contains(d, cone)
    clear = ~inside & (gap > 1e-7)
    assert angle(out[clear], ref[clear]).max() < 1e-6


def test_continuity() -> None:
    rng = np.random.default_rng(12)
    m = 4000
    cone = random_cones(rng, m)
    d = unit(rng.normal(size=(m, 3)))
    step = 1e-7
    d2 = unit(d + step * unit(rng.normal(size=(m, 3))))
    moved = angle(clamp_cone(d, cone), clamp_cone(d2, cone))
    _, gap = reference_nearest(d, cone)
    # Away from ties between two basins (the medial axis), a small input change moves the output little.
    clear = (gap > 1e-3) & (cone.min(axis=1) > 1e-3)
    ratio = moved[clear] / angle(d, d2)[clear]
    assert np.quantile(ratio, 0.99) < 5.0
    assert ratio.max() < 1e3, f"clamp jumped {moved[clear].max():.3g} rad for a {step} rad input change"


# ------------------------------------------------------------------------------------------------------
# Twist
# ------------------------------------------------------------------------------------------------------


def random_swings(rng: np.random.Generator, m: int, max_angle: float = 3.0) -> F64:
    """Rotations about axes perpendicular to Y (pure swings)."""
    phi = rng.uniform(0, 2 * np.pi, m)
    axis = np.stack((np.cos(phi), np.zeros(m), np.sin(phi)), -1)
    return axis_angle(axis, rng.uniform(0, max_angle, m))


def test_twist_decomposition_round_trips() -> None:
    rng = np.random.default_rng(20)
    m = 5000
    tau = rng.uniform(-np.pi, np.pi, m)
    rel = random_swings(rng, m) @ rot_y(tau)
    assert np.abs(twist_angle(rel) - tau).max() < 1e-12
    # Same as 2 atan2(q.y, q.w) from a quaternion of rel (wrapped to (-pi, pi]).
    r = rotations(rng, m)
    w = 0.5 * np.sqrt(np.maximum(0, 1 + r[:, 0, 0] + r[:, 1, 1] + r[:, 2, 2]))
    qy = (r[:, 0, 2] - r[:, 2, 0]) / (4 * w)
    expect = np.angle(np.exp(2j * np.arctan2(qy, w)))
    ok = w > 0.1
    assert np.abs(np.angle(np.exp(1j * (twist_angle(r)[ok] - expect[ok])))).max() < 1e-12
    assert twist_angle(rot_y(np.array([np.pi, -np.pi])))[1] == np.pi, "twist is wrapped to (-pi, pi]"


def test_clamp_twist_keeps_y_and_lands_in_range() -> None:
    rng = np.random.default_rng(21)
    m = 5000
    rel = rotations(rng, m)
    tmin = rng.uniform(-np.pi, np.pi, m)
    tmax = np.minimum(tmin + rng.uniform(0, 2 * np.pi, m), np.pi)
    out = clamp_twist(rel, tmin, tmax)
    assert np.abs(out[:, :, 1] - rel[:, :, 1]).max() < 1e-15, "clamping twist must not move the Y axis"
    tw = twist_angle(out)
    # In range going around the circle (a twist clamped to pi may read back as -pi + 1e-16).
    past_min = np.mod(tw - tmin + 1e-12, 2 * np.pi) - 1e-12
    assert np.all(past_min <= tmax - tmin + 1e-12)
    before = twist_angle(rel)
    inside = (before >= tmin) & (before <= tmax)
    assert np.array_equal(out[inside], rel[inside])
    # Nearest end around the circle.
    to_min = np.abs(np.angle(np.exp(1j * (tmin - before))))
    to_max = np.abs(np.angle(np.exp(1j * (tmax - before))))
    expect = np.where(to_min < to_max, tmin, tmax)
    assert np.abs(np.angle(np.exp(1j * (tw - expect))))[~inside].max() < 1e-12
    # Swing unchanged: out = rel @ Ry(delta).
    delta = rel.transpose(0, 2, 1) @ out
    assert np.abs(delta - rot_y(twist_angle(delta))).max() < 1e-12


def test_twist_wraps_around_the_circle() -> None:
    rel = rot_y(np.radians([-170.0]))
    out = clamp_twist(rel, np.radians([100.0]), np.radians([170.0]))
    assert np.degrees(twist_angle(out))[0] == pytest.approx(170.0)


# ------------------------------------------------------------------------------------------------------
# Frames
# ------------------------------------------------------------------------------------------------------


def test_apply_joint_limits() -> None:
    rng = np.random.default_rng(30)
    m = 4000
    ref, frame = rotations(rng, m), rotations(rng, m)
    cone = random_cones(rng, m)
    twist = np.sort(rng.uniform(-np.pi, np.pi, size=(m, 2)), axis=1)
    use_cone, use_twist = rng.random(m) < 0.6, rng.random(m) < 0.6
    out = apply_joint_limits(ref, frame, cone, use_cone, twist, use_twist)

    free = ~use_cone & ~use_twist
    assert np.array_equal(out[free], frame[free]), "rows without limits must pass through bit-identical"
    assert np.abs(out.transpose(0, 2, 1) @ out - np.eye(3)).max() < 1e-13
    assert np.abs(np.linalg.det(out) - 1).max() < 1e-13

    cv, tv = limit_violation(ref, out, cone, use_cone, twist, use_twist)
    assert cv.max() <= 1e-9 and tv.max() <= 1e-9

    # The Y axis (in ref) is the clamped Y, by the minimal rotation when the twist is not limited.
    rel_in = ref.transpose(0, 2, 1) @ frame
    rel_out = ref.transpose(0, 2, 1) @ out
    y_expect = np.where(use_cone[:, None], clamp_cone(rel_in[:, :, 1], cone), rel_in[:, :, 1])
    assert angle(rel_out[:, :, 1], y_expect).max() < 1e-12
    only_cone = use_cone & ~use_twist
    turn = out[only_cone] @ frame[only_cone].transpose(0, 2, 1)
    turn_angle = np.arccos(np.clip((np.trace(turn, axis1=1, axis2=2) - 1) / 2, -1, 1))
    y_angle = angle(rel_in[only_cone, :, 1], rel_out[only_cone, :, 1])
    assert np.abs(turn_angle - y_angle).max() < 1e-7, "the cone clamp must use the minimal rotation"

    # Frames already within their limits come back bit-identical (a second pass changes nothing).
    assert np.array_equal(apply_joint_limits(ref, out, cone, use_cone, twist, use_twist), out)


def test_apply_joint_limits_row_independence() -> None:
    rng = np.random.default_rng(31)
    m = 300
    ref, frame = rotations(rng, m), rotations(rng, m)
    cone = random_cones(rng, m)
    twist = np.sort(rng.uniform(-np.pi, np.pi, size=(m, 2)), axis=1)
    uc, ut = rng.random(m) < 0.5, rng.random(m) < 0.5
    full = apply_joint_limits(ref, frame, cone, uc, twist, ut)
    one = np.concatenate(
        [
            apply_joint_limits(
                ref[i : i + 1], frame[i : i + 1], cone[i : i + 1], uc[i : i + 1], twist[i : i + 1], ut[i : i + 1]
            )
            for i in range(0, m, 7)
        ]
    )
    assert np.abs(full[::7] - one).max() < 1e-12


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="shape"):
        clamp_cone(np.zeros((3, 2)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="rows"):
        clamp_cone(np.zeros((3, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="rows"):
        apply_joint_limits(
            np.zeros((2, 3, 3)),
            np.zeros((3, 3, 3)),
            np.zeros((3, 4)),
            np.ones(3, bool),
            np.zeros((3, 2)),
            np.ones(3, bool),
        )


# ------------------------------------------------------------------------------------------------------
# JointLimits
# ------------------------------------------------------------------------------------------------------


def test_joint_limits_none_and_validation() -> None:
    none = JointLimits.none(2, 3)
    assert none.cone.shape == (2, 3, 4) and none.twist.shape == (2, 3, 2)
    assert not none.use_cone.any() and not none.use_twist.any()

    good = {
        "cone": np.full((2, 3, 4), 0.5),
        "use_cone": np.ones((2, 3), bool),
        "twist": np.tile([-0.2, 0.3], (2, 3, 1)),
        "use_twist": np.ones((2, 3), bool),
    }
    JointLimits(**good)
    cases = [
        ("cone", lambda a: a.__setitem__((1, 2, 3), math.pi), r"cone\[1, 2\] \(right\)"),
        ("cone", lambda a: a.__setitem__((0, 1, 0), -0.1), r"cone\[0, 1\] \(up\)"),
        ("cone", lambda a: a.__setitem__((1, 0, 1), np.nan), r"cone\[1, 0\] \(down\)"),
        ("twist", lambda a: a.__setitem__((1, 1), [0.5, 0.1]), r"twist\[1, 1\]: min"),
        ("twist", lambda a: a.__setitem__((0, 2, 1), 4.0), r"twist\[0, 2\] \(max\)"),
    ]
    for name, change, message in cases:
        args = {k: v.copy() for k, v in good.items()}
        change(args[name])
        with pytest.raises(ValueError, match=message):
            JointLimits(**args)
    with pytest.raises(ValueError, match="use_twist"):
        JointLimits(**{**good, "use_twist": np.ones((3, 2), bool)})
    with pytest.raises(ValueError, match="cone must have shape"):
        JointLimits(**{**good, "cone": np.zeros((2, 3, 3))})
    # Stored read-only, so validated values cannot be changed behind the solver's back.
    limits = JointLimits(**good)
    with pytest.raises(ValueError):
        limits.cone[0, 0, 0] = 1.0


def test_joint_limits_messages_show_numbers_not_reprs() -> None:
    """Values in messages read as numbers (4 digits, and degrees), never as reprs (numpy 2: np.float64(...))."""
    args = {
        "cone": np.zeros((1, 2, 4)),
        "use_cone": np.ones((1, 2), bool),
        "twist": np.zeros((1, 2, 2)),
        "use_twist": np.ones((1, 2), bool),
    }
    args["cone"][0, 1, 2] = math.pi + 1.0 / 3.0
    with pytest.raises(ValueError) as cone_err:
        JointLimits(**args)
    args["cone"][0, 1, 2] = 0.0
    args["twist"][0, 0] = [0.5 + 1.0 / 3.0, 0.5]
    with pytest.raises(ValueError) as twist_err:
        JointLimits(**args)
    for err, shown in ((cone_err, "3.475 rad (199.1°)"), (twist_err, "0.8333 rad (47.75°)")):
        text = str(err.value)
        assert shown in text and "np." not in text and "3333" not in text, text


def test_joint_limits_twist_bounds_within_rounding_of_pi() -> None:
    """+-180 degrees stored as float32 is +-3.1415927, a hair outside [-pi, pi]: taken as +-pi."""
    pi32 = float(np.float32(math.pi))
    assert pi32 > math.pi
    limits = JointLimits(
        cone=np.zeros((1, 2, 4)),
        use_cone=np.zeros((1, 2), bool),
        twist=np.array([[[-pi32, pi32], [-pi32, -pi32]]]),
        use_twist=np.ones((1, 2), bool),
    )
    assert limits.twist[0, 0].tolist() == [-math.pi, math.pi]
    assert limits.twist[0, 1].tolist() == [-math.pi, -math.pi]
    for bad in (math.pi + 1e-4, -math.pi - 1e-4):
        with pytest.raises(ValueError, match=r"twist\[0, 1\]"):
            JointLimits(
                cone=np.zeros((1, 2, 4)),
                use_cone=np.zeros((1, 2), bool),
                twist=np.array([[[0.0, 0.0], [min(bad, 0.0), max(bad, 0.0)]]]),
                use_twist=np.ones((1, 2), bool),
            )


# ------------------------------------------------------------------------------------------------------
# Drawing geometry
# ------------------------------------------------------------------------------------------------------

RING_CONES = [
    [0.5, 0.5, 0.5, 0.5],
    [0.3, 0.8, 0.2, 1.2],
    [2.0, 1.7, 2.5, 1.6],  # wider than 90 degrees
    [0.6, 0.4, 0.5, 0.0],  # half-cone
    [1.0, 0.5, 0.0, 0.0],  # hinge
    [0.0, 0.0, 0.0, 0.0],
    [3.1, 0.0, 0.0, 0.9],
]


@pytest.mark.parametrize("cone", RING_CONES)
def test_ring_lies_on_the_boundary(cone: list[float]) -> None:
    c = np.array(cone)
    ring = cone_ring(c, 64)
    assert ring.shape == (64, 3)
    assert np.abs(np.linalg.norm(ring, axis=1) - 1).max() < 1e-14
    cc = np.tile(c, (64, 1))
    assert cone_violation(ring, cc).max() <= 1e-12, "ring points must be inside (on) the cone"
    # On the edge: a 1e-6 rad nudge in some direction leaves the cone (unless the cone is the point +Y).
    if c.max() > 0:
        nudges = np.array([[1, 0, 0], [-1, 0, 0], [0, 0, 1], [0, 0, -1], [0, -1, 0]], dtype=float)
        out_any = np.zeros(64, bool)
        for n in nudges:
            out_any |= ~cone_contains(unit(ring + 1e-6 * n), cc)
        assert out_any.all(), "every ring point must be on the cone's edge"
    # The four extremes are exact when n is a multiple of 4.
    tx = np.array([c[RIGHT], 0, -c[LEFT], 0])
    tz = np.array([0, c[UP], 0, -c[DOWN]])
    assert np.abs(ring[[0, 16, 32, 48]] - swing_direction(tx, tz)).max() < 1e-15
    if c.min() > 0:  # ordered around: the azimuth increases
        phi = np.unwrap(np.arctan2(ring[:, 2], ring[:, 0]))
        assert np.all(np.diff(phi) > 0)


@pytest.mark.parametrize("cone", RING_CONES)
def test_fan_is_well_formed(cone: list[float]) -> None:
    verts, tris = cone_fan(np.array(cone), n=48, length=2.5)
    assert verts.shape == (49, 3) and tris.shape == (48, 3)
    assert tris.dtype.kind == "i" and tris.min() == 0 and tris.max() == 48
    assert np.array_equal(verts[0], np.zeros(3))
    assert np.all(tris[:, 0] == 0)
    assert np.abs(np.linalg.norm(verts[1:], axis=1) - 2.5).max() < 1e-12
    assert np.array_equal(np.sort(tris[:, 1]), np.arange(1, 49)), "each rim vertex starts one triangle"
    assert np.array_equal(tris[:, 2], np.roll(tris[:, 1], -1)), "the fan closes"


def test_ring_rejects_too_few_points() -> None:
    with pytest.raises(ValueError, match="n >= 3"):
        cone_ring(np.zeros(4), 2)


def test_module_constants() -> None:
    assert lim.INSIDE_TOLERANCE <= 1e-9


def test_clamp_of_a_few_rows_is_the_nearest_boundary_direction() -> None:
    """Calls with a few rows (live solving: one chain, one joint) take a fixed-step search; same exactness."""
    rng = np.random.default_rng(2718)
    m = 1500
    cone = rng.uniform(0.05, 0.5 * np.pi, size=(m, 4))
    cone[rng.random((m, 4)) < 0.05] = 0.0
    d = unit(rng.normal(size=(m, 3)))
    psi = rng.uniform(0, 2 * np.pi, size=(m, 1))
    near = rng.random(m) < 0.5
    d[near] = unit(boundary(cone, psi)[:, 0][near] + 0.05 * unit(rng.normal(size=(m, 3)))[near])
    outside = ~cone_contains(d, cone)
    d, cone = d[outside], cone[outside]
    sizes = rng.integers(1, 5, size=len(d))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    starts = starts[starts < len(d)]
    out = np.concatenate([clamp_cone(d[s : s + n], cone[s : s + n]) for s, n in zip(starts, sizes, strict=False)])
    ref, gap = reference_nearest(d, cone)
    worse = angle(d, out) - angle(d, ref)
    assert worse.max() <= 1e-9, f"clamp farther than the nearest boundary point by {worse.max():.3g} rad"
    clear = gap > 1e-7
    assert clear.mean() > 0.99
    assert angle(out, ref)[clear].max() <= 1e-6


@pytest.mark.parametrize("cone", [[2.98, 0.98, 3.12, 0.02], [3.1, 3.1, 0.02, 3.12], [0.5, 3.1, 3.1, 0.01]])
def test_clamp_near_straight_backward_on_extreme_cones(cone: list[float]) -> None:
    """Behind the bone, near-180-degree sides next to near-zero ones put two basins close together."""
    rng = np.random.default_rng(5)
    d = unit(np.array([0.0, -1.0, 0.0]) + 0.4 * rng.normal(size=(500, 3)))
    c = np.repeat(np.array(cone)[None], len(d), axis=0)
    outside = ~cone_contains(d, c)
    d, c = d[outside], c[outside]
    ref, _ = reference_nearest(d, c, samples=16384)
    for out in (clamp_cone(d, c), np.concatenate([clamp_cone(d[i : i + 1], c[i : i + 1]) for i in range(len(d))])):
        worse = angle(d, out) - angle(d, ref)
        assert worse.max() <= 1e-9, f"clamp farther than the nearest boundary point by {worse.max():.3g} rad"
