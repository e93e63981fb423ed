"""The extension registers everything it promises and, once disabled, leaves nothing behind."""

from __future__ import annotations

from types import ModuleType

import bpy
import conftest


def _ours() -> dict[str, list[str]]:
    """Everything of Reach IK's that can be registered, found by inspecting Blender (not our lists)."""
    found: dict[str, list[str]] = {}
    found["classes"] = [name for name in dir(bpy.types) if name.startswith(("REACH_", "VIEW3D_PT_reach", "Reach"))]
    found["properties"] = [
        f"{t.__name__}.reach_ik" for t in (bpy.types.Object, bpy.types.PoseBone) if hasattr(t, "reach_ik")
    ]
    found["handlers"] = [
        f"{kind}:{fn.__module__}.{fn.__name__}"
        for kind in dir(bpy.app.handlers)
        if not kind.startswith("_") and isinstance(getattr(bpy.app.handlers, kind), list)
        for fn in getattr(bpy.app.handlers, kind)
        if "reach_ik" in getattr(fn, "__module__", "")
    ]
    found["operators"] = [name for name in dir(bpy.ops.reach)]
    return found


def test_enabled_as_extension(addon: ModuleType) -> None:
    assert addon.__name__ == conftest.ADDON, "the add-on must run as bl_ext.<repo>.reach_ik"
    assert conftest.ADDON in bpy.context.preferences.addons
    ours = _ours()
    assert "REACH_OT_solve" in ours["classes"], ours
    assert ours["properties"] == ["Object.reach_ik", "PoseBone.reach_ik"], ours
    assert any("depsgraph_update_post" in h for h in ours["handlers"]), ours
    assert any("frame_change_post" in h for h in ours["handlers"]), ours
    assert "solve" in ours["operators"], ours


def test_disable_leaves_nothing_registered() -> None:
    conftest.disable_addon()
    try:
        left = _ours()
        assert not any(left.values()), f"still registered after disabling Reach IK: {left}"
        # The CLI command must be gone too: registering the same id again succeeds only if it was freed.
        handle = bpy.utils.register_cli_command("reach_ik", lambda argv: 0)
        bpy.utils.unregister_cli_command(handle)
    finally:
        conftest.enable_addon()
    assert "REACH_OT_solve" in _ours()["classes"], "re-enabling must register again"


def test_settings_defaults() -> None:
    arm = bpy.data.armatures.new("Arm")
    obj = bpy.data.objects.new("Rig", arm)
    s = obj.reach_ik
    assert (s.live, s.max_iterations, s.roll_mode, s.start_from) == (True, 30, "KEEP", "CURRENT")
    assert abs(s.tolerance - 0.001) < 1e-9
    chain = s.chains.add()
    assert (chain.enabled, chain.solver, chain.chain_length, chain.weight) == (True, "FABRIK", 2, 1.0)


def test_user_resources_are_temporary() -> None:
    """bpy must start with BLENDER_USER_RESOURCES in a temp folder: the user's own config is never touched."""
    import tempfile

    user = bpy.utils.resource_path("USER")
    assert user.startswith(tempfile.gettempdir()), f"bpy's user folder is {user}, not a temporary one"
