"""Reach IK's pure-numpy solvers: FABRIK, CCD, analytic two-bone, and multi-effector FABRIK trees.

Everything here imports numpy only, so it runs (and is tested) without Blender. The contract with the
Blender side is ``docs/design/solvers.md``: problems are frozen dataclasses of float64 arrays, results
carry joint positions, per-bone frames and per-chain diagnostics.

>>> from solvers import ChainProblem, solve_fabrik, STATUS_NAMES  # doctest: +SKIP
>>> result = solve_fabrik(ChainProblem(positions, frames, offsets, ref_local, base, targets))  # doctest: +SKIP
>>> [STATUS_NAMES[s] for s in result.status]  # doctest: +SKIP
"""

from __future__ import annotations

from .ccd import solve_ccd
from .fabrik import solve_fabrik
from .limits import JointLimits, apply_joint_limits
from .soft import soft_distance
from .tree import solve_tree
from .two_bone import solve_two_bone
from .types import (
    CAP,
    CONVERGED,
    ROLL_MODES,
    SOFT,
    STALLED,
    STATUS_NAMES,
    UNREACHABLE,
    ChainProblem,
    SolveResult,
    TreeProblem,
    TreeResult,
)

__all__ = [
    "CAP",
    "CONVERGED",
    "ROLL_MODES",
    "SOFT",
    "STALLED",
    "STATUS_NAMES",
    "UNREACHABLE",
    "ChainProblem",
    "JointLimits",
    "SolveResult",
    "TreeProblem",
    "TreeResult",
    "apply_joint_limits",
    "soft_distance",
    "solve_ccd",
    "solve_fabrik",
    "solve_tree",
    "solve_two_bone",
]
