"""In the real Blender GUI, the one-click humanoid with keyed chain bones and controls: Reach IK's idle timer
solves the playback range ahead, and Blender's own Play then takes a frame solved ahead on every frame change
(nothing Blender does during playback drops them), and the chain's status matches the pose Blender shows when
it stops (tests/e2e/gui_playahead.py runs inside Blender)."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, Blender

SCRIPT = ROOT / "tests" / "e2e" / "gui_playahead.py"
DEADLINE = 180


def test_playback_in_the_gui_takes_the_frames_solved_ahead(installed: Blender, tmp_path: Path) -> None:
    result = installed.gui_json(SCRIPT, "REACH_PLAY", tmp_path / "play.json", deadline=DEADLINE)
    assert result["ready"] == 48, result
    changes = result["changes"]
    assert isinstance(changes, int) and changes >= 24, f"Play stepped {changes} frames before its deadline: {result}"
    assert result["taken"] == changes, result
    assert result["ready_after"] == 48, "playback dropped what was solved ahead"
    assert result["valid"], result
    # The status is the pose Blender shows: its residual, and 'reached' only within the tolerance.
    assert abs(result["residual"] - result["miss"]) <= 1e-5 + 1e-3 * result["miss"], result
    if not result["message"]:
        assert result["miss"] <= result["tolerance"] * (1 + 1e-6), result


def test_keyed_controls_loop_in_the_gui_on_the_frames_solved_ahead(installed: Blender, tmp_path: Path) -> None:
    """Only the hands' controls keyed (an animator's rig): the chain bones carry each frame's result to the
    next, the range is solved ahead in that order, and Play, looping, starts the range's first frame over from
    the FK pose (`rig.live.on_frame_change_pre`): from the first loop on, every frame change takes a frame
    solved ahead. (The loop before it started from the pose the set-up left at frame 1, not the FK pose.)"""
    result = installed.gui_json(SCRIPT, "REACH_PLAY", tmp_path / "play_controls.json", deadline=DEADLINE)
    assert result["ready"] == 12, result
    assert isinstance(result["loops"], int) and result["loops"] >= 2, f"Play looped {result['loops']} times: {result}"
    assert isinstance(result["after_loop"], int) and result["after_loop"] >= 12, result
    assert result["taken_after_loop"] == result["after_loop"], result
    assert result["ready_after"] == 12, "playback dropped what was solved ahead"
    assert result["valid"], result
    assert abs(result["residual"] - result["miss"]) <= 1e-5 + 1e-3 * result["miss"], result
