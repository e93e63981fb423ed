"""`blender -b shot.blend -c reach_ik ...`: the headless command for pipelines and farms."""

from __future__ import annotations

import bpy

_handle: object | None = None


def main(argv: list[str]) -> int:
    print("reach_ik: no subcommands yet")
    return 2


def register() -> None:
    global _handle
    # The CLI command API exists from 4.2; registering it is harmless in the GUI.
    _handle = bpy.utils.register_cli_command("reach_ik", main)


def unregister() -> None:
    global _handle
    if _handle is not None:
        bpy.utils.unregister_cli_command(_handle)
        _handle = None
