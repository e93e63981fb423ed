"""Live solving: persistent depsgraph/frame handlers that re-solve armatures whose inputs changed."""

from __future__ import annotations

import bpy
from bpy.app.handlers import persistent

# Armatures (by session uid) whose settings changed since their last solve.
_dirty: set[int] = set()


def mark_dirty(obj: bpy.types.Object) -> None:
    _dirty.add(obj.session_uid)


@persistent
def on_depsgraph_update(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    pass


@persistent
def on_frame_change(scene: bpy.types.Scene, depsgraph: bpy.types.Depsgraph) -> None:
    pass


def register() -> None:
    bpy.app.handlers.depsgraph_update_post.append(on_depsgraph_update)
    bpy.app.handlers.frame_change_post.append(on_frame_change)


def unregister() -> None:
    # Removed by reference, never by name: another add-on may use the same function names.
    for handlers, fn in (
        (bpy.app.handlers.frame_change_post, on_frame_change),
        (bpy.app.handlers.depsgraph_update_post, on_depsgraph_update),
    ):
        while fn in handlers:
            handlers.remove(fn)
    _dirty.clear()
