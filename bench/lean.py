"""The leanest live handlers that still solve, against Blender's IK constraint on the same rigs and targets:
what a Python `depsgraph_update_post` solver pays on this machine before it adds anything (issue 14's goals,
measured as a bound).

Each stand-in is a `depsgraph_update_post` handler that does only what a live solver cannot skip: read the
moved targets and the pose it starts from, solve, write every bone's rotation in one `foreach_set` and tag
the armature so Blender evaluates the new pose. It keeps no status, no FK store, no rotation continuity, no
checks of the rig or the inputs, and it writes XYZ Euler angles (every bone of these rigs is XYZ). Reach
IK's own handlers are unregistered for these runs; timing as `bench/live.py` (two `view_layer.update()`
calls per round, medians of warm rounds, the best of alternating runs of each side).

- (a1), (a) "limbs": each two-bone chain whose target moved, solved analytically toward its pole with
  `mathutils`, each bone turned from its current pose by the shortest arc (its twist kept). On (a) the
  FABRIK spine and the CCD tail are left as they are: they cost nothing, so this row is a lower bound for
  any solver of (a).
- (a) "no iterations": the same limbs, and the spine's and the tail's bones read and written (the arms carried
  along by the chest) but not solved: the cost of handling two more chains in the leanest code, a lower bound
  for any solver of them. "plain": solved by textbook FABRIK and CCD (no polish step) from the current pose
  to the Tolerance (1e-3, at most 30 iterations).
- (b) "no iterations": every bone's matrix read, turned and written as a numpy batch, FABRIK not run: a lower
  bound for any solver of (b). "plain": FABRIK on the same batch to the Tolerance, no polish step.

The residual columns are the worst tip-to-target distance (world units, from the evaluated pose) over the
chains the stand-in solves, on both sides: the limbs rows measure the limbs only. "handler ms" is the
stand-in's own time per update.

`--setup`: the rig Set Up Character makes, one hand's control bone dragged (`bench/lean_setup.py`): the floor
for bone controls in the same armature, against Blender's IK on the same set-up rig; and the same stand-in
solving in `depsgraph_update_pre`, before the evaluation (one evaluation instead of two). Then the floor under
the set-up's limits: Reach IK's own limb solve (the compiled program's, as a drag solves) alone in
`depsgraph_update_pre` for one hand and for four limbs, against Blender's IK on the same drags, and Reach
IK's live solving on the same drags in the same process (what the live handler adds to the solve).

    .venv/bin/python bench/lean.py [--rounds 40] [--repeats 3] [--setup]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live  # bench/live.py: the rigs, targets and timing this compares with

# isort: split
import bpy
import numpy as np
from mathutils import Matrix, Quaternion, Vector

rigs = live.rigs
TOLERANCE = 1e-3  # Reach IK's default, as bench/live.py's rigs use it
MAX_ITERATIONS = 30
_Y = Vector((0.0, 1.0, 0.0))


def _rest_rel(bone: bpy.types.Bone) -> Quaternion:
    """The bone's rest rotation relative to its parent's (Blender poses a bone as parent @ rest_rel @ basis)."""
    if bone.parent is None:
        return bone.matrix_local.to_quaternion()
    return (bone.parent.matrix_local.to_3x3().inverted() @ bone.matrix_local.to_3x3()).to_quaternion()


class _Link:
    """One chain of the character as the scalar stand-in solves it."""

    def __init__(self, obj: bpy.types.Object, spec: rigs.ChainSpec, names: list[str]) -> None:
        tip = obj.data.bones[spec.tip]
        bones = [tip]
        for _ in range(spec.length - 1):
            bones.insert(0, bones[0].parent)
        parent = bones[0].parent
        self.name, self.solver, self.target, self.pole = spec.name, spec.solver, spec.target, spec.pole
        self.bones = [names.index(b.name) for b in bones]
        self.parent = names.index(parent.name)
        self.lengths = [b.length for b in bones]
        self.rest_inv = [_rest_rel(b).inverted() for b in bones]
        self.offset = parent.matrix_local.inverted() @ bones[0].head_local  # root head in the parent's frame
        self.last: tuple[float, float, float] | None = None
        self.iterations: list[int] = []


class _Timed:
    """The stand-in's own time per call (its share of an update, as `bench/live.py`'s handler column)."""

    seconds: list[float]

    def __call__(self, scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
        start = time.perf_counter()
        self.handle()
        self.seconds.append(time.perf_counter() - start)

    def handle(self) -> None:
        raise NotImplementedError


class LeanScalar(_Timed):
    """(a1), (a): two-bone limbs solved analytically; the spine and tail left alone (`iterations` None) or
    solved plainly with at most `iterations` iterations (0: read and written, not solved)."""

    def __init__(self, rig: rigs.Rig, iterations: int | None) -> None:
        obj = self.obj = rig.obj
        self.seconds = []
        names = [pb.name for pb in obj.pose.bones]
        if any(pb.rotation_mode != "XYZ" for pb in obj.pose.bones):
            raise ValueError("the stand-in writes XYZ Euler angles")
        self.euler = np.empty(3 * len(names), dtype=np.float32)
        obj.pose.bones.foreach_get("rotation_euler", self.euler)
        links = [_Link(obj, spec, names) for spec in rig.chains]
        if iterations is None:
            links = [link for link in links if link.solver == "TWO_BONE"]
        self.max_iterations = iterations or 0
        # Parents first: the arms hang below the spine's chest.
        self.links = sorted(links, key=lambda link: link.name != "spine")
        self.chest = names.index("chest")

    def handle(self) -> None:
        obj = self.obj
        bones = obj.pose.bones
        inverse: Matrix | None = None
        chest_move: Matrix | None = None  # the chest's new pose @ its old pose^-1, once the spine moved
        wrote = False
        for link in self.links:
            t = link.target.matrix_world.translation
            at = (t.x, t.y, t.z)
            carried = chest_move is not None and link.name.startswith("arm")
            if at == link.last and not carried:
                continue
            link.last = at
            if inverse is None:
                inverse = obj.matrix_world.inverted()
            goal = inverse @ t
            above = bones[link.parent].matrix
            if carried:
                above = chest_move @ above
            root = above @ link.offset
            mats = [bones[b].matrix.copy() for b in link.bones]
            if link.solver == "TWO_BONE":
                rotations = _two_bone(link, mats, root, goal, inverse @ link.pole.matrix_world.translation)
            else:
                solve = _fabrik if link.solver == "FABRIK" else _ccd
                rotations = solve(link, mats, root, goal, self.max_iterations)
                if link.bones[-1] == self.chest:
                    head = root.copy()
                    for q, length in zip(rotations[:-1], link.lengths[:-1], strict=True):
                        head += q @ (_Y * length)
                    chest_move = Matrix.LocRotScale(head, rotations[-1], None) @ mats[-1].inverted()
            parent_q = above.to_quaternion()
            for b, q, rest_inv in zip(link.bones, rotations, link.rest_inv, strict=True):
                basis = rest_inv @ (parent_q.conjugated() @ q)
                basis.normalize()
                self.euler[3 * b : 3 * b + 3] = basis.to_euler("XYZ")[:]
                parent_q = q
            wrote = True
        if wrote:
            bones.foreach_set("rotation_euler", self.euler)
            obj.update_tag(refresh={"DATA"})


def _two_bone(link: _Link, mats: list[Matrix], root: Vector, goal: Vector, pole: Vector) -> list[Quaternion]:
    """The law of cosines in the plane of root, goal and pole; each bone turned from its current direction by
    the shortest arc (its twist kept, as Reach IK's default roll mode does)."""
    l1, l2 = link.lengths
    d = goal - root
    distance = d.length
    reach = min(max(distance, abs(l1 - l2) + 1e-6), l1 + l2 - 1e-6)
    bend = math.acos(max(-1.0, min(1.0, (l1 * l1 + reach * reach - l2 * l2) / (2.0 * l1 * reach))))
    axis = d / distance
    side = pole - root
    side -= axis * side.dot(axis)
    side.normalize()
    elbow = root + (axis * math.cos(bend) + side * math.sin(bend)) * l1
    upper, lower = (m.to_quaternion() for m in mats)
    turn = (upper @ _Y).rotation_difference(elbow - root)
    upper = turn @ upper
    lower = turn @ lower
    lower = (lower @ _Y).rotation_difference(root + axis * reach - elbow) @ lower
    return [upper, lower]


def _fabrik(link: _Link, mats: list[Matrix], root: Vector, goal: Vector, most: int) -> list[Quaternion]:
    """Textbook FABRIK on the joint positions, then each bone turned by the shortest arc to its new direction."""
    lengths = link.lengths
    n = len(lengths)
    p = [m.translation.copy() for m in mats]
    p.append(mats[-1].translation + mats[-1].col[1].xyz.normalized() * lengths[-1])
    before = [(p[i + 1] - p[i]).normalized() for i in range(n)]
    iterations = 0
    if most and (goal - root).length >= sum(lengths):
        # The textbook reach check: a target beyond the chain's length lays it straight toward the target.
        link.iterations.append(0)
        return [b.rotation_difference(goal - root) @ m.to_quaternion() for b, m in zip(before, mats, strict=True)]
    while (p[-1] - goal).length > TOLERANCE and iterations < most:
        iterations += 1
        p[-1] = goal.copy()
        for i in range(n - 1, -1, -1):
            p[i] = p[i + 1] + (p[i] - p[i + 1]).normalized() * lengths[i]
        p[0] = root.copy()
        for i in range(n):
            p[i + 1] = p[i] + (p[i + 1] - p[i]).normalized() * lengths[i]
    link.iterations.append(iterations)
    return [
        before[i].rotation_difference((p[i + 1] - p[i]).normalized()) @ m.to_quaternion() for i, m in enumerate(mats)
    ]


def _ccd(link: _Link, mats: list[Matrix], root: Vector, goal: Vector, most: int) -> list[Quaternion]:
    """Textbook CCD: tip to root, each joint turned so the tip points at the target."""
    lengths = link.lengths
    n = len(lengths)
    rotations = [m.to_quaternion() for m in mats]
    p = [root]
    for q, length in zip(rotations, lengths, strict=True):
        p.append(p[-1] + q @ (_Y * length))
    iterations = 0
    if most and (goal - root).length >= sum(lengths):
        link.iterations.append(0)  # out of reach: straight toward the target, as `_fabrik`
        return [(q @ _Y).rotation_difference(goal - root) @ q for q in rotations]
    while (p[-1] - goal).length > TOLERANCE and iterations < most:
        iterations += 1
        for j in range(n - 1, -1, -1):
            turn = (p[-1] - p[j]).rotation_difference(goal - p[j])
            for k in range(j, n):
                rotations[k] = turn @ rotations[k]
            for k in range(j + 1, n + 1):
                p[k] = p[j] + turn @ (p[k] - p[j])
    link.iterations.append(iterations)
    return rotations


class LeanBatch(_Timed):
    """(b): every chain's bones read, solved (or not) and written as one numpy batch."""

    def __init__(self, rig: rigs.Rig, iterations: int) -> None:
        obj = self.obj = rig.obj
        self.seconds = []
        names = [pb.name for pb in obj.pose.bones]
        bones = [obj.data.bones[name] for name in names]  # in the pose's order
        if any(pb.rotation_mode != "XYZ" for pb in obj.pose.bones):
            raise ValueError("the stand-in writes XYZ Euler angles")
        n = rig.chains[0].length
        self.index = np.array([[names.index(f"{s.name}.{i:03d}") for i in range(n)] for s in rig.chains])
        if any(bones[int(i)].parent is not None for i in self.index[:, 0]):
            raise ValueError("the stand-in takes chains whose root has no parent")
        self.targets = [spec.target for spec in rig.chains]
        rest = np.array([np.array(_rest_rel(b).to_matrix()) for b in bones])
        self.rest_inv = np.swapaxes(rest, -1, -2)[self.index]  # (K, N, 3, 3)
        self.lengths = np.array([b.length for b in bones])[self.index]  # (K, N)
        self.matrices = np.empty(16 * len(names), dtype=np.float32)
        self.euler = np.empty(3 * len(names), dtype=np.float32)
        obj.pose.bones.foreach_get("rotation_euler", self.euler)
        self.max_iterations = iterations
        # The add-on's own conversions (loaded once the add-on is enabled).
        self.minimal_rotation = live.bpy_session.submodule("solvers.rotations").minimal_rotation
        self.euler_pair = live.bpy_session.submodule("core.convert").euler_pair
        self.last: np.ndarray | None = None
        self.iterations: list[int] = []

    def handle(self) -> None:
        at = np.array([t.matrix_world.translation for t in self.targets])
        if self.last is not None and np.array_equal(at, self.last):
            return
        self.last = at
        obj = self.obj
        bones = obj.pose.bones
        inverse = np.linalg.inv(np.array(obj.matrix_world))
        goals = at @ inverse[:3, :3].T + inverse[:3, 3]
        bones.foreach_get("matrix", self.matrices)
        mats = self.matrices.reshape(-1, 4, 4).transpose(0, 2, 1).astype(np.float64)[self.index]  # (K, N, 4, 4)
        frames = mats[..., :3, :3] / np.linalg.norm(mats[..., :3, :3], axis=-2)[..., None, :]
        k, n = self.index.shape
        p = np.empty((k, n + 1, 3))
        p[:, :n] = mats[..., :3, 3]
        p[:, n] = p[:, n - 1] + frames[:, -1, :, 1] * self.lengths[:, -1, None]
        before = p[:, 1:] - p[:, :-1]
        root = p[:, 0].copy()
        lengths = self.lengths
        iterations = 0
        while iterations < self.max_iterations and float(np.linalg.norm(p[:, -1] - goals, axis=1).max()) > TOLERANCE:
            iterations += 1
            p[:, -1] = goals
            for i in range(n - 1, -1, -1):
                d = p[:, i] - p[:, i + 1]
                p[:, i] = p[:, i + 1] + d * (lengths[:, i] / np.linalg.norm(d, axis=1))[:, None]
            p[:, 0] = root
            for i in range(n):
                d = p[:, i + 1] - p[:, i]
                p[:, i + 1] = p[:, i] + d * (lengths[:, i] / np.linalg.norm(d, axis=1))[:, None]
        self.iterations.append(iterations)
        # Each bone turned by the shortest arc from its old direction to its new one (the solvers' own).
        after = p[:, 1:] - p[:, :-1]
        a = (before / np.linalg.norm(before, axis=-1, keepdims=True)).reshape(-1, 3)
        b = (after / np.linalg.norm(after, axis=-1, keepdims=True)).reshape(-1, 3)
        solved = self.minimal_rotation(a, b).reshape(k, n, 3, 3) @ frames
        parents = np.empty_like(solved)
        parents[:, 0] = np.eye(3)
        parents[:, 1:] = solved[:, :-1]
        basis = self.rest_inv @ np.swapaxes(parents, -1, -2) @ solved
        self.euler.reshape(-1, 3)[self.index.ravel()] = self.euler_pair(basis.reshape(-1, 3, 3), "XYZ")[0]
        bones.foreach_set("rotation_euler", self.euler)
        obj.update_tag(refresh={"DATA"})


def _iterations(stand_in: object) -> str:
    """Median and most iterations per solved chain (the batch: per update)."""
    counts = {link.name: link.iterations for link in getattr(stand_in, "links", ()) if link.iterations}
    if getattr(stand_in, "iterations", None):
        counts["all"] = stand_in.iterations  # type: ignore[attr-defined]
    return " ".join(f"{name} {statistics.median(c):g}/{max(c)}" for name, c in counts.items()) or "-"


def lean_run(
    build: Callable[[], rigs.Rig],
    make: Callable[[rigs.Rig], _Timed] | None,
    rounds: int,
    amplitude: float,
    names: set[str] | None,
) -> dict[str, float | str]:
    """One update with stand-in `make(rig)` (None: Blender's IK constraint): median ms, the worst residual
    over the chains `names` (None: all), the stand-in's median ms per round and its iterations."""
    live.fresh()
    rig = build()
    path = live.trajectory(rig, rounds + 3, amplitude)
    handler = make(rig) if make is not None else None
    handlers = bpy.app.handlers.depsgraph_update_post
    if handler is None:
        rigs.use_blender_ik(rig)
    else:
        handlers.append(handler)
    bpy.context.view_layer.update()
    times, own, worst = [], [], 0.0
    try:
        for r, goals in enumerate(path):
            if handler is not None:
                handler.seconds.clear()
            elapsed = live._move_and_update(rig, goals)
            if r >= 3:
                times.append(elapsed)
                if handler is not None:
                    own.append(sum(handler.seconds))
                evaluated = rig.obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
                for spec in rig.chains:
                    if names is None or spec.name in names:
                        tip = evaluated.matrix_world @ evaluated.pose.bones[spec.tip].tail
                        worst = max(worst, (tip - spec.target.matrix_world.translation).length)
    finally:
        if handler is not None:
            handlers.remove(handler)
    return {
        "ms": 1e3 * statistics.median(times),
        "res": worst,
        "own": 1e3 * statistics.median(own) if own else 0.0,
        "iterations": _iterations(handler),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--setup", action="store_true", help="the set-up rig's one-hand drag (bench/lean_setup.py)")
    args = parser.parse_args()
    live.bpy_session.enable_addon()
    live.bpy_session.submodule("rig.live").unregister()  # only the stand-in runs
    if args.setup:
        import lean_setup

        lean_setup.run(args.rounds, args.repeats)
        live.bpy_session.finish(0)
    print(
        f"bench/lean.py on bpy {bpy.app.version_string}; median of {args.rounds} warm updates, "
        f"best of {args.repeats} alternating runs of each side"
    )
    print(
        f"{'case':40} {'lean ms':>8} {'Blender ms':>10} {'ratio':>6} {'goal':>6} {'lean res':>9} {'Blender res':>11}"
        f" {'handler ms':>10}  iterations (median/most)"
    )
    limbs = {"arm.L", "arm.R", "leg.L", "leg.R"}
    cases: list[tuple[str, Callable[[], rigs.Rig], Callable[[rigs.Rig], _Timed], float, float, set[str] | None]] = [
        ("(a1) one hand moved: the arm", live.character_one_hand, lambda r: LeanScalar(r, None), 0.15, 0.7, limbs),
        ("(a) limbs; spine and tail free", live.character, lambda r: LeanScalar(r, None), 0.15, 1.2, limbs),
        ("(a) limbs; spine, tail: no iterations", live.character, lambda r: LeanScalar(r, 0), 0.15, 1.2, limbs),
        (
            "(a) limbs; plain FABRIK spine, CCD tail",
            live.character,
            lambda r: LeanScalar(r, MAX_ITERATIONS),
            0.15,
            1.2,
            None,
        ),
        ("(b) 100 x 10: no iterations", live.many_chains, lambda r: LeanBatch(r, 0), 0.2, 1.0, None),
        ("(b) 100 x 10: plain FABRIK", live.many_chains, lambda r: LeanBatch(r, MAX_ITERATIONS), 0.2, 1.0, None),
    ]
    for label, build, make, amplitude, goal, names in cases:
        # Alternating, so a burst of load hits both sides; the best run of each is compared (as bench/live.py).
        runs = [
            (lean_run(build, make, args.rounds, amplitude, names), lean_run(build, None, args.rounds, amplitude, names))
            for _ in range(args.repeats)
        ]
        ours = min((r[0] for r in runs), key=lambda r: r["ms"])
        ref = min((r[1] for r in runs), key=lambda r: r["ms"])
        print(
            f"{label:40} {ours['ms']:8.3f} {ref['ms']:10.3f} {float(ours['ms']) / float(ref['ms']):6.2f} "
            f"{'<=' + str(goal):>6} {ours['res']:9.2e} {ref['res']:11.2e} {ours['own']:10.3f}  {ours['iterations']}"
        )
    live.bpy_session.finish(0)


if __name__ == "__main__":
    main()
