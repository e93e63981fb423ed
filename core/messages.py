"""A chain's outcome and the message it shows: how far its tip is, why, and what can help."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..solvers.types import STATUS_NAMES
from .model import F64, ChainOutcome, ChainPlan, Skeleton


def chain_message(
    residual: float,
    status: str,
    reached: bool,
    frames: int,
    worst: int,
    tip: str,
    fixed: bool = False,
    stretched: float = 1.0,
) -> str:
    """What a chain that missed its target shows: the tip bone, how far, why, and what can help.

    `status` is the solver's (`STATUS_NAMES`) at the worst frame, and picks the advice: only a solve that
    ran out of iterations (CAP) can be helped by more of them. `fixed`: a one-bone chain with Use Target
    Rotation, whose only bone takes the target's orientation, so nothing is left to solve. `stretched`: the
    factor the chain's bones were lengthened by at the worst frame.
    """
    if reached:
        return ""
    # Never "nan" or "inf": past single precision (an absurd armature scale) the miss cannot be measured.
    far = f"{residual:.4g}" if math.isfinite(residual) else "an unmeasurable distance"
    if fixed:
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target. With Use Target Rotation the tip bone takes "
            "the target's orientation, and in a one-bone chain nothing above it moves, so its tail reaches only a "
            "target placed where that orientation points it: lengthen the chain or turn off Use Target Rotation"
        )
    elif status == "UNREACHABLE" and stretched > 1.0:
        message = (
            f"target out of reach: the tip of '{tip}' stops {far} short with the chain stretched to "
            f"{stretched:.4g}x its length (its Stretch): move the target or raise Stretch"
        )
    elif status == "UNREACHABLE":
        message = (
            f"target out of reach: the tip of '{tip}' stops {far} short (the chain is fully extended, folded or "
            "held by a joint limit): move the target, lengthen the chain or loosen the Joint Limits"
        )
    elif status == "SOFT":
        message = (
            f"softened: the tip of '{tip}' trails the target by {far} near full extension (Soft eases the reach "
            "there instead of snapping the chain straight): set Soft to 0, or raise Stretch to reach it"
        )
    elif status == "CAP":
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target when Max Iterations ran out: "
            "raise Max Iterations"
        )
    elif status == "STALLED":
        # The solver stopped gaining (and the global stage under limits did not help): more iterations would not either.
        message = (
            f"not reached: the tip of '{tip}' stops {far} from the target, where the solve stops gaining "
            "(joint limits or the chain's shape hold it): loosen the Joint Limits, add a pole or move the target"
        )
    else:
        # Converged by the solver's tolerance in armature units, which is set for the armature's smallest
        # scale over the frames: in a frame where the armature is scaled up the miss is larger in world units.
        message = (
            f"not reached: the tip of '{tip}' is {far} from the target, over the Tolerance in world units "
            "(the armature's scale changes over the frames): lower the Tolerance"
        )
    return f"worst frame #{worst}: {message}" if frames > 1 else message


def chain_outcome(
    residuals: F64, iterations: F64, statuses: Sequence[str], tolerance: float, tip: str, stretch: F64 | None = None
) -> ChainOutcome:
    """One chain's outcome from its (F,) residuals, iterations and statuses; `stretch`: (F,) how many times
    its length the chain was lengthened (None: not stretched)."""
    worst = int(np.argmax(residuals))
    residual = float(residuals[worst])
    reached = bool((residuals <= tolerance * (1.0 + 1e-6)).all())
    status = statuses[worst]
    stretched = 1.0 if stretch is None else float(stretch[worst])
    message = chain_message(residual, status, reached, residuals.shape[0], worst, tip, stretched=stretched)
    most = 1.0 if stretch is None else float(np.max(stretch))
    return ChainOutcome(True, message, float(iterations.mean()), residual, reached, status, residuals, iterations, most)


def outcomes_of(
    residuals: F64,
    iterations: F64,
    codes: NDArray[np.int8],
    tolerance: float,
    tips: Sequence[str],
    fixed: bool = False,
    stretch: F64 | None = None,
) -> list[ChainOutcome]:
    """`chain_outcome` for K chains at once: (F, K) residuals, iterations and status codes -> K outcomes.

    `tips`: the K tip bones' names; `fixed`: one-bone chains with Use Target Rotation (see `chain_message`);
    `stretch`: (F, K) factors the chains' bones were lengthened by (None: not stretched).
    """
    f, k = residuals.shape
    if f == 1:
        # Live solving (one frame): the same answers from Python floats, without a dozen numpy calls per batch.
        limit = tolerance * (1.0 + 1e-6)
        res, its, names = residuals[0].tolist(), iterations[0].tolist(), [STATUS_NAMES[c] for c in codes[0].tolist()]
        factors = [1.0] * k if stretch is None else stretch[0].tolist()
        return [
            ChainOutcome(
                True,
                chain_message(r, name, r <= limit, 1, 0, tip, fixed, fs),
                it,
                r,
                r <= limit,
                name,
                residuals[:, j],
                iterations[:, j],
                fs,
            )
            for j, (r, it, name, tip, fs) in enumerate(zip(res, its, names, tips, factors, strict=True))
        ]
    cols = np.arange(k)
    worst = np.argmax(residuals, axis=0)
    worst_res = residuals[worst, cols].tolist()
    reached: list[bool] = np.asarray((residuals <= tolerance * (1.0 + 1e-6)).all(axis=0)).tolist()
    status = [STATUS_NAMES[c] for c in codes[worst, cols].tolist()]
    mean_its = iterations.mean(axis=0).tolist()
    worst_l = worst.tolist()
    at_worst = [1.0] * k if stretch is None else stretch[worst, cols].tolist()
    most = [1.0] * k if stretch is None else stretch.max(axis=0).tolist()
    return [
        ChainOutcome(
            True,
            chain_message(worst_res[j], status[j], reached[j], f, worst_l[j], tips[j], fixed, at_worst[j]),
            mean_its[j],
            worst_res[j],
            reached[j],
            status[j],
            residuals[:, j],
            iterations[:, j],
            most[j],
        )
        for j in range(k)
    ]


def refused_message(sk: Skeleton, chain: ChainPlan, exc: ValueError, tree: bool) -> str:
    """The message of a chain the solver refused although the rig's checks passed it.

    The rig checks what it can name in the panel's terms first (limits, transforms, scales, settings), so
    this is for what they did not foresee: the message names the chain's bones and what to try, and ends
    with the solver's own words (its field and index names), which is what a bug report needs.
    """
    root, tip = sk.names[chain.bones[0]], sk.names[chain.bones[-1]]
    bones = f"bone '{tip}'" if root == tip else f"bones '{root}' to '{tip}'"
    whole = " (solved as one tree with the chains it shares bones with)" if tree else ""
    return (
        f"cannot solve: the solver refused the numbers of {bones}{whole}: reset their pose (Alt G/R/S) and check "
        f"their Joint Limits; if that does not help, please report it with this detail: {exc}"
    )


# Full Body: why a limb's target stays out of reach (then the pinned chains' names).
BODY_BLOCKED = "the body cannot reach further with its pinned chains held"


def mark_body_blocked(outcomes: dict[int, ChainOutcome], anchors: Sequence[ChainPlan], pinned: set[int]) -> None:
    """Full Body could not bring every pulling limb in reach: each unpinned limb still short says so, naming
    the pinned chains (`core.body.solve_levels` and the lean live path, `rig.live._lean_body`)."""
    pins = ", ".join(f"'{c.name}'" for c in anchors if c.index in pinned)
    for c in anchors:
        out = outcomes.get(c.index)
        if out is not None and out.valid and not out.reached and c.index not in pinned:
            out.message = f"not reached: {out.residual:.4g} short, {BODY_BLOCKED} ({pins})"


def bent_by_body(residual: float) -> str:
    """A body chain (the spine) the body bent away from its own control, `residual` from it (world units)."""
    return f"bent by the body: its tip is {residual:.4g} from its target while the limbs pull"
