"""The sidebar panels' poll() and draw(), run against a recording layout that checks every name it is given.

A real UI layout needs a window (not available headless), so `Recorder` stands in for it: each `prop` must
name a real RNA property of its data, each `operator` a registered operator (and each property set on it a
real operator property), each icon a real icon, each `template_list` a registered UIList. The draw code then
runs for real on the wheel's context.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import bpy
import bpy_session
import pytest
import rigs

panel = bpy_session.submodule("ui.panel")
ICONS = set(bpy.types.UILayout.bl_rna.functions["label"].parameters["icon"].enum_items.keys())


class _OpProps:
    def __init__(self, idname: str) -> None:
        group, name = idname.split(".")
        op = getattr(getattr(bpy.ops, group), name)
        object.__setattr__(self, "_props", set(op.get_rna_type().properties.keys()))
        object.__setattr__(self, "_idname", idname)

    def __setattr__(self, key: str, value: Any) -> None:
        assert key in self._props, f"{self._idname} has no property '{key}'"


class Recorder:
    """A UILayout stand-in that validates names and records (method, text) calls."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        self.__dict__["log"] = log

    def __setattr__(self, key: str, value: Any) -> None:
        assert key in bpy.types.UILayout.bl_rna.properties, f"UILayout has no attribute '{key}'"
        self.__dict__[key] = value

    def __getattr__(self, name: str) -> Any:
        assert name in bpy.types.UILayout.bl_rna.functions, f"UILayout has no method '{name}'"

        def method(*args: Any, **kw: Any) -> Any:
            icon = kw.get("icon")
            if icon is not None:
                assert icon in ICONS, f"unknown icon '{icon}' in {name}()"
            if name in ("prop", "prop_search"):
                data, prop = args[0], args[1]
                assert prop in data.bl_rna.properties, f"{data.bl_rna.identifier} has no property '{prop}'"
            if name == "prop_search":
                sdata, sprop = args[2], args[3]
                assert sprop in sdata.bl_rna.properties, f"{sdata.bl_rna.identifier} has no '{sprop}'"
            if name == "template_list":
                assert hasattr(bpy.types, args[0]), f"UIList {args[0]} is not registered"
            text = kw.get("text", args[1] if name in ("prop", "prop_search") else "")
            self.log.append((name, str(text)))
            if name == "operator":
                self.log.append(("op", args[0]))
                return _OpProps(args[0])
            return Recorder(self.log)

        return method


def _draw(cls: type) -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = []
    cls.draw(SimpleNamespace(layout=Recorder(log)), bpy.context)
    return log


def _texts(log: list[tuple[str, str]]) -> str:
    return " | ".join(t for _, t in log)


SUBPANELS = ("VIEW3D_PT_reach_ik_chains", "VIEW3D_PT_reach_ik_limits", "VIEW3D_PT_reach_ik_overlay")


def test_panels_are_registered_in_the_reach_ik_tab() -> None:
    for name in ("VIEW3D_PT_reach_ik", *SUBPANELS):
        cls = getattr(bpy.types, name)
        assert (cls.bl_space_type, cls.bl_region_type, cls.bl_category) == ("VIEW_3D", "UI", "Reach IK"), name
    assert hasattr(bpy.types, "REACH_UL_chains")


def test_hint_without_an_armature() -> None:
    log = _draw(panel.VIEW3D_PT_reach_ik)
    assert "Select an armature" in _texts(log), log
    for name in SUBPANELS:
        assert not getattr(panel, name).poll(bpy.context), f"{name} must hide without an armature"
    mesh = bpy.data.objects.new("Cube", bpy.data.meshes.new("Cube"))
    bpy.context.scene.collection.objects.link(mesh)
    bpy.context.view_layer.objects.active = mesh
    assert "Select an armature" in _texts(_draw(panel.VIEW3D_PT_reach_ik))


def test_hint_in_edit_mode() -> None:
    rig = rigs.chain_rig(2)
    bpy.context.view_layer.objects.active = rig
    bpy.ops.object.mode_set(mode="EDIT")
    try:
        assert "Switch to Object or Pose Mode" in _texts(_draw(panel.VIEW3D_PT_reach_ik))
        assert not panel.VIEW3D_PT_reach_ik_chains.poll(bpy.context)
    finally:
        bpy.ops.object.mode_set(mode="OBJECT")


def test_rig_settings_and_buttons() -> None:
    rig = rigs.chain_rig(2)
    bpy.context.view_layer.objects.active = rig
    log = _draw(panel.VIEW3D_PT_reach_ik)
    props = [t for m, t in log if m == "prop"]
    assert {"live", "tolerance", "roll_mode", "start_from"} <= set(props) | {"live"}, log
    ops = [t for m, t in log if m == "op"]
    assert ops == ["reach.solve", "reach.bake"], ops
    for name in SUBPANELS:
        assert getattr(panel, name).poll(bpy.context), f"{name} must show for an armature"


def test_chain_list_and_active_chain() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    assert "then +" in _texts(log), "with no chains the panel says how to add one"
    ops = [t for m, t in log if m == "op"]
    assert ops[:7] == [
        "reach.auto_setup",  # first, and large, while the rig has no chains
        "reach.chain_add",
        "reach.chain_remove",
        "reach.chain_move",
        "reach.chain_move",
        "reach.chains_from_hierarchy",
        "reach.symmetrize",
    ], ops
    ch = rigs.add_chain(rig, "b2", 3, None)
    ch.is_valid, ch.message = False, "no target: pick an object (normally an Empty) for the tip to reach"
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    assert ("prop_search", "Tip Bone") in log
    assert "no target: pick an object" in _texts(log), "an invalid chain shows its message"
    ch.is_valid, ch.message, ch.iterations = True, "", 3
    assert "Iterations: 3" in _texts(_draw(panel.VIEW3D_PT_reach_ik_chains))
    # The list rows: enabled toggle, name with the solver icon, a warning icon when invalid.
    for valid in (True, False):
        ch.is_valid = valid
        log = []
        panel.REACH_UL_chains.draw_item(
            None, bpy.context, Recorder(log), rig.reach_ik, ch, 0, rig.reach_ik, "active_chain_index"
        )
        assert ("prop", "") in log, "the enabled toggle"
        assert (("label", "") in log) == (not valid), f"a warning icon exactly when invalid: {log}"


def test_limits_panel_and_presets() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    rig.data.bones.active = None
    assert "Click a bone" in _texts(_draw(panel.VIEW3D_PT_reach_ik_limits))
    rig.data.bones.active = rig.data.bones["b1"]
    log = _draw(panel.VIEW3D_PT_reach_ik_limits)
    props = {t for m, t in log if m == "prop"}
    assert {"Cone", "Up", "Down", "Left", "Right", "Twist", "Min", "Max"} <= props, props
    presets = [t for m, t in log if m == "operator"]
    assert presets == ["Ball", "Hinge", "Shoulder", "Knee / Elbow", "Spine"], presets


@pytest.mark.parametrize("name", ["VIEW3D_PT_reach_ik_overlay"])
def test_overlay_toggles(name: str) -> None:
    rig = rigs.chain_rig(2)
    bpy.context.view_layer.objects.active = rig
    log = _draw(getattr(panel, name))
    assert [t for m, t in log if m == "prop"] == ["show_chains", "show_limits", "show_targets"]


def test_bone_pickers_and_the_convert_button() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    empty = rigs.empty("t", (0, 0, 3))
    ch = rigs.add_chain(rig, "b2", 2, empty)
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    assert ("prop_search", "Target Bone") not in log and ("prop_search", "Pole Bone") not in log, "Empties: no bones"
    assert "reach.convert_constraints" not in [t for m, t in log if m == "op"], "no IK constraints: no button"
    ch.target, ch.pole = rig, rig  # control bones of the rig itself
    rig.pose.bones["b0"].constraints.new("IK")
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    assert ("prop_search", "Target Bone") in log and ("prop_search", "Pole Bone") in log, log
    assert ("prop", "pole_angle") in log
    assert "reach.convert_constraints" in [t for m, t in log if m == "op"]


def test_active_chain_shows_influence_and_the_ik_fk_buttons_first() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    rigs.add_chain(rig, "b2", 2, rigs.empty("t", (0, 0, 3)))
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    props = [t for m, t in log if m == "prop"]
    assert "influence" in props and props.index("influence") < props.index("solver"), (
        f"Influence comes first in the chain's settings: {props}"
    )
    ops = [t for m, t in log if m == "op"]
    assert ops[6:10] == ["reach.snap_to_pose", "reach.apply_to_fk", "reach.switch", "reach.switch"], ops
    assert ops[-1] == "reach.auto_setup", "with chains, Set Up Character is last (it adds what is missing)"
    texts = [t for m, t in log if m == "operator"]
    assert texts[-5:-1] == ["Snap IK to Pose", "Apply IK to FK", "Switch to IK", "Switch to FK"], texts


def test_a_chain_refused_for_a_bone_setting_shows_its_fix_button() -> None:
    rig = rigs.chain_rig(3)
    bpy.context.view_layer.objects.active = rig
    ch = rigs.add_chain(rig, "b2", 3, rigs.empty("t", (0.4, 0.3, 3.6)))
    ch.stretch = 1.5  # every bone Inherit Scale 'Full' (Blender's default): refused, fixable
    rigs.update()
    assert not ch.is_valid
    log = _draw(panel.VIEW3D_PT_reach_ik_chains)
    ops = [t for m, t in log if m == "op"]
    assert "reach.fix_chain" in ops, ops
    texts = [t for m, t in log]
    at = texts.index("reach.fix_chain")
    assert texts[at - 1] == "Fix: Inherit Scale 'Aligned' on b1, b2", texts[at - 1]
    assert texts.index(next(t for t in texts if "Inherit Scale 'Full'" in t)) < at, "under the message"
    assert bpy.ops.reach.fix_chain() == {"FINISHED"}
    rigs.update()
    assert ch.is_valid, ch.message
    assert "reach.fix_chain" not in [t for m, t in _draw(panel.VIEW3D_PT_reach_ik_chains) if m == "op"]
    ch.target = None  # refused for something no bone setting fixes: no button
    rigs.update()
    assert not ch.is_valid and "no target" in ch.message, ch.message
    assert "reach.fix_chain" not in [t for m, t in _draw(panel.VIEW3D_PT_reach_ik_chains) if m == "op"]


def _flat(log: list[tuple[str, str]]) -> str:
    """The texts as one line (wrapped labels joined)."""
    return " ".join(t for _, t in log)


def test_the_panel_says_how_playback_is_solved() -> None:
    """The rig panel's playback line (`rig.lookahead.status`): nothing before a rig was played, the frames
    solved ahead once they are, why not when a rig cannot be, and nothing when no chain is on."""
    from test_lookahead import FRAMES, _cmu

    la = bpy_session.submodule("rig.lookahead")
    obj, start = _cmu()
    bpy.context.view_layer.objects.active = obj
    rigs.update()  # (making it active tags the scene: that update lists the scene, not only the rig)
    assert "Playback" not in _flat(_draw(panel.VIEW3D_PT_reach_ik))
    assert la.fill(obj) is None
    text = _flat(_draw(panel.VIEW3D_PT_reach_ik))
    assert f"Playback solved ahead: frames {start}-{start + FRAMES}" in text, text
    obj.update_tag()
    rigs.update()  # an update listed the rig: its frames are checked when things are quiet
    assert "checking the frames solved ahead" in _flat(_draw(panel.VIEW3D_PT_reach_ik))
    obj.pose.bones[obj.reach_ik.chains[0].target_bone].constraints.new("COPY_LOCATION")
    rigs.update()
    assert la.fill(obj) is not None
    text = _flat(_draw(panel.VIEW3D_PT_reach_ik))
    assert "Playback solved frame by frame:" in text and "has constraints" in text, text
    # Every chain off (as a bake leaves them): nothing solves playback, and the line says nothing of it.
    for ch in obj.reach_ik.chains:
        ch.enabled = False
    rigs.update()
    la.fill(obj)
    assert "Playback" not in _flat(_draw(panel.VIEW3D_PT_reach_ik))
