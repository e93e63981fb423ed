"""Solver inputs and results: frozen dataclasses of float64 arrays, plus input validation.

Every solver takes one of these problems and returns the matching result. The problems validate and
normalize their inputs once, in ``__post_init__``, so the solvers can trust shapes and values and stay
free of checks. Arrays are stored as read-only float64 copies: a solver can never modify a caller's
array, and a problem can be reused (for example with :func:`dataclasses.replace` to change the targets).

Conventions (see ``docs/design/solvers.md``): a bone's frame is a 3x3 rotation whose **columns** are its
X, Y, Z axes in the common space; a bone's ``offset`` is the vector from its head to the next joint in its
own frame, so ``next_joint = head + frame @ offset``.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass
from typing import Any, Final

import numpy as np

# Re-exported: the solver modules import the aliases from here.
from .arrays import F64 as F64
from .arrays import I8 as I8
from .arrays import I64 as I64
from .arrays import Bools as Bools
from .limits import JointLimits

CONVERGED: Final = 0
"""The end effector is within ``tolerance`` of its target."""
CAP: Final = 1
"""The iteration cap was hit while the solver was still making progress."""
STALLED: Final = 2
"""Progress stopped before reaching the target (limits, or a target that cannot be reached exactly)."""
UNREACHABLE: Final = 3
"""The target is out of reach (too far, too close, on the root, or blocked by a limit)."""
SOFT: Final = 4
"""The end effector reached its eased target (``ChainProblem.soft``), which trails the real one."""
STATUS_NAMES: Final = ("CONVERGED", "CAP", "STALLED", "UNREACHABLE", "SOFT")
"""Names of the status codes, indexed by code: ``STATUS_NAMES[result.status[k]]``."""

ROLL_MODES: Final = ("KEEP", "REST", "NATURAL")
"""Valid values of ``roll_mode`` (see the design doc for their meaning)."""

# Frames must be rotations to this accuracy. Blender hands us float32 matrices (error ~1e-7); anything
# worse means the caller forgot to remove scale, and solving would silently distort the bones.
ROTATION_TOLERANCE: Final = 1e-5
# An offset shorter than this (relative to the longest one, or absolutely for tiny rigs) cannot define a
# direction: normalizing it would amplify rounding noise into an arbitrary rotation.
ZERO_LENGTH: Final = 1e-12
_EYE: Final = np.eye(3)
# Up to this many matrices the rotation check takes one stacked matmul (fewest numpy calls); above, six
# column dot products (faster in bulk).
_FEW_MATRICES: Final = 64


def _describe_chain(name: str, index: tuple[int, ...]) -> str:
    """Say in words which chain element ``name[index]`` is, for error messages."""
    k = index[0] if index else 0
    if name == "positions" and len(index) >= 2:
        return f"joint {index[1]} of chain {k}"
    if name in {"frames", "offsets", "ref_local"} and len(index) >= 2:
        return f"bone {index[1]} of chain {k}"
    if name in {"base", "targets", "poles"}:
        return f"chain {k}"
    return f"element {index}"


def _describe_tree(name: str, index: tuple[int, ...]) -> str:
    """Say in words which tree element ``name[index]`` is, for error messages."""
    if not index:
        return "the tree"
    if name in {"targets", "weights", "effectors", "poles"}:
        return f"effector {index[0]}"
    if name == "base":
        return "the tree's base frame"
    return f"bone {index[0]}"


def _fmt_index(index: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in index)


def as_float_array(name: str, value: Any, shape: tuple[int, ...], expected: str) -> F64:
    """Return ``value`` as a read-only float64 copy of the given shape, or raise ``ValueError``.

    Parameters
    ----------
    name
        Field name, used in the error message.
    value
        Anything :func:`numpy.asarray` accepts.
    shape
        Required shape.
    expected
        Symbolic form of the shape for the message, e.g. ``"(K, N+1, 3)"``.

    Returns
    -------
    numpy.ndarray
        A new C-contiguous float64 array that is not writeable.
    """
    try:
        arr = np.array(value, dtype=np.float64, copy=True, order="C")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of numbers {expected}: {exc}") from exc
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}; expected {expected} = {shape}")
    arr.flags.writeable = False
    return arr


def load_arrays(fields: list[tuple[str, Any, tuple[int, ...], str]], describe: Any = _describe_chain) -> list[F64]:
    """Copy several inputs into one new float64 buffer; return read-only views of it, in field order.

    Each field is ``(name, value, shape, expected)`` as for :func:`as_float_array`, and fields are checked
    in the order given (the first wrong shape or non-finite value is the one reported). Finiteness is
    checked once over the whole buffer (one numpy call instead of one per field); only when that fails is
    the first bad element looked for, to name it in the message.
    """
    converted = []
    for name, value, shape, expected in fields:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be an array of numbers {expected}: {exc}") from exc
        if arr.shape != shape:
            raise ValueError(f"{name} has shape {arr.shape}; expected {expected} = {shape}")
        converted.append(arr)
    buffer = np.empty(sum(arr.size for arr in converted))
    views = []
    start = 0
    for arr in converted:
        view = buffer[start : start + arr.size].reshape(arr.shape)
        view[...] = arr
        start += arr.size
        views.append(view)
    if not np.isfinite(buffer).all():
        for (name, _, _, _), view in zip(fields, views, strict=True):
            check_finite(name, view, describe)
    for view in views:
        view.flags.writeable = False
    return views


def check_finite(name: str, arr: F64, describe: Any = _describe_chain) -> None:
    """Raise ``ValueError`` naming the first NaN or infinite element of ``arr``."""
    bad = ~np.isfinite(arr)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}[{_fmt_index(index)}] is {arr[index]}: {describe(name, index)}; every value must be finite"
        )


def check_rotations(name: str, arr: F64, describe: Any = _describe_chain) -> F64:
    """Check that every 3x3 matrix in ``arr`` is a rotation and return re-orthonormalized copies.

    The check is loose (``ROTATION_TOLERANCE``) so float32 data from Blender passes; the returned
    matrices are exact to float64 rounding so that results stay orthonormal.
    """
    return check_rotation_groups([(name, arr)], describe)[0]


def check_rotation_groups(groups: list[tuple[str, F64]], describe: Any = _describe_chain) -> list[F64]:
    """:func:`check_rotations` for several fields at once (one batched test and orthonormalization).

    The test is cheap: the largest deviation of ``M^T M`` from the identity over all matrices, and the
    handedness read from the re-orthonormalized frames (whose X is ``Y x Z`` by construction, so a
    mirrored input has its X column pointing against it). Only when it fails are the per-matrix error and
    determinant computed, to name the first bad matrix. The orthonormalization (Y kept, Z made
    perpendicular, X = Y x Z, as :func:`solvers.rotations.orthonormalize`) reuses the dot products of
    ``M^T M``, which are well conditioned once the test has passed.
    """
    from .rotations import cross

    shapes = [arr.shape[:-2] for _, arr in groups]
    if len(groups) > 1:
        flat = np.concatenate([arr.reshape(-1, 3, 3) for _, arr in groups])
    else:
        flat = groups[0][1].reshape(-1, 3, 3)
    out = np.empty(flat.shape)
    if flat.shape[0]:
        col_x, col_y, col_z = flat[:, :, 0], flat[:, :, 1], flat[:, :, 2]
        if flat.shape[0] <= _FEW_MATRICES:
            gram = np.matmul(np.ascontiguousarray(flat.transpose(0, 2, 1)), flat)
            worst = float(np.abs(gram - _EYE).max())
            yy, zy, zz = gram[:, 1, 1], gram[:, 2, 1], gram[:, 2, 2]
        else:
            # Many matrices: the six column products directly (stacked 3x3 matmul is slow in bulk).
            xx, yy, zz = (np.einsum("mi,mi->m", c, c) for c in (col_x, col_y, col_z))
            xy, xz, zy = (np.einsum("mi,mi->m", a, b) for a, b in ((col_x, col_y), (col_x, col_z), (col_z, col_y)))
            worst = max(float(np.abs(v - 1.0).max()) for v in (xx, yy, zz))
            worst = max(worst, *(float(np.abs(v).max()) for v in (xy, xz, zy)))
        if worst > ROTATION_TOLERANCE:
            for name, arr in groups:
                _explain_rotations(name, arr, describe)
        along = zy / yy
        out[:, :, 1] = col_y / np.sqrt(yy)[:, None]
        out[:, :, 2] = (col_z - along[:, None] * col_y) / np.sqrt(zz - along * zy)[:, None]
        out[:, :, 0] = cross(out[:, :, 1], out[:, :, 2])
        # X . (Y x Z) > 0 for a right-handed input: read it against the output's X = Y x Z.
        if float(np.einsum("mi,mi->m", col_x, out[:, :, 0]).min()) <= 0.0:
            for name, arr in groups:
                _explain_rotations(name, arr, describe)
    out.flags.writeable = False
    parts = []
    start = 0
    for shape in shapes:
        count = math.prod(shape)
        parts.append(out[start : start + count].reshape(*shape, 3, 3))
        start += count
    return parts


def _explain_rotations(name: str, arr: F64, describe: Any) -> None:
    """Raise ``ValueError`` naming the first matrix of ``arr`` that is not a rotation (the slow path)."""
    eye = np.eye(3)
    gram = np.einsum("...ji,...jk->...ik", arr, arr)
    err = np.abs(gram - eye).max(axis=(-2, -1)) if arr.size else np.zeros(arr.shape[:-2])
    det = np.linalg.det(arr) if arr.size else np.ones(arr.shape[:-2])
    bad = (err > ROTATION_TOLERANCE) | (det <= 0.0)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}[{_fmt_index(index)}] is not a rotation (orthonormal with det +1; error "
            f"{float(err[index]):.3g}, det {float(det[index]):.6g}): {describe(name, index)}; "
            "remove scale and shear from the matrix before solving"
        )


def check_lengths(name: str, offsets: F64, describe: Any = _describe_chain) -> None:
    """Raise ``ValueError`` if any offset is too short to define a direction."""
    if not offsets.size:
        return
    squares = np.einsum("...i,...i->...", offsets, offsets)
    scale = max(1.0, math.sqrt(float(squares.max())))
    if float(squares.min()) > (ZERO_LENGTH * scale) ** 2:
        return
    lengths = np.sqrt(squares)
    bad = lengths <= ZERO_LENGTH * scale
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}[{_fmt_index(index)}] has zero length: {describe(name, index)}; "
            "remove the bone from the chain or give it a length"
        )


def _check_settings(tolerance: float, max_iterations: int, roll_mode: str) -> tuple[float, int]:
    # Values are shown with str() or a format, never repr(): numpy 2 scalars repr as np.float64(...).
    tol = float(tolerance)
    if not math.isfinite(tol) or tol <= 0.0:
        raise ValueError(f"tolerance must be a finite number > 0, got {tol:.4g}")
    if isinstance(max_iterations, bool) or int(max_iterations) != max_iterations or max_iterations < 0:
        raise ValueError(f"max_iterations must be an integer >= 0, got {max_iterations}")
    if roll_mode not in ROLL_MODES:
        names = ", ".join(repr(m) for m in ROLL_MODES)
        raise ValueError(f"roll_mode '{roll_mode}' is not one of {names}")
    return tol, int(max_iterations)


def _check_limits(limits: JointLimits | None, k: int, n: int, where: str) -> None:
    """Check that the limit arrays have the shapes of the problem (values are limits.py's business)."""
    if limits is None:
        return
    expected = {
        "cone": ((k, n, 4), "(K, N, 4)"),
        "use_cone": ((k, n), "(K, N)"),
        "twist": ((k, n, 2), "(K, N, 2)"),
        "use_twist": ((k, n), "(K, N)"),
    }
    for field, (shape, text) in expected.items():
        arr = np.asarray(getattr(limits, field))
        if arr.shape != shape:
            raise ValueError(f"limits.{field} has shape {arr.shape}; expected {text} = {shape} for {where}")


def _per_chain(name: str, value: Any, k: int, low: float, high: float, expected: str) -> F64:
    """A ``(K,)`` per-chain setting as a read-only float64 copy, each value in ``[low, high)``."""
    arr = as_float_array(name, value, (k,), "(K,)")
    bad = ~((arr >= low) & (arr < high))  # True for NaN too
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{row}] is {arr[row]}: chain {row}; every value must be finite and {expected}")
    return arr


def _set(obj: object, name: str, value: object) -> None:
    # Frozen dataclasses forbid normal assignment; __post_init__ may still normalize its own fields.
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class ChainProblem:
    """K chains of N bones to solve, each toward one target (see ``docs/design/solvers.md``).

    Parameters
    ----------
    positions
        ``(K, N+1, 3)`` current joint positions: the N bone heads, then the tip bone's tail. Used as the
        warm start; ``positions[:, 0]`` is the root, which never moves.
    frames
        ``(K, N, 3, 3)`` current bone frames (columns X, Y, Z). ``'KEEP'`` keeps their twist.
    offsets
        ``(K, N, 3)`` head to next joint, in the bone's own frame. Never zero; ``|offset|`` is the segment
        length and is preserved exactly.
    ref_local
        ``(K, N, 3, 3)`` rest frame of bone i relative to its parent's frame (bone i-1, or ``base``).
    base
        ``(K, 3, 3)`` current frame of the chain root's parent (identity when it has none).
    targets
        ``(K, 3)`` where each chain's end effector (the tip bone's tail) should go.
    poles
        ``(K, 3)`` or None. A NaN row means "no pole" for that chain. A pole fixes the bend plane.
    limits
        :class:`solvers.limits.JointLimits` with arrays ``(K, N, ...)``, or None for no limits (fast).
    tolerance
        Distance under which a target counts as reached. Default 1e-3.
    max_iterations
        Iteration cap of the iterative solvers. Default 30.
    roll_mode
        ``'KEEP'`` (default), ``'REST'`` or ``'NATURAL'``.
    soft
        ``(K,)`` in [0, 1), or None (default: all 0, off). The fraction of each chain's (natural) length
        over which its reach eases out toward full extension (soft IK, :mod:`solvers.soft`): a target
        distance ``d`` from the root is remapped before solving, unchanged below ``(1 - soft) L`` and
        ``L - s exp(-(d - (L - s)) / s)`` above it (``s = soft L``), so the chain approaches full extension
        exponentially and never snaps straight. The residual, ``reached`` and the status are measured
        against the real target (status ``SOFT`` when only the eased one was reached).
    stretch
        ``(K,)`` >= 1, or None (default: all 1). How many times each chain's given length (its offsets)
        exceeds its natural length: the caller stretched the offsets, and the soft curve stays the natural
        chain's, scaled by this factor (eased distance ``min(d, stretch * curve(d; L / stretch))``). Only
        matters where ``soft > 0``.
    uniform_iterations
        False (default): each chain stops as soon as it converges or stalls. True: chains that converged
        keep iterating until every chain has converged (or stalled, or hit the cap), so all rows run the
        same number of iterations. For rows that are frames of one animation (a bake): redundant chains
        have many solutions, and stopping each frame at a different iteration lands on different ones,
        which makes the keys jitter; the same iteration count keeps the result continuous in the target.
    exact_rotations
        Init-only, not stored. False (default): ``frames``, ``ref_local`` and ``base`` are checked to be
        rotations (loosely, so float32 data passes) and re-orthonormalized. True: the caller guarantees
        they are rotations exact to float64 rounding (built by Gram-Schmidt in float64, or products of
        such) and both steps are skipped; shapes and finiteness are still checked. The rig layer builds
        its frames that way, and the check is most of the cost of building a problem of many frames.
        ``dataclasses.replace`` on a problem checks again (the default).

    Raises
    ------
    ValueError
        On wrong shapes, NaN or infinite values, zero-length offsets, frames that are not rotations, or
        invalid settings; the message names the field, the index and the bone/chain.
    """

    positions: F64
    frames: F64
    offsets: F64
    ref_local: F64
    base: F64
    targets: F64
    poles: F64 | None = None
    limits: JointLimits | None = None
    tolerance: float = 1e-3
    max_iterations: int = 30
    roll_mode: str = "KEEP"
    uniform_iterations: bool = False
    soft: F64 | None = None
    stretch: F64 | None = None
    exact_rotations: InitVar[bool] = False

    def __post_init__(self, exact_rotations: bool) -> None:
        offsets_in = np.asarray(self.offsets)
        if offsets_in.ndim != 3 or offsets_in.shape[2] != 3 or offsets_in.shape[1] < 1:
            raise ValueError(f"offsets has shape {offsets_in.shape}; expected (K, N, 3) with N >= 1 bones per chain")
        k, n = int(offsets_in.shape[0]), int(offsets_in.shape[1])
        offsets, positions, frames, ref_local, base, targets = load_arrays(
            [
                ("offsets", offsets_in, (k, n, 3), "(K, N, 3)"),
                ("positions", self.positions, (k, n + 1, 3), "(K, N+1, 3)"),
                ("frames", self.frames, (k, n, 3, 3), "(K, N, 3, 3)"),
                ("ref_local", self.ref_local, (k, n, 3, 3), "(K, N, 3, 3)"),
                ("base", self.base, (k, 3, 3), "(K, 3, 3)"),
                ("targets", self.targets, (k, 3), "(K, 3)"),
            ],
        )
        check_lengths("offsets", offsets)
        if not exact_rotations:
            frames, ref_local, base = check_rotation_groups(
                [("frames", frames), ("ref_local", ref_local), ("base", base)]
            )
        poles = None
        if self.poles is not None:
            poles = as_float_array("poles", self.poles, (k, 3), "(K, 3)")
            nan = np.isnan(poles)
            bad = (nan.any(axis=1) & ~nan.all(axis=1)) | np.isinf(poles).any(axis=1)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"poles[{row}] is {poles[row].tolist()}: chain {row}; a pole must be finite, or all NaN for no pole"
                )
        tol, max_it = _check_settings(self.tolerance, self.max_iterations, self.roll_mode)
        _check_limits(self.limits, k, n, f"{k} chains of {n} bones")
        soft = None if self.soft is None else _per_chain("soft", self.soft, k, 0.0, 1.0, "in [0, 1)")
        stretch = None if self.stretch is None else _per_chain("stretch", self.stretch, k, 1.0, math.inf, ">= 1")
        _set(self, "soft", soft)
        _set(self, "stretch", stretch)
        _set(self, "positions", positions)
        _set(self, "frames", frames)
        _set(self, "offsets", offsets)
        _set(self, "ref_local", ref_local)
        _set(self, "base", base)
        _set(self, "targets", targets)
        _set(self, "poles", poles)
        _set(self, "tolerance", tol)
        _set(self, "max_iterations", max_it)

    @classmethod
    def trusted(
        cls,
        positions: F64,
        frames: F64,
        offsets: F64,
        ref_local: F64,
        base: F64,
        targets: F64,
        poles: F64 | None,
        limits: JointLimits | None,
        tolerance: float,
        max_iterations: int,
        roll_mode: str,
    ) -> ChainProblem:
        """A problem built without any check, for a caller whose arrays are checked already.

        The rig core builds its problems from inputs it has checked (finite transforms, bones of non-zero
        length and scale, limits in range, float64 rotations from Gram-Schmidt): for one live update of a
        few bones, the checks cost as much as the scalar solve itself. Anything else uses the constructor.
        Joint limits are still checked (their values come from properties a script can set to NaN).
        """
        if limits is not None:
            k, n = int(offsets.shape[0]), int(offsets.shape[1])
            _check_limits(limits, k, n, f"{k} chains of {n} bones")
        problem = object.__new__(cls)
        for name, value in (
            ("positions", positions),
            ("frames", frames),
            ("offsets", offsets),
            ("ref_local", ref_local),
            ("base", base),
            ("targets", targets),
            ("poles", poles),
            ("limits", limits),
            ("tolerance", float(tolerance)),
            ("max_iterations", int(max_iterations)),
            ("roll_mode", roll_mode),
            ("uniform_iterations", False),
            ("soft", None),
            ("stretch", None),
        ):
            _set(problem, name, value)
        return problem

    @property
    def n_chains(self) -> int:
        """Number of chains K."""
        return int(self.offsets.shape[0])

    @property
    def n_bones(self) -> int:
        """Number of bones per chain N."""
        return int(self.offsets.shape[1])


@dataclass(frozen=True)
class SolveResult:
    """Solved chains and per-chain diagnostics.

    Attributes
    ----------
    positions
        ``(K, N+1, 3)`` joint positions; ``positions[:, i+1] == positions[:, i] + frames[:, i] @
        offsets[:, i]`` (the positions are computed from the frames).
    frames
        ``(K, N, 3, 3)`` bone frames, orthonormal and right-handed.
    iterations
        ``(K,)`` iterations spent on each chain (0 when no iteration was needed).
    residual
        ``(K,)`` distance from the end effector to its target.
    reached
        ``(K,)`` ``residual <= tolerance``.
    status
        ``(K,)`` int8 status code (``CONVERGED``, ``CAP``, ``STALLED``, ``UNREACHABLE``, ``SOFT``); names in
        ``STATUS_NAMES``.
    """

    positions: F64
    frames: F64
    iterations: I64
    residual: F64
    reached: Bools
    status: I8


@dataclass(frozen=True)
class TreeProblem:
    """One tree of B bones with E end effectors, for multi-effector FABRIK.

    Bones are in topological order: ``parents[b] < b``, and bone 0 is the only root (``parents[0] ==
    -1``). Every bone is placed by its parent: ``head[b] = head[p] + frame[p] @ head_offsets[b]``.

    Parameters
    ----------
    parents
        ``(B,)`` int, parent bone index, -1 for bone 0.
    heads
        ``(B, 3)`` current head positions (warm start). ``heads[0]`` is the root and never moves.
    frames
        ``(B, 3, 3)`` current bone frames (columns X, Y, Z).
    head_offsets
        ``(B, 3)`` head of bone b relative to its parent's head, in the parent's frame (row 0 unused).
        For a connected bone this is the parent's ``(0, length, 0)``. It may be zero (a head on its
        parent's head, like Rigify's face on spine.006).
    tail_offsets
        ``(B, 3)`` tail of each bone relative to its head in its own frame (Blender: ``(0, length, 0)``).
    ref_local
        ``(B, 3, 3)`` rest frame of each bone relative to its parent's frame (``base`` for bone 0).
    base
        ``(3, 3)`` current frame of the root bone's parent (identity when it has none).
    effectors
        ``(E,)`` int, the bones whose tails have targets (each bone at most once).
    targets
        ``(E, 3)`` target of each effector's tail.
    weights
        ``(E,)`` > 0, how strongly each effector pulls shared bones (default: all 1).
    limits
        :class:`solvers.limits.JointLimits` with arrays ``(1, B, ...)``, or None.
    tolerance, max_iterations, roll_mode
        As in :class:`ChainProblem`. ``'NATURAL'`` rolls like ``'REST'`` in trees.
    """

    parents: I64
    heads: F64
    frames: F64
    head_offsets: F64
    tail_offsets: F64
    ref_local: F64
    base: F64
    effectors: I64
    targets: F64
    weights: F64 | None = None
    limits: JointLimits | None = None
    tolerance: float = 1e-3
    max_iterations: int = 30
    roll_mode: str = "KEEP"

    def __post_init__(self) -> None:
        parents_in = np.asarray(self.parents)
        if parents_in.ndim != 1 or parents_in.shape[0] < 1:
            raise ValueError(f"parents has shape {parents_in.shape}; expected (B,) with B >= 1 bones")
        if not np.issubdtype(parents_in.dtype, np.integer):
            raise ValueError(f"parents must be integers, got dtype {parents_in.dtype}")
        b = int(parents_in.shape[0])
        parents = parents_in.astype(np.int64).copy()
        if parents[0] != -1:
            raise ValueError(f"parents[0] is {parents[0]}; bone 0 must be the root (parent -1)")
        for i in range(1, b):
            if not 0 <= parents[i] < i:
                raise ValueError(
                    f"parents[{i}] is {parents[i]}: bone {i}; bones must be in topological order "
                    "(0 <= parent < bone) with bone 0 the only root"
                )
        parents.flags.writeable = False
        dt = _describe_tree
        effectors_in = np.asarray(self.effectors)
        if effectors_in.ndim != 1 or effectors_in.shape[0] < 1:
            raise ValueError(f"effectors has shape {effectors_in.shape}; expected (E,) with E >= 1")
        if not np.issubdtype(effectors_in.dtype, np.integer):
            raise ValueError(f"effectors must be integer bone indices, got dtype {effectors_in.dtype}")
        e = int(effectors_in.shape[0])
        effectors = effectors_in.astype(np.int64).copy()
        for j, bone in enumerate(effectors.tolist()):
            if not 0 <= bone < b:
                raise ValueError(f"effectors[{j}] is {bone}: effector {j}; must be a bone index in [0, {b})")
        if len(set(effectors.tolist())) != e:
            raise ValueError("effectors lists a bone twice; each bone's tail can have one target")
        effectors.flags.writeable = False
        weights_in = np.ones(e) if self.weights is None else self.weights
        heads, frames, head_offsets, tail_offsets, ref_local, base, targets, weights = load_arrays(
            [
                ("heads", self.heads, (b, 3), "(B, 3)"),
                ("frames", self.frames, (b, 3, 3), "(B, 3, 3)"),
                ("head_offsets", self.head_offsets, (b, 3), "(B, 3)"),
                ("tail_offsets", self.tail_offsets, (b, 3), "(B, 3)"),
                ("ref_local", self.ref_local, (b, 3, 3), "(B, 3, 3)"),
                ("base", self.base, (3, 3), "(3, 3)"),
                ("targets", self.targets, (e, 3), "(E, 3)"),
                ("weights", weights_in, (e,), "(E,)"),
            ],
            dt,
        )
        if (weights <= 0).any():
            j = int(np.flatnonzero(weights <= 0)[0])
            raise ValueError(f"weights[{j}] is {weights[j]}: effector {j}; weights must be > 0")
        # A zero head offset is allowed: the child's head sits on its parent's head (Rigify's face on
        # spine.006) and gives the parent no lever. A zero tail offset on an effector could never be
        # aimed at its target.
        check_lengths("tail_offsets", tail_offsets, dt)
        frames, ref_local, base = check_rotation_groups(
            [("frames", frames), ("ref_local", ref_local), ("base", base[None])], dt
        )
        base = base[0]
        tol, max_it = _check_settings(self.tolerance, self.max_iterations, self.roll_mode)
        _check_limits(self.limits, 1, b, f"a tree of {b} bones")
        for name, value in (
            ("parents", parents),
            ("heads", heads),
            ("frames", frames),
            ("head_offsets", head_offsets),
            ("tail_offsets", tail_offsets),
            ("ref_local", ref_local),
            ("base", base),
            ("effectors", effectors),
            ("targets", targets),
            ("weights", weights),
            ("tolerance", tol),
            ("max_iterations", max_it),
        ):
            _set(self, name, value)

    @property
    def n_bones(self) -> int:
        """Number of bones B."""
        return int(self.parents.shape[0])

    @property
    def effector_weights(self) -> F64:
        """``(E,)`` effector weights (``weights``, which validation always fills in)."""
        assert self.weights is not None
        return self.weights

    @property
    def n_effectors(self) -> int:
        """Number of effectors E."""
        return int(self.effectors.shape[0])


@dataclass(frozen=True)
class TreeResult:
    """Solved tree and per-effector diagnostics.

    Attributes
    ----------
    heads
        ``(B, 3)`` bone heads; ``heads[b] == heads[p] + frames[p] @ head_offsets[b]``.
    tails
        ``(B, 3)`` bone tails, ``heads + frames @ tail_offsets``.
    frames
        ``(B, 3, 3)`` bone frames, orthonormal and right-handed.
    iterations
        Iterations spent (the whole tree iterates together).
    residual
        ``(E,)`` distance from each effector's tail to its target.
    reached
        ``(E,)`` ``residual <= tolerance``.
    status
        ``(E,)`` int8 status code per effector.
    """

    heads: F64
    tails: F64
    frames: F64
    iterations: int
    residual: F64
    reached: Bools
    status: I8
