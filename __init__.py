"""Reach IK: FABRIK, CCD and analytic two-bone IK for Blender armatures, with elliptical cone limits.

The package root only registers. Submodules register in dependency order (properties before the
operators and panels that use them) and unregister in reverse, so a failed enable leaves nothing behind.
"""

from __future__ import annotations

from types import ModuleType

from . import operators, rig, ui

# glTF's exporter calls these by name on every enabled add-on's package (rig/export.py).
from .rig.export import glTF2_post_export_callback, glTF2_pre_export_callback

# Order matters: property groups first (operators and panels read them), the CLI command last.
_modules: tuple[ModuleType, ...] = (rig, operators, ui)
__all__ = ["glTF2_post_export_callback", "glTF2_pre_export_callback", "register", "unregister"]


def register() -> None:
    done: list[ModuleType] = []
    try:
        for module in _modules:
            module.register()
            done.append(module)
    except Exception:
        # Roll back what did register, so a half-enabled add-on never lingers in the session.
        for module in reversed(done):
            module.unregister()
        raise


def unregister() -> None:
    for module in reversed(_modules):
        module.unregister()
