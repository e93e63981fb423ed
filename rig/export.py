"""Exports that sample the animation carry each frame's live pose: the render's temporary bake around them.

glTF calls `glTF2_pre_export_callback` / `glTF2_post_export_callback` of every enabled add-on's package
(io_scene_gltf2, `export_settings['pre_export_callbacks']`): the package root re-exports the two below, so
`export_scene.gltf` in any animation mode exports the solved pose with nothing to do. The armature's action
during the export is a baked copy carrying the user's action's name (a rig with no action gets
'<armature>Action'), so glTF's Actions mode writes the animation under the name the user knows.

FBX, Alembic and any other exporter have no such hook: `baked(scene)` does the same around any code, e.g.
`with baked(bpy.context.scene): bpy.ops.export_scene.fbx(...)`; from the GUI, File > Export > ... with Live IK
(`operators/export.py`) runs FBX, Alembic or USD inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import bpy

from . import render


@contextmanager
def baked(scene: bpy.types.Scene) -> Iterator[list[str]]:
    """Every live rig of `scene` plays a temporary bake of the scene's range inside the block (the names of
    the rigs baked are yielded); everything is put back as it was afterwards, also when the block raises."""
    render.prepare(scene, names=True)
    try:
        yield render.baked()
    finally:
        render.restore()


def glTF2_pre_export_callback(_export_settings: object) -> None:  # the name glTF looks for
    scene = bpy.context.scene
    if scene is not None and render.render_rigs(scene):
        render.prepare(scene, names=True)
        # glTF calls the post callback only when the export went through: if it raises, the next turn of the
        # event loop puts everything back (`restore` does nothing when there is nothing to put back).
        bpy.app.timers.register(render.restore, first_interval=0.0)


def glTF2_post_export_callback(_export_settings: object) -> None:
    render.restore()
