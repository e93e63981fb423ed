"""docs/panel_annotated.png: the real panel screenshot (docs/panel.png) with its parts labelled.

    .venv/bin/python tools/annotate_panel.py             # writes docs/panel_annotated.png
    .venv/bin/python tools/annotate_panel.py --rows      # prints the rows it found, section by section

docs/panel.png is redrawn from the real Blender GUI by the e2e tests (`REACH_UPDATE_DOCS=1`, see
tests/e2e/test_gui.py; tools/gui_setup.py turns Full Body on so Body Root, Pin and Pull show). The labels
are not placed at fixed pixels: the script finds the panel's rows in the picture (a row is a run of pixel
lines that differ from the panel's background at its left margin), splits them into the four panels at
their headers (a header is where the background turns to a sub-panel's), and labels rows by name from
`SECTIONS`. A redrawn panel at another size, scale or position is labelled the same; a panel whose rows
changed (a row added or removed) makes the script stop and print the rows it found next to the names it
expected: update `SECTIONS` (one name per row, top to bottom) and `PARTS`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "panel.png"
OUT = ROOT / "docs" / "panel_annotated.png"

# The rows of each panel as tools/gui_setup.py shows it (Full Body on, the left forearm's chain active, a
# two-bone chain with a pole): one name per row the picture shows, top to bottom. Aligned widgets (the four
# cone angles, the preset grid) draw as one row.
SECTIONS: dict[str, tuple[str, ...]] = {
    "Reach IK": (
        "Live",
        "Tolerance",
        "Iterations",
        "Roll",
        "Start From",
        "Full Body",
        "Body Root",
        "Solve Now / Bake",
    ),
    "Chains": (
        "chain list",
        "Influence",
        "IK/FK buttons",
        "Solver",
        "Tip Bone",
        "Length",
        "Target",
        "Pole",
        "Pole Angle",
        "Weight",
        "Target Rotation",
        "Pin",
        "Pull",
        "Soft",
        "Stretch",
        "status",
        "Set Up Character",
    ),
    "Joint Limits": ("Cone", "cone angles", "Twist", "twist range", "Presets label", "preset buttons"),
    "Overlay": ("overlay toggles",),
}

# (section, first row, last row, label), top to bottom.
PARTS = (
    ("Reach IK", "Live", "Start From", "Rig settings: Live, Tolerance (world units),\nIterations, Roll, Start From"),
    (
        "Reach IK",
        "Full Body",
        "Body Root",
        "Full Body: solve the chains as one body;\nBody Root: the bone that moves it (the hips)",
    ),
    ("Reach IK", "Solve Now / Bake", "Solve Now / Bake", "Solve Now (rigs with Live off) and Bake"),
    (
        "Chains",
        "chain list",
        "chain list",
        "Chains: checkbox = enabled, icon = solver;\n+ / - / move, Chains from Hierarchy, Symmetrize",
    ),
    (
        "Chains",
        "Influence",
        "IK/FK buttons",
        "Influence (keyable) and the IK/FK buttons:\nSnap IK to Pose, Apply IK to FK, Switch to IK / FK",
    ),
    (
        "Chains",
        "Solver",
        "Target Rotation",
        "The active chain: solver, tip bone, length,\ntarget and pole (Empties or bones), Pole Angle,\n"
        "Weight, Target Rotation",
    ),
    (
        "Chains",
        "Pin",
        "Pull",
        "Full Body only: Pin (the body never pulls it\noff its target), Pull (how much it moves the body)",
    ),
    ("Chains", "Soft", "Stretch", "Soft and Stretch (keyable)"),
    ("Chains", "status", "status", "Status: iterations, residual, Reached,\nor in red why not (with a Fix button)"),
    ("Chains", "Set Up Character", "Set Up Character", "Set Up Character: a humanoid in one click"),
    (
        "Joint Limits",
        "Cone",
        "twist range",
        "Joint Limits of the active bone:\nelliptical cone (four angles) and twist range",
    ),
    (
        "Joint Limits",
        "Presets label",
        "preset buttons",
        "Limit presets: Ball, Hinge, Shoulder,\nKnee / Elbow, Spine",
    ),
    ("Overlay", "overlay toggles", "overlay toggles", "Overlay: draw chains, cones, target links"),
)

MARGIN_X = 9  # a column inside every panel's left margin: the panel's background, never a widget
TABS = 36  # the sidebar's tab strip at the right (Item, Tool, View, Reach IK): not part of any row
MIN_ROW = 4  # lines: thinner runs are a widget's shadow or a panel's edge, not a row


def find_rows(gray: np.ndarray) -> list[tuple[int, int, float]]:
    """Runs of pixel lines that differ from the background at the left margin: (top, bottom, background)."""
    height, width = gray.shape
    background = gray[:, MARGIN_X]
    content = gray[:, MARGIN_X + 1 : width - TABS]
    blank = (np.abs(content - background[:, None]) <= 4 / 255).all(axis=1)
    rows: list[tuple[int, int, float]] = []
    y = 0
    while y < height:
        if blank[y]:
            y += 1
            continue
        top = y
        while y < height and not blank[y]:
            y += 1
        if y - top >= MIN_ROW:
            rows.append((top, y - 1, float(background[(top + y - 1) // 2])))
    return rows


def split_sections(rows: list[tuple[int, int, float]]) -> dict[str, list[tuple[int, int]]]:
    """The rows under each panel's header. The first row is the main panel's header; a sub-panel's header is
    a row whose background differs from the next row's (a sub-panel's body is darker than its header)."""
    names = list(SECTIONS)
    found: dict[str, list[tuple[int, int]]] = {name: [] for name in names}
    current = 0
    for i, (top, bottom, bg) in enumerate(rows):
        if i == 0:
            continue  # the "Reach IK" header
        following = rows[i + 1][2] if i + 1 < len(rows) else bg
        if abs(following - bg) > 2 / 255 and bg > following:
            current += 1
            if current >= len(names):
                break
            continue
        found[names[current]].append((top, bottom))
    return found


def locate(image: np.ndarray) -> dict[tuple[str, str], tuple[int, int]] | str:
    """Each row's pixel span by (section, row name), or why the picture does not match `SECTIONS`."""
    gray = image[..., :3].mean(axis=2)
    found = split_sections(find_rows(gray))
    problems = []
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for section, names in SECTIONS.items():
        rows = found[section]
        if len(rows) != len(names):
            listed = ", ".join(f"{top}-{bottom}" for top, bottom in rows)
            problems.append(
                f"{section}: {len(names)} rows expected ({', '.join(names)}), {len(rows)} found at lines {listed}"
            )
            continue
        spans.update({(section, name): row for name, row in zip(names, rows, strict=True)})
    return "\n".join(problems) if problems else spans


def main(argv: list[str]) -> int:
    image = plt.imread(SOURCE)
    located = locate(image)
    if "--rows" in argv:
        gray = image[..., :3].mean(axis=2)
        for section, rows in split_sections(find_rows(gray)).items():
            print(section, rows)
    if isinstance(located, str):
        print(f"{SOURCE}: its rows do not match SECTIONS (update SECTIONS and PARTS):\n{located}", file=sys.stderr)
        return 1
    height, width = image.shape[:2]
    dpi = 100
    label_width = 370
    fig = plt.figure(figsize=((width + label_width) / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width + label_width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    fig.patch.set_facecolor("#f7f7f7")
    ax.imshow(image, extent=(0, width, height, 0))
    for n, (section, first, last, label) in enumerate(PARTS, start=1):
        top, bottom = located[(section, first)][0], located[(section, last)][1]
        top, bottom = top + 2, bottom - 2  # inside the rows: neighbouring brackets stay apart
        x = width + 6
        ax.plot([x, x], [top, bottom], color="#e8590c", lw=2.5, solid_capstyle="butt")
        ax.plot([x - 5, x], [top, top], color="#e8590c", lw=2)
        ax.plot([x - 5, x], [bottom, bottom], color="#e8590c", lw=2)
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
    sys.exit(main(sys.argv[1:]))
