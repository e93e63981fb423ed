"""The bpy boundary: Blender data -> arrays -> solvers -> arrays -> Blender data.

Operators and panels call into this package; nothing in `solvers/` knows Blender exists.
"""

from __future__ import annotations

from . import live, props


def register() -> None:
    props.register()
    live.register()


def unregister() -> None:
    live.unregister()
    props.unregister()
