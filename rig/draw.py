"""Geometry of the viewport overlay, in numpy: cones of limited joints, chain lines, dashed target links.

numpy only (no bpy, no gpu), so the shapes are unit-testable; `ui/overlay.py` reads Blender data, calls these
functions and hands the vertex arrays to the gpu module. Every function returns flat vertex lists ready for a
gpu batch: ``(3 * triangles, 3)`` for 'TRIS' and ``(2 * segments, 3)`` for 'LINES'.

Frames are 3x3 rotations whose columns are the bone's X, Y, Z axes (see docs/design/solvers.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..solvers.limits import cone_ring, cone_violation

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

#: Boundary points per cone: a multiple of 4 puts points exactly on the four extreme directions.
RING_POINTS = 48


def reference_frames(pose_rot: F64, parent: I64, rest_rel: F64) -> F64:
    """Each bone's limit frame: its rest frame carried by its parent's pose (armature space).

    Parameters
    ----------
    pose_rot : (B, 3, 3) posed rotations (scale removed)
    parent : (B,) parent index, -1 for roots (a root's parent frame is the armature's)
    rest_rel : (B, 3, 3) rest rotation relative to the parent's rest rotation
    """
    ref = np.array(rest_rel, dtype=np.float64, copy=True)
    has = parent >= 0
    ref[has] = pose_rot[parent[has]] @ rest_rel[has]
    return ref


_RINGS: dict[tuple[bytes, int], F64] = {}


def _local_rings(cones: F64, n: int) -> F64:
    """`cone_ring` of every cone, cached: while posing only the frames change, not the angles."""
    key = (np.ascontiguousarray(cones).tobytes(), n)
    rings = _RINGS.get(key)
    if rings is None:
        rings = np.stack([cone_ring(c, n) for c in cones])
        if len(_RINGS) >= 16:
            _RINGS.clear()
        _RINGS[key] = rings
    return rings


@dataclass(frozen=True)
class ConeMesh:
    """Translucent fans and their outlines for M cones, plus which cones the current pose violates."""

    fans: F64  # (M * n * 3, 3) triangle vertices
    outlines: F64  # (M * (n + 4) * 2, 3) line vertices: the boundary ring and four spokes per cone
    violated: NDArray[np.bool_]  # (M,) the bone's current direction lies outside its cone
    owner_fans: I64  # (M * n * 3,) cone index of each fan vertex
    owner_lines: I64  # (M * (n + 4) * 2,) cone index of each line vertex

    def split(self, mask: NDArray[np.bool_]) -> tuple[F64, F64]:
        """Fans and outlines of the cones where `mask` (M,) is true."""
        return self.fans[mask[self.owner_fans]], self.outlines[mask[self.owner_lines]]


def cone_mesh(
    frames: F64, apexes: F64, cones: F64, sizes: F64, directions: F64 | None = None, n: int = RING_POINTS
) -> ConeMesh:
    """Fans and outlines of elliptical cones.

    Parameters
    ----------
    frames : (M, 3, 3) each cone's reference frame (cone axis = the frame's +Y)
    apexes : (M, 3) cone apexes (the bones' heads)
    cones : (M, 4) half-angles [up, down, left, right] in radians (``solvers.limits`` order)
    sizes : (M,) distance of the boundary ring from the apex (same space as `apexes`)
    directions : (M, 3), optional
        The bones' current +Y directions, same space; with it, `violated` says which lie outside.
    n : boundary points per cone
    """
    frames = np.asarray(frames, dtype=np.float64).reshape(-1, 3, 3)
    m = frames.shape[0]
    apexes = np.asarray(apexes, dtype=np.float64).reshape(m, 3)
    cones = np.asarray(cones, dtype=np.float64).reshape(m, 4)
    sizes = np.asarray(sizes, dtype=np.float64).reshape(m)
    if m == 0:
        empty = np.zeros((0, 3))
        none = np.zeros(0, dtype=np.int64)
        return ConeMesh(empty, empty, np.zeros(0, dtype=np.bool_), none, none)
    rings_local = _local_rings(cones, n)  # (M, n, 3), unit directions
    rings = apexes[:, None] + sizes[:, None, None] * np.einsum("mij,mnj->mni", frames, rings_local)
    nxt = np.roll(rings, -1, axis=1)
    apex = np.broadcast_to(apexes[:, None], rings.shape)
    fans = np.stack((apex, rings, nxt), axis=2).reshape(-1, 3)  # (M*n*3, 3)
    ring_lines = np.stack((rings, nxt), axis=2)  # (M, n, 2, 3)
    quarter = np.arange(4) * (n // 4)
    spokes = np.stack((apex[:, :4], rings[:, quarter]), axis=2)  # (M, 4, 2, 3)
    outlines = np.concatenate((ring_lines, spokes), axis=1).reshape(-1, 3)
    violated = np.zeros(m, dtype=np.bool_)
    if directions is not None:
        d = np.asarray(directions, dtype=np.float64).reshape(m, 3)
        local = np.einsum("mji,mj->mi", frames, d)
        norm = np.linalg.norm(local, axis=1, keepdims=True)
        ok = norm[:, 0] > 1e-12
        if ok.any():
            # A small tolerance: the solver leaves clamped bones on the boundary up to rounding.
            violated[ok] = cone_violation(local[ok] / norm[ok], cones[ok]) > 1e-3
    owner_fans = np.repeat(np.arange(m), n * 3)
    owner_lines = np.repeat(np.arange(m), (n + 4) * 2)
    return ConeMesh(fans, outlines, violated, owner_fans, owner_lines)


def polyline_segments(polylines: Sequence[F64]) -> F64:
    """Line-list vertices (2 per segment) for polylines of (P_i, 3) points each."""
    parts = [np.stack((p[:-1], p[1:]), axis=1).reshape(-1, 3) for p in polylines if len(p) > 1]
    return np.concatenate(parts) if parts else np.zeros((0, 3))


def dashed_segments(starts: F64, ends: F64, dash: float, duty: float = 0.55) -> F64:
    """Line-list vertices of dashed lines from each start to its end.

    Each line is cut into pieces of length `dash` (at least one), of which the first `duty` fraction is
    drawn; the last dash always ends exactly at the end point, so a link visibly touches its target.
    """
    a = np.asarray(starts, dtype=np.float64).reshape(-1, 3)
    b = np.asarray(ends, dtype=np.float64).reshape(-1, 3)
    if a.shape[0] == 0 or dash <= 0.0:
        return np.zeros((0, 3))
    out = []
    for p, q in zip(a, b, strict=True):
        length = float(np.linalg.norm(q - p))
        if length < 1e-9:
            continue
        count = max(1, min(200, round(length / dash)))
        t0 = np.arange(count) / count
        t1 = t0 + duty / count
        t1[-1] = 1.0
        out.append(np.stack((p + np.outer(t0, q - p), p + np.outer(t1, q - p)), axis=1).reshape(-1, 3))
    return np.concatenate(out) if out else np.zeros((0, 3))


def transform_points(matrix: F64, points: F64) -> F64:
    """(P, 3) points through a 4x4 matrix."""
    m = np.asarray(matrix, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    out: F64 = p @ m[:3, :3].T + m[:3, 3]
    return out


# ---------------------------------------------------------------------------------------------------------
# One armature's overlay, from plain arrays (read from Blender by ui/overlay.py)
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainLine:
    """One chain as the overlay sees it: bone indices root first, its validity, and its goals (world)."""

    bones: tuple[int, ...]
    valid: bool
    target: tuple[float, float, float] | None
    pole: tuple[float, float, float] | None


@dataclass(frozen=True)
class OverlayInputs:
    """Everything one armature's overlay is drawn from (armature space unless noted)."""

    world: F64  # (4, 4) the armature's world matrix
    pose: F64  # (B, 4, 4) evaluated pose matrices
    tails: F64  # (B, 3) posed tails
    parent: I64  # (B,)
    rest_rel: F64  # (B, 3, 3)
    limited: I64  # (M,) bones with a cone
    cones: F64  # (M, 4) their half-angles [up, down, left, right]
    chains: tuple[ChainLine, ...]
    show_chains: bool = True
    show_limits: bool = True
    show_targets: bool = True


@dataclass(frozen=True)
class OverlayGeometry:
    """World-space vertex lists, one per colour the overlay draws."""

    cone_fans: F64
    cone_lines: F64
    bad_cone_fans: F64  # cones the current pose lies outside of
    bad_cone_lines: F64
    chain_lines: F64
    bad_chain_lines: F64  # invalid chains
    target_links: F64  # dashed, tip -> target
    pole_links: F64  # dashed, middle joint -> pole

    def is_empty(self) -> bool:
        return not any(len(getattr(self, f)) for f in self.__dataclass_fields__)


#: The cone's ring sits at this fraction of the bone's posed length from its head.
CONE_SIZE = 0.6


def build_overlay(inp: OverlayInputs) -> OverlayGeometry:
    """The overlay of one armature: limited joints' cones, chain lines and dashed links, in world space."""
    none = np.zeros((0, 3))
    world = np.asarray(inp.world, dtype=np.float64)
    heads = inp.pose[:, :3, 3]
    fans = lines = bad_fans = bad_lines = none
    if inp.show_limits and len(inp.limited):
        scale = np.linalg.norm(inp.pose[:, :3, :3], axis=1)  # (B, 3) column norms
        rot = inp.pose[:, :3, :3] / np.maximum(scale[:, None, :], 1e-12)
        ref = reference_frames(rot, inp.parent, inp.rest_rel)[inp.limited]
        lengths = np.linalg.norm(inp.tails[inp.limited] - heads[inp.limited], axis=1)
        mesh = cone_mesh(ref, heads[inp.limited], inp.cones, CONE_SIZE * lengths, rot[inp.limited][:, :, 1])
        fans, lines = mesh.split(~mesh.violated)
        bad_fans, bad_lines = mesh.split(mesh.violated)
        fans, lines, bad_fans, bad_lines = (transform_points(world, v) for v in (fans, lines, bad_fans, bad_lines))
    good: list[F64] = []
    bad: list[F64] = []
    t_from: list[F64] = []
    t_to: list[tuple[float, float, float]] = []
    p_from: list[F64] = []
    p_to: list[tuple[float, float, float]] = []
    seg_lengths: list[float] = []
    for ch in inp.chains:
        if not ch.bones:
            continue
        idx = np.asarray(ch.bones, dtype=np.int64)
        pts = transform_points(world, np.concatenate((heads[idx], inp.tails[idx[-1:]])))
        (good if ch.valid else bad).append(pts)
        seg_lengths.extend(np.linalg.norm(np.diff(pts, axis=0), axis=1).tolist())
        if ch.target is not None:
            t_from.append(pts[-1])
            t_to.append(ch.target)
        if ch.pole is not None and len(pts) >= 3:
            p_from.append(pts[-2])
            p_to.append(ch.pole)
    chain_lines = polyline_segments(good) if inp.show_chains else none
    bad_chain_lines = polyline_segments(bad) if inp.show_chains else none
    dash = 0.12 * float(np.median(seg_lengths)) if seg_lengths else 0.1
    targets = poles = none
    if inp.show_targets and t_from:
        targets = dashed_segments(np.array(t_from), np.array(t_to), dash)
    if inp.show_targets and p_from:
        poles = dashed_segments(np.array(p_from), np.array(p_to), dash)
    return OverlayGeometry(fans, lines, bad_fans, bad_lines, chain_lines, bad_chain_lines, targets, poles)
