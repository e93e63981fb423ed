"""A memo of the chains a full-body solve re-solves on every update (`core/body.py`).

A full-body update solves every chain, because the body may move what each hangs from. Most of them get
the very same inputs as on the update before: the spine starts from its FK pose under the root at its home
(both the same while nothing is re-posed) toward a control that did not move; a pinned leg starts from what
the last solve wrote, under hips that did not move this time. A chain's solve is a function of what it
reads, so when that is what it was, the solve is not run again: its bones get the poses and its outcome
the copy kept from then. What a solve reads, per group (each a top of the groups solved together: none
hangs below another's bones), compared bit for bit: the target's and pole's matrices, the armature's world
matrix, the pole angle, Soft and Stretch per frame, the plan (its chain settings and joint limits, rebuilt
on any change), the rig's settings and `smooth`; and the start: the working pose of its bones, of its
root's parent and of its target and pole bones, or what the caller says the start is a function of (the
spine's: the root's home to `DIGITS` decimals and the FK pose, `core/body._spine_start`). Anything else in play
is left to the solvers (no memo): several frames (a bake), Start From 'Rest', an Influence below 1, a
stretch owned or released; and a solve that changed a bone's scale, or refused a chain, is not kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from .kinematics import Space, Work
from .model import F64, ChainOutcome, Group, Inputs, RigReport, Snapshot

Levels = Callable[[Snapshot, Work, list[Group], Inputs, Space, RigReport, bool, Sequence[Group]], None]

_SIZE = 64
"""Groups kept at most (a few rigs' worth): the oldest goes first."""

DIGITS = 10
"""Decimals (armature units) the body root's home is compared to (`core/body._spine_start`): far below any
Tolerance, far above the rounding of carrying it home."""
ENABLED = True
"""Off: every group is solved (`bench/live.py --full-body` measures both in one process; tests compare)."""
hits = 0
"""Groups taken from the memo so far (tests check that a drag uses it)."""


@dataclass(frozen=True)
class _Kept:
    plan: object  # the plan the solve was of (identity: a changed setting builds a new plan)
    key: bytes
    rot: F64  # (1, n, 3, 3) the group's bones as solved
    heads: F64  # (1, n, 3)
    outcomes: dict[int, ChainOutcome]


_kept: dict[tuple[int, tuple[int, ...]], _Kept] = {}


def forget() -> None:
    """Drop every kept solve (tests; a new file)."""
    _kept.clear()


def _key(snap: Snapshot, work: Work, group: Group, inputs: Inputs, smooth: bool, start: bytes | None) -> bytes | None:
    """Everything the solve of `group` reads, as bytes; None when the memo does not apply to it. `start`:
    what its start pose is a function of, when the caller knows (else the start pose itself counts)."""
    sk = work.sk
    parts: list[bytes] = [repr((snap.settings, smooth)).encode()]
    bones = list(group.bones)
    parent = int(sk.parent[group.bones[0]])
    if parent >= 0:
        bones.append(parent)
    for c in group.chains:
        if c.index in inputs.influence or c.index in work.owned or c.index in inputs.release:
            return None
        if c.target_local >= 0:
            bones.append(c.target_local)
        if c.pole_local >= 0:
            bones.append(c.pole_local)
        for table in (inputs.targets, inputs.poles, inputs.pole_angles, inputs.soft, inputs.stretch):
            value = table.get(c.index)
            parts.append(b"-" if value is None else value.tobytes())
    parts.append(start if start is not None else work.matrices[:, bones].tobytes())
    parts.append(inputs.world.tobytes())
    if inputs.scale is not None:
        parts.append(inputs.scale[:, group.bones].tobytes())
    return b"|".join(parts)


def _nested(groups: Sequence[Group], work: Work) -> bool:
    """Whether a group hangs below another's bones (its start then depends on that one's solve)."""
    owned = {b for g in groups for b in g.bones}
    for g in groups:
        mine = set(g.bones)
        if any(a in owned and a not in mine for a in work.sk.ancestors(g.bones[0])):
            return True
    return False


def memo_levels(
    levels: Levels,
    snap: Snapshot,
    work: Work,
    groups: list[Group],
    inputs: Inputs,
    space: Space,
    report: RigReport,
    smooth: bool,
    dropped: Sequence[Group],
    start: Callable[[Group], bytes | None] | None = None,
) -> None:
    """`levels(...)` on `groups`, with the groups whose inputs are what they were at their last solve taken
    from that solve (see the module's notes). `start(group)`: what the group's start pose is a function of
    (bytes), where the caller knows it (the spine's: the root's home and the FK pose), else None."""
    global hits
    if not ENABLED or work.matrices.shape[0] != 1 or inputs.basis is not None or _nested(groups, work):
        levels(snap, work, groups, inputs, space, report, smooth, dropped)
        return
    keys: list[bytes | None] = []
    todo: list[Group] = []
    for g in groups:
        key = _key(snap, work, g, inputs, smooth, None if start is None else start(g))
        kept = _kept.get((id(snap.plan), tuple(g.bones))) if key is not None else None
        keys.append(key)
        if kept is not None and kept.plan is snap.plan and kept.key == key:
            work.set_bones(g.bones, kept.rot.copy(), kept.heads.copy())
            hits += 1
            for i, out in kept.outcomes.items():
                report.outcomes[i] = replace(out)
        else:
            todo.append(g)
    if not todo:
        return
    rescaled, scale_out = set(work.rescaled), set(work.scale_out)
    levels(snap, work, todo, inputs, space, report, smooth, dropped)
    if work.rescaled != rescaled or set(work.scale_out) != scale_out:
        return  # a solve changed a bone's scale: not kept (the memo puts back rotations and heads only)
    solved = {id(g) for g in todo}
    for g, key in zip(groups, keys, strict=True):
        if key is None or id(g) not in solved:
            continue
        if not all(c.index in report.outcomes and report.outcomes[c.index].valid for c in g.chains):
            continue  # refused or failed: its bones were not solved (nothing to put back; solved again next time)
        if not work.solved.issuperset(g.bones):
            continue
        outcomes = {c.index: replace(report.outcomes[c.index]) for c in g.chains}
        where = (id(snap.plan), tuple(g.bones))
        _kept.pop(where, None)
        _kept[where] = _Kept(snap.plan, key, work.rot[:, g.bones].copy(), work.heads()[:, g.bones].copy(), outcomes)
        while len(_kept) > _SIZE:
            _kept.pop(next(iter(_kept)))
