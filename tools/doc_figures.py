"""Draw the README's explanatory pictures from the solvers themselves (numpy + matplotlib, no Blender).

.venv/bin/python tools/doc_figures.py      # writes docs/roll_modes.png, docs/cones.png and docs/soft.png
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solvers import ChainProblem, soft_distance, solve_fabrik, solve_two_bone  # noqa: E402
from solvers.limits import clamp_cone, cone_contains, cone_ring  # noqa: E402

BONE = "#2b4c7e"
TARGET = "#2e9e44"
POLE = "#b03a8a"
CONE = "#d9822b"


def frame_along(y: np.ndarray, up: np.ndarray) -> np.ndarray:
    y = y / np.linalg.norm(y)
    x = np.cross(y, up)
    x /= np.linalg.norm(x)
    return np.stack([x, y, np.cross(x, y)], axis=1)


def arm(n: int = 2, bend: float = 0.25) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An arm along +X from the origin, slightly bent toward -Y (an elbow pointing back)."""
    pts = [np.zeros(3)]
    for i in range(n):
        pts.append(pts[-1] + np.array([1.0, bend * (1 if i == 0 else -1), 0.0]))
    pos = np.array(pts)
    frames = np.stack([frame_along(pos[i + 1] - pos[i], np.array([0, 0, 1.0])) for i in range(n)])
    offsets = np.array([[0.0, np.linalg.norm(pos[i + 1] - pos[i]), 0.0] for i in range(n)])
    return pos, frames, offsets


def solve(kind: str, target: np.ndarray, pole: np.ndarray | None = None, roll: str = "KEEP") -> np.ndarray:
    pos, frames, offsets = arm()
    base = frames[0]
    ref = np.stack([np.eye(3), frames[0].T @ frames[1]])
    problem = ChainProblem(
        positions=pos[None],
        frames=frames[None],
        offsets=offsets[None],
        ref_local=ref[None],
        base=base[None],
        targets=target[None],
        poles=None if pole is None else pole[None],
        roll_mode=roll,
    )
    result = (solve_two_bone if kind == "TWO_BONE" else solve_fabrik)(problem)
    return result.positions[0]


def draw_chain(ax: plt.Axes, pts: np.ndarray, color: str = BONE, alpha: float = 1.0) -> None:
    ax.plot(*pts.T, color=color, lw=3, alpha=alpha, solid_capstyle="round")
    ax.scatter(*pts.T, color=color, s=12, alpha=alpha)


def roll_modes(path: Path) -> None:
    fig = plt.figure(figsize=(13, 4.4), dpi=110)
    target = np.array([1.2, 0.0, 0.6])
    ax = fig.add_subplot(1, 3, 1, projection="3d")
    for pole, tone in ((np.array([0.8, -1.0, 0.2]), 1.0), (np.array([0.6, 0.2, 1.4]), 0.55)):
        pts = solve("TWO_BONE", target, pole)
        draw_chain(ax, pts, alpha=tone)
        ax.scatter(*pole, marker="D", color=POLE, s=30, alpha=tone)
        ax.plot(*np.stack([pts[1], pole]).T, color=POLE, lw=0.8, ls=":", alpha=tone)
    ax.scatter(*target, marker="x", color=TARGET, s=60, linewidths=2)
    ax.set_title("A pole fixes the bend plane\n(same target, two poles)", fontsize=10)
    ax = fig.add_subplot(1, 3, 2, projection="3d")
    for ang, tone in ((0.0, 1.0), (70.0, 0.75), (140.0, 0.5), (200.0, 0.35)):
        a = math.radians(ang)
        t = np.array([1.3 * math.cos(a), 1.3 * math.sin(a) * 0.9, 0.5 * math.sin(a)])
        pts = solve("TWO_BONE", t, roll="NATURAL")
        draw_chain(ax, pts, alpha=tone)
        ax.scatter(*t, marker="x", color=TARGET, s=45, linewidths=2, alpha=tone)
    ax.scatter(0, 0, 0, color="black", s=25)
    ax.set_title("'NATURAL': the elbow rolls with the target\nlike a shoulder (front, side, behind)", fontsize=10)
    ax = fig.add_subplot(1, 3, 3, projection="3d")
    pole = np.array([0.9, -1.0, 0.0])
    for t, tone, label in (
        (np.array([2.35, 0.3, 0.35]), 1.0, "too far: straight,\nroot fixed"),
        (np.array([1.3, 0.3, 0.5]), 0.7, "reachable: exact"),
        (np.array([0.25, 0.1, 0.1]), 0.45, "too close: folded"),
    ):
        pts = solve("TWO_BONE", t, pole)
        draw_chain(ax, pts, alpha=tone)
        ax.scatter(*t, marker="x", color=TARGET, s=50, linewidths=2, alpha=tone)
        ax.text(*(t + np.array([0.0, 0.0, 0.15])), label, fontsize=7, alpha=max(tone, 0.7), ha="right")
    ax.scatter(0, 0, 0, color="black", s=25)
    ax.set_title("Two-bone: exact when reachable, defined\nwhen not (never NaN, the root never moves)", fontsize=10)
    for ax in fig.axes:
        ax.view_init(elev=20, azim=-60)
        ax.set_xlim(-1.5, 2.6)
        ax.set_ylim(-1.5, 1.5)
        ax.set_zlim(-1.0, 1.5)
        ax.set_box_aspect((4.1, 3.0, 2.5), zoom=1.3)
        ax.set_axis_off()
    fig.subplots_adjust(left=0, right=1, bottom=0.02, top=0.9, wspace=0.02)
    fig.savefig(path)
    plt.close(fig)


def sphere(ax: plt.Axes) -> None:
    u, v = np.mgrid[0 : 2 * np.pi : 30j, 0 : np.pi : 16j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.cos(v), np.sin(u) * np.sin(v), color="#cccccc", lw=0.4)
    ax.quiver(0, 0, 0, 0, 1.25, 0, color="black", lw=1.2, arrow_length_ratio=0.08)
    ax.text(0, 1.35, 0, "+Y (bone)", fontsize=8)
    ax.text(1.25, 0, 0, "right +X", fontsize=7)
    ax.text(0, 0, 1.2, "up +Z", fontsize=7)


def cones(path: Path) -> None:
    deg = np.radians
    fig = plt.figure(figsize=(13, 4.6), dpi=110)
    shapes = [
        ("circular 40°", [40, 40, 40, 40], "#d9822b"),
        ("elliptical: up 50 down 15\nleft 25 right 70", [50, 15, 25, 70], "#2b7bb9"),
        ("wide: 150° / 100° sides", [100, 100, 150, 150], "#8a5cc2"),
        ("hinge (left = right = 0)", [80, 60, 0, 0], "#2e9e44"),
    ]
    ax = fig.add_subplot(1, 3, 1, projection="3d")
    sphere(ax)
    for label, c, col in shapes[:2]:
        ring = cone_ring(deg(c), 96)
        ax.plot(*ring.T, color=col, lw=2, label=label)
    ax.set_title("Four half-angles, one quarter-ellipse each\n(measured as swing angles from +Y)", fontsize=10)
    ax.legend(loc="lower left", fontsize=7, frameon=False)
    ax = fig.add_subplot(1, 3, 2, projection="3d")
    sphere(ax)
    for label, c, col in shapes[2:]:
        ring = cone_ring(deg(c), 128)
        ax.plot(*ring.T, color=col, lw=2, label=label)
    ax.set_title("Up to 180°, half-cones and hinges", fontsize=10)
    ax.legend(loc="lower left", fontsize=7, frameon=False)
    ax = fig.add_subplot(1, 3, 3, projection="3d")
    sphere(ax)
    cone = deg([50, 15, 25, 70])
    ring = cone_ring(cone, 128)
    ax.plot(*ring.T, color="#2b7bb9", lw=2)
    rng = np.random.default_rng(3)
    d = rng.normal(size=(120, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    d = d[~cone_contains(d, np.tile(cone, (len(d), 1)))][:40]
    c = clamp_cone(d, np.tile(cone, (len(d), 1)))
    ax.scatter(*d.T, color="#d1342f", s=8)
    for a, b in zip(d, c, strict=True):
        # The geodesic from each outside direction to its clamp: the shortest way onto the cone.
        t = np.linspace(0, 1, 12)[:, None]
        arc = (1 - t) * a + t * b
        arc /= np.linalg.norm(arc, axis=1, keepdims=True)
        ax.plot(*arc.T, color="#777777", lw=0.7)
    ax.scatter(*c.T, color="#2b7bb9", s=8)
    ax.set_title("Outside directions (red) move to the nearest\nboundary direction on the sphere (exact)", fontsize=10)
    for ax in fig.axes:
        ax.view_init(elev=22, azim=-50)
        ax.set_box_aspect((1, 1, 1), zoom=1.2)
        ax.set_axis_off()
    fig.subplots_adjust(left=0, right=1, bottom=0, top=0.88, wspace=0.0)
    fig.savefig(path)
    plt.close(fig)


def knee_sweep(d: np.ndarray, soft: float, stretch: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Knee bend (degrees) and tip distance of the doc arm (two bones, L = 2) for targets at distances `d`
    along a fixed line, solved by the two-bone solver with `soft`; with `stretch` the bones lengthen as the
    rig core lengthens them (d / soft(d), up to `stretch`)."""
    pos, frames, offsets = arm()
    k = d.size
    length = float(np.linalg.norm(offsets, axis=1).sum())
    direction = np.array([0.9, 0.3, 0.1]) / np.linalg.norm([0.9, 0.3, 0.1])
    natural = np.minimum(soft_distance(d, np.full(k, length), np.full(k, soft)), length)
    rho = np.clip(d / natural, 1.0, stretch)
    problem = ChainProblem(
        positions=np.tile(pos, (k, 1, 1)) * rho[:, None, None],
        frames=np.tile(frames, (k, 1, 1, 1)),
        offsets=np.tile(offsets, (k, 1, 1)) * rho[:, None, None],
        ref_local=np.tile(np.stack([np.eye(3), frames[0].T @ frames[1]]), (k, 1, 1, 1)),
        base=np.tile(frames[0], (k, 1, 1)),
        targets=d[:, None] * direction,
        poles=np.tile(np.array([0.5, -1.0, 0.0]), (k, 1)),
        soft=np.full(k, soft),
        stretch=rho,
        tolerance=1e-9,
    )
    p = solve_two_bone(problem).positions
    a, b = p[:, 1] - p[:, 0], p[:, 2] - p[:, 1]
    cos = np.einsum("ki,ki->k", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))), np.linalg.norm(p[:, 2] - p[:, 0], axis=1)


def soft_curve(path: Path) -> None:
    """Knee angle and reach against the target's distance: Soft 0 (the hard law of cosines) and Soft 0.1."""
    _, _, offsets = arm()
    length = float(np.linalg.norm(offsets, axis=1).sum())
    d = np.linspace(0.6, 1.25, 1301) * length
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.0), dpi=110)
    cases = (
        ("Soft 0 (hard)", 0.0, 1.0, "#d1342f", "-"),
        ("Soft 0.1", 0.1, 1.0, BONE, "-"),
        ("Soft 0.1 + Stretch 1.2", 0.1, 1.2, TARGET, "--"),
    )
    for label, soft, stretch, color, style in cases:
        knee, reach = knee_sweep(d, soft, stretch)
        left.plot(d / length, knee, color=color, ls=style, lw=2, label=label)
        right.plot(d / length, reach / length, color=color, ls=style, lw=2, label=label)
    for ax in (left, right):
        ax.axvline(1.0, color="#999999", lw=0.8, ls=":")
        ax.axvline(0.9, color="#999999", lw=0.8, ls=":")
        ax.set_xlabel("target distance from the root / chain length L")
        ax.grid(alpha=0.25)
        ax.legend(fontsize=8, frameon=False)
    left.set_ylabel("knee bend (degrees, 0 = straight)")
    left.set_title("Hard IK snaps the knee straight at L (the pop);\nSoft 0.1 eases it out from 0.9 L", fontsize=10)
    right.set_ylabel("tip distance from the root / L")
    right.set_title("Soft trails the target near full extension;\nStretch lengthens the bones to reach it", fontsize=10)
    right.plot(d / length, d / length, color="#999999", lw=0.8, ls=":")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    docs = ROOT / "docs"
    docs.mkdir(exist_ok=True)
    roll_modes(docs / "roll_modes.png")
    cones(docs / "cones.png")
    soft_curve(docs / "soft.png")
    print(docs / "roll_modes.png")
    print(docs / "cones.png")
    print(docs / "soft.png")


if __name__ == "__main__":
    main()
