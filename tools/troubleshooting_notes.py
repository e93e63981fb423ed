"""What each chain message means and what to do: the data of the troubleshooting page (tools/troubleshooting.py).

One `Note` per message: `match` is a piece of the message's literal text that occurs in that message only
(names and numbers the code fills in are not part of it), `section` the page's section, `meaning` what
happened and what to do, in the user's terms, and `page` the manual page that explains the setting. When a
message changes in the code, its `match` may stop matching: `python tools/troubleshooting.py --check` (and
the docs build, and tests/unit/test_troubleshooting.py) names the message and the note to update.
"""

from __future__ import annotations

from dataclasses import dataclass

PAGES = {
    "chains.md": "Chains and solvers",
    "limits.md": "Joint limits",
    "soft-stretch.md": "Soft and Stretch",
    "ik-fk.md": "IK and FK",
    "poles-and-roll.md": "Poles and roll",
    "limitations.md": "Limitations",
    "scripting.md": "Scripting",
    "baking.md": "Baking",
    "panel.md": "The panel",
    "full-body.md": "Full-body IK",
}


@dataclass(frozen=True)
class Note:
    match: str
    section: str
    meaning: str
    page: str = ""

    def matches(self, template: str) -> bool:
        """`match` occurs in the message (or, written "^...", starts it)."""
        if self.match.startswith("^"):
            return template.startswith(self.match[1:])
        return self.match in template

    @property
    def page_title(self) -> str:
        return PAGES[self.page]


# Literals in the sources that are parts of a longer message (explained with it), not messages themselves.
PARTS: tuple[str, ...] = (
    "(solved as one tree with the chains it shares bones with)",
    "bone '…' does not fully inherit its parent's rotation and scale",  # in "above this one is invalid, and ..."
    "the body cannot reach further with its pinned chains held",  # in Full Body's "not reached: … short, …"
)

NOTES: tuple[Note, ...] = (
    # -- the outcome of a solve (core/messages.py, core/blend.py) --
    Note(
        "in a one-bone chain nothing above it moves",
        "reach",
        "A one-bone chain with Use Target Rotation has nothing left to solve: the bone points where the target's "
        "orientation points it. Lengthen the chain (the bones above then place it) or turn Use Target Rotation off.",
        "chains.md",
    ),
    Note(
        "with the chain stretched to",
        "reach",
        "The target is farther than the chain reaches even at its largest Stretch: the chain lies straight at full "
        "stretch, pointing at the target. Raise Stretch, or move the target closer.",
        "soft-stretch.md",
    ),
    Note(
        "(the chain is fully extended, folded or held by a joint limit)",
        "reach",
        "The target is out of the chain's reach: too far (the chain points straight at it), too close to the root "
        "(the chain folds), or where the joint limits do not let the tip go. The status is measured on the pose "
        "Blender shows. Move the target, add a bone to the chain, widen the Joint Limits, or allow Stretch.",
        "limits.md",
    ),
    Note(
        "softened: the tip of",
        "reach",
        "Soft is on, and the target is within the last part of the chain's reach, where Soft eases the knee "
        "straight instead of snapping it: the tip trails the target on purpose (at most about 0.37 times Soft times "
        "the chain's length). Set Soft to 0 for an exact reach, or raise Stretch so the bones make up the difference.",
        "soft-stretch.md",
    ),
    Note(
        "when Max Iterations ran out",
        "reach",
        "An iterative solver (FABRIK or CCD) was still getting closer when it hit the rig's Max Iterations. Raise "
        "Max Iterations in the Reach IK panel; a long chain far from its last pose may need more than the default 30.",
        "chains.md",
    ),
    Note(
        "where the solve stops gaining",
        "reach",
        "The solver stopped because more iterations would not get closer: joint limits, the chain's shape or a pole "
        "that bends it the wrong way hold the tip. Widen the limits that bind (the overlay draws them red), add or "
        "move the pole, or move the target. Under joint limits a global search has already been tried.",
        "limits.md",
    ),
    Note(
        "over the Tolerance in world units",
        "reach",
        "The solver met its Tolerance in the armature's own units, but the armature is scaled up at this frame, so "
        "the miss is larger in world units. Lower the Tolerance (it is in world units at the smallest scale).",
        "chains.md",
    ),
    Note(
        "cannot solve: the solver refused the numbers",
        "reach",
        "The checks passed the chain, but the solver found numbers it cannot work with (a pose or a limit it did "
        "not expect). Reset the bones' pose (Alt G, Alt R, Alt S) and look at their Joint Limits. If it stays, "
        "it is a bug: please report it with the detail at the end of the message.",
        "limits.md",
    ),
    Note(
        "FK: Influence is 0",
        "reach",
        "The chain's Influence is 0, so it shows the FK pose exactly and the IK has no effect: the tip is wherever "
        "FK puts it. Raise Influence (or use Switch to IK) to reach the target. This is information, not an error.",
        "ik-fk.md",
    ),
    Note(
        "of the way from FK to IK",
        "reach",
        "The chain's Influence is between 0 and 1: each bone shows its FK pose turned that fraction of the way to "
        "the IK solution, so the tip is between the two and the message says how far from the target. This is "
        "information, not an error; Influence 1 reaches.",
        "ik-fk.md",
    ),
    # -- the armature itself (rig/chains.py, core/checks.py, core/solve.py) --
    Note(
        "not an armature: Reach IK chains live on armatures",
        "rig",
        "Chains belong to an armature object; this object is something else (a script added chains to it). "
        "Select the armature and add the chains there.",
        "scripting.md",
    ),
    Note(
        "cannot be posed: make a library override",
        "rig",
        "The armature is linked from another file and not overridden, so nothing can change its pose. Make a "
        "library override (Object ▸ Library Override ▸ Make) and add the chains on the override.",
        "limitations.md",
    ),
    Note(
        "is a system library override",
        "rig",
        "A system override (the kind Blender makes for the rest of a linked hierarchy) silently ignores the bulk "
        "writes Reach IK poses with. Make it editable: select it and use Object ▸ Library Override ▸ Make.",
        "limitations.md",
    ),
    Note(
        "has a non-uniform or negative scale",
        "rig",
        "The armature object is scaled differently along its axes (or mirrored by a negative scale); Reach IK "
        "solves in a uniformly scaled space. Apply the scale (Ctrl A ▸ Scale) or scale all axes equally.",
        "limitations.md",
    ),
    Note(
        "out of the range Reach IK can solve in",
        "rig",
        "The armature's scale is so large (above 1e12) or so small (below 1e-12) that single-precision math "
        "overflows or underflows and a miss could not be measured. Scale the armature down or up (and its targets "
        "with it).",
        "limitations.md",
    ),
    Note(
        "has a Tolerance of",
        "rig",
        "The rig's Tolerance is not a positive distance (0, negative or not a number, set from a script). Set a "
        "small positive distance in world units (the default is 0.001).",
        "chains.md",
    ),
    Note(
        "has a NaN or infinite pose",
        "rig",
        "A bone's pose channels hold a NaN or an infinite value (usually from a script or a broken driver), so the "
        "whole rig is refused. Reset the bone's transform (Alt G, Alt R, Alt S).",
        "chains.md",
    ),
    Note(
        "^'…' has a NaN or infinite transform: fix",
        "rig",
        "The armature object's location, rotation or scale holds a NaN or an infinite value (from a script or a "
        "driver), so the whole rig is refused. Fix its transform.",
        "chains.md",
    ),
    Note(
        "^…'…' has a NaN or infinite transform",
        "rig",
        "The armature object's transform is a NaN or infinite at the frame named (a bake reads every frame): a "
        "driver or an F-Curve makes it so there. Fix that animation.",
        "baking.md",
    ),
    Note(
        "is scaled to zero in the pose",
        "rig",
        "A chain bone is scaled to zero in the pose, so the chain has no length to reach with. Reset its scale "
        "(Alt S).",
        "chains.md",
    ),
    Note(
        "has an infinite value in its",
        "rig",
        "A chain bone's rotation channel holds an infinite value. Reset its rotation (Alt R) or type a finite value.",
        "chains.md",
    ),
    Note(
        "one update behind: its target or pole follows a bone of",
        "reach",
        "The target (or pole) follows a bone of another Reach IK rig through a constraint or driver whose effect "
        "Reach IK cannot work out by itself (a Child Of with some channels off or below full influence, a Copy "
        "Location in a local space or on some axes, any other constraint, a driver). Blender moves the target only "
        "after the other rig's solve, so the chain is solved again at the next update (at once in the viewport). "
        "This is information, not an error. To follow in the same update, use a Child Of with every channel, Copy "
        "Transforms, or Copy Location in world space on every axis, at full influence, or parent the target to the "
        "bone.",
        "limitations.md",
    ),
    # -- targets, poles and bones that are gone or broken --
    Note(
        "(renamed or deleted?): pick the … bone again",
        "input",
        "The chain's target bone or pole bone is not in its armature any more. Renames are followed; a bone deleted "
        "(or renamed and moved at rest in one edit) is not. Pick the bone again in the chain's settings. A hand or "
        "foot that followed the deleted control (Set Up Character's follow constraint) keeps its own rotation "
        "meanwhile: Reach IK mutes that constraint and turns it back on, on the chain's control, once there is one.",
        "chains.md",
    ),
    Note(
        "(renamed or deleted?): pick the tip bone again",
        "input",
        "The chain's tip bone is not in the armature any more. Renames are followed; a bone deleted (or renamed and "
        "moved at rest in one edit) is not. Pick the tip bone again.",
        "scripting.md",
    ),
    Note(
        "(the rig cannot chase itself)",
        "input",
        "The target or pole is the chain's own armature object: it moves with the pose the chain writes. Pick an "
        "Empty, or pick one of the armature's bones as Target Bone (a control bone outside the chain).",
        "chains.md",
    ),
    Note(
        "is not in the scene (deleted?)",
        "input",
        "The target or pole object was deleted or unlinked from the scene. Pick another object.",
        "chains.md",
    ),
    Note(
        "^…the … … has a NaN or infinite transform",
        "input",
        "The target or pole (an object, or a bone whose pose is) has a NaN or infinite location, rotation or "
        "scale, usually from a script, a driver or its animation; a bake names the frame. Fix it there. Only this "
        "chain is refused, and it is solved again as soon as the target is sound.",
        "chains.md",
    ),
    Note(
        "the Pole Angle of chain",
        "input",
        "The chain's Pole Angle is not a number (set from a script, or driven by a broken driver). Type an angle.",
        "poles-and-roll.md",
    ),
    Note(
        "is scaled to zero, so it has no rotation for Use Target Rotation",
        "input",
        "With Use Target Rotation the tip takes the target's orientation, and a target scaled to zero has none. "
        "Give the target a scale, or turn Use Target Rotation off.",
        "chains.md",
    ),
    Note(
        "no tip bone: pick the last bone",
        "input",
        "The chain has no tip bone yet (made from a script, or the field was cleared). Pick the last bone of the "
        "chain (the hand of an arm).",
        "chains.md",
    ),
    Note(
        "no target: pick an object",
        "input",
        "The chain has no target. Pick an object (an Empty, or an armature and its Target Bone).",
        "chains.md",
    ),
    Note(
        "is longer than the hierarchy above",
        "input",
        "The chain's length counts more bones than there are from the tip up to the root. Lower the length "
        '(0 means "up to the root").',
        "chains.md",
    ),
    Note(
        "the two-bone solver needs a chain length of 2",
        "input",
        "Two-Bone solves exactly two bones (an upper arm and a forearm). Set the length to 2, or pick FABRIK or "
        "CCD for a longer chain.",
        "chains.md",
    ),
    Note(
        "Use Target Rotation needs a FABRIK or CCD chain",
        "input",
        "A Two-Bone chain's two bones are both placed by the law of cosines, so none is left to take the target's "
        "orientation. Add the hand as its own chain, or make the arm a FABRIK chain of length 3 with the hand.",
        "chains.md",
    ),
    Note(
        "has zero length: give it a length in Edit Mode",
        "input",
        "A chain bone has zero length (its head and tail coincide), so it has no direction to solve. Give it a "
        "length in Edit Mode, or shorten the chain so it does not include the bone.",
        "chains.md",
    ),
    # -- chain settings --
    Note("is not a number: set a weight", "setting", "The chain's Weight is not a number. Set 0 to 10.", "chains.md"),
    Note(
        "set it from 0 (off) to 0.5",
        "setting",
        "Soft is outside its range (set from a script). Set it from 0 (off) to 0.5.",
        "soft-stretch.md",
    ),
    Note(
        "set it to 1 (off) or more",
        "setting",
        "Stretch is below 1 or not a number (set from a script). Set 1 (off) or more.",
        "soft-stretch.md",
    ),
    Note(
        "set an angle from 0° (no cap) to 180°",
        "setting",
        "A CCD chain's Step Cap is outside its range (set from a script). Set 0° (no cap) to 180°.",
        "chains.md",
    ),
    Note(
        "its Cone … limit is",
        "setting",
        "A bone's cone limit holds a value the solver cannot take (a NaN, or an angle out of range, set from a "
        "script). Set it from 0° to 179.9° in the Joint Limits box, or turn the cone off.",
        "limits.md",
    ),
    Note(
        "its Twist … limit is",
        "setting",
        "A bone's twist limit holds a value the solver cannot take (a NaN, set from a script). Set it from -180° to "
        "180° in the Joint Limits box, or turn the twist off.",
        "limits.md",
    ),
    # -- bone settings --
    Note(
        "has a driver on its rotation",
        "bones",
        "A driver sets the rotation of one of the chain's bones. Blender applies drivers after Reach IK writes the "
        "pose, so the bone would always show the driver's value, never the solve. Remove the driver (Drivers "
        "editor, or right-click the rotation and Delete Driver), drive something the chain does not pose, or "
        "shorten the chain so it stops above that bone.",
        "limitations.md",
    ),
    Note(
        "does not inherit its parent's rotation (Bone > Relations)",
        "bones",
        "A chain bone has Inherit Rotation off, so turning the bone above it would not carry it along. Turn "
        "Inherit Rotation on (Bone ▸ Relations); the panel's Fix button does it.",
        "panel.md",
    ),
    Note(
        "in a way Reach IK can solve",
        "bones",
        "A chain bone inherits scale as 'Average', 'Fix Shear' or another mode Reach IK cannot carry exactly. Set "
        "Inherit Scale to 'Full', 'Aligned' or 'None' (Bone ▸ Relations); the panel's Fix button does it.",
        "panel.md",
    ),
    # -- chains that share, follow or chase each other --
    Note(
        "which this rig's IK moves: it would chase itself",
        "structure",
        "The target or pole hangs from a bone that this rig's chains move, so every solve would move it again. "
        "Parent it to the armature object or to a bone no chain moves.",
        "chains.md",
    ),
    Note(
        "chain shares its tip bone",
        "structure",
        "Two chains end at the same bone and would pull it two ways. Give each chain its own tip bone.",
        "chains.md",
    ),
    Note(
        "only FABRIK chains can share bones",
        "structure",
        "Chains that share bones are solved together as one tree, which only FABRIK does. Switch the chains to "
        "FABRIK, or shorten one so they no longer overlap.",
        "chains.md",
    ),
    Note(
        "they would chase each other",
        "structure",
        "Two chains' control bones each hang below the other chain, so neither can be solved first. Parent one of "
        "the controls outside the other chain (to the root, or the hips).",
        "chains.md",
    ),
    Note(
        "hangs below another chain through bone",
        "structure",
        "A control bone follows another chain's solved pose, but a bone on the way does not fully inherit its "
        "parent's rotation and scale, so the control could not be carried with it. Turn Inherit Rotation on and "
        "set Inherit Scale to 'Full' on the named bone; the panel's Fix button does it.",
        "chains.md",
    ),
    Note(
        "which stretches, and inherits its scale",
        "structure",
        "This chain hangs below a stretching chain through a bone that inherits its scale, so it would be "
        "stretched and sheared along. Set Inherit Scale 'None' on the named bone (the lower chain keeps its size) "
        "or set the upper chain's Stretch to 1.",
        "soft-stretch.md",
    ),
    Note(
        "and this chain does not fully inherit",
        "structure",
        "A bone between two chains does not fully inherit its parent's rotation and scale, so the lower chain "
        "could not be carried with the upper one. Turn Inherit Rotation on and set Inherit Scale to 'Full' on the "
        "named bone; the panel's Fix button does it.",
        "chains.md",
    ),
    Note(
        "above this one is invalid, and this chain hangs from chain",
        "structure",
        "This chain hangs below a chain that cannot be solved, and a chain solved further up moves both through a "
        "bone Reach IK cannot carry as Blender does (one that does not fully inherit, or a stretch). Fix the chain "
        "above (its own message says how); this one is solved again then. Below a refused chain that nothing "
        "solved moves, a chain is solved on the pose Blender shows.",
        "chains.md",
    ),
    Note(
        "the chain moves its own",
        "structure",
        "The chain's control bone (target or pole) is one of the chain's bones or hangs below one, so each solve "
        "would move the control again. Parent the control outside the chain (to the root, or a bone above it).",
        "chains.md",
    ),
    Note(
        "Start From 'Rest' would solve it on a pose Blender does not show",
        "structure",
        "A chain above this one was refused part-way through a solve, and with Start From 'Rest' this chain would "
        "start from a pose Blender does not show. Fix the chain above first.",
        "poles-and-roll.md",
    ),
    Note(
        "in a tree every chain needs a weight above 0",
        "structure",
        "In a tree (FABRIK chains that share bones, solved as one) every chain's Weight says how strongly it pulls "
        "the shared bones; a chain with Weight 0 pulls nothing. Give it a weight above 0.",
        "chains.md",
    ),
    Note(
        "is shared with other chains of its tree",
        "structure",
        "A chain with Use Target Rotation ends on a bone that other chains of its tree also move, so the tip cannot "
        "simply take the target's orientation. Turn Use Target Rotation off, or lengthen the chain so its tip is "
        "its own.",
        "chains.md",
    ),
    Note(
        "but that bone is the tip of chain",
        "structure",
        "With Use Target Rotation the bone above the tip reaches for where the tip's head must be, but that bone "
        "is another chain's tip. Turn Use Target Rotation off, or end the other chain elsewhere.",
        "chains.md",
    ),
    # -- stretch --
    Note(
        "a chain stretches the bones of its branch only (those no other chain shares)",
        "stretch",
        "In a tree a stretching chain lengthens only the bones no other chain shares (its branch), and those "
        "cannot stretch for the reason given at the end. Fix that, or set Stretch to 1.",
        "soft-stretch.md",
    ),
    Note(
        "a chain stretches the bones of its branch only: …",
        "stretch",
        "The same as above, found while solving: the chain's branch cannot stretch for the reason given at the end.",
        "soft-stretch.md",
    ),
    Note(
        "this chain cannot stretch: set Stretch to 1",
        "stretch",
        "The chain has Stretch above 1 but cannot stretch. Set Stretch to 1.",
        "soft-stretch.md",
    ),
    Note(
        "so none is its own to stretch",
        "stretch",
        "Every bone of this tree chain is shared with another chain, so it has no branch of its own to lengthen. "
        "Set Stretch to 1, or lengthen the chain.",
        "soft-stretch.md",
    ),
    Note(
        "has no bone left to stretch",
        "stretch",
        "A one-bone chain with Use Target Rotation keeps its bone's length (it takes the target's orientation), so "
        "nothing can stretch. Set Stretch to 1 or lengthen the chain.",
        "soft-stretch.md",
    ),
    Note(
        "in full (Inherit Scale 'Full'), so stretching",
        "stretch",
        "A bone below the chain's first inherits scale 'Full' (Blender's default), so it would be stretched twice "
        "and sheared. Set its Inherit Scale to 'Aligned' (recommended) or 'None'; the panel's Fix button sets "
        "every such bone of the chain at once.",
        "soft-stretch.md",
    ),
    Note(
        "has its Y scale locked",
        "stretch",
        "The chain stretches its bones through their Y scale, and a bone has that channel locked. Unlock it (the "
        "lock beside Scale Y in Bone ▸ Transform) or set Stretch to 1.",
        "soft-stretch.md",
    ),
    Note(
        "so it must not inherit the stretch",
        "stretch",
        "With Use Target Rotation the tip takes the target's orientation and keeps its length, so it must not "
        "inherit the stretch of the bone above. Set the tip's Inherit Scale to 'None'; the panel's Fix button does "
        "it.",
        "soft-stretch.md",
    ),
    # -- Full Body (core/body.py) --
    Note(
        "^not reached: … short, … (…)",
        "body",
        "Full Body moved the hips and bent the spine as far as the pinned chains (named at the end) allow, and the "
        "target is still that far beyond the limb's reach. The pose shown is the closest the body found with every "
        "pin on its target. Move the target nearer, unpin a chain, or move its control (a step) so the body can "
        "follow.",
        "full-body.md",
    ),
    Note(
        "bent by the body: its tip is",
        "body",
        "The spine (a chain that carries other chains) was solved to its own control, then bent by the body so a "
        "pulled limb could reach: its tip is this far from its control now. Nothing to fix; move the control (or "
        "set the pulling chain's Pull lower) to change how far the body leans.",
        "full-body.md",
    ),
    Note(
        "its target moves with the body root",
        "body",
        "The chain's control bone hangs below the body root, so it moves with the body the chain would move: it "
        "takes no part in moving the body (its limb still reaches for it). Parent the control to the bone above "
        "the hips, or to nothing, for it to pull.",
        "full-body.md",
    ),
    Note(
        "is not a bone of this rig: using",
        "body",
        "The rig's Body Root names no bone (renamed or deleted): the lowest common ancestor of the chains is used. "
        "Pick the body root again in the Reach IK panel, or clear it.",
        "full-body.md",
    ),
    Note(
        "; chains solved one by one",
        "body",
        "Full Body is on but has no bone to move the body with: the Body Root is a bone a chain solves, or the "
        "chains share no bone above them. The chains are solved one by one. Pick a Body Root above the chains "
        "(the hips).",
        "full-body.md",
    ),
)
