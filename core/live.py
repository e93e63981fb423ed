"""The live program: a rig's planned chains compiled once, then solved per update on ``mathutils`` (or, for
many chains at once, in numpy batches).

A live update that moves one or two targets solves a handful of small chains. `core.solve` builds numpy
arrays for the whole rig on every call (a working pose, a space, batches, outcomes), and on a character
that scaffolding costs ten times the solve itself. A `Program` keeps everything that holds between
updates (bones, rest frames, limits as cone tables, rotation modes, which chains hang below which) and an
update does only this: the pose of the few bones it needs, as Blender evaluated it (the caller reads them
on demand), carried along below chains solved earlier in the same update; one scalar kernel call per chain
(`solvers.scalar`, the kernels `core.solve` uses for live updates too, so both paths give the same pose up
to float32 rounding, tested); basis rotations written into the channel arrays in each bone's own rotation
mode, with the same continuity and "moved by more than rounding" rules as `rig.armature`; and each chain's
outcome with the same message. When many chains move at once (`Program.solve_many`) they are solved instead
in the rig core's numpy batches, batched as `core.solve` batches them, on the few arrays those chains need.

Only plain rigs are compiled (`Program.build` says why not): single chains (no trees), Start From
'Current', no axis-angle bones, control bones (targets and poles that are bones of the armature itself)
that hang below no chain; Influence 1 (the rig layer checks); Use Target Rotation toward a control bone
(the tip takes its orientation, as `core.batch`). Chains with Target Rotation toward an object, Soft,
Stretch or a CCD step are left out (`Program.refused`): an update that moves them, or a chain they hang
below, goes through `core.solve`, as does every update the rig layer cannot prove touches only targets,
poles and control bones.

This module imports ``mathutils`` (Blender's C math module, not bpy), because it holds chains as ``mathutils``
objects between updates; of `core/` only it and `core.lookahead` (playback solved ahead with it) do. The unit
tier cannot import them; the bpy tier tests them (tests/blender/test_live_program.py, test_lookahead.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from mathutils import Euler, Matrix, Quaternion, Vector
from numpy.typing import NDArray

from ..solvers.limits import JointLimits
from ..solvers.rotations import quaternion_to_matrix
from ..solvers.scalar import chain_limits
from ..solvers.scalar._chain import (
    BoneLimit,
    Chain,
    Step,
    bend_side,
    fabrik_step,
    fabrik_step_limited,
    make_ccd_step,
    solve_chains,
    two_bone,
)
from ..solvers.scalar._closed import Limb, applies, two_bone_limited
from ..solvers.search import defer_stage, refine
from ..solvers.types import CONVERGED, STALLED, STATUS_NAMES, UNREACHABLE, ZERO_LENGTH, ChainProblem, SolveResult
from . import convert
from .batch import solver_for, turn_about
from .checks import cached_limits
from .kinematics import Space, local_rotations
from .messages import chain_message, outcomes_of
from .model import ChainOutcome, ChainPlan, Snapshot

Channels = dict[str, NDArray[np.float32]]
F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
_IDENTITY_ROWS = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
_ULPS8 = 8.0 * 2.0**-23  # as rig.armature._few_to_channels
# A limited limb's analytic pose is not finished when its lower bone's head is farther than this from where it
# could still put the tip within the tolerance: the tolerance itself, and float32 rounding of the chain's size
# (the tip test measures on mathutils' float32 frames).
_MISS = 1.0
_MISS_F32 = 1e-5


class _Rows:
    """One chain's float64 rest rows as the scalar kernel reads them (`solvers.scalar._chain.RestRows`);
    the base and the root's frame are converted only when a kernel asks (the natural bend)."""

    __slots__ = ("base", "frame0", "ref")

    def __init__(self, ref: list[list[list[float]]], base: Quaternion, frame0: Quaternion) -> None:
        self.ref, self.base, self.frame0 = ref, base, frame0

    def rest(self, k: int) -> tuple[list[list[list[float]]], list[list[float]]]:
        return self.ref, _rows(self.base.to_matrix())

    def keep(self, k: int) -> list[list[float]]:
        return _rows(self.frame0.to_matrix())


def _rows(m: Matrix) -> list[list[float]]:
    """A 3x3 matrix as nested lists of rows."""
    return [[m[i][j] for j in range(3)] for i in range(3)]


def _xyz(v: Vector) -> tuple[float, float, float]:
    return (v.x, v.y, v.z)


def basis_matrix(mode: str, raw: Sequence[float], loc: Vector, scale: Vector) -> Matrix:
    """A bone's matrix_basis from its channels, as Blender builds it (`BKE_pchan_to_mat4`): `raw` is the
    channel of rotation mode `mode` (a quaternion normalized; an axis-angle of zero axis no rotation)."""
    if mode == "QUATERNION":
        rot = Quaternion(raw).normalized().to_matrix()
    elif mode == "AXIS_ANGLE":
        axis = Vector(raw[1:4])
        rot = Quaternion(axis.normalized(), raw[0]).to_matrix() if axis.length > 0.0 else Matrix.Identity(3)
    else:
        rot = Euler(raw[:3], mode).to_matrix()
    return Matrix.LocRotScale(loc, rot, scale)


@dataclass
class Link:
    """One compiled chain."""

    chain: ChainPlan
    bones: list[int]
    parent: int  # the root bone's parent, -1 for none
    level: int
    ref_rows: list[list[list[float]]]  # rest_rel of each bone, as rows
    ref_inv: list[Quaternion]  # the same as inverted quaternions
    limits: list[BoneLimit | None] | None
    step: Step | None  # None: two-bone, solved analytically
    tip_length: float
    channel: list[tuple[str, str]]  # each bone's (channel attribute, rotation mode)
    joint: JointLimits | None = None  # the limits as the numpy solvers take them (two-bone under limits)
    below: list[int] = field(default_factory=list)  # links hanging below this one's bones, by level
    blocks: bool = False  # a chain the program refused hangs below this one's bones
    # Use Target Rotation: the tip bone (not among `bones`, which reach for where its head must be) takes the
    # target's orientation; its channel and inverted rest_rel. -1: none.
    rot_tip: int = -1
    tip_channel: tuple[str, str] = ("", "")
    tip_ref_inv: Quaternion | None = None

    @property
    def posed(self) -> list[int]:
        """Every bone the link writes, root first."""
        return [*self.bones, self.rot_tip] if self.rot_tip >= 0 else self.bones


@dataclass
class Outcomes:
    """What one `Program.solve` did."""

    changed: set[str]  # channel attributes written
    written: list[tuple[int, str]]  # (bone, channel attribute) of the channel rows changed
    outcomes: dict[int, ChainOutcome]  # chain index -> outcome


@dataclass
class _Batch:
    """Links of one solver and bone count, solved together by `Program.solve_many`: their index arrays."""

    solver: str
    bones: I64  # (K, N) root first
    parents: I64  # (K,) each root's parent, -1 for none
    rest_rel: F64  # (K, N, 3, 3)
    tip_lengths: F64  # (K,)
    chains: list[ChainPlan]
    tips: list[str]  # tip bones' names
    poled: list[int]  # rows with a pole
    limits: JointLimits | None  # the plan's (a limit change makes a new plan, and a new program)


@dataclass
class _Many:
    """What `Program.solve_many` holds for one set of links between updates."""

    batches: list[_Batch]
    bones: list[int]  # every solved bone, parents first (as `core.solve` lists them)
    at: I64  # where each of `bones` is in the batches' frames, concatenated


class Program:
    """A rig compiled for live updates (see the module docstring)."""

    def __init__(self, snap: Snapshot, links: list[Link], modes: list[str]) -> None:
        self.snap = snap
        self.links = links
        self.modes = modes
        self.by_chain = {link.chain.index: i for i, link in enumerate(links)}
        self.parent: list[int] = snap.sk.parent.tolist()
        # Link -> a chain of its bones holding their local geometry, built on first use: it holds while the
        # bones' rest data, scale and location do, which the rig layer guarantees until it calls `forget`.
        self.shapes: dict[int, Chain] = {}
        self.limbs: dict[int, Limb] = {}  # link -> its closed form's geometry (`two_bone_limited`), with `shapes`
        self.many: dict[tuple[int, ...], _Many | None] = {}  # links -> their batches (None: not batchable)
        self.closures: dict[frozenset[int], list[int] | None] = {}  # chains -> `closure` (a drag asks the same)
        self.refused: dict[int, str] = {}  # chains left to the full solve (chain index -> why)

    def forget(self) -> None:
        """The bones' local geometry may have changed (a channel other than rotation, or the rest pose)."""
        self.shapes.clear()
        self.limbs.clear()

    @classmethod
    def build(cls, snap: Snapshot, modes: list[str]) -> Program | str:
        """`snap` compiled, or why it cannot be (`modes`: every bone's rotation mode name)."""
        settings = snap.settings
        if snap.body is not None:
            return "Full Body"  # the chains move the body together: the full path (core/body.py)
        if settings.start_from != "CURRENT":
            return "Start From 'Rest'"
        if not (math.isfinite(settings.tolerance) and settings.tolerance > 0.0):
            return "the Tolerance is not a distance"
        sk = snap.sk
        links: list[Link] = []
        refused: dict[int, str] = {}  # chain index -> why the program leaves it to the full solve
        for g in snap.plan.groups:
            if g.is_tree:
                return "a tree"
            c = g.chains[0]
            # Target Rotation: with a control bone of this armature (an Empty turned in place would go
            # unnoticed: the lean path compares where objects are), and a bone left to solve.
            rotation = c.use_target_rotation and c.target_local >= 0 and len(c.bones) > 1 and c.solver != "TWO_BONE"
            if (c.use_target_rotation and not rotation) or c.soft > 0.0 or c.stretch > 1.0 or c.ccd_max_step:
                # Left to the full solve: an update that moves its controls (or a chain it hangs below) takes
                # the full path; the other chains stay compiled.
                refused[c.index] = f"chain '{c.name}' uses a feature only the full solve has"
                continue
            channel = []
            for b in c.bones:
                mode = modes[b]
                if mode == "AXIS_ANGLE":
                    return "an axis-angle bone"
                channel.append(("rotation_quaternion" if mode == "QUATERNION" else "rotation_euler", mode))
            solved_bones = c.bones[:-1] if rotation else c.bones
            try:
                joint = cached_limits(snap, [solved_bones])
            except ValueError:
                return f"chain '{c.name}' has limits the solver refuses"
            limits = chain_limits(joint)[0] if joint is not None else None
            step: Step | None = None
            if c.solver == "FABRIK":
                step = fabrik_step_limited if limits is not None else fabrik_step
            elif c.solver == "CCD":
                step = make_ccd_step(None, limits is not None)
            elif len(c.bones) != 2:
                return f"chain '{c.name}' is not two bones"
            ref = sk.rest_rel[solved_bones]
            link = Link(
                chain=c,
                bones=list(solved_bones),
                parent=int(sk.parent[c.bones[0]]),
                level=g.level,
                ref_rows=ref.tolist(),
                ref_inv=[Matrix(r.tolist()).to_quaternion().inverted() for r in ref],
                limits=limits,
                step=step,
                tip_length=float(snap.lengths[c.bones[-1]]),
                channel=channel[: len(solved_bones)],
                joint=joint if step is None else None,
            )
            if rotation:
                tip = c.bones[-1]
                link.rot_tip, link.tip_channel = tip, channel[-1]
                link.tip_ref_inv = Matrix(sk.rest_rel[tip].tolist()).to_quaternion().inverted()
            links.append(link)
        if not links:
            return next(iter(refused.values()), "no chains")
        chain_bones = {b for g in snap.plan.groups for b in g.bones}
        for link in links:
            for control in (link.chain.target_local, link.chain.pole_local):
                if control >= 0 and (control in chain_bones or any(a in chain_bones for a in sk.ancestors(control))):
                    # It moves with the chain it hangs below: the full solve orders that.
                    return f"chain '{link.chain.name}' has a control bone that hangs below a chain"
        prog = cls(snap, links, modes)
        prog.refused = refused
        owner = {b: i for i, link in enumerate(links) for b in link.posed}
        for i, link in enumerate(links):
            # Links whose root hangs below this link's bones, at any depth (a bone's ancestors include those of
            # every link it hangs below through), parents first.
            below = [
                j
                for j, other in enumerate(links)
                if j != i and any(owner.get(a) == i for a in sk.ancestors(other.bones[0]))
            ]
            link.below = sorted(below, key=lambda j: links[j].level)
            link.blocks = any(
                any(owner.get(a) == i for a in sk.ancestors(g.chains[0].bones[0]))
                for g in snap.plan.groups
                if g.chains[0].index in refused
            )
        return prog

    def closure(self, chains: Iterable[int]) -> list[int] | None:
        """The links of `chains` (chain indices) and every link below them, parents first; None when one of
        them is a chain the program refused, or has one below it (the full solve's). Worked out once per set of
        chains (a drag asks the same set on every update; the links do not change while the program lives):
        callers must not change the list."""
        key = frozenset(chains)
        found = self.closures.get(key)
        if found is None and key not in self.closures:
            if len(self.closures) > 64:
                self.closures.clear()  # a rig with many chains dragged in many combinations: bounded
            found = self.closures[key] = self._closure(key)
        return found

    def _closure(self, chains: frozenset[int]) -> list[int] | None:
        out: set[int] = set()
        for index in chains:
            i = self.by_chain.get(index)
            if i is None or self.links[i].blocks:
                return None
            if i not in out:
                out.add(i)
                out.update(self.links[i].below)
        return sorted(out, key=lambda j: self.links[j].level)

    def solve(
        self,
        order: list[int],
        read_pose: Callable[[int], Matrix],
        world: Matrix,
        targets: dict[int, Matrix],
        poles: dict[int, Matrix],
        angles: dict[int, float],
        channels: Channels,
        placed: dict[int, tuple[Vector, Quaternion]] | None = None,
    ) -> Outcomes:
        """Solve links `order` (parents first, `closure`) and put their rotations into `channels`.

        `read_pose(b)`: bone b's armature-space pose matrix as Blender evaluated it; `world`: the armature's
        world matrix; `targets`, `poles`: world matrices by chain index; `angles`: pole angles (radians);
        `placed`: bones already posed anew in this update (Full Body: the body's, `core/body_live.py`) by
        their head and rotation, their scale as read: the links below them start from there.
        """
        sk = self.snap.sk
        settings = self.snap.settings
        scale = abs(world.determinant()) ** (1.0 / 3.0)
        inv = world.inverted_safe()
        tolerance = settings.tolerance / scale
        parent = self.parent
        old: dict[int, Matrix] = {}
        new: dict[int, Matrix] = {}
        moves: dict[int, Matrix] = {}  # solved bone -> new @ old^-1, to carry what hangs below it
        for b, (head, q) in (placed or {}).items():
            m = old[b] = read_pose(b)
            new[b] = Matrix.LocRotScale(head, q, m.to_scale())

        def pose(b: int) -> Matrix:
            m = new.get(b)
            if m is not None:
                return m
            m = old.get(b)
            if m is None:
                m = old[b] = read_pose(b)
            if new:
                a = parent[b]
                while a >= 0 and a not in new:
                    a = parent[a]
                if a >= 0:
                    d = moves.get(a)
                    if d is None:
                        d = moves[a] = new[a] @ old[a].inverted_safe()
                    return d @ m
            return m

        out = Outcomes(set(), [], {})
        for i in order:
            link = self.links[i]
            c = link.chain
            mats = [pose(b) for b in link.bones]
            keep = [m.to_quaternion() for m in mats]
            root = _xyz(mats[0].translation)
            base = pose(link.parent).to_quaternion() if link.parent >= 0 else Quaternion()
            tip_mat = pose(link.rot_tip) if link.rot_tip >= 0 else None
            shape = self.shapes.get(i)
            if shape is None:
                shape = self.shapes[i] = self._shape(link, mats, base, tip_mat)
            goal = _xyz(inv @ targets[c.index].translation)
            tip_rot: Quaternion | None = None
            if tip_mat is not None:
                # As `core.batch.solve_batch`: the tip takes the target's orientation (in armature space); the
                # bones above reach for where the tip's head must be for its tail to be on the target.
                tip_rot = (inv @ targets[c.index]).to_quaternion()
                tip_off = tip_mat.to_3x3().normalized().transposed() @ (tip_mat.col[1].xyz * link.tip_length)
                goal = _xyz(Vector(goal) - tip_rot @ tip_off)
            pole_at: list[float] | None = None
            if c.index in poles:
                p = inv @ poles[c.index].translation
                angle = angles.get(c.index, 0.0)
                if angle:
                    p = _turn(p, Vector(root), Vector(goal), angle)
                pole_at = list(_xyz(p))
            keep_dirs = [q @ d for q, d in zip(keep, shape.directions, strict=True)]
            step = link.step
            chain = Chain.assemble(
                _Rows(link.ref_rows, base, keep[0]), shape, root, goal, keep, keep_dirs, pole_at, base
            )
            limited = link.limits is not None
            solved: list[Quaternion] | None
            if step is None:
                if chain.distance <= ZERO_LENGTH * max(chain.total, 1.0):
                    solved, iterations, code = None, 0, UNREACHABLE
                elif not limited:
                    solved, iterations, code = two_bone(chain, keep[0] @ shape.offsets[0]), 0, CONVERGED
                else:
                    # Under limits, the analytic pose matters only when it reaches the target (else the closed
                    # form and the stage take over): its lower bone is not limited when its head already rules
                    # that out (`two_bone`'s `miss`), and the full pose is made only if the stage needs it.
                    # The elbow's slack as the tip's: the Tolerance and float32 rounding (`two_bone.elbow_moved`
                    # holds the full solves to the Tolerance; a pose in between is a coincidence of the
                    # rounding's size).
                    miss = _MISS * tolerance + _MISS_F32 * chain.total
                    analytic = two_bone(chain, keep[0] @ shape.offsets[0], miss, miss)
                    solved = self._limited_two_bone(
                        i, link, shape, chain, analytic or None, keep, base, pole_at, root, tolerance
                    )
                    iterations, code = 0, CONVERGED
            else:
                head = Vector()
                relative = [[0.0, 0.0, 0.0]]
                for q, offset in zip(keep, shape.offsets, strict=True):
                    head = head + q @ offset
                    relative.append([head.x, head.y, head.z])
                solved, iterations, code = solve_chains(
                    [chain],
                    [relative],
                    step,
                    track=limited,
                    polished=True,
                    limited=limited,
                    tolerance=tolerance,
                    max_iterations=int(settings.max_iterations),
                    uniform=False,
                )[0]
            if solved is None:
                tip = _xyz(mats[-1].translation + mats[-1].col[1].xyz * link.tip_length)
                residual = math.dist(tip, goal)
            else:
                rel = self._place(link, shape, solved, mats, base, channels, new, out, tip_rot, tip_mat)
                residual = math.dist(_xyz(rel), chain.target64)
            # As `solvers.scalar._result`: within tolerance is converged; the analytic solve's miss is out of
            # reach; an iterative solve that stopped short is stalled unless it said why.
            if residual <= tolerance and solved is not None:
                code = CONVERGED
            elif link.step is None:
                code = UNREACHABLE
            elif code == CONVERGED:
                code = STALLED
            world_residual = residual * scale
            reached = world_residual <= settings.tolerance * (1.0 + 1e-6)
            name = STATUS_NAMES[code]
            text = chain_message(world_residual, name, reached, 1, 0, sk.names[c.bones[-1]])
            if not text:
                text = self.snap.plan.notes.get(c.index, "")
            # No per-frame arrays: a live outcome has one frame, and only the bake reads them.
            out.outcomes[c.index] = ChainOutcome(True, text, float(iterations), world_residual, reached, name)
        return out

    def batchable(self, order: list[int]) -> _Many | None:
        """The batches that solve links `order` in one pass, or None when some link hangs below another of
        them (the full solve's levels do that) or its bones are not each the parent of the next."""
        key = tuple(order)
        if key in self.many:
            return self.many[key]
        if len(self.many) > 8:
            self.many.clear()
        chosen = set(order)
        sk = self.snap.sk
        ok = all(chosen.isdisjoint(self.links[i].below) and self.links[i].rot_tip < 0 for i in order)
        # Batched as `core.solve` batches one level (`core.solve._solve_levels`), so each batch picks the same solver.
        groups: dict[tuple[int, str, int], list[Link]] = {}
        for i in order:
            link = self.links[i]
            bones = link.bones
            ok = ok and all(int(sk.parent[b]) == a for a, b in itertools.pairwise(bones))
            groups.setdefault((link.level, link.chain.solver, len(bones)), []).append(link)
        if not ok:
            self.many[key] = None
            return None
        batches = []
        for (_level, solver, _n), links in groups.items():
            idx = np.asarray([link.bones for link in links], dtype=np.int64)
            batches.append(
                _Batch(
                    solver,
                    idx,
                    np.asarray([link.parent for link in links], dtype=np.int64),
                    sk.rest_rel[idx],
                    self.snap.lengths[idx[:, -1]],
                    [link.chain for link in links],
                    [sk.names[link.bones[-1]] for link in links],
                    [k for k, link in enumerate(links) if link.chain.pole is not None],
                    cached_limits(self.snap, idx.tolist()),
                )
            )
        flat = np.concatenate([b.bones.ravel() for b in batches])
        order_b = np.lexsort((flat, sk.depth[flat]))  # parents before children, as `core.solve`
        many = _Many(batches, flat[order_b].tolist(), order_b)
        self.many[key] = many
        return many

    def solve_many(
        self,
        many: _Many,
        pose: F64,
        world: F64,
        targets: dict[int, F64],
        poles: dict[int, F64],
        angles: dict[int, float],
    ) -> tuple[list[int], F64, dict[int, ChainOutcome]]:
        """Solve the links of `many` (`batchable`) in numpy batches, as `core.solve` solves one frame of them
        (the same arrays, solvers and outcomes), without its working pose of the whole armature.

        `pose`: (B, 4, 4) armature-space pose matrices as Blender evaluated them; `world`: (4, 4); `targets`,
        `poles`: (4, 4) world matrices by chain index; `angles`: pole angles. Returns the solved bones
        (parents first), their (1, n, 3, 3) basis rotations and each chain's outcome.
        """
        settings = self.snap.settings
        space = Space.of(world[None])
        scale = float(space.scale[0])
        tolerance = float(settings.tolerance) / scale
        frames_out = []
        outcomes: dict[int, ChainOutcome] = {}
        for batch in many.batches:
            idx = batch.bones
            k, n = idx.shape
            mats = pose[idx]  # (K, N, 4, 4)
            frames, scales = convert.rotation_parts(mats[..., :3, :3])
            positions = np.empty((k, n + 1, 3))
            positions[:, :n] = mats[..., :3, 3]
            positions[:, n] = mats[:, -1, :3, 3] + mats[:, -1, :3, 1] * batch.tip_lengths[:, None]
            offsets = np.einsum("knji,knj->kni", frames, positions[:, 1:] - positions[:, :-1])
            base = np.empty((k, 3, 3))
            rooted = batch.parents >= 0
            base[rooted] = convert.rotation_parts(pose[batch.parents[rooted], :3, :3])[0]
            base[~rooted] = np.eye(3)
            goals = space.points_of(np.stack([targets[c.index] for c in batch.chains])[None])[0]
            pole_at = None
            if batch.poled:
                pole_at = np.full((k, 3), np.nan)
                pole_mats = np.stack([poles[batch.chains[j].index] for j in batch.poled])
                pole_at[batch.poled] = space.points_of(pole_mats[None])[0]
                for j in batch.poled:
                    angle = angles.get(batch.chains[j].index, 0.0)
                    if angle:
                        pole_at[j] = turn_about(
                            pole_at[j : j + 1], positions[j, :1], goals[j : j + 1], np.array([angle])
                        )[0]
            problem = ChainProblem.trusted(
                positions,
                frames,
                offsets,
                batch.rest_rel,
                base,
                goals,
                pole_at,
                batch.limits,
                tolerance,
                int(settings.max_iterations),
                settings.roll_mode,
            )
            result = solver_for(batch.solver, k)(problem)
            solved = result.frames  # (K, N, 3, 3)
            # The tip's tail as the full solve measures it: its head, and its Y axis at the bone's scale.
            tails = result.positions[:, n - 1] + solved[:, -1, :, 1] * (scales[:, -1, 1] * batch.tip_lengths)[:, None]
            residuals = np.linalg.norm(tails - goals, axis=1) * scale
            found = outcomes_of(
                residuals[None],
                result.iterations.astype(np.float64)[None],
                result.status[None],
                float(settings.tolerance),
                batch.tips,
            )
            for c, out in zip(batch.chains, found, strict=True):
                note = self.snap.plan.notes.get(c.index)
                if note and not out.message:
                    out.message = note
                outcomes[c.index] = out
            parents = np.empty_like(solved)
            parents[:, 0] = base
            parents[:, 1:] = solved[:, :-1]
            frames_out.append(local_rotations(solved, parents, batch.rest_rel).reshape(k * n, 3, 3))
        basis = np.concatenate(frames_out)[many.at][None]
        return many.bones, basis, outcomes

    def _limited_two_bone(
        self,
        i: int,
        link: Link,
        shape: Chain,
        chain: Chain,
        solved: list[Quaternion] | None,
        keep: list[Quaternion],
        base: Quaternion,
        pole_at: list[float] | None,
        root: tuple[float, float, float],
        tolerance: float,
    ) -> list[Quaternion]:
        """A two-bone limb under limits: its analytic pose (`solved`; None when it provably misses the target)
        if it reaches the target, else solved again as the full solve solves it (`solvers.two_bone`: the
        closed form under limits, then the global stage for what it leaves), on a one-chain problem relative
        to the root, so the program and the full solve agree."""
        if solved is not None:
            tip = solved[0] @ shape.offsets[0] + solved[1] @ shape.offsets[1]
            if math.dist(_xyz(tip), chain.target64) <= tolerance:
                return solved
        # The closed form on mathutils first (as the scalar solver); only what it leaves takes the numpy
        # solve with its global stage.
        if applies(chain):
            limb = self.limbs.get(i)
            if limb is None:
                limb = self.limbs[i] = Limb(chain)
            closed, settled = two_bone_limited(chain, bend_side(chain, keep[0] @ shape.offsets[0]), limb)
            # As `solvers.two_bone.settle`: a pose the limits left on its target needs no search.
            end = closed[0] @ shape.offsets[0] + closed[1] @ shape.offsets[1]
            if settled or math.dist(_xyz(end), chain.target64) <= tolerance:
                return closed
            if defer_stage():
                # A drag: the closed form's pose now (its status says how far it is), the stage once the
                # target stands still (the rig layer solves it again then).
                return closed
        elif defer_stage():
            return solved or two_bone(chain, keep[0] @ shape.offsets[0])
        if solved is None:
            solved = two_bone(chain, keep[0] @ shape.offsets[0])  # the stage starts from it
        offsets = np.array([_xyz(o) for o in shape.offsets], dtype=np.float64)[None]
        frames = np.array([_rows(q.to_matrix()) for q in keep], dtype=np.float64)[None]
        positions = np.zeros((1, 3, 3))
        positions[0, 1] = frames[0, 0] @ offsets[0, 0]
        positions[0, 2] = positions[0, 1] + frames[0, 1] @ offsets[0, 1]
        poles = None
        if pole_at is not None:
            poles = (np.asarray(pole_at, dtype=np.float64) - np.asarray(root))[None]
        problem = ChainProblem.trusted(
            positions,
            frames,
            offsets,
            np.asarray(link.ref_rows, dtype=np.float64)[None],
            np.array(_rows(base.to_matrix()), dtype=np.float64)[None],
            np.asarray(chain.target64, dtype=np.float64)[None],
            poles,
            link.joint,
            tolerance,
            int(self.snap.settings.max_iterations),
            self.snap.settings.roll_mode,
        )
        # The stage from the analytic pose, as the full solve's (`solvers.scalar.solve_two_bone_scalar`: the
        # analytic pose, `two_bone.settle`'s closed form, then `refine`). The closed form is not run again: it
        # decides as the scalar one just did (to float32 at its boundaries).
        quats = np.array([[q.w, q.x, q.y, q.z] for q in solved], dtype=np.float64)
        quats /= np.linalg.norm(quats, axis=1)[:, None]
        start = quaternion_to_matrix(quats)[None]
        placed = np.zeros((1, 3, 3))
        placed[0, 1] = start[0, 0] @ offsets[0, 0]
        placed[0, 2] = placed[0, 1] + start[0, 1] @ offsets[0, 1]
        residual = np.linalg.norm(placed[:, 2] - problem.targets, axis=1)
        reached = residual <= tolerance
        analytic = SolveResult(
            placed,
            start,
            np.zeros(1, dtype=np.int64),
            residual,
            reached,
            np.where(reached, CONVERGED, UNREACHABLE).astype(np.int8),
        )
        result = refine(problem, analytic)
        return [Matrix(f.tolist()).to_quaternion() for f in result.frames[0]]

    def _shape(self, link: Link, mats: list[Matrix], base: Quaternion, tip: Matrix | None = None) -> Chain:
        """The chain's local geometry (offsets, lengths, reference frames, limits) from its bones' pose; with
        Target Rotation (`tip`: the tip bone's pose) the chain ends at the tip's head."""
        heads = [m.translation for m in mats]
        end = heads[-1] + mats[-1].col[1].xyz * link.tip_length if tip is None else tip.translation
        points = [*heads, end]
        rots = [m.to_3x3().normalized() for m in mats]
        offsets = [list(_xyz(r.transposed() @ (points[k + 1] - points[k]))) for k, r in enumerate(rots)]
        keep_dirs = [list(_xyz((points[k + 1] - points[k]).normalized())) for k in range(len(rots))]
        root = _xyz(points[0])
        frames = [_rows(r) for r in rots]
        settings = self.snap.settings
        return Chain(
            _Rows(link.ref_rows, base, rots[0].to_quaternion()),
            0,
            list(root),
            list(_xyz(points[-1])),
            frames,
            keep_dirs,
            offsets,
            None,
            link.limits,
            settings.roll_mode,
            link.limits is not None or settings.roll_mode != "KEEP",
        )

    def _place(
        self,
        link: Link,
        shape: Chain,
        solved: list[Quaternion],
        mats: list[Matrix],
        base_q: Quaternion,
        channels: Channels,
        new: dict[int, Matrix],
        out: Outcomes,
        tip_rot: Quaternion | None = None,
        tip_mat: Matrix | None = None,
    ) -> Vector:
        """Write a solved link's rotations into `channels` (with Target Rotation, the tip's `tip_rot` too),
        note its bones' new poses (for links below); return its end relative to its root."""
        carry = bool(link.below)
        parent_inv = base_q.conjugated()
        rel = Vector()
        bones, rotations = link.bones, solved
        if tip_rot is not None:
            bones, rotations = link.posed, [*solved, tip_rot]
        for k, (b, q) in enumerate(zip(bones, rotations, strict=True)):
            tip = k == len(link.bones)
            # Blender poses a bone as parent @ rest_rel @ basis (`core.solve.local_rotations`).
            basis = (link.tip_ref_inv if tip else link.ref_inv[k]) @ (parent_inv @ q)  # type: ignore[operator]
            basis.normalize()
            attr, mode = link.tip_channel if tip else link.channel[k]
            row = channels[attr][b]
            prev = row.tolist()
            if mode == "QUATERNION":
                if basis.dot(Quaternion(prev)) < 0.0:
                    basis.negate()
                values = basis[:]
            else:
                values = basis.to_euler(mode, Euler(prev, mode))[:]
            # `rig.armature._moved`: more than 1e-6 plus 8 float32 ulps of the old value, in some component
            # (a plain loop: a generator under any() costs twice as much, on every bone of every update).
            for n, o in zip(values, prev, strict=True):
                if abs(n - o) > 1e-6 + _ULPS8 * abs(o):
                    row[:] = values
                    out.changed.add(attr)
                    out.written.append((b, attr))
                    break
            if carry:
                # The bone's new pose, for chains below: its head, the solved rotation, its scale as it was.
                scale = tip_mat.to_scale() if tip and tip_mat is not None else mats[k].to_scale()
                new[b] = Matrix.LocRotScale(mats[0].translation + rel, q, scale)
            if tip:
                break
            # Relative to the root, as the kernels solved it: float32 rounds to the chain's size.
            rel = rel + q @ shape.offsets[k]
            parent_inv = q.conjugated()
        return rel


def _turn(pole: Vector, root: Vector, goal: Vector, angle: float) -> Vector:
    """`pole` turned by `angle` about the root -> goal axis (`core.batch.turn_poles`, one chain)."""
    axis = goal - root
    if axis.length <= 1e-12:
        return pole
    return root + Quaternion(axis.normalized(), angle) @ (pole - root)
