"""Rotation helpers: every output is a rotation and does what it says, including degenerate inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.rotations import (
    NEAR_OPPOSITE,
    any_perpendicular,
    axis_angle_matrix,
    cross,
    fit_rotation,
    matrix_to_quaternion,
    minimal_rotation,
    nearest_rotation,
    normalize,
    orthonormalize,
    quaternion_to_matrix,
    rotation_between,
    rotvec_matrix,
    skew,
)

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def unit(rng: np.random.Generator, m: int) -> np.ndarray:
    v = rng.normal(size=(m, 3))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def assert_rotations(r: np.ndarray, what: str) -> None:
    gram = np.einsum("...ji,...jk->...ik", r, r)
    err = np.abs(gram - np.eye(3)).max()
    assert err < 1e-12, f"{what}: not orthonormal (error {err:.3g})"
    assert np.allclose(np.linalg.det(r), 1.0, atol=1e-12), f"{what}: det must be +1"


@settings(derandomize=True, max_examples=40, deadline=None)
@given(SEEDS)
def test_minimal_rotation_maps_a_to_b(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = unit(rng, 64), unit(rng, 64)
    # Include exact and near opposites, and identical vectors.
    b[:8] = -a[:8]
    b[8:16] = -a[8:16] + 1e-7 * unit(rng, 8)
    b[8:16] /= np.linalg.norm(b[8:16], axis=1, keepdims=True)
    b[16:20] = a[16:20]
    r = minimal_rotation(a, b)
    assert_rotations(r, "minimal_rotation")
    err = np.abs(np.einsum("mij,mj->mi", r, a) - b).max()
    assert err < 1e-12, f"R @ a must equal b; worst error {err:.3g}"
    # Minimal: the rotation angle equals the angle between a and b (away from opposites).
    angle = np.arccos(np.clip((np.trace(r, axis1=1, axis2=2) - 1) / 2, -1, 1))
    between = np.arccos(np.clip(np.einsum("mi,mi->m", a, b), -1, 1))
    assert np.allclose(angle[20:], between[20:], atol=1e-7), "rotation angle must be the angle between"


def test_minimal_rotation_opposite_uses_fallback_axis() -> None:
    a = np.array([[0.0, 1.0, 0.0]])
    r = minimal_rotation(a, -a, fallback_axis=np.array([[1.0, 0.0, 0.0]]))
    assert np.allclose(r, np.diag([1.0, -1.0, -1.0])), "half turn about the fallback axis X expected"


@settings(derandomize=True, max_examples=30, deadline=None)
@given(SEEDS)
def test_quaternion_round_trip(seed: int) -> None:
    rng = np.random.default_rng(seed)
    axis = unit(rng, 50)
    angle = rng.uniform(0, np.pi, 50)
    angle[:3] = [0.0, np.pi, np.pi - 1e-9]
    m = axis_angle_matrix(axis, angle)
    assert_rotations(m, "axis_angle_matrix")
    q = matrix_to_quaternion(m)
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0), "quaternions must be unit"
    assert (q[:, 0] >= 0).all(), "w >= 0 by convention"
    assert np.allclose(quaternion_to_matrix(q), m, atol=1e-12), "matrix -> quaternion -> matrix"


@settings(derandomize=True, max_examples=30, deadline=None)
@given(SEEDS)
def test_rotation_between_and_cap(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(40, 3)) * 3
    b = rng.normal(size=(40, 3)) * 0.1
    a[0] = 0.0  # nothing to aim: identity
    b[1] = -a[1]  # opposite
    r = rotation_between(a, b)
    assert_rotations(r, "rotation_between")
    assert np.allclose(r[0], np.eye(3)), "zero vector must give the identity"
    ua, ub = normalize(a[1:]), normalize(b[1:])
    assert np.allclose(np.einsum("mij,mj->mi", r[1:], ua), ub, atol=1e-9), "R turns a onto b"
    capped = rotation_between(a, b, max_angle=0.1)
    angle = np.arccos(np.clip((np.trace(capped, axis1=1, axis2=2) - 1) / 2, -1, 1))
    assert (angle <= 0.1 + 1e-9).all(), "max_angle caps each rotation"


@settings(derandomize=True, max_examples=30, deadline=None)
@given(SEEDS)
def test_orthonormalize_and_nearest_rotation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = axis_angle_matrix(unit(rng, 20), rng.uniform(0, np.pi, 20))
    noisy = r + 1e-4 * rng.normal(size=r.shape)
    o = orthonormalize(noisy)
    assert_rotations(o, "orthonormalize")
    y = noisy[:, :, 1] / np.linalg.norm(noisy[:, :, 1], axis=1, keepdims=True)
    assert np.allclose(o[:, :, 1], y), "orthonormalize keeps the Y axis direction"
    n = nearest_rotation(noisy)
    assert_rotations(n, "nearest_rotation")
    assert np.abs(n - r).max() < 1e-3, "nearest rotation of a slightly noisy rotation is close to it"
    degenerate = orthonormalize(np.zeros((2, 3, 3)))
    assert_rotations(degenerate, "orthonormalize of zeros")


@settings(derandomize=True, max_examples=30, deadline=None)
@given(SEEDS)
def test_fit_rotation_recovers_a_rotation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    r = axis_angle_matrix(unit(rng, 1), rng.uniform(0, np.pi, 1))[0]
    local = rng.normal(size=(5, 3))
    world = local @ r.T
    got = fit_rotation(local[None], world[None], rng.uniform(0.5, 2.0, (1, 5)))[0]
    assert np.allclose(got, r, atol=1e-10), "Kabsch must recover the rotation of exact data"


def test_any_perpendicular() -> None:
    v = np.array([[1.0, 0, 0], [0, 0, 1], [1, 1, 1], [0, 0, 0]])
    p = any_perpendicular(v)
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0), "unit vectors"
    assert np.allclose(np.einsum("mi,mi->m", p, v), 0.0), "perpendicular"


@settings(derandomize=True, max_examples=20, deadline=None)
@given(SEEDS)
def test_cross_is_numpy_cross_bit_for_bit(seed: int) -> None:
    # Both code paths (few vectors: one gather; many: strided products) must equal np.cross exactly.
    rng = np.random.default_rng(seed)
    for shape in ((1, 3), (7, 3), (2, 5, 3), (500, 3), (40, 9, 3)):
        a, b = rng.normal(size=shape), rng.normal(size=shape) * 1e3
        assert np.array_equal(cross(a, b), np.cross(a, b)), f"cross differs from np.cross for shape {shape}"
    a = rng.normal(size=(6, 3))
    assert np.array_equal(cross(a, a[:1]), np.cross(a, a[:1])), "broadcasting"
    v, w = rng.normal(size=(9, 3)), rng.normal(size=(9, 3))
    assert np.allclose(np.einsum("mij,mj->mi", skew(v), w), np.cross(v, w)), "skew(v) @ w == v x w"


@settings(derandomize=True, max_examples=20, deadline=None)
@given(SEEDS)
def test_rotvec_matrix(seed: int) -> None:
    rng = np.random.default_rng(seed)
    axis = unit(rng, 30)
    angle = rng.uniform(0, 3, 30)
    angle[:3] = [0.0, 1e-12, np.pi]
    r = rotvec_matrix(axis * angle[:, None])
    assert_rotations(r, "rotvec_matrix")
    assert np.allclose(r, axis_angle_matrix(axis, angle), atol=1e-14), "same as axis and angle"
    assert np.array_equal(rotvec_matrix(np.zeros((1, 3)))[0], np.eye(3)), "a zero vector is the identity"


@settings(derandomize=True, max_examples=20, deadline=None)
@given(SEEDS)
def test_rotation_between_fast_and_general_paths_agree(seed: int) -> None:
    # The common case skips trigonometry (minimal rotation by two reflections); rows that need the
    # general path (a zero vector, an opposite pair, a cap) send the whole batch there. Both must agree.
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(30, 3)), rng.normal(size=(30, 3)) * 2.0
    fast = rotation_between(a, b)
    with_zero = rotation_between(np.concatenate([a, np.zeros((1, 3))]), np.concatenate([b, b[:1]]))
    assert np.allclose(fast, with_zero[:-1], atol=1e-12), "fast and general paths must agree"
    capped = rotation_between(a, b, max_angle=10.0)  # a cap that never binds: still the fast path
    assert np.allclose(fast, capped, atol=1e-15)
    # Just outside the near-opposite threshold the minimal rotation still maps a onto b.
    a1 = unit(rng, 20)
    b1 = -a1 + 1.5 * NEAR_OPPOSITE * any_perpendicular(a1)
    b1 /= np.linalg.norm(b1, axis=1, keepdims=True)
    r = minimal_rotation(a1, b1)
    assert_rotations(r, "minimal_rotation near opposite")
    assert np.abs(np.einsum("mij,mj->mi", r, a1) - b1).max() < 1e-10, "R @ a must equal b near opposite"
