"""Screenshots of the Set Up Character button before and after one click (README: docs/setup_before.png,
docs/setup_after.png), in the real Blender GUI (BLENDER must be set, with blender-shot beside it).

    BLENDER=../shared/tools/blender .venv/bin/python tools/character_shots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT), str(ROOT / "demo")]

import bpy_session  # noqa: E402

# isort: split
import bpy  # noqa: E402

from demo import character  # noqa: E402
from demo.run_demo import gui_screenshot  # noqa: E402

VIEW = {"location": [0.0, 0.0, 0.95], "distance": 3.6}


def main() -> int:
    bpy_session.enable_addon()
    with tempfile.TemporaryDirectory(prefix="reach_shots_", dir="/tmp") as tmp:
        for when in ("before", "after"):
            bpy.ops.wm.read_homefile(use_factory_startup=True, use_empty=True)
            obj = character.figure()
            if when == "after":
                bpy.context.view_layer.objects.active = obj
                assert bpy.ops.reach.auto_setup() == {"FINISHED"}
                # The left arm's chain active (the set-up leaves the last one made, the neck): the panel then
                # shows the chain of the bone the picture selects.
                chains = obj.reach_ik.chains
                obj.reach_ik.active_chain_index = next(i for i, c in enumerate(chains) if c.name == "arm.L")
            blend = Path(tmp) / f"{when}.blend"
            bpy.ops.wm.save_as_mainfile(filepath=str(blend), copy=True, check_existing=False)
            options = {"armature": obj.name, "bone": "mixamorig:LeftForeArm", "view": VIEW}
            print(gui_screenshot(blend, ROOT / "docs" / f"setup_{when}.png", options))
    return 0


if __name__ == "__main__":
    bpy_session.finish(main())
