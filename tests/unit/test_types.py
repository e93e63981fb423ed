"""Input validation: bad input raises ValueError naming the field, the index and the bone/chain."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from solver_fixtures import make_rig, make_tree

from solvers import STATUS_NAMES, ChainProblem, JointLimits
from solvers.types import CAP, CONVERGED, STALLED, UNREACHABLE


def problem(k: int = 4, n: int = 3) -> ChainProblem:
    rig = make_rig(np.random.default_rng(0), k, n)
    return rig.problem(rig.positions[:, -1].copy())


def test_status_names() -> None:
    assert STATUS_NAMES[CONVERGED] == "CONVERGED" and STATUS_NAMES[CAP] == "CAP"
    assert STATUS_NAMES[STALLED] == "STALLED" and STATUS_NAMES[UNREACHABLE] == "UNREACHABLE"


def test_zero_length_offset_names_bone_and_chain() -> None:
    p = problem()
    offsets = p.offsets.copy()
    offsets[3, 1] = 0.0
    with pytest.raises(ValueError, match=re.escape("offsets[3, 1] has zero length: bone 1 of chain 3")):
        replace(p, offsets=offsets)


@pytest.mark.parametrize(
    ("field", "index", "words"),
    [
        ("positions", (2, 1, 0), "joint 1 of chain 2"),
        ("frames", (1, 2, 0, 0), "bone 2 of chain 1"),
        ("targets", (3, 2), "chain 3"),
        ("base", (0, 1, 1), "chain 0"),
    ],
)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_are_named(field: str, index: tuple[int, ...], words: str, bad: float) -> None:
    p = problem()
    arr = np.array(getattr(p, field))
    arr[index] = bad
    where = ", ".join(map(str, index))
    with pytest.raises(ValueError, match=re.escape(f"{field}[{where}] is {bad}: {words}")):
        replace(p, **{field: arr})


def test_wrong_shapes() -> None:
    p = problem()
    with pytest.raises(ValueError, match=re.escape("positions has shape (4, 3, 3); expected (K, N+1, 3)")):
        replace(p, positions=p.positions[:, :3])
    with pytest.raises(ValueError, match="targets has shape"):
        replace(p, targets=p.targets[:2])
    with pytest.raises(ValueError, match="offsets has shape"):
        replace(p, offsets=np.zeros((4, 0, 3)))
    with pytest.raises(ValueError, match=r"limits\.cone has shape"):
        replace(p, limits=JointLimits.none(4, 2))


def test_frames_must_be_rotations() -> None:
    p = problem()
    frames = p.frames.copy()
    frames[1, 0] *= 2.0
    with pytest.raises(ValueError, match=re.escape("frames[1, 0] is not a rotation")):
        replace(p, frames=frames)
    frames = p.frames.copy()
    frames[0, 2, :, 0] *= -1  # mirrored: det -1
    with pytest.raises(ValueError, match="bone 2 of chain 0"):
        replace(p, frames=frames)


def test_exact_rotations_skips_only_the_rotation_check() -> None:
    """`exact_rotations=True` trusts the frames (the rig's are Gram-Schmidt in float64); nothing else."""
    p = problem()
    fields = {name: getattr(p, name) for name in ("positions", "frames", "offsets", "ref_local", "base", "targets")}
    trusted = ChainProblem(**fields, exact_rotations=True)
    for name in ("frames", "ref_local", "base"):
        assert np.array_equal(getattr(trusted, name), getattr(p, name)), f"{name}: exact input is kept as given"
        assert not getattr(trusted, name).flags.writeable
    scaled = p.frames.copy()
    scaled[1, 0] *= 2.0
    assert np.array_equal(ChainProblem(**{**fields, "frames": scaled}, exact_rotations=True).frames, scaled), (
        "the caller's promise is taken: no check, no re-orthonormalization"
    )
    with pytest.raises(ValueError, match="not a rotation"):
        replace(ChainProblem(**{**fields, "frames": scaled}, exact_rotations=True))  # replace checks again
    broken = p.positions.copy()
    broken[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match=re.escape("positions[2, 1, 0] is nan")):
        ChainProblem(**{**fields, "positions": broken}, exact_rotations=True)
    with pytest.raises(ValueError, match="targets has shape"):
        ChainProblem(**{**fields, "targets": p.targets[:2]}, exact_rotations=True)


def test_trusted_problem_solves_as_the_checked_one() -> None:
    """`ChainProblem.trusted` (the rig core's live path) skips the checks but not the meaning."""
    from solvers import solve_fabrik

    p = problem()
    fields = {name: getattr(p, name) for name in ("positions", "frames", "offsets", "ref_local", "base", "targets")}
    trusted = ChainProblem.trusted(
        **fields, poles=None, limits=None, tolerance=p.tolerance, max_iterations=p.max_iterations, roll_mode=p.roll_mode
    )
    a, b = solve_fabrik(p), solve_fabrik(trusted)
    assert np.array_equal(a.positions, b.positions) and np.array_equal(a.status, b.status)
    k, n = p.n_chains, p.n_bones
    # Limits are still checked against the problem (here: for one bone too many).
    bad = JointLimits(
        np.zeros((k, n + 1, 4)), np.ones((k, n + 1), bool), np.zeros((k, n + 1, 2)), np.zeros((k, n + 1), bool)
    )
    with pytest.raises(ValueError, match="limits"):
        ChainProblem.trusted(**fields, poles=None, limits=bad, tolerance=1e-3, max_iterations=30, roll_mode="KEEP")


def test_settings_and_poles() -> None:
    p = problem()
    with pytest.raises(ValueError, match="roll_mode 'SPIN' is not one of 'KEEP', 'REST', 'NATURAL'"):
        replace(p, roll_mode="SPIN")
    with pytest.raises(ValueError, match="tolerance"):
        replace(p, tolerance=0.0)
    with pytest.raises(ValueError, match="max_iterations"):
        replace(p, max_iterations=-1)
    poles = np.full((4, 3), np.nan)
    poles[2, 0] = 1.0
    with pytest.raises(ValueError, match=re.escape("poles[2]")):
        replace(p, poles=poles)
    ok = replace(p, poles=np.full((4, 3), np.nan))
    assert ok.poles is not None and np.isnan(ok.poles).all(), "all-NaN rows mean no pole"


def test_arrays_are_read_only_float64_copies() -> None:
    p = problem()
    positions = np.array(p.positions)
    q = replace(p, positions=positions)
    positions[0, 0, 0] = 99.0
    assert q.positions[0, 0, 0] != 99.0, "the problem must not alias the caller's array"
    assert q.positions.dtype == np.float64 and not q.positions.flags.writeable


def test_float32_frames_are_accepted() -> None:
    p = problem()
    q = replace(p, frames=p.frames.astype(np.float32))
    err = np.abs(np.einsum("knji,knjl->knil", q.frames, q.frames) - np.eye(3)).max()
    assert err < 1e-14, "frames are re-orthonormalized to float64 accuracy"


def test_tree_validation() -> None:
    rng = np.random.default_rng(0)
    rig = make_tree(rng, [-1, 0, 1, 1], [2, 3])
    targets = np.zeros((2, 3))
    with pytest.raises(ValueError, match="topological order"):
        replace(rig.problem(targets), parents=np.array([-1, 2, 0, 1]))
    with pytest.raises(ValueError, match="bone 0 must be the root"):
        replace(rig.problem(targets), parents=np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="lists a bone twice"):
        replace(rig.problem(targets), effectors=np.array([2, 2]))
    with pytest.raises(ValueError, match=re.escape("weights[1] is -1.0: effector 1")):
        rig.problem(targets, weights=np.array([1.0, -1.0]))
    heads = rig.heads.copy()
    heads[2, 1] = np.nan
    with pytest.raises(ValueError, match=re.escape("heads[2, 1] is nan: bone 2")):
        replace(rig.problem(targets), heads=heads)
    tails = rig.tail_offsets.copy()
    tails[3] = 0.0
    with pytest.raises(ValueError, match=re.escape("tail_offsets[3] has zero length: bone 3")):
        replace(rig.problem(targets), tail_offsets=tails)


@pytest.mark.parametrize("k", [2, 40])  # few matrices (one stacked product) and many (column dot products)
def test_rotation_check_names_the_first_bad_matrix(k: int) -> None:
    p = problem(k=k)
    ref_local = p.ref_local.copy()
    ref_local[k - 1, 1] *= 1.001  # scaled: not orthonormal
    with pytest.raises(ValueError, match=re.escape(f"ref_local[{k - 1}, 1] is not a rotation")):
        replace(p, ref_local=ref_local)
    base = p.base.copy()
    base[k - 1, :, 2] *= -1  # mirrored
    with pytest.raises(ValueError, match=re.escape(f"base[{k - 1}] is not a rotation") + ".*det -1"):
        replace(p, base=base)
    ok = replace(p, frames=p.frames + 1e-7)  # float32-like noise passes and is cleaned up
    err = np.abs(np.einsum("knji,knjl->knil", ok.frames, ok.frames) - np.eye(3)).max()
    assert err < 1e-14, "frames are re-orthonormalized to float64 accuracy"
    y = (p.frames + 1e-7)[..., :, 1]
    y = y / np.linalg.norm(y, axis=-1, keepdims=True)
    assert np.allclose(ok.frames[..., :, 1], y, atol=1e-15), "re-orthonormalization keeps the Y axis"


def test_first_non_finite_field_is_reported_in_field_order() -> None:
    p = problem()
    positions, targets = np.array(p.positions), np.array(p.targets)
    positions[1, 2, 0] = np.nan
    targets[0, 0] = np.inf
    with pytest.raises(ValueError, match=re.escape("positions[1, 2, 0] is nan: joint 2 of chain 1")):
        replace(p, positions=positions, targets=targets)
