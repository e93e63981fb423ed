"""Render Animation in the real GUI (virtual X screen), with Render > Lock Interface on and off.

`tools/gui_render.py` builds a live two-bone arm reaching for a keyed Empty in the running GUI, presses Render
Animation as the menu does (a render job on its own thread), waits for the end, measures the hand's sphere
in each PNG against the target's projection and records the pose and actions before and after.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Blender

SCRIPT = ROOT / "tools" / "gui_render.py"
DEADLINE = 300


@pytest.mark.parametrize(
    ("lock", "still"),
    [(True, False), (False, False), (False, True)],
    ids=["animation-lock-interface", "animation-unlocked", "F12-unlocked"],
)
def test_gui_render(installed: Blender, tmp_path: Path, lock: bool, still: bool) -> None:
    info_path = tmp_path / "info.json"
    opts = {
        "info": str(info_path),
        "shot": str(tmp_path / "gui.png"),
        "frames": str(tmp_path / "frames"),
        "lock": lock,
        "still": still,
    }
    proc = installed.gui(SCRIPT, "REACH_RENDER", opts, tmp_path / "gui.png", size="1280x800", deadline=DEADLINE)
    log = proc.stdout + proc.stderr
    assert info_path.exists(), f"tools/gui_render.py wrote nothing ({proc.returncode}):\n{log[-4000:]}"
    info = json.loads(info_path.read_text())
    assert info["ok"] and not info["errors"], f"{info['errors']}\n{log[-3000:]}"
    assert info["invoke"] == ["RUNNING_MODAL"], info
    assert info["end"] == "complete", f"the render did not complete: {info}\n{log[-3000:]}"
    assert "Traceback" not in log, log[-4000:]
    assert info["baked"] == ["Rig"] and info["prepared_on_main_thread"] is True, info
    print(f"render_init on the main thread: {info['init_on_main_thread']}, to frame 1: {info['init_to_first_frame_s']}")
    for f, seen in info["frames"].items():
        want = np.array(info["expect"][f])
        assert seen, f"frame {f}: nothing rendered"
        assert np.linalg.norm(np.array(seen) - want) < 1.0, f"frame {f}: hand at {seen}, target at {want} px"
    assert info["after"] == info["before"], "the pose, the actions and the frame are as before the render"
