"""The IK <-> FK operators on real rigs: `reach.snap_to_pose`, `reach.apply_to_fk`, `reach.switch`.

The promise is that nothing moves: every check measures the bones' world-space tails (and where roll matters,
the ends of their X and Z axes) from Blender's evaluated pose before and after, never the solver's numbers.
A snap is judged by what live solving then does with the snapped targets: Live is off while posing by hand,
the snap runs, Live goes on, and the solve must put every bone back where it was.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

import bpy
import conftest
import numpy as np
import pytest
import rigs
from mathutils import Euler, Matrix, Vector
from test_ikfk import _basis, _character, _fk_pose, _key_fk_animation, _move_targets
from test_rigify import _generate, rigify  # noqa: F401  (the fixture, used by name)

from demo import rigs as demo_rigs


def _module(name: str) -> ModuleType:
    return sys.modules[f"{conftest.ADDON}.{name}"]


def _rig(rotation_mode: str = "QUATERNION", **settings: object) -> demo_rigs.Rig:
    """The demo character with Reach IK chains, solved once (Live on)."""
    rig = _character(rotation_mode)
    demo_rigs.use_reach(rig, **settings)
    rigs.update()
    return rig


def _index(obj: bpy.types.Object, name: str) -> int:
    return next(i for i, ch in enumerate(obj.reach_ik.chains) if ch.name == name)


def _bones(obj: bpy.types.Object, i: int) -> list[str]:
    ch = obj.reach_ik.chains[i]
    pb = obj.pose.bones[ch.tip_bone]
    out = []
    for _ in range(ch.chain_length):
        out.append(pb.name)
        pb = pb.parent
    return out[::-1]


def _ends(obj: bpy.types.Object, bones: Sequence[str]) -> np.ndarray:
    """(n, 3, 3) world positions of each bone's tail and of the ends of its X and Z axes (as long as the bone),
    from Blender's evaluated pose: a bone that moves, turns or rolls moves some of them."""
    deps = bpy.context.evaluated_depsgraph_get()
    ev = obj.evaluated_get(deps)
    out = []
    for name in bones:
        pb = ev.pose.bones[name]
        m = ev.matrix_world @ pb.matrix
        head = m.translation
        length = pb.bone.length
        out.append([np.array(head + m.col[k].xyz.normalized() * length) for k in (0, 1, 2)])
    return np.array(out)


def _moved(before: np.ndarray, after: np.ndarray) -> float:
    return float(np.linalg.norm(before - after, axis=-1).max())


def _every_bone(obj: bpy.types.Object) -> list[str]:
    return [pb.name for pb in obj.pose.bones]


def _pose_by_hand(obj: bpy.types.Object, bones: Sequence[str], seed: int, amount: float = 0.35) -> None:
    """Rotate `bones` by hand (random, fixed seed); Blender puts each rotation in the bone's own mode."""
    rng = np.random.default_rng(seed)
    for name in bones:
        pb = obj.pose.bones[name]
        pb.matrix_basis = Matrix.LocRotScale(pb.location, Euler(rng.uniform(-amount, amount, 3)), pb.scale)


def _solved_live(obj: bpy.types.Object) -> None:
    """Live on, one update: the chains are solved on what the snap left (checked: a solve ran)."""
    live = _module("rig.live")
    before = live.solve_count(obj)
    obj.reach_ik.live = True
    rigs.update()
    assert live.solve_count(obj) > before, "Live on must solve the rig (else the test proves nothing)"


# ---------------------------------------------------------------------------------------------------------
# Snap IK to Pose
# ---------------------------------------------------------------------------------------------------------


def _control_bones(obj: bpy.types.Object, chain: int) -> None:
    """Give chain `chain` control bones of the rig itself ('IK-<tip>' and 'Pole-<tip>', unparented) as its
    target and pole, placed where its Empties are."""
    ch = obj.reach_ik.chains[chain]
    places = {f"IK-{ch.tip_bone}": ch.target, f"Pole-{ch.tip_bone}": ch.pole}
    inverse = obj.matrix_world.inverted()
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="EDIT")
    for name, ob in places.items():
        eb = obj.data.edit_bones.new(name)
        eb.head = inverse @ ob.matrix_world.translation
        eb.tail = eb.head + Vector((0.0, 0.0, 0.1))
        eb.use_deform = False
    bpy.ops.object.mode_set(mode="OBJECT")
    ch.target, ch.target_bone = obj, f"IK-{ch.tip_bone}"
    ch.pole, ch.pole_bone = obj, f"Pole-{ch.tip_bone}"


def _parented_controls(obj: bpy.types.Object, chain: int) -> None:
    """The chain's target hangs below a turned, scaled, offset Empty, and its pole below the target."""
    ch = obj.reach_ik.chains[chain]
    root = rigs.empty("root", (0.3, -0.2, 0.1))
    root.rotation_euler = (0.2, -0.4, 0.7)
    root.scale = (1.5, 1.5, 1.5)
    rigs.update()
    for child, parent in ((ch.target, root), (ch.pole, ch.target)):
        world = child.matrix_world.copy()
        child.parent = parent
        child.matrix_world = world
    rigs.update()


def _euler_bones(obj: bpy.types.Object, chain: int) -> None:
    for name in _bones(obj, chain):
        pb = obj.pose.bones[name]
        pb.rotation_mode = "ZXY"


def _stretched(obj: bpy.types.Object, chain: int) -> None:
    """Stretch up to 1.3 and a target beyond reach: the leg's bones hold a stretch (Y scale) when posed."""
    ch = obj.reach_ik.chains[chain]
    bones = _bones(obj, chain)
    obj.data.bones[bones[1]].inherit_scale = "ALIGNED"
    ch.stretch = 1.3
    ch.target.location.z -= 0.15
    rigs.update()
    assert obj.pose.bones[bones[0]].scale[1] > 1.05, "the leg must be stretched for this case"


def _fabrik_pole(obj: bpy.types.Object, chain: int) -> None:
    ch = obj.reach_ik.chains[chain]
    ch.pole = rigs.empty("spine.pole", (0.0, -0.8, 1.35))
    ch.pole_angle = math.radians(35.0)


SNAP_CASES: dict[str, tuple[str, Callable[[bpy.types.Object, int], None] | None, dict[str, object]]] = {
    "two-bone+pole": ("arm.L", None, {}),
    "two-bone+pole-angle": ("arm.L", None, {"pole_angle": math.radians(50.0)}),
    "leg+pole-angle-120": ("leg.R", None, {"pole_angle": math.radians(-120.0)}),
    "fabrik": ("spine", None, {}),
    "fabrik+pole+pole-angle": ("spine", _fabrik_pole, {}),
    "ccd": ("tail", None, {}),
    "target-rotation-fabrik": ("spine", None, {"use_target_rotation": True}),
    "target-rotation-arm": ("arm.R", None, {"solver": "FABRIK", "use_target_rotation": True}),
    "bone-targets+pole-angle": ("arm.L", _control_bones, {"pole_angle": math.radians(-30.0)}),
    "parented-controls": ("leg.L", _parented_controls, {}),
    "euler-bones": ("arm.R", _euler_bones, {}),
    "soft": ("leg.L", None, {"soft": 0.15}),
    "stretched": ("leg.R", _stretched, {}),
    "stretched+soft": ("leg.R", _stretched, {"soft": 0.1}),
}


@pytest.mark.parametrize("case", list(SNAP_CASES))
def test_snap_to_pose_then_live_solving_keeps_the_pose(case: str) -> None:
    chain, prepare, settings = SNAP_CASES[case]
    rig = _rig()
    obj = rig.obj
    i = _index(obj, chain)
    ch = obj.reach_ik.chains[i]
    if prepare is not None:
        prepare(obj, i)
    for key, value in settings.items():
        setattr(ch, key, value)
    rigs.update()
    obj.reach_ik.live = False
    bones = _bones(obj, i)
    if case.startswith("stretched"):
        # IK stretches a chain only toward a target beyond its reach (straight, or with Soft along the soft
        # curve): a bent chain holding a stretch is no IK result. The stretched IK pose, turned at the hip.
        pb = obj.pose.bones[bones[0]]
        pb.rotation_quaternion = Euler((0.3, -0.2, 0.25)).to_quaternion() @ pb.rotation_quaternion
    elif case == "soft":
        # Nearly straight, in the soft zone (the tip at 96-99 % of the leg's length): the solve eases the
        # tip short of a target at the tip, so the target must go further out.
        obj.pose.bones[bones[0]].rotation_quaternion = Euler((0.3, 0.0, 0.1)).to_quaternion()
        obj.pose.bones[bones[1]].rotation_quaternion = Euler((-0.25, 0.0, 0.0)).to_quaternion()
    else:
        _pose_by_hand(obj, bones, seed=len(case))
    rigs.update()
    tip = obj.pose.bones[bones[-1]]
    watched = bones + [child.name for child in tip.children]  # the hand shows the tip's roll
    before = _ends(obj, watched)
    obj.reach_ik.active_chain_index = i
    assert bpy.ops.reach.snap_to_pose(chains="ACTIVE") == {"FINISHED"}
    assert _moved(before, _ends(obj, watched)) == 0.0, "snapping moves controls, never the bones"
    _solved_live(obj)
    moved = _moved(before, _ends(obj, watched))
    tol = obj.reach_ik.tolerance
    assert ch.is_valid, ch.message
    assert moved <= tol, f"{case}: after the snap, live solving moved the chain by {moved:.3g} (tolerance {tol})"


def _posed_character() -> demo_rigs.Rig:
    rig = _rig()
    _fk_pose(rig.obj, 0.7)
    return rig


def _posed_spider() -> demo_rigs.Rig:
    """The spider's eight legs share its body: one FABRIK tree, snapped as one (its targets together)."""
    rig = demo_rigs.spider()
    demo_rigs.use_reach(rig)
    rigs.update()
    _pose_by_hand(rig.obj, _every_bone(rig.obj), seed=11, amount=0.2)
    return rig


def _posed_spider_with_poles() -> demo_rigs.Rig:
    """The spider with a pole on every leg: each leg's pole turns its branch (the two bones below the body)."""
    rig = demo_rigs.spider()
    demo_rigs.use_reach(rig)
    for i, ch in enumerate(rig.obj.reach_ik.chains):
        a = 2 * math.pi * i / 8
        ch.pole = rigs.empty(f"Pole{i}", (math.cos(a), 1.5 + 0.2 * i, math.sin(a)))
    rigs.update()
    _pose_by_hand(rig.obj, _every_bone(rig.obj), seed=11, amount=0.2)
    return rig


@pytest.mark.parametrize(
    "make",
    [_posed_character, _posed_spider, _posed_spider_with_poles],
    ids=["character", "spider-tree", "spider-poles"],
)
def test_snap_all_chains_of_a_posed_rig_moves_no_bone(make: Callable[[], demo_rigs.Rig]) -> None:
    obj = make().obj
    obj.reach_ik.live = False  # before the update that shows the pose: it is the pose, not an IK result
    rigs.update()
    before = _ends(obj, _every_bone(obj))
    assert bpy.ops.reach.snap_to_pose(chains="ALL") == {"FINISHED"}
    _solved_live(obj)
    moved = _moved(before, _ends(obj, _every_bone(obj)))
    assert moved <= obj.reach_ik.tolerance, f"a bone moved by {moved:.3g} after snapping every chain"
    assert all(ch.is_valid for ch in obj.reach_ik.chains)


def test_snap_warns_where_the_ik_cannot_give_the_pose() -> None:
    """Start From 'Rest': a FABRIK spine solved from its rest pose finds another bend than one posed by hand."""
    rig = _rig(start_from="REST")
    obj = rig.obj
    obj.reach_ik.live = False
    i = _index(obj, "spine")
    _pose_by_hand(obj, _bones(obj, i), seed=2, amount=0.5)
    rigs.update()
    outcome = _module("rig.ikfk").snap(obj, {i})
    assert len(outcome.warnings) == 1 and "'spine': the IK solution differs from the pose by" in outcome.warnings[0]


def test_snap_selected_tips_moves_only_their_controls() -> None:
    rig = _rig()
    obj = rig.obj
    obj.reach_ik.live = False
    _fk_pose(obj, 1.1)
    rigs.update()
    bpy.context.view_layer.objects.active = obj
    bpy.ops.object.mode_set(mode="POSE")
    bpy.ops.pose.select_all(action="DESELECT")
    tips = {"forearm.L", "shin.R"}
    for name in tips:
        pb = obj.pose.bones[name]
        if "select" in pb.bl_rna.properties:
            pb.select = True
        else:
            pb.bone.select = True
    unmoved = {spec.name: spec.target.matrix_world.copy() for spec in rig.chains if spec.tip not in tips}
    assert bpy.ops.reach.snap_to_pose(chains="SELECTED") == {"FINISHED"}
    for spec in rig.chains:
        if spec.tip in tips:
            gap = (spec.target.matrix_world.translation - Vector(rigs.world_tail(obj, spec.tip))).length
            assert gap < 1e-5, f"{spec.name}: its target must be at the tip, it is {gap:.3g} away"
        else:
            assert spec.target.matrix_world == unmoved[spec.name], f"{spec.name} was not selected: untouched"
    bpy.ops.object.mode_set(mode="OBJECT")


def test_snap_with_key_keys_the_targets_and_poles_at_the_current_frame() -> None:
    rig = _rig()
    obj = rig.obj
    bpy.context.scene.frame_set(7)
    obj.reach_ik.live = False
    i = _index(obj, "arm.L")
    _pose_by_hand(obj, _bones(obj, i), seed=3)
    rigs.update()
    obj.reach_ik.active_chain_index = i
    assert bpy.ops.reach.snap_to_pose(chains="ACTIVE", key=True) == {"FINISHED"}
    ch = obj.reach_ik.chains[i]
    for ob, paths in ((ch.target, ("location", "rotation_euler")), (ch.pole, ("location", "rotation_euler"))):
        action = ob.animation_data.action
        for path in paths:
            for j in range(3):
                fc = _fcurve(ob, path, j)
                assert fc is not None, f"'{ob.name}' {path}[{j}] must be keyed"
                frames = [k.co[0] for k in fc.keyframe_points]
                assert frames == [7.0], f"'{ob.name}' {path}[{j}]: one key at frame 7, got {frames}"
        assert action is not None
    # The keys hold the snap: leaving the frame and coming back shows the same pose under live solving.
    before = _ends(obj, _bones(obj, i))
    _solved_live(obj)
    bpy.context.scene.frame_set(20)
    bpy.context.scene.frame_set(7)
    assert _moved(before, _ends(obj, _bones(obj, i))) <= obj.reach_ik.tolerance


def _fcurve(ob: bpy.types.Object, path: str, index: int) -> bpy.types.FCurve | None:
    anim = _module("rig.anim")
    ad = ob.animation_data
    if ad is None or ad.action is None:
        return None
    return anim.find_fcurve(ad.action, ob, path, index)


def test_key_defaults_to_auto_keying() -> None:
    rig = _rig()
    obj = rig.obj
    obj.reach_ik.active_chain_index = _index(obj, "leg.L")
    target = obj.reach_ik.chains[obj.reach_ik.active_chain_index].target
    bpy.context.scene.tool_settings.use_keyframe_insert_auto = False
    assert bpy.ops.reach.snap_to_pose() == {"FINISHED"}
    assert target.animation_data is None, "Auto Keying off: no keys"
    bpy.context.scene.tool_settings.use_keyframe_insert_auto = True
    assert bpy.ops.reach.snap_to_pose() == {"FINISHED"}
    assert _fcurve(target, "location", 0) is not None, "Auto Keying on: the target is keyed"
    target.animation_data_clear()
    assert bpy.ops.reach.snap_to_pose(key=False) == {"FINISHED"}
    assert target.animation_data is None, "Key given as off: no keys, whatever Auto Keying says"


# ---------------------------------------------------------------------------------------------------------
# Apply IK to FK
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rotation_mode", ["QUATERNION", "XYZ", "AXIS_ANGLE"])
def test_apply_to_fk_makes_the_ik_pose_the_fk_pose(rotation_mode: str) -> None:
    rig = _rig(rotation_mode)
    obj = rig.obj
    _move_targets(rig)
    rigs.update()
    i = _index(obj, "arm.L")
    bones = _bones(obj, i)
    ik = _ends(obj, bones)
    obj.reach_ik.active_chain_index = i
    assert bpy.ops.reach.apply_to_fk(chains="ACTIVE", key=True) == {"FINISHED"}
    # Influence 0 now shows the FK pose: the IK pose that was applied.
    obj.reach_ik.chains[i].influence = 0.0
    rigs.update()
    assert _moved(ik, _ends(obj, bones)) < 1e-5, "Influence 0 must show the applied IK pose"
    channel = {"QUATERNION": "rotation_quaternion", "AXIS_ANGLE": "rotation_axis_angle"}.get(
        rotation_mode, "rotation_euler"
    )
    for name in bones:
        path = f'pose.bones["{name}"].{channel}'
        fc = _fcurve(obj, path, 0)
        assert fc is not None and [k.co[0] for k in fc.keyframe_points] == [1.0], f"{path} keyed at frame 1"
    assert _fcurve(obj, f'pose.bones["{bones[0]}"].scale', 1) is None, "no Stretch: no scale keys"


def test_apply_to_fk_keys_the_y_scale_of_a_stretching_chain() -> None:
    rig = _rig()
    obj = rig.obj
    i = _index(obj, "leg.L")
    ch = obj.reach_ik.chains[i]
    bones = _bones(obj, i)
    obj.data.bones[bones[1]].inherit_scale = "ALIGNED"
    ch.stretch = 1.3
    ch.target.location.z -= 0.2  # beyond reach: the leg stretches
    rigs.update()
    assert obj.pose.bones[bones[0]].scale[1] > 1.01, "the leg must stretch for this test"
    obj.reach_ik.active_chain_index = i
    assert bpy.ops.reach.apply_to_fk(chains="ACTIVE", key=True) == {"FINISHED"}
    fc = _fcurve(obj, f'pose.bones["{bones[0]}"].scale', 1)
    assert fc is not None and len(fc.keyframe_points) == 1, "the stretching bone's Y scale is keyed"
    assert _fcurve(obj, f'pose.bones["{bones[0]}"].scale', 0) is None, "only Y: X and Z are never written"


# ---------------------------------------------------------------------------------------------------------
# Switch IK/FK
# ---------------------------------------------------------------------------------------------------------


def _animated_character() -> demo_rigs.Rig:
    """The character with keyed FK animation on its chain bones (frames 1-20) and targets away from the FK
    tips, so IK and FK differ everywhere."""
    rig = _rig()
    obj = rig.obj
    _key_fk_animation(obj, range(1, 21, 5))
    bpy.context.scene.frame_set(8)
    _move_targets(rig)
    rigs.update()
    return rig


@pytest.mark.parametrize("key", [False, True], ids=["no-key", "key"])
@pytest.mark.parametrize("first", ["FK", "IK"])
def test_switch_both_ways_moves_no_bone(first: str, key: bool) -> None:
    rig = _animated_character()
    obj = rig.obj
    tol = obj.reach_ik.tolerance
    chains = obj.reach_ik.chains
    if first == "IK":
        for ch in chains:  # start from FK, so the first switch goes to IK
            ch.influence = 0.0
        rigs.update()
    every = _every_bone(obj)
    second = "IK" if first == "FK" else "FK"
    for mode in (first, second):
        before = _ends(obj, every)
        assert bpy.ops.reach.switch(chains="ALL", mode=mode, key=key) == {"FINISHED"}
        for _ in range(2):
            rigs.update()
        moved = _moved(before, _ends(obj, every))
        assert moved <= tol, f"switching to {mode} moved a bone by {moved:.3g} (tolerance {tol})"
        want = 1.0 if mode == "IK" else 0.0
        assert all(ch.influence == want for ch in chains), f"switch to {mode}: Influence {want}"
        if key:
            for i, ch in enumerate(chains):
                fc = _fcurve(obj, f"reach_ik.chains[{i}].influence", 0)
                assert fc is not None and any(k.co == Vector((8.0, want)) for k in fc.keyframe_points), (
                    f"'{ch.name}': Influence {want} keyed at frame 8"
                )
            if mode == "IK":
                for spec in rig.chains:
                    assert _fcurve(spec.target, "location", 0) is not None, f"{spec.name}: the target is keyed"
        # Live solving after the switch keeps the pose too (a frame change re-evaluates everything).
        if key:
            bpy.context.scene.frame_set(9)
            bpy.context.scene.frame_set(8)
            moved = _moved(before, _ends(obj, every))
            assert moved <= tol, f"after switching to {mode} with keys, frame 8 replays the pose ({moved:.3g})"


def test_after_switching_to_fk_the_target_no_longer_moves_the_chain() -> None:
    rig = _animated_character()
    obj = rig.obj
    i = _index(obj, "arm.L")
    obj.reach_ik.active_chain_index = i
    assert bpy.ops.reach.switch(chains="ACTIVE", mode="FK") == {"FINISHED"}
    rigs.update()
    bones = _bones(obj, i)
    before = _ends(obj, bones)
    obj.reach_ik.chains[i].target.location += Vector((0.05, -0.1, 0.08))
    rigs.update()
    assert _moved(before, _ends(obj, bones)) < 1e-6, "at Influence 0 the target does not move the arm"
    assert bpy.ops.reach.switch(chains="ACTIVE", mode="IK") == {"FINISHED"}
    rigs.update()
    assert _moved(before, _ends(obj, bones)) <= obj.reach_ik.tolerance, "switching back to IK snaps first"


def test_switch_to_ik_on_a_rig_with_start_from_rest() -> None:
    rig = _rig(start_from="REST")
    obj = rig.obj
    for ch in obj.reach_ik.chains:
        ch.influence = 0.0
        # The spine and tail stay FK: from the rest pose FABRIK and CCD find other interior poses.
        ch.enabled = ch.solver == "TWO_BONE"
    _fk_pose(obj, 0.4)
    rigs.update()
    two_bone = [_index(obj, n) for n in ("arm.L", "arm.R", "leg.L", "leg.R")]
    bones = [b for i in two_bone for b in _bones(obj, i)]
    before = _ends(obj, bones)
    assert bpy.ops.reach.switch(chains="ALL", mode="IK") == {"FINISHED"}
    rigs.update()
    # Two-bone chains are exact from any start; with Roll 'Keep' their roll comes from the rest pose here.
    tails = np.array([rigs.world_tail(obj, b) for b in bones])
    assert np.linalg.norm(tails - before[:, 1], axis=1).max() <= obj.reach_ik.tolerance


# ---------------------------------------------------------------------------------------------------------
# Refusals: a clear message, and nothing changed
# ---------------------------------------------------------------------------------------------------------


def _everything(obj: bpy.types.Object) -> tuple[object, ...]:
    """Every channel of the rig, every object's transform, every key, the FK store and the frame."""
    objects = tuple(
        (ob.name, tuple(ob.location), tuple(ob.rotation_euler), tuple(ob.rotation_quaternion), tuple(ob.scale))
        for ob in bpy.data.objects
    )
    keys = []
    for action in bpy.data.actions:
        for fc in _all_curves(action):
            keys.append((action.name, fc.data_path, fc.array_index, tuple(tuple(k.co) for k in fc.keyframe_points)))
    store = (obj.get("_reach_ik_fk_bones"), bytes(np.array(obj.get("_reach_ik_fk", []), dtype=np.float32)))
    influences = tuple(ch.influence for ch in obj.reach_ik.chains)
    return (rigs.pose_snapshot(obj), objects, tuple(sorted(keys)), store, influences, bpy.context.scene.frame_current)


def _all_curves(action: bpy.types.Action) -> list[bpy.types.FCurve]:
    """Every F-Curve of `action`, in any slot (4.4+: layers, strips, channelbags; 4.2/4.3: `fcurves`)."""
    if not hasattr(action, "layers"):
        return list(action.fcurves)
    return [fc for layer in action.layers for strip in layer.strips for bag in strip.channelbags for fc in bag.fcurves]


def _refused(obj: bpy.types.Object, call: Callable[[], object], match: str, why: str = "") -> None:
    """`call` fails with an error matching `match`, and nothing of `_everything` changed."""
    before = _everything(obj)
    with pytest.raises(RuntimeError, match=match):
        call()
    assert _everything(obj) == before, why or f"a refused operation changes nothing ({match})"


OPS: dict[str, Callable[..., set[str]]] = {
    "snap": lambda **kw: bpy.ops.reach.snap_to_pose(**kw),
    "apply_to_fk": lambda **kw: bpy.ops.reach.apply_to_fk(**kw),
    "switch-ik": lambda **kw: bpy.ops.reach.switch(mode="IK", **kw),
    "switch-fk": lambda **kw: bpy.ops.reach.switch(mode="FK", **kw),
}


@pytest.mark.parametrize("op", list(OPS))
def test_operators_refuse_an_invalid_chain_and_change_nothing(op: str) -> None:
    rig = _rig()
    obj = rig.obj
    _key_fk_animation(obj, range(1, 11, 3))
    bpy.context.scene.frame_set(4)
    i = _index(obj, "arm.L")
    obj.reach_ik.chains[i].target = None
    obj.reach_ik.active_chain_index = i
    rigs.update()
    _refused(obj, lambda: OPS[op](chains="ACTIVE", key=True), r"nothing was changed.*no target")
    # ALL refuses too while one chosen chain is invalid (the others are left alone as well).
    _refused(obj, lambda: OPS[op](chains="ALL", key=True), r"arm\.L")


@pytest.mark.parametrize("op", list(OPS))
def test_operators_say_when_there_is_no_chain_to_work_on(op: str) -> None:
    rig = _rig()
    obj = rig.obj
    i = _index(obj, "leg.L")
    obj.reach_ik.chains[i].enabled = False
    obj.reach_ik.active_chain_index = i
    rigs.update()
    _refused(obj, lambda: OPS[op](chains="ACTIVE"), r"'leg\.L' is disabled: enable it")
    _refused(obj, lambda: OPS[op](chains="SELECTED"), r"no enabled chains to .* \(selected\)")


def test_a_target_held_by_a_constraint_is_refused_and_put_back() -> None:
    rig = _rig()
    obj = rig.obj
    obj.reach_ik.live = False
    i = _index(obj, "arm.L")
    ch = obj.reach_ik.chains[i]
    anchor = rigs.empty("anchor", ch.target.matrix_world.translation)
    con = ch.target.constraints.new("COPY_LOCATION")
    con.target = anchor
    _pose_by_hand(obj, _bones(obj, i), seed=5)
    rigs.update()
    obj.reach_ik.active_chain_index = i
    _refused(
        obj,
        lambda: bpy.ops.reach.switch(chains="ACTIVE", mode="IK", key=True),
        r"target 'Character\.hand\.L' of chain 'arm\.L' did not stay where snapped",
        "the pole it had already moved is put back, and nothing is keyed",
    )


def test_a_key_blender_refuses_undoes_the_whole_switch() -> None:
    rig = _rig()
    obj = rig.obj
    i = _index(obj, "arm.L")
    ch = obj.reach_ik.chains[i]
    ch.pole.keyframe_insert("location", frame=1)
    _fcurve(ch.pole, "location", 2).lock = True
    obj.reach_ik.live = False
    _pose_by_hand(obj, _bones(obj, i), seed=6)
    rigs.update()
    obj.reach_ik.active_chain_index = i
    bpy.context.scene.frame_set(3)
    _refused(
        obj,
        lambda: bpy.ops.reach.switch(chains="ACTIVE", mode="IK", key=True),
        "locked",
        "the target's keys and both controls' moves are undone",
    )
    assert ch.target.animation_data is None, "the action the target's key created is removed again"


def test_switch_refuses_a_driven_influence() -> None:
    rig = _rig()
    obj = rig.obj
    i = _index(obj, "arm.L")
    fc = obj.driver_add(f"reach_ik.chains[{i}].influence")
    fc.driver.expression = "1.0"
    obj.reach_ik.active_chain_index = i
    rigs.update()
    _refused(obj, lambda: bpy.ops.reach.switch(chains="ACTIVE", mode="FK"), r"Influence of chain 'arm\.L' is driven")


def test_warns_when_an_animated_channel_is_changed_without_a_key() -> None:
    rig = _rig()
    obj = rig.obj
    i = _index(obj, "arm.L")
    obj.keyframe_insert(f"reach_ik.chains[{i}].influence", frame=1)
    obj.reach_ik.active_chain_index = i
    warnings = _module("rig.ikfk").switch(obj, "ACTIVE", "FK", key=False).warnings
    assert any("Influence of chain 'arm.L' is animated" in w for w in warnings), warnings
    assert obj.reach_ik.chains[i].influence == 0.0, "a warning, not a refusal: the switch is done"


# ---------------------------------------------------------------------------------------------------------
# A rig nobody on this project wrote
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("rigify")
def test_rigify_human_switches_to_fk_and_refuses_a_snap_its_constraints_would_undo() -> None:
    """Rigify's generated human, its IK constraints converted (as test_rigify does). The converted arm aims at
    `MCH-upper_arm_ik_target.L`, which Rigify's own constraints (Copy Location, Limit Distance) place from
    the hand IK control: a snap could not keep it where the pose needs it, so it is refused and nothing
    changes. Switching to FK works on the real rig: nothing moves, and the IK control then moves nothing."""
    ref, obj = _generate()
    bpy.data.objects.remove(ref)
    bpy.context.view_layer.objects.active = obj
    assert bpy.ops.reach.convert_constraints() == {"FINISHED"}
    rigs.update()
    chains = obj.reach_ik.chains
    i = next(k for k, ch in enumerate(chains) if ch.tip_bone == "MCH-forearm_ik.L")
    obj.reach_ik.active_chain_index = i
    target = obj.pose.bones[chains[i].target_bone]
    assert any(con.type == "COPY_LOCATION" for con in target.constraints), "Rigify constrains the MCH target"
    # The pose differs from what the IK gives: the arm turned by hand with Live off.
    obj.reach_ik.live = False
    _pose_by_hand(obj, _bones(obj, i), seed=9, amount=0.2)
    rigs.update()
    _refused(
        obj,
        lambda: bpy.ops.reach.snap_to_pose(chains="ACTIVE", key=True),
        r"bone 'MCH-upper_arm_ik_target\.L' of chain .* did not stay where snapped",
        "the refused snap put the control bone back and keyed nothing",
    )

    obj.reach_ik.live = True
    rigs.update()
    every = _every_bone(obj)
    ik = _ends(obj, every)
    assert bpy.ops.reach.switch(chains="ALL", mode="FK", key=True) == {"FINISHED"}
    rigs.update()
    moved = _moved(ik, _ends(obj, every))
    assert moved <= obj.reach_ik.tolerance, f"switching Rigify's limbs to FK moved a bone by {moved:.3g}"
    # Rigify turns the arm's parent (its IK swing bone) toward the control, so the arm goes with it; its own
    # rotations are what Influence 0 keeps: the FK pose, as evaluated.
    arm = _bones(obj, i)
    held = [_basis(obj, b) for b in arm]
    control = obj.pose.bones["hand_ik.L"]
    control.location = Vector(control.location) + Vector((0.05, 0.05, 0.05))
    rigs.update()
    turned = max(_basis(obj, b).rotation_difference(q).angle for b, q in zip(arm, held, strict=True))
    assert turned < 1e-6, f"at Influence 0 the hand IK control turned an arm bone by {turned:.3g} rad"


def test_a_failed_operation_puts_the_fk_store_back_whole() -> None:
    """Undoing an operation that failed restores the FK store's bone names with its rows: a store that gained
    a row meanwhile (a bone it had not held) must not end up with the old rows under the new names, which
    reads as a damaged store and loses every kept FK pose."""
    rig = _rig()
    obj = rig.obj
    fk, ikfk = _module("rig.fk"), _module("rig.ikfk")
    names_before = obj[fk.NAMES_KEY]
    rows_before = np.array(memoryview(obj[fk.ROWS_KEY]), dtype=np.float32)
    kept = fk.Store.read(obj)
    assert kept.names, "live solving stored the chain bones' FK values"
    with pytest.raises(RuntimeError, match="an operation fails"):
        with ikfk._transaction(obj) as tx:
            tx.save_fk()
            grown = fk.Store.read(obj)
            extra = next(n for n in _every_bone(obj) if n not in grown.index)
            names = [*grown.names, extra]
            fk.Store(names, np.vstack([grown.rows, grown.rows[:1]]), changed=True).write(obj)
            assert fk.Store.read(obj).names == names
            raise RuntimeError("an operation fails")
    assert obj[fk.NAMES_KEY] == names_before
    assert np.array(memoryview(obj[fk.ROWS_KEY]), dtype=np.float32).tobytes() == rows_before.tobytes()
    back = fk.Store.read(obj)
    assert back.names == kept.names and back.rows.tobytes() == kept.rows.tobytes()
