"""One-click character set-up (`reach.auto_setup`) and Symmetrize (`reach.symmetrize`).

Set Up Character finds a humanoid in the active armature (`core.humanoid`: bone names of every common
convention, else the shape of the hierarchy), plans its chains (`core.character`) and creates them with their
controls and limits (`rig.character`). It changes nothing when it finds no humanoid, and adds nothing a
previous run made. Symmetrize copies limits and chains to the other side by the same naming rules.
"""

from __future__ import annotations

import math

import numpy as np
from bpy.props import BoolProperty, EnumProperty, FloatProperty
from bpy.types import Context, Object, Operator

from ..core.character import ChainSpec, SetupOptions, SetupPlan, plan
from ..core.humanoid import Humanoid, recognise
from ..rig.body import set_up_body
from ..rig.character import SkeletonRead, apply_plan, read_motion, read_skeleton
from ..rig.compat import classes_factory
from ..rig.props import rig_settings
from ..rig.snapshot import prepare, read_inputs
from ..rig.solve import solve_inputs
from .chains import _armature, _poll_armature


class REACH_OT_auto_setup(Operator):
    """Find the arms, legs, spine and head of a humanoid skeleton (Mixamo, Unreal, VRM, Rigify, CC, Daz or
    generic names, else by its shape) and give it IK chains, controls, poles and joint limits"""

    bl_idname = "reach.auto_setup"
    bl_label = "Set Up Character"
    bl_options = {"REGISTER", "UNDO"}

    controls: EnumProperty(
        name="Controls",
        description="What the chains' targets and poles are",
        items=[
            ("BONE", "Control Bones", "New non-deforming bones in this armature (IK-hand.L, Pole-arm.L...)", 0),
            ("EMPTY", "Empties", "New Empty objects", 1),
        ],
        default="BONE",
    )
    parent: EnumProperty(
        name="Parent Controls To",
        description="Which bone the new controls hang from (they move with it)",
        items=[
            ("ROOT", "Root", "The skeleton's top bone above the hips (none when the hips are the top)", 0),
            ("HIPS", "Hips", "The hips: controls travel with the body", 1),
            ("NONE", "Nothing", "Unparented: controls move only when animated", 2),
        ],
        default="ROOT",
    )
    neck: BoolProperty(name="Neck and Head", description="Also a chain from the neck to the head", default=True)
    fingers: BoolProperty(name="Fingers", description="Also a chain per finger", default=False)
    end_follow: BoolProperty(
        name="Hands and Feet Follow",
        description="Hands and feet take their control's rotation (a Copy Rotation constraint on each)",
        default=True,
    )
    full_body: BoolProperty(
        name="Full Body",
        description="Solve the character as one body: legs pinned, arms and head pulling the hips and spine along",
        default=False,
    )
    limits: BoolProperty(
        name="Joint Limits",
        description="Hinges on elbows and knees (bending as modelled), cones on shoulders, hips and spine",
        default=True,
    )
    fit_animation: BoolProperty(
        name="Fit Limits to Animation",
        description=(
            "When the armature has an action, widen each joint's limits to hold every frame of it (with the "
            "margin), so the motion is always inside its limits"
        ),
        default=True,
    )
    margin: FloatProperty(
        name="Margin",
        description="Room left beyond the animation's rotations when limits are fitted to it",
        subtype="ANGLE",
        default=math.radians(5.0),
        min=0.0,
        max=math.radians(45.0),
    )

    @classmethod
    def poll(cls, context: Context) -> bool:
        return _poll_armature(cls, context)

    def execute(self, context: Context) -> set[str]:
        obj = _armature(context)
        if obj is None:
            self.report({"ERROR"}, "Reach IK: make an armature the active object first")
            return {"CANCELLED"}
        sk = read_skeleton(obj)
        found = recognise(sk.info)
        if not isinstance(found, Humanoid):
            self.report({"ERROR"}, f"Reach IK: '{obj.name}' is {found.why}; nothing was changed")
            return {"CANCELLED"}
        motion = read_motion(obj, sk.info.names) if self.limits and self.fit_animation else None
        options = SetupOptions(
            neck=self.neck,
            fingers=self.fingers,
            limits=self.limits,
            end_follow=self.end_follow,
            fit_animation=motion is not None,
            margin=self.margin,
        )
        the_plan = plan(
            found, sk.info.names, sk.info.parent, sk.rest, sk.length, sk.pose, options, motion[0] if motion else None
        )
        settings = rig_settings(obj)
        taken = {ch.tip_bone for ch in settings.chains}
        new = [c for c in the_plan.chains if sk.info.names[c.tip] not in taken]
        if not new:
            self.report(
                {"WARNING"},
                f"Reach IK: '{obj.name}' is set up already (every chain it would add exists); nothing was added. "
                "Remove its chains to set it up again",
            )
            return {"CANCELLED"}
        parent = ""
        # Full Body moves the hips: controls never hang from them then (the root instead).
        hips = self.parent == "HIPS" and not self.full_body
        if self.parent != "NONE" and not hips and found.root >= 0:
            parent = sk.info.names[found.root]
        elif hips:
            parent = sk.info.names[found.hips]
        problem = _setup_problem(obj, sk, parent)
        if problem is not None:
            self.report({"ERROR"}, f"Reach IK: {problem}; nothing was changed")
            return {"CANCELLED"}
        try:
            made, kept = apply_plan(context, obj, sk, the_plan, new, self.controls, parent)
        except Exception as exc:  # apply_plan took back all it made: say so rather than leave a traceback
            self.report({"ERROR"}, f"Reach IK: setting up '{obj.name}' failed ({exc}); nothing was changed")
            return {"CANCELLED"}
        text = summary(obj.name, found, the_plan.chains, new, options, len(made))
        if self.full_body:
            text += "; " + set_up_body(obj, sk.info.names[found.hips], [(sk.info.names[c.tip], c.name) for c in new])
        if kept:
            text += f"; kept the joint limits {kept} bone(s) already had"
        text += limits_summary(the_plan, new, sk.info.names, sk.info.parent, motion)
        missed = _missed(context, obj, made)
        if missed:
            self.report({"WARNING"}, "Reach IK: " + text + "; " + missed)
        else:
            self.report({"INFO"}, "Reach IK: " + text)
        return {"FINISHED"}


def _setup_problem(obj: Object, sk: SkeletonRead, parent: str) -> str | None:
    """Why the controls cannot be placed: they hang from a bone (or an armature) scaled to zero, which has no
    inverse to place them under."""
    if abs(np.linalg.det(np.array(obj.matrix_world.to_3x3(), dtype=np.float64))) < 1e-30:
        return f"'{obj.name}' is scaled to zero: give it a scale so controls can be placed in it"
    if parent:
        m = sk.pose[sk.info.names.index(parent)][:3, :3]
        if abs(np.linalg.det(m)) < 1e-30:
            return (
                f"bone '{parent}' (the controls' parent) is scaled to zero in the pose, so nothing can be placed "
                "under it: reset its scale (Alt S) or parent the controls to something else"
            )
    return None


def summary(
    rig: str, h: Humanoid, planned: tuple[ChainSpec, ...], new: list[ChainSpec], options: SetupOptions, made: int
) -> str:
    """'Armature' (Mixamo names): arms: 2, legs: 2, spine: 3 bones, neck: 2 bones; not found: ..."""
    parts = [f"arms: {len(h.arms)}", f"legs: {len(h.legs)}"]
    missing = []
    parts.append(f"spine: {len(h.spine)} bones" if len(h.spine) >= 2 else "spine: 1 bone (no chain)")
    if h.head < 0:
        missing.append("head")
    elif options.neck:
        parts.append(f"neck: {len(h.neck)} bones" if len(h.neck) >= 2 else "neck: none (head on the chest)")
    if options.fingers:
        parts.append(f"fingers: {sum(len(f) for f in h.fingers.values())}")
        if not h.fingers:
            missing.append("fingers")
    skipped = len(planned) - len(new)
    text = f"'{rig}' ({'by its shape' if h.by == 'topology' else h.by + ' names'}): " + ", ".join(parts)
    text += f"; made {made} chains"
    if skipped:
        text += f" ({skipped} already there, kept)"
    if missing:
        text += "; not found: " + ", ".join(missing)
    return text


def _missed(context: Context, obj: Object, made: list[str]) -> str:
    """What the chains just made would miss by, solved now as live solving would (nothing written): '' when
    every tip lands on its control. A set-up should change nothing, so a miss is news."""
    settings = rig_settings(obj)
    if context.view_layer is None:
        return ""
    context.view_layer.update()  # the new controls evaluated where they were put
    indices = {i for i, ch in enumerate(settings.chains) if ch.name in made and ch.enabled}
    report, sk, the_plan = prepare(obj, indices)
    if sk is None or the_plan is None:
        return ""
    solve_inputs(obj, sk, the_plan, read_inputs(obj, the_plan), report)
    tol = float(settings.tolerance)
    out = []
    for i in sorted(indices):
        o = report.outcomes.get(i)
        if o is not None and (not o.valid or o.residual > tol * (1.0 + 1e-6)):
            out.append(f"chain '{settings.chains[i].name}' misses its control by {o.residual:.3g} ({o.message})")
    return "; ".join(out)


def _deg(radians: float) -> str:
    return f"{math.degrees(radians):.1f}°"


def limits_summary(
    the_plan: SetupPlan,
    new: list[ChainSpec],
    names: tuple[str, ...],
    parents: tuple[int, ...],
    motion: tuple[object, str] | None,
) -> str:
    """What the report says of the limits: fitted to an animation, widened for the pose, left out (and why),
    for the bones of the chains made now."""
    ours: set[int] = set()
    for spec in new:
        b = spec.tip
        for _ in range(spec.length):
            ours.add(b)
            b = parents[b]
    text = ""
    if motion is not None:
        frames = len(motion[0])  # type: ignore[arg-type]
        fitted = [b for b in the_plan.fitted if b in ours]
        text += f"; limits fitted to the {frames} frames of action '{motion[1]}' ({len(fitted)} bone(s) widened)"
    # Growths below a twentieth of a degree are rounding (the pose on the limit's edge): widened, not news.
    widened = [(b, w) for b, w in the_plan.widened.items() if b in ours and w.most > math.radians(0.05)]
    if widened:
        parts = []
        for b, w in sorted(widened, key=lambda bw: -bw[1].most):
            what = []
            if w.cone > math.radians(0.05):
                what.append(f"cone +{_deg(w.cone)}")
            if w.twist > math.radians(0.05):
                what.append(f"twist +{_deg(w.twist)}")
            parts.append(f"{names[b]} {' '.join(what)}")
        text += "; widened limits to hold the current pose: " + ", ".join(parts)
    unlimited = [(b, why) for b, why in the_plan.unlimited.items() if b in ours]
    if unlimited:
        text += "; no limit on " + ", ".join(f"{names[b]} ({why})" for b, why in unlimited)
    return text


classes = (REACH_OT_auto_setup,)
register, unregister = classes_factory(classes)
