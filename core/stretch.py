"""Stretch in a solve: how far each chain's bones are lengthened for its tip to reach, and the Y scale
that gives it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..solvers.soft import soft_distance
from .kinematics import Work
from .model import F64, ChainPlan, Inputs


def chain_settings(inputs: Inputs, chains: Sequence[ChainPlan], f: int) -> tuple[F64, F64]:
    """(F, K) Soft and Stretch of each chain in each frame: as read per frame, else as planned."""
    if not inputs.soft and not inputs.stretch:
        # As planned (live solving: the plan is rebuilt when a value changes): the same in every frame.
        soft = np.array([[c.soft for c in chains]]).repeat(f, axis=0)
        stretch = np.array([[c.stretch for c in chains]]).repeat(f, axis=0)
    else:
        soft = np.empty((f, len(chains)))
        stretch = np.empty((f, len(chains)))
        for j, c in enumerate(chains):
            soft[:, j] = inputs.soft.get(c.index, c.soft)
            stretch[:, j] = inputs.stretch.get(c.index, c.stretch)
    # The property's own range, for values set from a script: soft below 0 is off, at or above 1 meaningless.
    return np.clip(np.nan_to_num(soft), 0.0, 0.5), np.maximum(np.nan_to_num(stretch, nan=1.0, posinf=1.0), 1.0)


def length_ratio(offsets: F64, factor: F64) -> F64:
    """(...,) how many times longer chains of `offsets` (..., N, 3) get when every bone's Y is scaled by
    `factor` (...,): exactly `factor` for connected bones (offsets along Y), less for sideways offsets."""
    a = offsets[..., 0] ** 2 + offsets[..., 2] ** 2
    b = offsets[..., 1] ** 2
    natural = np.sqrt(a + b).sum(axis=-1)
    ratio: F64 = np.sqrt(a + factor[..., None] ** 2 * b).sum(axis=-1) / natural
    return ratio


def factor_for(offsets: F64, ratio: F64) -> F64:
    """(...,) the Y scale that makes chains of `offsets` `ratio` times longer (`length_ratio`'s inverse):
    Newton's method on the convex, increasing length from `ratio` itself (exact for connected bones)."""
    a = offsets[..., 0] ** 2 + offsets[..., 2] ** 2
    b = offsets[..., 1] ** 2
    goal = ratio * np.sqrt(a + b).sum(axis=-1)
    x = ratio.copy()
    moving = ratio > 1.0
    if not moving.any():
        return x
    for _ in range(8):
        r = np.sqrt(a + x[..., None] ** 2 * b)
        slope = (x[..., None] * b / np.maximum(r, 1e-300)).sum(axis=-1)
        step = (r.sum(axis=-1) - goal) / np.maximum(slope, 1e-300)
        x = np.where(moving & (slope > 0.0), x - step, x)
    return np.maximum(x, 1.0)


def stretch_chains(
    work: Work,
    chains: Sequence[ChainPlan],
    positions: F64,
    frames: F64,
    offsets: F64,
    aims: F64,
    soft: F64,
    limit: F64,
) -> tuple[F64, F64, F64, F64, F64]:
    """Lengthen the bones of the stretching chains of a batch by just enough for their tips to reach.

    Each owned chain's bones are first brought back to their natural length (the Y scale a previous solve
    gave them divided out: `work.channel_y` of their carriers). The chain then stretches by the factor that
    takes its natural soft reach to the target, `d / soft(d)` (`solvers.soft`; with Soft 0, `d / L` beyond
    full extension), up to its Stretch: the shape follows the soft curve and the tip reaches; past the limit
    the tip trails (and beyond Stretch x L the chain is straight at full stretch). The solver gets the
    stretched offsets, the warm start rebuilt on them, and the factor (`ChainProblem.stretch`) that keeps the
    soft curve the natural chain's.

    Returns positions and offsets (F*K rows, as given, stretched where owned), the solver's stretch `rho`
    (F*K,), and (F, K) Y scale factors and (F, K, N) divisors (the bones' previous stretch).
    """
    f = work.matrices.shape[0]
    k, n = len(chains), offsets.shape[1]
    off = offsets.reshape(f, k, n, 3).copy()
    divisors = np.ones((f, k, n))
    owned = np.zeros(k, dtype=bool)
    for j, c in enumerate(chains):
        carriers = work.owned.get(c.index)
        if carriers is not None:
            owned[j] = True
            if work.channel_y is not None:
                divisors[:, j] = divisors_of(work, c.bones[: len(carriers)], carriers)  # a single chain's rows
    off[..., 1] /= divisors
    root = positions.reshape(f, k, n + 1, 3)[:, :, 0]
    distance = np.linalg.norm(aims - root, axis=-1)
    natural = np.linalg.norm(off, axis=-1).sum(axis=-1)  # (F, K)
    eased = np.minimum(soft_distance(distance, natural, soft), natural)
    need = distance / np.maximum(eased, 1e-300)
    rho = np.where(owned[None], np.clip(need, 1.0, length_ratio(off, limit)), 1.0)
    factors = factor_for(off, rho)
    factors[:, ~owned] = 1.0
    off[..., 1] *= factors[..., None]
    # The warm start on the new lengths: joints from the current frames and the stretched offsets.
    pos = positions.reshape(f, k, n + 1, 3).copy()
    steps = np.einsum("fknij,fknj->fkni", frames.reshape(f, k, n, 3, 3)[:, owned], off[:, owned])
    pos[:, owned, 1:] = root[:, owned, None] + np.cumsum(steps, axis=2)
    stretched = offsets.reshape(f, k, n, 3).copy()
    stretched[:, owned] = off[:, owned]
    return pos.reshape(f * k, n + 1, 3), stretched.reshape(f * k, n, 3), rho.reshape(f * k), factors, divisors


def divisors_of(work: Work, rows: Sequence[int], carriers: list[int]) -> F64:
    """(F, len(carriers)) each row's previous stretch: its carrier's Y scale channel, times the channels of
    the loose bones (`Work.loose`) between that carrier and the row, which it inherits as well."""
    assert work.channel_y is not None
    out = np.array(work.channel_y[:, carriers])
    if work.loose:
        rows = list(rows)
        for r, carrier in enumerate(carriers):
            start = rows.index(carrier) + 1 if carrier in rows else 0
            for b in rows[start : r + 1]:
                if b in work.loose:
                    out[:, r] *= work.channel_y[:, b]
    return out


def rescale(work: Work, chains: Sequence[ChainPlan], rows: list[list[int]], factors: F64, divisors: F64) -> None:
    """Give the bones of stretching chains their new Y scale in the working pose and note what to write:
    the carriers' Y scale channel, for chains that stretch in some frame or held a stretch to undo."""
    for j, c in enumerate(chains):
        carriers = work.owned.get(c.index)
        if carriers is None:
            continue
        bones = np.asarray(rows[j], dtype=np.int64)
        ratio = factors[:, j, None] / divisors[:, j]  # (F, N): new over previous stretch
        if (ratio != 1.0).any():
            work.scale[:, bones, 1] *= ratio
            work.rescaled.update(rows[j])
        held = divisors[:, j] if work.held_y is None else work.held_y[:, carriers]
        if (factors[:, j] != 1.0).any() or (held != 1.0).any():
            for b in dict.fromkeys(carriers):
                work.scale_out[b] = factors[:, j].copy()
        for b in rows[j]:
            if b in work.loose and b not in carriers:
                work.scale_out[b] = np.ones(factors.shape[0])
