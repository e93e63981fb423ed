"""Chain discovery and validation: turn `Object.reach_ik.chains` into solvable groups, or clear messages.

Bone order always comes from the hierarchy (tip, then its parents), never from the user. FABRIK chains that
share bones become one multi-effector tree; every other overlap is refused. Nothing here writes to Blender.
"""

from __future__ import annotations

import math
from dataclasses import replace

import bpy
import numpy as np

from ..core.model import NONE, NONE_LEGACY, ChainPlan, Group, Plan, Skeleton, usable
from ..core.trees import branch
from . import anim, cache, fk, renames
from .compat import is_bone_selected
from .props import ReachChain, rig_settings

# One bone setting a fix changes: (bone name, Bone attribute, value).
Edit = tuple[str, str, object]


class Refusal(str):
    """A chain's message that names bone settings Reach IK can change itself (`fix`): the panel offers a
    button for it (`reach.fix_chain`). A plain `str` everywhere else."""

    fix: tuple[Edit, ...] = ()

    def __new__(cls, message: str, fix: tuple[Edit, ...]) -> Refusal:
        out = super().__new__(cls, message)
        out.fix = fix
        return out


def _relations(bone: str, rotation: bool, scale: str) -> tuple[Edit, ...]:
    """Edits that turn Inherit Rotation on (when `rotation`) and set Inherit Scale to `scale`."""
    return ((bone, "use_inherit_rotation", True),) * rotation + ((bone, "inherit_scale", scale),)


# The largest armature scale solved: from about 1e13 up the solve overflows (single-precision numbers on the
# way; measured on bpy 4.5.4: "stops inf short" at 1e13, "nan" from 1e20, sound at 1e12 and below).
MAX_SCALE = 1e12
# The smallest: below about 1e-13 the cube of the scale (an armature matrix's determinant, which the live
# path computes in single precision) underflows to zero (measured on bpy 4.5.4: a ZeroDivisionError at 1e-30,
# chains stopping "2.234 short" from 1e-18; sound at 1e-12 and above).
MIN_SCALE = 1e-12


def rig_problem(obj: bpy.types.Object) -> str | None:
    """A reason the whole armature cannot be solved, or None."""
    if obj.type != "ARMATURE":
        return f"'{obj.name}' is a {obj.type.lower()}, not an armature: Reach IK chains live on armatures"
    if obj.library is not None or not getattr(obj, "is_editable", True):
        lib = obj.library.filepath if obj.library is not None else "a library"
        return (
            f"'{obj.name}' is linked from {lib} and cannot be posed: make a library override "
            "(Object > Library Override > Make) and add chains to the override"
        )
    if system_override(obj):
        # Blender keeps a system override's channels from being written through foreach_set (it ignores the
        # write without an error; bpy 4.5.4 and 5.2.3, measured): a solve would show nothing, and the FK store
        # would note as written what never reached the channels, so their values (the library's IK result)
        # would be taken for FK once the override is made editable.
        return (
            f"'{obj.name}' is a system library override, which Blender does not let anything pose: select it "
            "and use Object > Library Override > Make to make it editable"
        )
    mw = np.array(obj.matrix_world, dtype=np.float64)
    if not usable(mw):
        return f"'{obj.name}' has a NaN or infinite transform: fix its location/rotation/scale"
    scale = np.linalg.norm(mw[:3, :3], axis=0)
    if np.linalg.det(mw[:3, :3]) <= 0 or scale.max() - scale.min() > 1e-4 * scale.max():
        s = ", ".join(f"{v:.4g}" for v in scale)
        return (
            f"'{obj.name}' has a non-uniform or negative scale ({s}): Reach IK needs a uniform positive "
            "scale; apply the scale (Ctrl A > Scale) or scale all axes equally"
        )
    if scale.max() > MAX_SCALE:
        return (
            f"'{obj.name}' has a scale of {scale.max():.4g}, out of the range Reach IK can solve in (up to "
            f"{MAX_SCALE:.0e}: beyond it single-precision math overflows and the miss cannot be measured): "
            "scale the armature down"
        )
    if scale.min() < MIN_SCALE:
        return (
            f"'{obj.name}' has a scale of {scale.min():.4g}, out of the range Reach IK can solve in (down to "
            f"{MIN_SCALE:.0e}: below it single-precision math underflows to zero): scale the armature up"
        )
    return None


def system_override(obj: bpy.types.Object) -> bool:
    """Whether `obj` is a library override Blender made for the hierarchy, not one made editable."""
    ov = obj.override_library
    return ov is not None and bool(ov.is_system_override)


class ChainChoiceError(RuntimeError):
    """The chains an operation was asked to work on are not there (no active chain, none selected...)."""


def choose_chains(obj: bpy.types.Object, which: str | set[int], doing: str) -> set[int]:
    """The chain indices of `obj` that `which` names: 'ALL' (every enabled chain), 'ACTIVE' (the active
    chain in the list), 'SELECTED' (enabled chains whose tip bone is selected), or a set of indices.

    `doing` names the operation in messages ("bake", "snap"). Raises `ChainChoiceError` when none fits.
    """
    settings = rig_settings(obj)
    chains = settings.chains
    if isinstance(which, set):
        return which
    if which == "ALL":
        picked = {i for i, ch in enumerate(chains) if ch.enabled}
    elif which == "ACTIVE":
        i = settings.active_chain_index
        if not 0 <= i < len(chains):
            raise ChainChoiceError(f"'{obj.name}' has no active chain to {doing}")
        if not chains[i].enabled:
            raise ChainChoiceError(f"the active chain '{chains[i].name}' is disabled: enable it to {doing}")
        picked = {i}
    elif which == "SELECTED":
        bones = obj.pose.bones
        picked = {
            i
            for i, ch in enumerate(chains)
            if ch.enabled and ch.tip_bone in bones and is_bone_selected(bones[ch.tip_bone])
        }
    else:
        raise ChainChoiceError(f"unknown chain selection {which!r}: use ALL, ACTIVE or SELECTED")
    if not picked:
        raise ChainChoiceError(
            f"'{obj.name}' has no enabled chains to {doing} ({which.lower() if isinstance(which, str) else which})"
        )
    return picked


def target_bone_of(ob: bpy.types.Object | None, bone: str) -> str:
    """The bone a target or pole names: its `target_bone`/`pole_bone` when `ob` is an armature, else ""."""
    return bone if bone and ob is not None and ob.type == "ARMATURE" else ""


def _object_problem(role: str, ob: bpy.types.Object | None, rig: bpy.types.Object, bone: str = "") -> str | None:
    if ob is None:
        return None
    if bone:
        arm = ob.data
        if not isinstance(arm, bpy.types.Armature) or bone not in arm.bones:
            return f"the {role} bone '{bone}' is not in '{ob.name}' (renamed or deleted?): pick the {role} bone again"
    elif ob == rig:
        return (
            f"the {role} is the armature '{rig.name}' itself: pick an Empty, or one of its bones as the "
            f"{role} bone (the rig cannot chase itself)"
        )
    if not ob.users_scene:
        # An object deleted in the viewport lingers in bpy.data until the file is saved: treat it as gone.
        return f"the {role} '{ob.name}' is not in the scene (deleted?): pick another object"
    # A NaN or infinite transform is not checked here: the plan is cached while the chains point at the same
    # objects, so a refusal here outlived the object's move back. Every solve checks the matrices it reads
    # (`core.checks.broken_inputs`), with the same message.
    return None


def _parent_bone_of(ob: bpy.types.Object, rig: bpy.types.Object, sk: Skeleton) -> int | None:
    """The rig bone that `ob` ultimately hangs from (through any chain of parents), if any."""
    seen = 0
    node: bpy.types.Object | None = ob
    while node is not None and seen < 1000:
        ob = node
        if ob.parent == rig:
            if ob.parent_type == "BONE" and ob.parent_bone in sk.index:
                return sk.index[ob.parent_bone]
            return None
        node = ob.parent
        seen += 1
    return None


def build_plan(obj: bpy.types.Object, sk: Skeleton, only: set[int] | None = None) -> Plan:
    """Validate every enabled chain of `obj` (or those in `only`) and group the valid ones; note the chains
    refused for bone settings Reach IK can fix itself (`cache.fixes`, for the panel's button)."""
    plan = _build_plan(obj, sk, only)
    offered = cache.fixes.setdefault(obj.session_uid, {})
    for i in [i for i in offered if only is None or i in only]:
        del offered[i]
    for i, err in plan.errors.items():
        if isinstance(err, Refusal) and err.fix:
            offered[i] = err
    return plan


def _build_plan(obj: bpy.types.Object, sk: Skeleton, only: set[int] | None = None) -> Plan:
    """Validate every enabled chain of `obj` (or those in `only`) and group the valid ones.

    Only what does not change while animating is checked here (the plan is cached while live solving);
    per-frame numbers (NaN transforms, bones scaled to zero) are checked by the solve on its inputs.
    """
    plan = Plan()
    settings = rig_settings(obj)
    plans: list[ChainPlan] = []
    checked: set[int] = set()
    driven = driven_rotations(obj)
    for i, ch in enumerate(settings.chains):
        if not ch.enabled or (only is not None and i not in only):
            continue
        checked.add(i)
        err = _validate_chain(obj, sk, i, ch, driven)
        if isinstance(err, str):
            plan.errors[i] = err
        else:
            plans.append(err)
    # Where the chains' bones are now, so a later rename can be followed (rig/renames.py).
    renames.remember(obj, checked)
    fk.follow_renames(obj, sk.index)
    if not plans:
        return plan

    # Targets that hang from a solved bone would chase themselves (a dependency cycle).
    solved = {b for p in plans for b in p.bones}
    for p in list(plans):
        ch = settings.chains[p.index]
        for role, ob in (("target", ch.target), ("pole", ch.pole)):
            if ob is None:
                continue
            hang = _parent_bone_of(ob, obj, sk)
            if hang is not None and ({hang, *sk.ancestors(hang)} & solved):
                plan.errors[p.index] = (
                    f"the {role} '{ob.name}' is parented to bone '{sk.names[hang]}', which this rig's IK "
                    "moves: it would chase itself; parent it to the armature or a bone outside the chains"
                )
                plans.remove(p)
                break

    # Same tip twice, or a non-FABRIK chain overlapping another: refuse both, name the other.
    by_tip: dict[int, list[ChainPlan]] = {}
    for p in plans:
        by_tip.setdefault(p.bones[-1], []).append(p)
    for tip, same in by_tip.items():
        if len(same) > 1:
            for p in same:
                others = ", ".join(f"'{o.name}'" for o in same if o is not p)
                plan.errors[p.index] = (
                    f"chain shares its tip bone '{sk.names[tip]}' with {others}: give each chain its own tip"
                )
    plans = [p for p in plans if p.index not in plan.errors]
    owners: dict[int, list[ChainPlan]] = {}
    for p in plans:
        for b in p.bones:
            owners.setdefault(b, []).append(p)
    for b, ps in owners.items():
        if len(ps) > 1 and any(p.solver != "FABRIK" for p in ps):
            for p in ps:
                others = ", ".join(f"'{o.name}'" for o in ps if o is not p)
                plan.errors[p.index] = (
                    f"chain shares bone '{sk.names[b]}' with {others}; only FABRIK chains can share bones "
                    "(they are solved together as a tree): switch them to FABRIK or shorten one"
                )
    plans = [p for p in plans if p.index not in plan.errors]

    # FABRIK chains that share bones form trees (union-find over shared bones).
    parent_of: dict[int, int] = {p.index: p.index for p in plans}

    def find(i: int) -> int:
        while parent_of[i] != i:
            parent_of[i] = parent_of[parent_of[i]]
            i = parent_of[i]
        return i

    first_owner: dict[int, int] = {}
    for p in plans:
        for b in p.bones:
            if b in first_owner:
                parent_of[find(p.index)] = find(first_owner[b])
            else:
                first_owner[b] = p.index
    clusters: dict[int, list[ChainPlan]] = {}
    for p in plans:
        clusters.setdefault(find(p.index), []).append(p)
    for members in clusters.values():
        bones = sorted({b for p in members for b in p.bones}, key=lambda b: (int(sk.depth[b]), b))
        is_tree = len(members) > 1
        if is_tree:
            members = [_branch_carriers(obj, sk, members, p) for p in members]
            problem = _tree_problem(sk, members, owners)
            if problem:
                for p in members:
                    plan.errors[p.index] = problem
                continue
        elif members[0].stretch > 1.0 and members[0].carriers is None:
            plan.errors[members[0].index] = members[0].stretch_problem
            continue
        plan.groups.append(Group(chains=members, bones=bones, is_tree=is_tree))

    # A group whose root hangs below another group's bones must be solved after it.
    owner_group: dict[int, int] = {b: gi for gi, g in enumerate(plan.groups) for b in g.bones}
    deps: list[set[int]] = []
    for g in plan.groups:
        root = g.bones[0]
        deps.append({owner_group[a] for a in sk.ancestors(root) if a in owner_group})
    # So must a group whose control bones (target or pole bones of this rig) hang below another group's
    # bones: the control moves with that group's solution. One the group moves itself would chase itself.
    control_deps = _control_dependencies(plan, sk, owner_group, deps)
    level: dict[int, int] = {}
    cyclic: set[int] = set()

    def level_of(gi: int, stack: tuple[int, ...] = ()) -> int:
        if gi in level:
            return level[gi]
        here = (*stack, gi)
        lv = 0
        for d in deps[gi]:
            if d in here:
                cyclic.update(here[here.index(d) :])
                continue
            lv = max(lv, 1 + level_of(d, here))
        level[gi] = lv
        return lv

    for gi, g in enumerate(plan.groups):
        g.level = level_of(gi)
    for gi in sorted(cyclic):
        names = ", ".join(f"'{plan.groups[o].chains[0].name}'" for o in sorted(cyclic) if o != gi)
        for c in plan.groups[gi].chains:
            plan.errors.setdefault(
                c.index,
                f"this chain's control bone hangs below chain {names}, whose control hangs below this chain: "
                "they would chase each other; parent one of the controls outside the other chain",
            )
    # Control bones carried with an upper group: the bones between must carry them as Blender does.
    for bones_between in control_deps.values():
        for c_index, role, control, path in bones_between:
            loose = next((a for a in path if not sk.inherits[a]), None)
            if loose is not None:
                plan.errors.setdefault(
                    c_index,
                    Refusal(
                        f"the {role} bone '{sk.names[control]}' hangs below another chain through bone "
                        f"'{sk.names[loose]}', which does not fully inherit its parent's rotation and scale (Bone > "
                        f"Relations), so it cannot follow that chain: turn Inherit Rotation on and Inherit Scale "
                        f"to 'Full' on '{sk.names[loose]}'",
                        _relations(sk.names[loose], True, "FULL"),
                    ),
                )

    # A group below another is solved on a parent pose we derive by carrying bones rigidly with the
    # upper group's solution. Blender carries a bone that way only if it inherits rotation and full scale:
    # below a bone that does not, we would solve the lower chain on a pose Blender never shows. Below a
    # chain that stretches it is the other way round: the first bone below it must not inherit its scale
    # (else the lower chain would be stretched and sheared with it).
    for gi, g in enumerate(plan.groups):
        if not deps[gi]:
            continue
        between: list[int] = []
        upper_bone = -1
        for a in sk.ancestors(g.bones[0]):
            if a in owner_group:
                upper_bone = a  # reached the upper group (its own bones are validated as chain bones)
                break
            between.append(a)
        if upper_bone < 0:
            continue  # it depends on another group only through a control bone (checked above)
        upper_group = plan.groups[owner_group[upper_bone]]
        # The chain that stretches the bone this group hangs from (in a tree: the bones of its branch). A tip
        # that takes the target's rotation is not stretched (it keeps its length, Inherit Scale 'None').
        stretcher = next(
            (c for c in upper_group.chains if c.stretch > 1.0 and upper_bone in _stretched_rows(upper_group, c)),
            None,
        )
        upper = (stretcher or upper_group.chains[0]).name
        link = between[-1] if between else g.bones[0]
        stretching = stretcher is not None
        problem = ""
        link_bone = obj.data.bones[sk.names[link]]
        if stretching and (not link_bone.use_inherit_rotation or sk.scale_modes()[link] not in (NONE, NONE_LEGACY)):
            problem = Refusal(
                f"bone '{sk.names[link]}' hangs from chain '{upper}', which stretches, and inherits its scale "
                f"(Bone > Relations), so this chain would be stretched and sheared with it: set Inherit Scale to "
                f"'None' on '{sk.names[link]}' (it then keeps its size), or Stretch of '{upper}' to 1",
                _relations(sk.names[link], not link_bone.use_inherit_rotation, "NONE"),
            )
        else:
            for a in between:
                if stretching and a == link:
                    continue
                if not sk.inherits[a]:
                    problem = Refusal(
                        f"bone '{sk.names[a]}' between chain '{upper}' and this chain does not fully inherit its "
                        f"parent's rotation and scale (Bone > Relations), so this chain cannot follow '{upper}': "
                        f"turn Inherit Rotation on and Inherit Scale to 'Full' on '{sk.names[a]}'",
                        _relations(sk.names[a], True, "FULL"),
                    )
                    break
        if problem:
            for c in g.chains:
                plan.errors[c.index] = problem
    # A tree is solved as one: one refused chain refuses its tree.
    refused = {gi for gi, g in enumerate(plan.groups) if any(c.index in plan.errors for c in g.chains)}
    for gi in refused:
        first = next(plan.errors[c.index] for c in plan.groups[gi].chains if c.index in plan.errors)
        for c in plan.groups[gi].chains:
            plan.errors.setdefault(c.index, first)
    # A group below a refused one is solved on the pose Blender shows for the refused group's bones (nothing
    # of it is written). That pose is exact unless a solved group further up moves them in the same solve
    # through a bone our rigid carry cannot follow as Blender does (one that does not fully inherit, or
    # below a stretching group): only then is it refused too (levels ascending, so refusals carry down).
    for gi in sorted(range(len(plan.groups)), key=lambda i: plan.groups[i].level):
        above = deps[gi] & refused
        if not above or gi in refused:
            continue
        loose = -1
        carrier = -1  # the nearest solved group above
        for a in sk.ancestors(plan.groups[gi].bones[0]):
            if a in owner_group and owner_group[a] not in refused:
                carrier = owner_group[a]
                break
            if loose < 0 and not sk.inherits[a]:
                loose = a
        if carrier < 0:
            continue  # nothing solved above moves it: the pose Blender shows, exactly
        if loose < 0 and not any(c.stretch > 1.0 for c in plan.groups[carrier].chains):
            continue
        refused.add(gi)
        upper = plan.groups[min(above)].chains[0].name
        mover = plan.groups[carrier].chains[0].name
        why = (
            f"bone '{sk.names[loose]}' does not fully inherit its parent's rotation and scale"
            if loose >= 0
            else f"'{mover}' stretches"
        )
        for c in plan.groups[gi].chains:
            plan.errors[c.index] = (
                f"the chain '{upper}' above this one is invalid, and this chain hangs from chain '{mover}' "
                f"through it ({why}), so it cannot be solved on the pose Blender shows: fix '{upper}' first "
                "(see its message)"
            )
    if refused:
        plan.groups = [g for g in plan.groups if not any(c.index in plan.errors for c in g.chains)]
    plan.groups.sort(key=lambda g: (g.level, g.bones[0]))
    return plan


def _stretched_rows(g: Group, c: ChainPlan) -> list[int]:
    """The bones chain `c` of group `g` lengthens when it stretches: its bones (in a tree, its branch's),
    without the tip when it takes the target's rotation."""
    own = branch(g.chains, c) if g.is_tree else c.bones
    return own[:-1] if c.use_target_rotation else own


def _control_dependencies(
    plan: Plan, sk: Skeleton, owner_group: dict[int, int], deps: list[set[int]]
) -> dict[int, list[tuple[int, str, int, list[int]]]]:
    """Add to `deps` the groups that move each group's control bones; refuse controls a group moves itself.

    Returns, per group, (chain index, role, control bone, bones between it and the moving group) for the
    controls carried by another group (the caller checks those bones carry it as Blender would).
    """
    out: dict[int, list[tuple[int, str, int, list[int]]]] = {}
    for gi, g in enumerate(plan.groups):
        for c in g.chains:
            for role, control in (("target", c.target_local), ("pole", c.pole_local)):
                if control < 0:
                    continue
                line = [control, *sk.ancestors(control)]
                owned = [k for k, a in enumerate(line) if a in owner_group]
                if not owned:
                    continue
                mover = line[owned[0]]
                if owner_group[mover] == gi:
                    where = "is one of its bones" if mover == control else f"hangs below its bone '{sk.names[mover]}'"
                    plan.errors[c.index] = (
                        f"the {role} bone '{sk.names[control]}' {where}: the chain moves its own {role}, which would "
                        f"chase itself; parent '{sk.names[control]}' outside the chain (to the root, or a bone above "
                        "the chain)"
                    )
                    continue
                deps[gi].update(owner_group[line[k]] for k in owned if owner_group[line[k]] != gi)
                # The control itself need not inherit rotation: its head follows its parent either way.
                out.setdefault(gi, []).append((c.index, role, control, line[1 : owned[0]]))
    return out


def _validate_chain(obj: bpy.types.Object, sk: Skeleton, i: int, ch: ReachChain, driven: set[str]) -> ChainPlan | str:
    tip = ch.tip_bone
    if not tip:
        return "no tip bone: pick the last bone of the chain"
    if tip not in sk.index:
        return f"bone '{tip}' is not in '{obj.name}' (renamed or deleted?): pick the tip bone again"
    b = sk.index[tip]
    line = [b, *sk.ancestors(b)]
    n = int(ch.chain_length)
    if n == 0:
        n = len(line)  # 0: up to the root bone, as Blender's IK constraint's Chain Length 0
    if n > len(line):
        return (
            f"chain length {n} is longer than the hierarchy above '{tip}' ({len(line)} bones): "
            f"set it to {len(line)} or less"
        )
    bones = list(reversed(line[:n]))
    if ch.solver == "TWO_BONE" and n != 2:
        return f"the two-bone solver needs a chain length of 2, not {n}: set the length to 2 or pick FABRIK/CCD"
    if ch.solver == "TWO_BONE" and ch.use_target_rotation:
        return (
            "Use Target Rotation needs a FABRIK or CCD chain: the two-bone solver positions exactly two bones; "
            "add the hand as its own chain or use FABRIK with length 3"
        )
    if ch.target is None:
        return "no target: pick an object (normally an Empty) for the tip to reach"
    target_bone = target_bone_of(ch.target, ch.target_bone)
    pole_bone = target_bone_of(ch.pole, ch.pole_bone)
    for role, ob, bone_name in (("target", ch.target, target_bone), ("pole", ch.pole, pole_bone)):
        problem = _object_problem(role, ob, obj, bone_name)
        if problem:
            return problem
    bone_data = obj.data.bones
    for bi in bones:
        bone = bone_data[sk.names[bi]]
        if bone.length < 1e-6:
            return f"bone '{bone.name}' has zero length: give it a length in Edit Mode or shorten the chain"
        if not bone.use_inherit_rotation:
            return Refusal(
                f"bone '{bone.name}' does not inherit its parent's rotation (Bone > Relations): Reach IK needs "
                "Inherit Rotation on on chain bones",
                ((bone.name, "use_inherit_rotation", True),),
            )
        if bone.inherit_scale not in _CHAIN_SCALE_MODES:
            # The fix: Blender's default 'Full', or 'Aligned' below the first bone of a stretching chain.
            scale = "ALIGNED" if bi != bones[0] and float(ch.stretch) > 1.0 else "FULL"
            return Refusal(
                f"bone '{bone.name}' does not inherit its parent's scale in a way Reach IK can solve (Inherit Scale "
                f"'{_SCALE_LABELS.get(bone.inherit_scale, bone.inherit_scale)}', Bone > Relations): chain bones need "
                "Inherit Scale 'Full', 'Aligned' or 'None'",
                ((bone.name, "inherit_scale", scale),),
            )
    for bi in bones:
        if sk.names[bi] in driven:
            return (
                f"bone '{sk.names[bi]}' has a driver on its rotation: Blender applies it after Reach IK writes the "
                "pose, so the chain would never show its solve: remove the driver (Drivers editor) or shorten the "
                "chain"
            )
    weight = float(ch.weight)
    if not math.isfinite(weight):
        return f"weight {weight} is not a number: set a weight of 0 to 10"
    soft, stretch = float(ch.soft), float(ch.stretch)
    if not 0.0 <= soft <= 0.5:  # False for NaN too: only a script can store it
        return f"Soft is {soft:.4g}: set it from 0 (off) to 0.5"
    if not (math.isfinite(stretch) and stretch >= 1.0):
        return f"Stretch is {stretch:.4g}: set it to 1 (off) or more"
    cap = float(ch.ccd_max_step) if ch.solver == "CCD" else 0.0
    if not 0.0 <= cap <= math.pi:  # False for NaN too: only a script can store it
        return f"Step Cap is {cap:.4g}: set an angle from 0° (no cap) to 180°"
    # A chain that cannot stretch is refused when it is planned alone (`build_plan`); in a tree its branch's
    # bones stretch, and their carriers are worked out there.
    carriers, stretch_problem = _stretch_carriers(obj, sk, bones, bool(ch.use_target_rotation))
    return ChainPlan(
        index=i,
        name=ch.name or tip,
        solver=ch.solver,
        bones=bones,
        target=ch.target.name,
        pole=ch.pole.name if ch.pole is not None else None,
        weight=weight,
        use_target_rotation=bool(ch.use_target_rotation),
        target_bone=target_bone,
        pole_bone=pole_bone,
        target_local=sk.index[target_bone] if target_bone and ch.target == obj else -1,
        pole_local=sk.index[pole_bone] if pole_bone and ch.pole == obj else -1,
        soft=soft,
        stretch=stretch,
        carriers=carriers,
        stretch_problem=stretch_problem,
        ccd_max_step=cap,
    )


def driven_rotations(obj: bpy.types.Object) -> set[str]:
    """Names of the bones whose rotation channels a driver of the armature object sets."""
    ad = obj.animation_data
    if ad is None or not len(ad.drivers):
        return set()
    found = (anim.rotation_bone(d.data_path) for d in ad.drivers)
    return {name for name in found if name is not None}


def _branch_carriers(obj: bpy.types.Object, sk: Skeleton, members: list[ChainPlan], p: ChainPlan) -> ChainPlan:
    """`p` with the carriers of its branch's bones (`core.trees.branch`): in a tree a chain stretches those
    only, the branch's first bone carrying its own stretch (its shared parent keeps its length)."""
    own = branch(members, p)
    carriers, problem = _stretch_carriers(obj, sk, own, p.use_target_rotation) if own else (None, "")
    if not own:
        problem = "every bone of the chain is shared with another chain, so none is its own to stretch"
    return replace(p, carriers=carriers, stretch_problem=problem)


def _tree_problem(sk: Skeleton, members: list[ChainPlan], owners: dict[int, list[ChainPlan]]) -> str:
    """Why chains that share bones cannot be solved as one tree, or "" (a tree is solved as one: one chain at
    fault refuses its tree, and the message names it)."""
    for p in members:
        if p.stretch > 1.0 and p.carriers is None:
            return (
                f"chain '{p.name}' stretches, and in a tree (chains that share bones, solved as one) a chain stretches "
                f"the bones of its branch only (those no other chain shares): {p.stretch_problem}"
            )
    weightless = [p for p in members if p.weight <= 0.0]
    if weightless:
        return (
            "chains that share bones are solved as one tree; in a tree every chain needs a weight above 0 (see "
            "chain " + ", ".join(f"'{p.name}'" for p in weightless) + ")"
        )
    tips = {p.bones[-1]: p for p in members}
    for p in members:
        if not p.use_target_rotation:
            continue
        tip = p.bones[-1]
        if len(owners[tip]) > 1 or len(p.bones) < 2:
            return (
                f"chain '{p.name}' uses Target Rotation, and its tip bone '{sk.names[tip]}' is shared with other "
                "chains of its tree (or is its only bone): in a tree the tip that takes the target's rotation must "
                "be a bone only its own chain solves; turn Use Target Rotation off or lengthen the chain"
            )
        other = tips.get(p.bones[-2])
        if other is not None:
            return (
                f"chain '{p.name}' uses Target Rotation, so its tip's parent '{sk.names[p.bones[-2]]}' reaches for "
                f"where the tip's head must be, but that bone is the tip of chain '{other.name}': turn Use Target "
                f"Rotation off on '{p.name}' or end '{other.name}' elsewhere"
            )
    return ""


# Inherit Scale modes chain bones may have: each gives a bone its parent's rotation exactly
# (`core.kinematics.child_pose`).
_CHAIN_SCALE_MODES = {"FULL", "ALIGNED", "NONE", "NONE_LEGACY"}
_SCALE_LABELS = {"FIX_SHEAR": "Fix Shear", "AVERAGE": "Average", "NONE_LEGACY": "None (Legacy)"}


def _stretch_carriers(
    obj: bpy.types.Object, sk: Skeleton, bones: list[int], use_target_rotation: bool
) -> tuple[list[int] | None, str]:
    """For each bone a chain solves, the bone whose Y scale channel carries its stretch; or None and why the
    chain cannot stretch.

    The chain's first bone carries its own stretch. A bone below it with Inherit Scale 'None' takes none of
    its parent's scale, so it carries its own too; one with 'Aligned' takes its parent's Y scale along its
    own length, so it is stretched by its parent's carrier. 'Full' would apply the parent's stretch along the
    parent's axis, which stretches the bone a second time and shears it: such a chain cannot stretch. Neither
    can a carrier whose Y scale is locked, nor (with Use Target Rotation, where the tip keeps its length) a
    tip that inherits the stretch.
    """
    data = obj.data.bones
    rows = bones[:-1] if use_target_rotation else bones
    if not rows:
        return None, (
            "a one-bone chain with Use Target Rotation has no bone left to stretch (the tip takes the target's "
            "orientation and keeps its length): set Stretch to 1 or lengthen the chain"
        )
    carriers: list[int] = []
    for i, b in enumerate(rows):
        mode = data[sk.names[b]].inherit_scale
        if i == 0 or mode in ("NONE", "NONE_LEGACY"):
            carriers.append(b)
        elif mode == "ALIGNED":
            carriers.append(carriers[-1])
        else:
            name, parent = sk.names[b], sk.names[rows[i - 1]]
            # The fix sets every such bone of the chain (a default rig has them all 'Full'), not only this one.
            full = [sk.names[r] for r in rows[i:] if data[sk.names[r]].inherit_scale not in ("NONE", "NONE_LEGACY")]
            return None, Refusal(
                f"bone '{name}' inherits the scale of '{parent}' in full (Inherit Scale 'Full'), so stretching "
                f"'{parent}' would stretch '{name}' again and shear it: set Inherit Scale of '{name}' to 'Aligned' "
                "(it takes the stretch along its length) or 'None' (Bone > Relations), or set Stretch to 1",
                tuple((n, "inherit_scale", "ALIGNED") for n in full if data[n].inherit_scale != "ALIGNED"),
            )
    pose_bones = obj.pose.bones
    for b in dict.fromkeys(carriers):
        if pose_bones[sk.names[b]].lock_scale[1]:
            return None, (
                f"bone '{sk.names[b]}' has its Y scale locked (the lock beside Scale Y in Bone > Transform), and "
                "the chain stretches its bones through their Y scale: unlock it, or set Stretch to 1"
            )
    if use_target_rotation:
        tip = sk.names[bones[-1]]
        if data[tip].inherit_scale not in ("NONE", "NONE_LEGACY"):
            return None, Refusal(
                f"with Use Target Rotation the tip '{tip}' takes the target's orientation and keeps its length, so "
                f"it must not inherit the stretch: set Inherit Scale of '{tip}' to 'None' (Bone > Relations), or "
                "set Stretch to 1",
                ((tip, "inherit_scale", "NONE"),),
            )
    return carriers, ""
