"""`bench/lean.py --setup`: the floor of a Python live handler on the rig Set Up Character makes.

The stand-in is a `depsgraph_update_post` handler that does only what a live solver of this rig cannot skip
when one hand's control bone is dragged: read the control's and the pole's armature-space position and the
arm's two bone matrices (pose bones of the same armature: moving a control bone re-evaluates the armature
before the handler runs), solve the arm analytically with `mathutils` (no limits, no status, no FK store),
write the two bones' rotation channels with one `foreach_set` and tag the armature, which Blender then
evaluates again. Blender's side is `bench/setup_rig.py`'s: the same set-up rig with IK constraints. Timing as
`bench/setup_rig.py` (two `view_layer.update()` per dragged position, median / p95 / max).

A second row runs the same stand-in in `depsgraph_update_pre` (`PreLeanSetup`): the control's and pole's pose
from their channels, the arm written before Blender evaluates, so one evaluation shows it. It measures what
solving there would leave to a live solver (issue 37: the post handler's floor is two evaluations).

The next rows solve under the set-up's limits (`ProgramFloor`): Reach IK's compiled program's limb solve
(the analytic pose, the closed form under the limits) and nothing else, for one hand and for four limbs, and
Reach IK's live solving of the same drags in the same process, each against Blender's IK on its drag.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import bpy
import numpy as np
import setup_rig
from mathutils import Vector

_Y = Vector((0.0, 1.0, 0.0))


class LeanSetup:
    """The arm `arm.L` of the set-up rig solved toward its control bone and pole bone, analytically."""

    def __init__(self, obj: bpy.types.Object) -> None:
        self.obj = obj
        ch = next(c for c in obj.reach_ik.chains if c.name == "arm.L")
        pbs = obj.pose.bones
        names = [pb.name for pb in pbs]
        tip = pbs[ch.tip_bone]
        self.bones = [names.index(tip.parent.name), names.index(tip.name)]
        self.parent = names.index(tip.parent.parent.name)
        self.control, self.pole = names.index(ch.target_bone), names.index(ch.pole_bone)
        self.lengths = [tip.parent.bone.length, tip.bone.length]
        self.rest_inv = []
        for b in self.bones:
            bone = obj.data.bones[names[b]]
            rel = bone.parent.matrix_local.to_3x3().inverted() @ bone.matrix_local.to_3x3()
            self.rest_inv.append(rel.to_quaternion().inverted())
        self.quats = np.empty(4 * len(names), dtype=np.float32)
        pbs.foreach_get("rotation_quaternion", self.quats)
        if any(pbs[names[b]].rotation_mode != "QUATERNION" for b in self.bones):
            raise ValueError("the stand-in writes quaternions")
        self.last: tuple[float, float, float] | None = None
        self.seconds: list[float] = []

    def __call__(self, scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
        start = time.perf_counter()
        pbs = self.obj.pose.bones
        self.solve(pbs[self.control].matrix.translation, lambda: pbs[self.pole].matrix.translation)
        self.seconds.append(time.perf_counter() - start)

    def solve(self, goal: Vector, pole_at: Callable[[], Vector]) -> None:
        """The arm toward `goal` (armature space), bent toward `pole_at()`; its two bones written, if it moved."""
        pbs = self.obj.pose.bones
        at = (goal.x, goal.y, goal.z)
        if at != self.last:
            self.last = at
            pole = pole_at()
            above = pbs[self.parent].matrix
            upper, lower = pbs[self.bones[0]].matrix, pbs[self.bones[1]].matrix
            root = upper.translation
            l1, l2 = self.lengths
            d = goal - root
            distance = max(d.length, 1e-9)
            reach = min(max(distance, abs(l1 - l2) + 1e-6), l1 + l2 - 1e-6)
            cos_a = max(-1.0, min(1.0, (l1 * l1 + reach * reach - l2 * l2) / (2.0 * l1 * reach)))
            axis = d / distance
            side = pole - root
            side -= axis * side.dot(axis)
            side.normalize()
            elbow = root + (axis * cos_a + side * (1.0 - cos_a * cos_a) ** 0.5) * l1
            q1, q2 = upper.to_quaternion(), lower.to_quaternion()
            turn = (q1 @ _Y).rotation_difference(elbow - root)
            q1, q2 = turn @ q1, turn @ q2
            q2 = (q2 @ _Y).rotation_difference(root + axis * reach - elbow) @ q2
            parent_q = above.to_quaternion()
            for b, q, rest_inv in zip(self.bones, (q1, q2), self.rest_inv, strict=True):
                basis = rest_inv @ (parent_q.conjugated() @ q)
                basis.normalize()
                self.quats[4 * b : 4 * b + 4] = basis[:]
                parent_q = q
            pbs.foreach_set("rotation_quaternion", self.quats)
            self.obj.update_tag(refresh={"DATA"})


class PreLeanSetup(LeanSetup):
    """The same stand-in in `depsgraph_update_pre`: the control's and pole's pose from their channels (they
    hang from no bone and have no constraint, as Set Up Character makes them: rest times basis), the arm
    written before Blender evaluates, so one evaluation shows it (a live solver's floor if it solved there)."""

    def __call__(self, scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph | None = None) -> None:
        start = time.perf_counter()
        pbs = self.obj.pose.bones
        control, pole = pbs[self.control], pbs[self.pole]
        self.solve(
            (control.bone.matrix_local @ control.matrix_basis).translation,
            lambda: (pole.bone.matrix_local @ pole.matrix_basis).translation,
        )
        self.seconds.append(time.perf_counter() - start)


class ProgramFloor:
    """Reach IK's own limb solve, and nothing else, in `depsgraph_update_pre`: the dragged chains' targets and
    poles from their control bones' channels (as `rig.live_pre` predicts them), the compiled program's solve
    (`core.live.Program.solve`: the analytic pose, the closed form under the set-up's limits, placing the
    rotations in the channel arrays, exactly as a live drag solves), the changed channel arrays written with
    `foreach_set` and the armature tagged. No reading or comparing of the rig, no statuses, no FK store, no
    check after the evaluation: the floor of a live handler that solves under these limits as Reach IK does
    (issue 37's floor clause), where `PreLeanSetup` solves one arm without limits."""

    def __init__(self, obj: bpy.types.Object, lean: object, chains: list[int]) -> None:
        self.obj = obj
        self.search = setup_rig.bpy_session.submodule("solvers.search")
        self.live = setup_rig.bpy_session.submodule("rig.live")
        self.program = lean.program  # type: ignore[attr-defined]
        self.angles = lean.angles  # type: ignore[attr-defined]
        order = self.program.closure(chains)
        if order is None:
            raise ValueError("the program refuses a dragged chain")
        self.order = order
        pbs = obj.pose.bones
        names = [pb.name for pb in pbs]
        self.goals: list[tuple[int, int, int]] = []  # (chain index, target bone, pole bone or -1)
        for index in chains:
            ch = obj.reach_ik.chains[index]
            self.goals.append((index, names.index(ch.target_bone), names.index(ch.pole_bone) if ch.pole_bone else -1))
        n = len(names)
        self.channels = {
            attr: np.empty((n, width), dtype=np.float32)
            for attr, width in (("rotation_quaternion", 4), ("rotation_euler", 3), ("rotation_axis_angle", 4))
        }
        for attr, array in self.channels.items():
            pbs.foreach_get(attr, array.ravel())
        self.seconds: list[float] = []

    def __call__(self, scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph | None = None) -> None:
        start = time.perf_counter()
        obj = self.obj
        pbs = obj.pose.bones
        world = obj.matrix_world.copy()
        targets, poles = {}, {}
        for index, target, pole in self.goals:
            control = pbs[target]
            targets[index] = world @ (control.bone.matrix_local @ control.matrix_basis)
            if pole >= 0:
                bone = pbs[pole]
                poles[index] = world @ (bone.bone.matrix_local @ bone.matrix_basis)
        # As a live drag: the global stage deferred to when the target stands still (`rig.live`).
        with self.search.budget(self.live.stage_budget), self.search.deferring(True):
            result = self.program.solve(
                self.order, lambda b: pbs[b].matrix.copy(), world, targets, poles, self.angles, self.channels
            )
        for attr in sorted(result.changed):
            pbs.foreach_set(attr, self.channels[attr].ravel())
        if result.changed:
            obj.update_tag(refresh={"DATA"})
        self.seconds.append(time.perf_counter() - start)


def program_floor_run(workload: str, rounds: int) -> dict[str, object]:
    """Per-update seconds of dragging `workload`'s controls with `ProgramFloor` (Reach IK's live solving off,
    after one drag update compiled the rig's program)."""
    live_program = setup_rig.bpy_session.submodule("rig.live_program")
    cache = setup_rig.bpy_session.submodule("rig.cache")
    live = setup_rig.bpy_session.submodule("rig.live")
    registered = live.on_depsgraph_update in bpy.app.handlers.depsgraph_update_post
    if not registered:
        live.register()  # `bench/lean.py` runs without Reach IK's handlers: they compile the program here
    setup_rig.fresh()
    obj = setup_rig.set_up()
    lead = 3  # drag updates that let Reach IK compile the rig's program
    path = setup_rig.drag_path(obj, workload, rounds + setup_rig.WARM + lead)
    pbs = obj.pose.bones
    for r in range(lead):
        for bone, mats in path.items():
            pbs[bone].matrix = mats[r]
        bpy.context.view_layer.update()
        bpy.context.view_layer.update()
    lean = cache.programs.get(obj.session_uid)
    if not registered:
        live.unregister()
    if lean is None or not isinstance(lean, live_program.Lean) or isinstance(lean.program, str):
        raise RuntimeError("the set-up rig has no compiled program")
    chains = [i for i, ch in enumerate(obj.reach_ik.chains) if ch.target_bone in path]
    obj.reach_ik.live = False
    bpy.context.view_layer.update()
    handler = ProgramFloor(obj, lean, chains)
    bpy.app.handlers.depsgraph_update_pre.append(handler)
    times, residuals = [], []
    try:
        for r in range(lead, rounds + setup_rig.WARM + lead):
            for bone, mats in path.items():
                pbs[bone].matrix = mats[r]
            start = time.perf_counter()
            bpy.context.view_layer.update()
            bpy.context.view_layer.update()
            if r >= setup_rig.WARM + lead:
                times.append(time.perf_counter() - start)
                ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
                worst = 0.0
                for i in chains:
                    ch = obj.reach_ik.chains[i]
                    tip = ev.pose.bones[ch.tip_bone].tail
                    worst = max(worst, (tip - ev.pose.bones[ch.target_bone].head).length)
                residuals.append(worst)
    finally:
        bpy.app.handlers.depsgraph_update_pre.remove(handler)
    return {"times": times, "res": max(residuals), "own": statistics.median(handler.seconds[setup_rig.WARM :]) * 1e3}


def lean_run(mode: str, rounds: int, workload: str = "one_hand") -> dict[str, object]:
    """Per-update seconds of the one-hand drag with the stand-in (`mode` 'lean', or 'pre': solved before the
    evaluation) or Blender's IK (`mode` 'blender', also dragging `workload`'s controls; the residual is the
    left arm's)."""
    setup_rig.fresh()
    obj = setup_rig.set_up()
    for ch in obj.reach_ik.chains:
        ch.enabled = False
    handlers = bpy.app.handlers.depsgraph_update_pre if mode == "pre" else bpy.app.handlers.depsgraph_update_post
    handler: LeanSetup | None = None
    if mode == "blender":
        setup_rig.to_blender_ik(obj)
    else:
        handler = PreLeanSetup(obj) if mode == "pre" else LeanSetup(obj)
        handlers.append(handler)
    path = setup_rig.drag_path(obj, workload, rounds + setup_rig.WARM)
    pbs = obj.pose.bones
    times, residuals = [], []
    try:
        for r in range(rounds + setup_rig.WARM):
            for bone, mats in path.items():
                pbs[bone].matrix = mats[r]
            start = time.perf_counter()
            bpy.context.view_layer.update()
            bpy.context.view_layer.update()
            if r >= setup_rig.WARM:
                times.append(time.perf_counter() - start)
                ev = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
                ch = next(c for c in obj.reach_ik.chains if c.name == "arm.L")
                tip = ev.pose.bones[ch.tip_bone].tail
                residuals.append((tip - ev.pose.bones[ch.target_bone].head).length)
    finally:
        if handler is not None:
            handlers.remove(handler)
    own = handler.seconds[setup_rig.WARM :] if handler is not None else [0.0]
    return {"times": times, "res": max(residuals), "own": statistics.median(own) * 1e3}


def _reach_live(workload: str, rounds: int) -> dict[str, object]:
    """`bench/live.py`'s (d) / (d4) row in this process: Reach IK's live solving, its handlers registered for
    the run (`bench/lean.py` runs the stand-ins without them)."""
    live = setup_rig.bpy_session.submodule("rig.live")
    live.register()
    try:
        out = setup_rig.drag_run(workload, "reach", rounds)
    finally:
        live.unregister()
    out["own"] = statistics.median(out["handler"]) * 1e3  # type: ignore[arg-type]
    return out


def run(rounds: int, repeats: int) -> None:
    print(setup_rig.HEADER.replace("Reach", "lean "))
    runs = [
        (
            lean_run("lean", rounds),
            lean_run("pre", rounds),
            lean_run("blender", rounds),
            program_floor_run("one_hand", rounds),
            program_floor_run("limbs", rounds),
            lean_run("blender", rounds, "limbs"),
            _reach_live("one_hand", rounds),
            _reach_live("limbs", rounds),
        )
        for _ in range(repeats)
    ]
    ref = setup_rig.best([r[2] for r in runs])
    four = setup_rig.best([r[5] for r in runs])
    for k, label, against in (
        (0, "(d) set-up rig, one hand: the floor", ref),
        (1, "(d) the floor solved before evaluation", ref),
        (3, "(d) Reach's limb solve alone, before", ref),
        (6, "(d) Reach IK live (bench/live.py's)", ref),
        (4, "(d4) Reach's limb solves alone, before", four),
        (7, "(d4) Reach IK live (bench/live.py's)", four),
    ):
        ours = setup_rig.best([r[k] for r in runs])
        ours["handler"] = [ours["own"] * 1e-3]
        print(setup_rig.row(label, ours, against))
