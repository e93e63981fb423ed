"""The bpy boundary: Blender data -> arrays -> solvers -> arrays -> Blender data.

Operators and panels call into this package; nothing in `solvers/` knows Blender exists.
"""

from __future__ import annotations

from . import follow, live, props, render


def register() -> None:
    props.register()
    live.register()
    render.register()


def unregister() -> None:
    render.unregister()
    live.unregister()
    follow.cancel()  # a re-solve scheduled by live solving (rig/follow.py)
    props.unregister()
