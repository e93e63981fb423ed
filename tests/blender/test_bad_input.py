"""Every bad input gives the chain a message that says what to fix, and leaves the pose byte-identical."""

from __future__ import annotations

import math
from collections.abc import Callable

import bpy
import bpy_session
import pytest
import rigs


def _setup() -> tuple[bpy.types.Object, bpy.types.Object]:
    rig = rigs.chain_rig(3)
    target = rigs.empty("T", (0.7, 0.3, 2.1))
    rigs.add_chain(rig, "b2", 3, target)
    rig.pose.bones["b0"].rotation_quaternion = (0.9, 0.1, 0.2, 0.0)
    rig.pose.bones["b1"].rotation_quaternion = (0.95, 0.0, 0.1, 0.3)
    return rig, target


def _delete_target(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    bpy.data.objects.remove(t)


def _unlink_target(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    bpy.context.scene.collection.objects.unlink(t)  # deleted from the scene, still in bpy.data


def _self_target(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.reach_ik.chains[0].target = rig


def _child_of_solved_bone(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    t.parent = rig
    t.parent_type = "BONE"
    t.parent_bone = "b1"


def _renamed_bone(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.data.bones["b2"].name = "renamed"


def _too_long(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.reach_ik.chains[0].chain_length = 7


def _two_bone_length(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.reach_ik.chains[0].solver = "TWO_BONE"


def _nan_target(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    t.location = (math.nan, 0.0, 1.0)


def _inf_rig(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.location = (math.inf, 0.0, 0.0)  # Blender clamps this to FLT_MAX: finite, still broken


def _nan_rig(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.rotation_euler = (0.0, math.nan, 0.0)


def _nonuniform_scale(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.scale = (1.0, 2.0, 1.0)


def _no_target(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.reach_ik.chains[0].target = None


def _no_inherit(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.data.bones["b1"].use_inherit_rotation = False


def _same_tip(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rigs.add_chain(rig, "b2", 2, t, name="again")


def _overlap_ccd(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rigs.add_chain(rig, "b1", 2, rigs.empty("T2", (0, 1, 1)), solver="CCD", name="ccd")


def _zero_scale_bone(rig: bpy.types.Object, t: bpy.types.Object) -> None:
    rig.pose.bones["b1"].scale = (0.0, 0.0, 0.0)


CASES: list[tuple[str, Callable[[bpy.types.Object, bpy.types.Object], None], str]] = [
    ("deleted target", _delete_target, "no target"),
    ("target removed from scene", _unlink_target, "not in the scene"),
    ("target is the rig", _self_target, "armature 'Rig' itself"),
    ("target child of a solved bone", _child_of_solved_bone, "chase itself"),
    # Renamed before the chain was ever checked: nothing recorded where 'b2' was, so it reads as deleted
    # (a chain checked before the rename follows it: test_renames.py).
    ("bone renamed before any check", _renamed_bone, "bone 'b2' is not in 'Rig'"),
    ("chain longer than hierarchy", _too_long, "set it to 3 or less"),
    ("two-bone with length 3", _two_bone_length, "two-bone solver needs a chain length of 2"),
    ("NaN target", _nan_target, "NaN or infinite transform"),
    ("inf armature", _inf_rig, "NaN or infinite transform"),
    ("NaN armature", _nan_rig, "NaN or infinite transform"),
    ("non-uniform scale", _nonuniform_scale, "non-uniform or negative scale"),
    ("no target", _no_target, "no target"),
    ("no inherit rotation", _no_inherit, "Inherit Rotation"),
    ("same tip twice", _same_tip, "shares its tip bone 'b2'"),
    ("non-FABRIK overlap", _overlap_ccd, "only FABRIK chains can share bones"),
    ("zero-scaled bone", _zero_scale_bone, "scaled to zero"),
]


@pytest.mark.parametrize("label,breaker,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_message_and_pose_untouched(
    label: str, breaker: Callable[[bpy.types.Object, bpy.types.Object], None], expected: str
) -> None:
    rig, target = _setup()
    rig.reach_ik.live = False  # break the rig first, then let live solving see it
    breaker(rig, target)
    rigs.update()
    before = rigs.pose_snapshot(rig)
    rig.reach_ik.live = True
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert not ch.is_valid, f"{label}: chain should be invalid"
    assert expected in ch.message, f"{label}: message {ch.message!r} should mention {expected!r}"
    assert rigs.pose_snapshot(rig) == before, f"{label}: the pose must stay byte-identical"
    bpy.context.view_layer.objects.active = rig
    try:
        result = bpy.ops.reach.solve()
    except RuntimeError as exc:  # the operator reports an ERROR (whole rig unusable): bpy.ops raises it
        result = {str(exc)}
        assert expected in str(exc), f"{label}: the operator's error should say {expected!r}: {exc}"
    assert rigs.pose_snapshot(rig) == before, f"{label}: reach.solve must not write either ({result})"


def test_linked_rig_refused(tmp_path: object) -> None:
    from pathlib import Path

    rig, _ = _setup()
    lib = Path(str(tmp_path)) / "lib.blend"
    bpy.data.libraries.write(str(lib), {rig, rig.data, *[c.target for c in rig.reach_ik.chains]})
    bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
    with bpy.data.libraries.load(str(lib), link=True) as (_src, dst):
        dst.objects = ["Rig", "T"]
    linked = bpy.data.objects["Rig"]
    bpy.context.scene.collection.objects.link(linked)
    bpy.context.scene.collection.objects.link(bpy.data.objects["T"])
    assert linked.library is not None and linked.reach_ik.live
    before = rigs.pose_snapshot(linked)
    bpy.data.objects["T"].location.x  # noqa: B018  (linked target: read-only too)
    rigs.update()
    assert rigs.pose_snapshot(linked) == before, "a linked rig's pose is never written by live solving"
    bpy.context.view_layer.objects.active = linked
    with pytest.raises(RuntimeError, match="library override"):
        bpy.ops.reach.solve()
    assert rigs.pose_snapshot(linked) == before, "a linked rig's pose is never written by reach.solve"


def test_one_bad_rig_does_not_stop_another() -> None:
    good = rigs.chain_rig(3, name="Good")
    t = rigs.empty("T", (0.7, 0.3, 2.1))
    rigs.add_chain(good, "b2", 3, t)
    bad = rigs.chain_rig(3, name="Bad")
    rigs.add_chain(bad, "b2", 3, None)  # type: ignore[arg-type]
    t.location = (0.4, 0.4, 2.3)
    rigs.update()
    assert not bad.reach_ik.chains[0].is_valid
    assert float(((rigs.world_tail(good, "b2") - t.location) ** 2).sum()) ** 0.5 <= 1e-3


def test_target_on_root() -> None:
    rig, target = _setup()
    target.location = (0.0, 0.0, 0.0)
    rigs.update()
    ch = rig.reach_ik.chains[0]
    assert ch.is_valid and "out of reach" in ch.message, ch.message


def test_a_broken_target_refuses_only_its_chain(capsys: pytest.CaptureFixture[str]) -> None:
    """A NaN target is its chain's fault: that chain is refused with the message and keeps its pose, the
    rig's other chains are solved (live and by `reach.solve`), and the CLI's check names only that chain."""
    rig = rigs.armature(
        "Two",
        [
            *[(f"a{i}", f"a{i - 1}" if i else None, (0, 0, i), (0, 0, i + 1), i > 0) for i in range(3)],
            *[(f"b{i}", f"b{i - 1}" if i else None, (2, 0, i), (2, 0.2, i + 1), i > 0) for i in range(3)],
        ],
    )
    good, bad = rigs.empty("Good", (0.6, 0.3, 2.3)), rigs.empty("Bad", (2.5, 0.2, 2.2))
    rigs.add_chain(rig, "a2", 3, good, name="good")
    rigs.add_chain(rig, "b2", 3, bad, name="bad")
    rigs.update()
    bones = ["b0", "b1", "b2"]
    before = [tuple(rig.pose.bones[n].rotation_quaternion) for n in bones]
    bad.location.x = math.nan
    good.location = (0.4, 0.5, 2.2)
    rigs.update()
    chains = rig.reach_ik.chains
    assert not chains["bad"].is_valid and "the target 'Bad' has a NaN or infinite transform" in chains["bad"].message
    assert chains["good"].is_valid, chains["good"].message
    assert float(((rigs.world_tail(rig, "a2") - good.location) ** 2).sum()) ** 0.5 <= 1e-3
    assert [tuple(rig.pose.bones[n].rotation_quaternion) for n in bones] == before, "the refused chain keeps its pose"
    good.location = (0.5, 0.4, 2.3)
    rigs.update()
    bpy.context.view_layer.objects.active = rig
    assert bpy.ops.reach.solve() == {"FINISHED"}  # a warning names the refused chain; the others are solved
    assert float(((rigs.world_tail(rig, "a2") - good.location) ** 2).sum()) ** 0.5 <= 1e-3
    cli = bpy_session.submodule("operators.cli")
    capsys.readouterr()
    assert cli.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "INVALID Two / bad" in out and "ok      Two / good" in out, out
