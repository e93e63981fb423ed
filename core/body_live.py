"""Full Body on the live program: the body stage of a drag that moves only the limbs' controls.

A full-body update through `core.solve` costs several times the per-chain rig's compiled update (`core.live`):
most of it is the scaffolding around the solves (the snapshot, the working pose, carrying it after every step,
the FK presets, the memo's keys), not the solves. Yet while a drag moves only the controls of the limbs (the
chains the body carries: arms, legs, head), most of a full-body solve is what it was on the last full solve:

- the body root's home and the spine's solve toward its own control (its start is the FK pose under the
  root at home): the *pre-body* pose of the body bones, a function of the home, the FK store and the spine's
  control, none of which such a drag moves;
- the body problem's anchors: where each limb hangs from the body (its root's head, carried by the body bone
  above it), its reach, its pin and pull.

`capture` keeps these from the last full solve (`core.body._move_body` calls it); `stage` then does the rest
of an update: the limbs' goals from their targets, the body stage (`solvers.body.solve_body`, the same problem
the full solve builds, targets aside) and the body bones' new poses, basis rotations and the root's location.
The rig layer (`rig/live.py`) writes them and solves the limbs on the compiled program from where the body put
them, as `core.body.solve_levels` solves them from there. The rig layer goes back to the full path for any
update that moves something else (the spine's control, a channel, a setting, the frame): the next full solve
captures again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ..solvers.body import BodyProblem, solve_body
from .kinematics import Space, local_rotations
from .messages import bent_by_body
from .model import F64, ChainOutcome, ChainPlan


@dataclass
class Captured:
    """What the last full solve of a full-body rig left for live updates of its limbs (see the module)."""

    plan: object  # the plan solved (identity)
    root: int
    bones: list[int]  # body bones, root first
    heads: F64  # (B, 3) the pre-body pose
    frames: F64  # (B, 3, 3)
    problem: BodyProblem  # the body problem with the pre-body targets (each update replaces them)
    anchors: list[ChainPlan]  # every limb (each an anchor)
    keep: NDArray[np.bool_]  # (A,): anchors in the problem (a reach above 0)
    starts: F64  # (A, 3)
    reach: F64  # (A,)
    tip_offsets: list[F64 | None]  # Use Target Rotation: the tip's tail offset in its frame (_aims)
    active_weight: F64  # (A,) pull x influence, 0 for pinned anchors (the "pulls beyond reach" test)
    pins: list[ChainPlan]  # pinned anchors (the blocked message names them)
    tolerance: float  # the rig's Tolerance (world units)
    parents: list[int]  # each body bone's parent, as a row of `bones` (-1: the root)
    rest_rel: F64  # (B, 3, 3) the body bones' rest_rel rotations
    root_rest_inv: F64  # (4, 4) the root's rest_rel4 inverted (its basis from its pose)
    # Body chains (the spine): plan, its tip's row among `bones`, the tip's tail offset in its frame, its goal
    # (armature space: its control does not move in a lean update) and its outcome before the body moved.
    spine: list[tuple[ChainPlan, int, F64, F64, ChainOutcome]]


_captured: dict[int, Captured] = {}


def forget(plan: object) -> None:
    """A full solve of `plan` began: what it captured last no longer stands until it captures again."""
    _captured.pop(id(plan), None)


def captured(plan: object) -> Captured | None:
    found = _captured.get(id(plan))
    return found if found is not None and found.plan is plan else None


def capture(found: Captured) -> None:
    if len(_captured) > 16:
        _captured.clear()
    _captured[id(found.plan)] = found


def tip_offset(frame: F64, head: F64, tail: F64) -> F64:
    out: F64 = frame.T @ (tail - head)
    return out


def root_location(found: Captured, head: F64) -> F64:
    """(3,) the location channel that puts the (parentless) root's head at `head`."""
    inv = found.root_rest_inv
    out: F64 = inv[:3, :3] @ head + inv[:3, 3]
    return out


@dataclass
class Stage:
    """One update's body stage: the body bones' poses and what the rig layer writes and reports."""

    heads: F64  # (B, 3)
    frames: F64  # (B, 3, 3)
    basis: F64  # (B, 3, 3) basis rotations
    location: F64  # (3,) the root's location channel
    moved: bool  # the body left its pre-body pose
    blocked: bool
    spine: dict[int, ChainOutcome]  # the body chains' outcomes


def stage(found: Captured, world: F64, targets: F64) -> Stage:
    """The body stage of one update: `world` (4, 4) the armature's world matrix, `targets` (A, 4, 4) each
    anchor's target world matrix (in `found.anchors` order)."""
    space = Space.of(world[None])
    goals = space.points_of(targets[None])[0]  # (A, 3), as core.body._aims
    for k, off in enumerate(found.tip_offsets):
        if off is not None:
            rot = space.rotations(targets[None, k])[0]
            goals[k] = goals[k] - rot @ off
    scale = float(space.scale[0])
    tolerance = found.tolerance / scale
    beyond = np.linalg.norm(goals - found.starts, axis=1) - found.reach > tolerance
    heads, frames = found.heads, found.frames
    moved = blocked = False
    if bool((beyond & (found.active_weight > 0.0)).any()) and found.keep.any():
        result = solve_body(replace(found.problem, targets=goals[found.keep], tolerance=tolerance))
        if result.moved:
            moved = True
            heads, frames = result.heads, result.frames
        blocked = result.blocked
    parents = np.empty_like(frames)
    for k, p in enumerate(found.parents):
        parents[k] = np.eye(3) if p < 0 else frames[p]
    basis = local_rotations(frames, parents, found.rest_rel)
    location = root_location(found, heads[0])
    spine: dict[int, ChainOutcome] = {}
    for c, row, off, goal, out in found.spine:
        now = replace(out)
        if moved:
            # As core.body._body_chain_outcomes: measured again after the body bent it off its target.
            residual = float(np.linalg.norm(heads[row] + frames[row] @ off - goal)) * scale
            if residual > found.tolerance * (1.0 + 1e-6):
                now.residual, now.residuals, now.reached = residual, np.array([residual]), False
                now.message = bent_by_body(residual)
        spine[c.index] = now
    return Stage(heads, frames, basis, location, moved, blocked, spine)
