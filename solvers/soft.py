"""Soft IK: the target distance eased toward full extension, so an analytic limb never snaps straight.

Every analytic limb solver straightens the knee as the target crosses full extension, and the knee's
angular speed goes to infinity there (the "knee pop": for two bones the bend angle is ``2 acos(d / L)``,
whose slope ``-2 / sqrt(L^2 - d^2)`` is unbounded at ``d = L``). Soft IK remaps the distance ``d`` from
the chain's root to its target before solving:

* below ``(1 - soft) L`` it is unchanged;
* above, it is ``L - s exp(-(d - (L - s)) / s)`` with ``s = soft L``: it meets the line ``d`` with the same
  slope (continuous in value and slope) and approaches ``L`` exponentially, never reaching it.

The solvers then solve toward the eased target, on the root-to-target line at the eased distance, so the
chain approaches full extension smoothly and its tip trails the real target slightly there (by at most
``s / e`` at ``d = L``). Residuals, ``reached`` and the status are measured against the real target; a
chain that reached its eased target but not the real one has status ``SOFT``.

A stretched chain (``ChainProblem.stretch``, set by the rig core, which lengthens the bones to reach) keeps
the natural chain's curve, scaled: ``min(d, stretch * curve(d; L / stretch))``. With the stretch the core
picks (``d / curve(d)``, up to the chain's limit) that is ``d`` itself: the bones lengthen by just enough
for the tip to reach while the chain's shape still follows the soft curve.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .rotations import norms
from .types import CONVERGED, F64, SOFT, UNREACHABLE, ZERO_LENGTH, ChainProblem, SolveResult, _set


def soft_distance(distance: F64, length: F64, soft: F64) -> F64:
    """The soft-IK remap of target distances (numpy, any matching shapes).

    Parameters
    ----------
    distance
        Distances ``d`` from the chain's root to its target.
    length
        The chain's length ``L`` (sum of its segment lengths).
    soft
        The fraction of ``L`` over which the reach eases out, in [0, 1); 0 leaves ``d`` unchanged.

    Returns
    -------
    numpy.ndarray
        ``d`` below ``(1 - soft) L``; above, ``L - s exp(-(d - (L - s)) / s)`` with ``s = soft L``.
    """
    d = np.asarray(distance, dtype=np.float64)
    s = np.asarray(soft, dtype=np.float64) * length
    start = length - s
    eased = d > start
    if not (eased & (s > 0.0)).any():
        return d.copy()
    on = eased & (s > 0.0)
    # The exponent only where the curve applies: a chain of the batch without Soft (s = 0) short of its length
    # would overflow it, even though np.where drops the value.
    x = np.where(on, -(d - start) / np.maximum(s, 1e-300), 0.0)
    out: F64 = np.where(on, length - s * np.exp(x), d)
    return out


def eased_distance(distance: F64, length: F64, soft: F64, stretch: F64 | None) -> F64:
    """Where a chain reaches toward a target: its eased distance, never beyond the target itself.

    Parameters
    ----------
    distance
        Distances ``d`` from the chains' roots to their targets.
    length
        The chains' given lengths (their offsets, stretched by ``stretch``).
    soft
        The soft fractions, as for :func:`soft_distance`.
    stretch
        How many times each given length exceeds the natural one, or None (1).

    Returns
    -------
    numpy.ndarray
        ``min(d, stretch * soft_distance(d, length / stretch, soft))``.
    """
    if stretch is None:
        return np.minimum(distance, soft_distance(distance, length, soft))
    natural = length / stretch
    return np.minimum(distance, stretch * soft_distance(distance, natural, soft))


def _with_targets(problem: ChainProblem, targets: F64) -> ChainProblem:
    """``problem`` toward other targets, soft and stretch removed, without validating it again (the eased
    targets lie between the validated root and target, so they are finite)."""
    out = object.__new__(ChainProblem)
    out.__dict__.update(problem.__dict__)  # a frozen dataclass: the fields are plain attributes
    targets.flags.writeable = False
    _set(out, "targets", targets)
    _set(out, "soft", None)
    _set(out, "stretch", None)
    return out


def solve_soft(problem: ChainProblem, solve: Callable[[ChainProblem], SolveResult]) -> SolveResult:
    """Run ``solve`` toward the eased targets of ``problem`` and measure the result against the real ones.

    Parameters
    ----------
    problem
        The chains; ``problem.soft`` (and ``problem.stretch``) say how each chain's reach is eased.
    solve
        A chain solver, called once on ``problem`` with the soft chains' targets replaced by their eased
        points (on the root-to-target line, at :func:`eased_distance`) and ``soft``/``stretch`` removed.

    Returns
    -------
    SolveResult
        The solver's result, with, for the soft chains: ``residual`` the distance to the real target,
        ``reached`` that compared with the tolerance, and the status ``CONVERGED`` when reached,
        ``UNREACHABLE`` when the real target lies beyond the chain's length, ``SOFT`` when the solver
        reached the eased target, the solver's own status otherwise. Chains with ``soft == 0`` are solved
        toward their own targets exactly as without this wrapper (a problem with no soft chain goes straight
        to ``solve``).
    """
    soft = problem.soft
    if soft is None or not soft.any():
        return solve(problem)
    rows = soft > 0.0
    root = problem.positions[rows, 0]
    real = problem.targets[rows]
    rel = real - root
    distance = norms(rel)
    length = norms(problem.offsets[rows]).sum(axis=1)
    stretch = None if problem.stretch is None else problem.stretch[rows]
    eased = eased_distance(distance, length, soft[rows], stretch)
    # A target on the root stays there (the solvers report it); elsewhere the eased point on the line.
    scale = np.where(distance > ZERO_LENGTH * np.maximum(length, 1.0), eased / np.maximum(distance, 1e-300), 1.0)
    targets = problem.targets.copy()
    targets[rows] = root + rel * scale[:, None]
    result = solve(_with_targets(problem, targets))
    tips = result.positions[rows, -1]
    residual = result.residual.copy()
    residual[rows] = norms(tips - real)
    on_root = distance <= ZERO_LENGTH * np.maximum(length, 1.0)
    hit = (residual[rows] <= problem.tolerance) & ~on_root
    reached = result.reached.copy()
    reached[rows] = hit
    status = result.status.copy()
    solved = status[rows]
    too_far = distance >= length
    status[rows] = np.where(
        hit, CONVERGED, np.where(too_far, UNREACHABLE, np.where(solved == CONVERGED, SOFT, solved))
    ).astype(np.int8)
    return SolveResult(
        positions=result.positions,
        frames=result.frames,
        iterations=result.iterations,
        residual=residual,
        reached=reached,
        status=status,
    )


__all__ = ["eased_distance", "soft_distance", "solve_soft"]
