"""docs/panel_annotated.png: the real panel screenshot (docs/panel.png) with its parts labelled.

    .venv/bin/python tools/annotate_panel.py

docs/panel.png is redrawn from the real Blender GUI by the e2e tests (`REACH_UPDATE_DOCS=1`, see
tests/e2e/test_gui.py). The labels below are placed by pixel rows of that picture: when a redrawn panel has
another size, the script stops and says so (check the rows against the new picture, then update `SIZE`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "panel.png"
OUT = ROOT / "docs" / "panel_annotated.png"
SIZE = (291, 1121)  # width, height of the panel.png these rows were read from

# (first row, last row, label): pixel rows of docs/panel.png, top to bottom.
PARTS = (
    (36, 148, "Rig settings: Live, Tolerance (world units),\nMax Iterations, Roll, Start From"),
    (153, 175, "Solve Now (rigs with Live off) and Bake"),
    (218, 340, "Chains: checkbox = enabled, icon = solver;\n+ / - / move, Chains from Hierarchy, Symmetrize"),
    (366, 430, "Influence (keyable) and the IK/FK buttons:\nSnap IK to Pose, Apply IK to FK, Switch to IK / FK"),
    (
        446,
        632,
        "The active chain: solver, tip bone, length,\ntarget and pole (Empties or bones), Pole Angle,\n"
        "Weight, Target Rotation",
    ),
    (634, 676, "Soft and Stretch (keyable)"),
    (682, 740, "Status: iterations, residual, Reached,\nor in red why not (with a Fix button)"),
    (746, 770, "Set Up Character: a humanoid in one click"),
    (782, 990, "Joint Limits of the active bone:\nelliptical cone (four angles) and twist range"),
    (994, 1066, "Limit presets: Ball, Hinge, Shoulder,\nKnee / Elbow, Spine"),
    (1076, 1121, "Overlay: draw chains, cones, target links"),
)


def main() -> int:
    image = plt.imread(SOURCE)
    height, width = image.shape[:2]
    if (width, height) != SIZE:
        print(
            f"{SOURCE} is {width}x{height}, the labels were placed on {SIZE[0]}x{SIZE[1]}: check PARTS", file=sys.stderr
        )
        return 1
    dpi = 100
    label_width = 370
    fig = plt.figure(figsize=((width + label_width) / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width + label_width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    fig.patch.set_facecolor("#f7f7f7")
    ax.imshow(image, extent=(0, width, height, 0))
    for n, (top, bottom, label) in enumerate(PARTS, start=1):
        x = width + 6
        ax.plot([x, x], [top + 2, bottom - 2], color="#e8590c", lw=2.5, solid_capstyle="butt")
        ax.plot([x - 5, x], [top + 2, top + 2], color="#e8590c", lw=2)
        ax.plot([x - 5, x], [bottom - 2, bottom - 2], color="#e8590c", lw=2)
        middle = (top + bottom) / 2
        ax.text(
            x + 10,
            middle,
            f"{n}",
            color="white",
            fontsize=9,
            fontweight="bold",
            ha="center",
            va="center",
            bbox={"boxstyle": "circle,pad=0.25", "fc": "#e8590c", "ec": "none"},
        )
        ax.text(x + 22, middle, label, fontsize=8.6, va="center", ha="left", color="#222222", linespacing=1.25)
    fig.savefig(OUT, dpi=dpi, facecolor=fig.get_facecolor())
    plt.close(fig)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
