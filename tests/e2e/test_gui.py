"""The sidebar panel and the viewport overlay in the real Blender GUI (virtual X screen, software OpenGL).

`blender-shot` (beside BLENDER) starts the GUI with the installed zip, runs tools/gui_setup.py (a small
character rigged with the add-on's own operators, an elbow with a cone limit active, the Reach IK tab open)
and writes a screenshot. The test fails on any Python error from our code in Blender's output, and checks
the picture independently: the sidebar and the viewport are not blank, and the overlay's colours (orange
cones, green chain lines) are on screen. With REACH_UPDATE_DOCS=1 it also writes docs/panel.png and
docs/overlay.png from the same screenshots, and docs/panel_annotated.png (tools/annotate_panel.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Blender

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib reads the screenshots (requirements/dev.txt)")
from matplotlib import image as mpimg  # noqa: E402

SETUP = ROOT / "tools" / "gui_setup.py"


# blender-shot shoots after a fixed wait; ours is only a deadline. The set-up takes the screenshot itself once
# it is drawn and has written its info ("shot" option), however long a loaded machine makes that.
READY_DEADLINE = 180


def _shot(blender: Blender, out: Path, mode: str, size: str, delay: float = 0.0) -> tuple[dict, np.ndarray, str]:
    tool = Path(blender.exe).with_name("blender-shot")
    if not tool.exists():
        pytest.skip(f"no blender-shot beside {blender.exe}: GUI screenshots need it")
    info = out.with_suffix(".json")
    options = json.dumps({"info": str(info), "mode": mode, "shot": str(out), "delay": delay})
    env = dict(os.environ, BLENDER_USER_RESOURCES=str(blender.resources), REAL_BLENDER_QUIET="1")
    proc = subprocess.run(
        [
            str(tool),
            str(out),
            "--size",
            size,
            "--wait",
            str(READY_DEADLINE),
            "--",
            "--enable-event-simulate",
            "--python-expr",
            f"import builtins; builtins.REACH_GUI = {options}",
            "--python",
            str(SETUP),
        ],
        capture_output=True,
        text=True,
        timeout=READY_DEADLINE + 240,  # Blender's start-up and exit come on top of the deadline
        env=env,
        cwd=ROOT,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.exists(), f"blender-shot failed ({proc.returncode}):\n{log[-4000:]}"
    assert info.exists(), f"tools/gui_setup.py wrote no {info.name} within {READY_DEADLINE} s:\n{log[-4000:]}"
    return json.loads(info.read_text()), mpimg.imread(str(out))[..., :3], log


def _our_errors(log: str) -> list[str]:
    """Tracebacks and error lines in Blender's output that come from Reach IK or the set-up script."""
    found = []
    for block in re.split(r"(?=Traceback \(most recent call last\):)", log):
        if block.startswith("Traceback") and re.search(r"reach_ik|gui_setup", block):
            found.append(block[:2000])
    found += [line for line in log.splitlines() if "Error" in line and re.search(r"reach", line, re.I)]
    return found


def test_error_detector_sees_our_tracebacks_only() -> None:
    ours = 'Traceback (most recent call last):\n  File "/x/user_default/reach_ik/ui/overlay.py", line 9\nKeyError'
    theirs = 'Traceback (most recent call last):\n  File "/x/other_addon.py", line 1\nValueError: nope'
    assert _our_errors(f"Blender 4.3\n{theirs}\n{ours}\nBlender quit") == [f"{ours}\nBlender quit"]
    assert _our_errors("Error: Python: reach_ik failed") == ["Error: Python: reach_ik failed"]
    assert not _our_errors(f"Warning: 1 x Draw window\n{theirs}")


def _crop(img: np.ndarray, rect: dict, right: int | None = None) -> np.ndarray:
    """A region of the screenshot; Blender's region y runs up from the window's bottom."""
    h = img.shape[0]
    x1 = rect["x"] + rect["width"] if right is None else right
    return img[h - (rect["y"] + rect["height"]) : h - rect["y"], rect["x"] : x1]


def _overlay_pixels(view: np.ndarray) -> tuple[int, int]:
    r, g, b = view[..., 0], view[..., 1], view[..., 2]
    orange = (r > 0.8) & (g > 0.35) & (g < 0.75) & (b < 0.35)  # cone fans and outlines
    green = (g > 0.85) & (r < 0.55) & (b < 0.65)  # chain lines
    return int(orange.sum()), int(green.sum())


def _check_common(info: dict, log: str) -> None:
    assert not _our_errors(log), "Python errors from Reach IK in Blender's output:\n" + "\n".join(_our_errors(log))
    assert info["ok"] and not info["errors"], f"the GUI set-up failed: {info['errors']}"
    assert info["mode"] == "POSE" and info["active_bone"] == "forearm.L", info
    bad = [c for c in info["chains"] if not c[1]]
    assert not bad, f"chains invalid in the GUI: {bad}"


def _trim_bottom(img: np.ndarray) -> np.ndarray:
    """Drop the empty rows below the last panel (rows equal to the bottom row)."""
    bottom = img[-1]
    rows = np.flatnonzero(np.abs(img - bottom[None]).max(axis=(1, 2)) > 0.02)
    return img[: rows[-1] + 12] if rows.size else img


def test_panel_and_overlay_in_the_gui(installed: Blender, tmp_path: Path) -> None:
    info, img, log = _shot(installed, tmp_path / "panel.png", "panel", "1600x1400")
    _check_common(info, log)
    assert info["tab"] == "Reach IK" and info["panel_draws"] > 0, f"the Reach IK tab is not showing: {info}"
    ui, view_rect = info["regions"]["UI"], info["regions"]["WINDOW"]
    sidebar = _crop(img, ui)
    view = _crop(img, view_rect, right=ui["x"])
    assert sidebar.std() > 0.03, f"the sidebar looks blank (std {sidebar.std():.4f})"
    assert view.std() > 0.02, f"the viewport looks blank (std {view.std():.4f})"
    orange, green = _overlay_pixels(view)
    assert orange > 300, f"no limit cones on screen ({orange} orange pixels)"
    assert green > 300, f"no chain lines on screen ({green} green pixels)"
    if os.environ.get("REACH_UPDATE_DOCS"):
        import matplotlib.pyplot as plt

        panel = _trim_bottom(sidebar)
        plt.imsave(ROOT / "docs" / "panel.png", panel)
        # The labelled copy (docs/panel_annotated.png) from the new picture: its rows are found in it, and a
        # panel whose rows changed stops here with the rows found (update tools/annotate_panel.py's SECTIONS).
        import annotate_panel

        assert annotate_panel.main([]) == 0, "tools/annotate_panel.py could not label the new docs/panel.png"


def test_overlay_closeup_in_the_gui(installed: Blender, tmp_path: Path) -> None:
    # The set-up starts 12 s late, longer than blender-shot's old fixed 10 s wait: the picture must still
    # come after it (a loaded machine is slow the same way).
    info, img, log = _shot(installed, tmp_path / "overlay.png", "overlay", "1400x1000", delay=12.0)
    _check_common(info, log)
    view = _crop(img, info["regions"]["WINDOW"])
    assert view.std() > 0.02, f"the viewport looks blank (std {view.std():.4f})"
    orange, green = _overlay_pixels(view)
    assert orange > 1000 and green > 500, f"the overlay is missing: {orange} orange, {green} green pixels"
    if os.environ.get("REACH_UPDATE_DOCS"):
        import matplotlib.pyplot as plt

        h, w = view.shape[:2]
        plt.imsave(ROOT / "docs" / "overlay.png", view[int(0.04 * h) : int(0.98 * h), int(0.2 * w) : int(0.8 * w)])
