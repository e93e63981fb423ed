"""Chains and trees built in code for the solver tests, plus independent checks of solver results.

Poses are built by forward kinematics from random joint rotations, so every "reachable" target here is
reached by some pose of the rig. The checks recompute what they verify (segment lengths, the tip by
forward kinematics from the returned frames and offsets) instead of trusting the solver's own numbers.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from solvers.limits import JointLimits
from solvers.rotations import axis_angle_matrix
from solvers.types import ChainProblem, SolveResult, TreeProblem

F64 = npt.NDArray[np.float64]


def addon_module(name: str) -> types.ModuleType:
    """`reach_ik.<name>` (e.g. 'core.solve'), imported as the add-on package's own module.

    core/ imports `..solvers` as the add-on package does. The checkout's own __init__.py imports bpy, so the
    package is stood up without running it: a bare module whose path is the checkout.
    """
    if "reach_ik" not in sys.modules:
        package = types.ModuleType("reach_ik")
        package.__path__ = [str(Path(__file__).resolve().parents[2])]
        sys.modules["reach_ik"] = package
    return importlib.import_module(f"reach_ik.{name}")


def random_rotations(rng: np.random.Generator, shape: tuple[int, ...], max_angle: float = np.pi) -> F64:
    """Random rotations ``shape + (3, 3)``: uniform axes, angles uniform in [0, max_angle]."""
    axis = rng.normal(size=(*shape, 3))
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    angle = rng.uniform(0.0, max_angle, size=shape)
    return axis_angle_matrix(axis, angle)


def forward_kinematics(root: F64, base: F64, ref_local: F64, local: F64, offsets: F64) -> tuple[F64, F64]:
    """Positions ``(K, N+1, 3)`` and frames ``(K, N, 3, 3)`` with ``frame_i = parent @ ref_local_i @ local_i``."""
    k, n = offsets.shape[:2]
    positions = np.empty((k, n + 1, 3))
    frames = np.empty((k, n, 3, 3))
    positions[:, 0] = root
    parent = base
    for i in range(n):
        parent = parent @ ref_local[:, i] @ local[:, i]
        frames[:, i] = parent
        positions[:, i + 1] = positions[:, i] + np.einsum("kij,kj->ki", parent, offsets[:, i])
    return positions, frames


@dataclass
class Rig:
    """K chains of N bones: rest data and a current pose."""

    root: F64
    base: F64
    ref_local: F64
    offsets: F64
    positions: F64
    frames: F64

    def problem(self, targets: F64, **kwargs: Any) -> ChainProblem:
        return ChainProblem(
            positions=self.positions,
            frames=self.frames,
            offsets=self.offsets,
            ref_local=self.ref_local,
            base=self.base,
            targets=targets,
            **kwargs,
        )

    def pose(self, local: F64) -> tuple[F64, F64]:
        return forward_kinematics(self.root, self.base, self.ref_local, local, self.offsets)

    @property
    def lengths(self) -> F64:
        return np.asarray(np.linalg.norm(self.offsets, axis=-1), dtype=np.float64)


def make_rig(
    rng: np.random.Generator,
    k: int,
    n: int,
    connected: bool = True,
    bend: float = 0.6,
    rest_bend: float = 0.3,
) -> Rig:
    """Random chains: lengths in [0.2, 1.2], random base, rest slightly bent, current pose bent by ``bend``."""
    lengths = rng.uniform(0.2, 1.2, size=(k, n))
    if connected:
        offsets = np.zeros((k, n, 3))
        offsets[..., 1] = lengths
    else:
        direction = rng.normal(size=(k, n, 3))
        direction[..., 1] += 1.5  # mostly along Y, like real disconnected bones
        offsets = direction / np.linalg.norm(direction, axis=-1, keepdims=True) * lengths[..., None]
    base = random_rotations(rng, (k,))
    ref_local = random_rotations(rng, (k, n), rest_bend)
    root = rng.uniform(-2.0, 2.0, size=(k, 3))
    local = random_rotations(rng, (k, n), bend)
    positions, frames = forward_kinematics(root, base, ref_local, local, offsets)
    return Rig(root, base, ref_local, offsets, positions, frames)


def reachable_targets(rng: np.random.Generator, rig: Rig, max_angle: float = np.pi) -> F64:
    """Tips of random poses of the rig: always reachable."""
    local = random_rotations(rng, rig.offsets.shape[:2], max_angle)
    positions, _ = rig.pose(local)
    return positions[:, -1].copy()


def check_result(problem: ChainProblem, result: SolveResult, length_rtol: float = 1e-9) -> None:
    """Invariants every chain result must satisfy, checked independently of the solver."""
    k, n = problem.n_chains, problem.n_bones
    assert result.positions.shape == (k, n + 1, 3), f"positions shape {result.positions.shape}"
    assert result.frames.shape == (k, n, 3, 3), f"frames shape {result.frames.shape}"
    assert np.isfinite(result.positions).all(), "positions must be finite"
    assert np.isfinite(result.frames).all(), "frames must be finite"
    # Frames are rotations: orthonormal and right-handed.
    gram = np.einsum("...ji,...jl->...il", result.frames, result.frames)
    ortho = np.abs(gram - np.eye(3)).max()
    assert ortho < 1e-9, f"frames must be orthonormal; worst error {ortho:.3g}"
    det = np.linalg.det(result.frames)
    assert np.abs(det - 1).max() < 1e-9, f"frames must be right-handed (det +1); got {det.min():.6g}"
    # Root never moves.
    assert np.array_equal(result.positions[:, 0], problem.positions[:, 0]), "the root moved"
    # Segment lengths preserved.
    seg = np.linalg.norm(np.diff(result.positions, axis=1), axis=-1)
    lengths = np.linalg.norm(problem.offsets, axis=-1)
    worst = np.abs(seg / lengths - 1).max()
    assert worst <= length_rtol, f"segment lengths must be preserved; worst relative error {worst:.3g}"
    # positions[i+1] == positions[i] + frames[i] @ offsets[i], by forward kinematics from the frames.
    fk = result.positions[:, :1] + np.cumsum(np.einsum("knij,knj->kni", result.frames, problem.offsets), axis=1)
    err = np.abs(fk - result.positions[:, 1:]).max()
    assert err < 1e-9 * max(1.0, float(lengths.sum(axis=1).max())), (
        f"joints must follow from frames and offsets (forward kinematics); worst error {err:.3g}"
    )
    # Connected bones (offset along +Y): the frame's Y axis runs along the segment, head to next joint.
    along_y = (np.abs(problem.offsets[..., 0]) < 1e-15) & (np.abs(problem.offsets[..., 2]) < 1e-15)
    seg_dir = np.diff(result.positions, axis=1) / seg[..., None]
    y_dot = np.einsum("kni,kni->kn", result.frames[..., :, 1], seg_dir)
    assert (y_dot[along_y] > 1 - 1e-9).all(), "connected bones: frame Y axis must point along the segment"
    tip_err = np.linalg.norm(fk[:, -1] - problem.targets, axis=-1)
    assert np.allclose(tip_err, result.residual, rtol=1e-9, atol=1e-12), "residual must be |tip - target|"
    assert np.array_equal(result.reached, result.residual <= problem.tolerance), "reached == residual <= tol"


def same_result(a: SolveResult, b: SolveResult) -> bool:
    """Bit-identical results."""
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("positions", "frames", "iterations", "residual", "reached", "status")
    )


def limits_from(cone: F64 | None, twist: F64 | None, k: int, n: int) -> JointLimits:
    """JointLimits with the same cone ``[up, down, left, right]`` / twist range on every bone."""
    return JointLimits(
        cone=np.broadcast_to(np.zeros(4) if cone is None else cone, (k, n, 4)).copy(),
        use_cone=np.full((k, n), cone is not None),
        twist=np.broadcast_to(np.zeros(2) if twist is None else twist, (k, n, 2)).copy(),
        use_twist=np.full((k, n), twist is not None),
    )


# ---------------------------------------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------------------------------------


@dataclass
class TreeRig:
    parents: npt.NDArray[np.int64]
    head_offsets: F64
    tail_offsets: F64
    ref_local: F64
    base: F64
    root: F64
    heads: F64
    frames: F64
    effectors: npt.NDArray[np.int64]

    def pose(self, local: F64) -> tuple[F64, F64, F64]:
        """Heads, frames and tails of the pose with local rotations ``local`` (B, 3, 3)."""
        b = self.parents.shape[0]
        heads = np.empty((b, 3))
        frames = np.empty((b, 3, 3))
        for i in range(b):
            p = self.parents[i]
            if p < 0:
                frames[i] = self.base @ self.ref_local[i] @ local[i]
                heads[i] = self.root
            else:
                frames[i] = frames[p] @ self.ref_local[i] @ local[i]
                heads[i] = heads[p] + frames[p] @ self.head_offsets[i]
        tails = heads + np.einsum("bij,bj->bi", frames, self.tail_offsets)
        return heads, frames, tails

    def problem(self, targets: F64, **kwargs: Any) -> TreeProblem:
        return TreeProblem(
            parents=self.parents,
            heads=self.heads,
            frames=self.frames,
            head_offsets=self.head_offsets,
            tail_offsets=self.tail_offsets,
            ref_local=self.ref_local,
            base=self.base,
            effectors=self.effectors,
            targets=targets,
            **kwargs,
        )


def make_tree(
    rng: np.random.Generator,
    parents: list[int],
    effectors: list[int],
    offset_children: dict[int, list[F64]] | None = None,
    bend: float = 0.4,
) -> TreeRig:
    """A tree from a parent list. Children are connected (head at the parent's tail) unless
    ``offset_children[parent]`` gives their head offsets in order."""
    b = len(parents)
    lengths = rng.uniform(0.3, 1.0, size=b)
    tail_offsets = np.zeros((b, 3))
    tail_offsets[:, 1] = lengths
    head_offsets = np.zeros((b, 3))
    counters: dict[int, int] = {}
    for i, p in enumerate(parents):
        if p < 0:
            continue
        if offset_children and p in offset_children:
            j = counters.get(p, 0)
            counters[p] = j + 1
            head_offsets[i] = offset_children[p][j]
        else:
            head_offsets[i] = tail_offsets[p]
    ref_local = random_rotations(rng, (b,), 0.5)
    base = random_rotations(rng, ())
    root = rng.uniform(-1, 1, size=3)
    rig = TreeRig(
        parents=np.array(parents, dtype=np.int64),
        head_offsets=head_offsets,
        tail_offsets=tail_offsets,
        ref_local=ref_local,
        base=base,
        root=root,
        heads=np.zeros((b, 3)),
        frames=np.zeros((b, 3, 3)),
        effectors=np.array(effectors, dtype=np.int64),
    )
    heads, frames, _ = rig.pose(random_rotations(rng, (b,), bend))
    rig.heads = heads
    rig.frames = frames
    return rig


def comfortable(rig: Rig, targets: F64, margin: float = 0.03) -> npt.NDArray[np.bool_]:
    """Targets reachable with a margin: not within ``margin`` (of the chain length) of full extension or
    of the closest approach. FABRIK and CCD converge arbitrarily slowly at those boundaries, so tests
    that demand a tolerance within an iteration cap use these."""
    lengths = rig.lengths
    total = lengths.sum(axis=1)
    closest = np.maximum(0.0, 2 * lengths.max(axis=1) - total)
    d = np.linalg.norm(targets - rig.root, axis=1)
    return np.asarray((d < total * (1 - margin)) & (d > closest + margin * total))


# ---------------------------------------------------------------------------------------------------------
# Rigs shaped like the Blender-tier ones (tests/blender/rigs.py chain_rig, demo/rigs.py chain_bones)
# ---------------------------------------------------------------------------------------------------------


def bone_frame(direction: F64) -> F64:
    """Blender's rest frame of a bone with roll 0: the minimal rotation taking +Y onto ``direction``."""
    y = np.array([0.0, 1.0, 0.0])
    d = np.asarray(direction, dtype=np.float64)
    d = d / np.linalg.norm(d)
    axis = np.cross(y, d)
    s = float(np.linalg.norm(axis))
    if s < 1e-12:
        return np.eye(3) if d[1] > 0 else np.diag([1.0, -1.0, -1.0])
    return np.asarray(axis_angle_matrix((axis / s)[None], np.array([np.arctan2(s, float(d @ y))]))[0])


def zigzag_rig(n: int, length: float = 1.0, bend: float = 0.15, k: int = 1) -> Rig:
    """K copies of a connected chain of n bones along +Z, zig-zagging in X by ``bend * length``, at rest.

    Head ``i+1`` is tail ``i`` = head ``i`` + ``(+-bend * length, 0, length)`` (first bone toward -X), as in
    ``tests/blender/rigs.py``'s ``chain_rig`` (bend 0.15, length 1) and the demo's ``chain_bones`` (bend
    0.08, length 0.1). Base is the identity; the pose is the rest pose.
    """
    heads = [np.zeros(3)]
    for i in range(n):
        heads.append(heads[-1] + np.array([bend * length * (1 if i % 2 else -1), 0.0, length]))
    joints = np.array(heads)
    rest = np.array([bone_frame(joints[i + 1] - joints[i]) for i in range(n)])
    ref_local = np.empty((n, 3, 3))
    ref_local[0] = rest[0]
    for i in range(1, n):
        ref_local[i] = rest[i - 1].T @ rest[i]
    offsets = np.zeros((n, 3))
    offsets[:, 1] = np.linalg.norm(np.diff(joints, axis=0), axis=1)

    def tile(a: F64) -> F64:
        return np.ascontiguousarray(np.broadcast_to(a, (k, *a.shape)))

    return Rig(tile(joints[0]), tile(np.eye(3)), tile(ref_local), tile(offsets), tile(joints), tile(rest))


def quaternion_pose(rng: np.random.Generator, shape: tuple[int, ...], spread: float) -> F64:
    """Local rotations like the Blender tests' ``_reachable_target``: per bone a random axis (normal draw),
    then an angle uniform in [-spread, spread], drawn in that order bone after bone."""
    out = np.empty((*shape, 3, 3))
    for index in np.ndindex(*shape):
        axis = rng.normal(size=3)
        angle = rng.uniform(-spread, spread)
        out[index] = axis_angle_matrix((axis / np.linalg.norm(axis))[None], np.array([angle]))[0]
    return out


def euler_xyz(angles: F64) -> F64:
    """Blender's XYZ Euler rotation matrices ``Rz @ Ry @ Rx`` of angles ``(..., 3)``."""
    x, y, z = (
        axis_angle_matrix(np.broadcast_to(e, (*angles.shape[:-1], 3)), angles[..., i]) for i, e in enumerate(np.eye(3))
    )
    return np.asarray(z @ y @ x)


def wave_pose(n: int, t: float, amplitude: float) -> F64:
    """``bench/live.py``'s smoothly moving pose at time ``t``: per bone i the XYZ Euler angles
    ``(a sin(t + 0.7i), a/2 sin(1.3t + i), a cos(0.9t + 0.3i))``, as ``(1, n, 3, 3)`` local rotations."""
    i = np.arange(n)
    angles = np.stack(
        [amplitude * np.sin(t + 0.7 * i), 0.5 * amplitude * np.sin(1.3 * t + i), amplitude * np.cos(0.9 * t + 0.3 * i)],
        axis=-1,
    )
    return euler_xyz(angles)[None]


# ---------------------------------------------------------------------------------------------------------
# Harsh joint limits (issue 28): a ball-like first joint, then hinges, half-cones and narrow cones
# ---------------------------------------------------------------------------------------------------------

HARSH_STARTS = ("rest", "pose")
"""Where a harsh problem starts: the rest pose, or another random pose inside the limits."""


def harsh_limits(rng: np.random.Generator, k: int, n: int) -> JointLimits:
    """Limits as a rigger sets them on fingers, insect legs, mechanical arms and converted knees.

    Bone 0 is ball-like (every side 35-85 degrees). Every other bone is, at random, a hinge (swings
    about X only: left = right = 0, up 30-140 degrees, down 0-30), a half-cone (one side zero, the
    others 20-85 degrees) or a narrow cone (every side 3-17 degrees). Twist is locked on every bone (as
    Blender's IK Lock Y), so every roll mode reaches the same poses. Sides: [up, down, left, right].
    """
    cone = np.empty((k, n, 4))
    cone[:, 0] = rng.uniform(0.6, 1.5, size=(k, 4))
    kind = rng.integers(0, 3, size=(k, n))
    kind[:, 0] = -1
    hinge, half, narrow = kind == 0, kind == 1, kind == 2
    cone[hinge] = np.stack(
        (rng.uniform(0.5, 2.4, hinge.sum()), rng.uniform(0.0, 0.5, hinge.sum()), *np.zeros((2, hinge.sum()))),
        axis=-1,
    )
    sides = rng.uniform(0.35, 1.5, size=(half.sum(), 4))
    sides[np.arange(half.sum()), rng.integers(0, 4, half.sum())] = 0.0
    cone[half] = sides
    cone[narrow] = rng.uniform(0.05, 0.3, size=(narrow.sum(), 4))
    return JointLimits(
        cone=cone,
        use_cone=np.ones((k, n), dtype=bool),
        twist=np.zeros((k, n, 2)),
        use_twist=np.ones((k, n), dtype=bool),
    )


def inside_limits(rng: np.random.Generator, limits: JointLimits, shrink: float = 0.95) -> F64:
    """Random twist-free local rotations (``ref^T @ frame``) whose swing lies inside the (shrunk) cones:
    uniform in the ellipse quadrants of the swing plane (+Z is up, +X right)."""
    shape = limits.use_cone.shape
    phi = rng.uniform(0, 2 * np.pi, size=shape)
    r = shrink * np.sqrt(rng.random(shape))
    c, s = np.cos(phi), np.sin(phi)
    a = np.where(c >= 0, limits.cone[..., 3], limits.cone[..., 2])
    b = np.where(s >= 0, limits.cone[..., 0], limits.cone[..., 1])
    tx, tz = r * a * c, r * b * s
    angle = np.hypot(tx, tz)
    # The swing turns +Y toward (tx, 0, tz): about the axis Y x (tx, 0, tz) = (tz, 0, -tx).
    axis = np.stack((tz, np.zeros_like(tz), -tx), axis=-1)
    axis = np.where(angle[..., None] > 0, axis / np.maximum(angle, 1e-300)[..., None], [1.0, 0.0, 0.0])
    return axis_angle_matrix(axis, angle)


def harsh_problem(seed: int, k: int, n: int, start: str, **kwargs: Any) -> ChainProblem:
    """K random chains of N bones under :func:`harsh_limits`; each target is the tip of a random pose
    inside the limits (so reachable); the chains start from their rest pose (``start='rest'``) or from
    another random pose inside the limits (``'pose'``)."""
    rng = np.random.default_rng(seed)
    rig = make_rig(rng, k, n, connected=True, bend=0.0)
    limits = harsh_limits(rng, k, n)
    target_pose, _ = rig.pose(inside_limits(rng, limits))
    if start == "rest":
        rig.positions, rig.frames = rig.pose(np.broadcast_to(np.eye(3), (k, n, 3, 3)).copy())
    else:
        rig.positions, rig.frames = rig.pose(inside_limits(rng, limits))
    return rig.problem(target_pose[:, -1].copy(), limits=limits, **kwargs)


_DEG = np.pi / 180.0


def coincidence_limb(tolerance: float = 1e-6) -> tuple[ChainProblem, np.ndarray, np.ndarray, float]:
    """A limb (one chain, no lower limits) whose analytic pose reaches its target only by coincidence: the
    upper bone's circular cone moves the elbow the law of cosines aimed (toward the pole) along the circle of
    elbows that reach, 50 degrees off the pole's plane (`solvers.two_bone.elbow_moved`). Returns the problem,
    the cone's axis, where the clamp puts the elbow, and the cone's half-angle."""
    d = 1.2
    rho = np.sqrt(1.0 - d * d / 4.0)
    target = np.array([0.0, d, 0.0])

    def on_circle(phi: float) -> np.ndarray:
        return np.array([rho * np.cos(phi), d / 2.0, rho * np.sin(phi)])

    aimed, moved = on_circle(0.0), on_circle(50.0 * _DEG)
    normal = np.cross(aimed, moved)
    normal /= np.linalg.norm(normal)
    half = 20.0 * _DEG
    axis = axis_angle_matrix(normal[None], np.array([half]))[0] @ moved  # beyond `moved`, away from `aimed`
    # The upper bone's rest frame turns +Y onto the cone's axis; the lower bone continues it.
    y = np.array([0.0, 1.0, 0.0])
    turn = np.cross(y, axis)
    rest0 = axis_angle_matrix((turn / np.linalg.norm(turn))[None], np.array([np.arccos(axis @ y)]))[0]
    ref_local = np.stack((rest0, np.eye(3)))[None]
    offsets = np.array([[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]])
    cone = np.zeros((1, 2, 4))
    cone[0, 0] = half
    use_cone = np.array([[True, False]])
    limits = JointLimits(cone, use_cone, np.zeros((1, 2, 2)), np.zeros((1, 2), dtype=bool))
    base = np.eye(3)[None]
    start_pos, start_frames = forward_kinematics(
        np.zeros((1, 3)), base, ref_local, np.tile(np.eye(3), (1, 2, 1, 1)), offsets
    )
    problem = ChainProblem(
        start_pos,
        start_frames,
        offsets,
        ref_local,
        base,
        target[None],
        (2.0 * aimed)[None],
        limits,
        tolerance=tolerance,
    )
    return problem, axis, moved, half
