"""CCD (cyclic coordinate descent) for batches of chains (seed 004).

One iteration walks from the tip bone to the root; at each joint it rotates the rest of the chain about
the joint's head so that the end effector points at the target, optionally by at most ``max_angle`` per
step (damping, against flips on long chains). With limits, each joint's new frame is rolled by the roll mode
(:func:`~solvers.frames.aim_frames`) and clamped right away by :func:`~solvers.frames.limit_frames` (the
same calls the forward sweep makes), and the bones below turn with the clamped frame, so their own frames
relative to their parents, hence their limits, are unchanged; the loop then keeps these frames for the
result. The loop, reach check, poles and final frames are the shared loop's, and the global stage under limits
(``search.refine``) the same, as for FABRIK.
"""

from __future__ import annotations

import numpy as np

from .frames import ChainBatch, aim_frames, frame_positions, limit_frames
from .loop import Step, solve_chains
from .rotations import NEAR_OPPOSITE, TINY, dots, matmul, matvec, norms, orthonormalize, rotation_between
from .search import refine
from .soft import solve_soft
from .types import F64, ChainProblem, SolveResult


def make_ccd_step(max_angle: float | None = None) -> Step:
    """Return the CCD iteration, turning each joint by at most ``max_angle`` radians (None: no cap)."""

    def step(batch: ChainBatch) -> None:
        p = batch.positions
        frames = batch.frames
        targets = batch.targets
        limited = batch.limits is not None and frames is not None
        if not limited and max_angle is None:
            _free_sweep(p, targets)
            return
        for j in range(batch.n_bones - 1, -1, -1):
            head = p[:, j]
            rot = rotation_between(p[:, -1] - head, targets - head, max_angle)
            if limited and frames is not None:
                parent = batch.base if j == 0 else frames[:, j - 1]
                ref = matmul(parent, batch.ref_local[:, j])
                old = frames[:, j]
                # The turned bone is rolled by the roll mode, as the forward sweep would roll it, then
                # clamped: turning the frame itself would leave twist that the roll mode never makes
                # (turning the child's cone; with the sweep's frames the tip then missed the target).
                # Re-orthonormalized: ``rot`` below is built from this frame, so rounding left in it
                # would pass to every bone below at each step and could double from one iteration to the
                # next (frames drifted off rotations and off their positions by 1e-4 within 50 steps).
                local_dir = batch.directions[:, j]
                turned = matvec(rot, matvec(old, local_dir))
                rolled = aim_frames(turned, local_dir, batch.keep_frames[:, j], ref, batch.roll_mode)
                new = orthonormalize(limit_frames(ref, rolled, batch.limits, j))
                # The rotation actually applied is the clamped one; the bones below follow it rigidly.
                rot = matmul(new, np.swapaxes(old, -1, -2))
                frames[:, j + 1 :] = np.matmul(rot[:, None], frames[:, j + 1 :])
                frames[:, j] = new
            rel = p[:, j + 1 :] - head[:, None]
            # Row vectors times R^T: every joint below turns about the head at once.
            np.add(head[:, None], np.matmul(rel, rot.transpose(0, 2, 1)), out=p[:, j + 1 :])
        if limited and frames is not None:
            # The joints exactly where the frames put them (the pose the result's frames describe).
            p[:] = frame_positions(batch, frames)

    return step


def _free_sweep(p: F64, targets: F64) -> None:
    """One unlimited, uncapped CCD sweep (tip joint to root) of joints ``p`` ``(A, N+1, 3)``, in place.

    The joints are turned on a coordinate-major copy (``(3, N+1, A)``, as FABRIK's passes: every numpy
    call then reads and writes contiguous rows, about twice as fast at a few hundred chains). A joint step
    with a row that needs the careful path goes back to the row-major :func:`_turn_joints_below` for the
    rest of the sweep; both compute the same reflections.
    """
    if p.shape[0] == 0:
        return  # no chains (the careful-path test below takes a minimum over the rows)
    c = np.ascontiguousarray(p.transpose(2, 1, 0))
    tt = np.ascontiguousarray(targets.T)
    n = p.shape[1] - 1
    for j in range(n - 1, -1, -1):
        if not _turn_below_major(c, j, tt):
            p[:] = c.transpose(2, 1, 0)
            for k in range(j, -1, -1):
                _turn_joints_below(p, k, targets)
            return
    p[:] = c.transpose(2, 1, 0)


def _turn_below_major(c: F64, j: int, tt: F64) -> bool:
    """:func:`_turn_joints_below` on coordinate-major joints ``c`` ``(3, N+1, A)`` and targets ``tt``
    ``(3, A)``. Returns False, having changed nothing, when some row needs the careful path."""
    head = c[:, j]
    a: F64 = c[:, -1] - head
    b: F64 = tt - head
    na: F64 = np.sqrt(np.einsum("ia,ia->a", a, a))
    nb: F64 = np.sqrt(np.einsum("ia,ia->a", b, b))
    a /= np.maximum(na, TINY)
    b /= np.maximum(nb, TINY)
    h: F64 = a + b
    nh: F64 = np.sqrt(np.einsum("ia,ia->a", h, h))
    if float(na.min()) <= TINY or float(nb.min()) <= TINY or float(nh.min()) < NEAR_OPPOSITE:
        return False
    h /= nh
    g = b - (2.0 * np.einsum("ia,ia->a", b, h)) * h
    rel = c[:, j + 1 :] - head[:, None]
    gx = np.einsum("ima,ia->ma", rel, g)
    hx = np.einsum("ima,ia->ma", rel, h)
    # R x = x - 2 b (g . x) - 2 h (h . x), as in _turn_joints_below.
    rel -= 2.0 * (gx * b[:, None] + hx * h[:, None])
    rel += head[:, None]
    c[:, j + 1 :] = rel
    return True


def _turn_joints_below(p: F64, j: int, targets: F64) -> None:
    """Turn the joints below joint ``j`` about its head so the end effector points at the target, in place.

    The unlimited, uncapped step without building rotation matrices: the minimal rotation taking unit
    ``a`` onto unit ``b`` is two reflections (as in :func:`~solvers.rotations.rotation_between`),
    ``R x = x - 2 b (g . x) - 2 h (h . x)``, applied to the lever vectors directly. Rows that need the
    careful path (a zero lever, nearly opposite directions) take :func:`rotation_between` instead, row by
    row, so a chain's result never depends on the other chains in its batch.
    """
    head = p[:, j]
    a = p[:, -1] - head
    b = targets - head
    na, nb = norms(a), norms(b)
    ua = a / np.maximum(na, TINY)[:, None]
    ub = b / np.maximum(nb, TINY)[:, None]
    h = ua + ub
    nh = norms(h)
    careful = (na <= TINY) | (nb <= TINY) | (nh < NEAR_OPPOSITE)
    h /= np.maximum(nh, TINY)[:, None]
    g = ub - (2.0 * dots(ub, h))[:, None] * h
    rel = p[:, j + 1 :] - head[:, None]
    gx = np.einsum("kmi,ki->km", rel, g)
    hx = np.einsum("kmi,ki->km", rel, h)
    turned = rel - 2.0 * (gx[..., None] * ub[:, None] + hx[..., None] * h[:, None])
    if careful.any():
        rot = rotation_between(a[careful], b[careful])
        turned[careful] = np.matmul(rel[careful], rot.transpose(0, 2, 1))
    turned += head[:, None]
    p[:, j + 1 :] = turned


def solve_ccd(problem: ChainProblem, max_angle: float | None = None) -> SolveResult:
    """Solve K chains with CCD.

    Parameters
    ----------
    problem
        The chains, warm-start pose, targets, optional poles and limits, tolerance, iteration cap and
        roll mode.
    max_angle
        Largest rotation of one joint in one step, in radians; None (default) for no cap. A cap slows
        convergence but avoids the sudden flips plain CCD makes when a target passes behind the chain.
        With a cap the iterations are CCD's alone: the shared polish step (``solvers.loop.iterate``)
        turns joints by whatever it takes, which the cap exists to prevent.

    Returns
    -------
    SolveResult
        As :func:`solvers.fabrik.solve_fabrik`.
    """
    if max_angle is not None and not (np.isfinite(max_angle) and max_angle > 0.0):
        raise ValueError(f"max_angle must be a finite angle > 0 in radians, or None; got {max_angle}")
    limited = problem.limits is not None and bool(np.any(problem.limits.use_cone) or np.any(problem.limits.use_twist))
    step = make_ccd_step(max_angle)
    if max_angle is not None:
        # The cap is there to stop large joint turns: no polish, and no global stage.
        return solve_soft(problem, lambda p: solve_chains(p, step, track_frames=limited, polished=False))
    return solve_soft(problem, lambda p: refine(p, solve_chains(p, step, track_frames=limited)))
