"""The full-body stage in plain Python floats, for bodies of a few bones (`solvers.body.solve_body`).

`solve_body` computes on numpy arrays (the reference) or, for a small body, calls `solve_body_floats` here:
the same steps on nested lists of Python floats. A body is a handful of bones and anchors (the set-up
humanoid: 4 bones, 5 anchors, 15 degrees of freedom), where numpy's cost per call (1-3 us, dozens of calls per
step on arrays of a few rows) is most of the time; plain floats do the same arithmetic in far fewer
microseconds (~2.5x faster on the live drag's body problems, `bench/live.py --full-body`).

The result equals the reference's to float64 rounding: the same iterations and decisions, the pose within
1e-12, or within what the problem itself amplifies rounding to (a one-ulp nudge of the targets moves the
reference by up to ~3e-11 on hard pinned problems); `tests/unit/test_body.py` checks this on random bodies.
Two steps are associated differently from the reference: each damped least-squares step is computed in the
anchors' space from the Gram matrix of the scaled Jacobian's rows (`_coefficients`), and the spine's joint
limits are `_radial_cone` and `apply_joint_limits` in floats (`_limited`), except where a cone needs the
exact search for its nearest point (then the reference's own functions run).

Matrices are lists of rows (``m[i][j]``), a frame's columns its axes, as in `solvers.body`. The problem, the
settings and the limit tests both computations share live in `solvers.body_problem` (this module must not
import `solvers.body`, which calls it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from operator import mul

import numpy as np

from .body_problem import (
    _CORRECTIONS,
    _DAMPING,
    _FOLLOW_DAMPING,
    _HALVINGS,
    _SLACK,
    _STALL,
    FOLLOW,
    LEAD_RAMP,
    MAX_TURN,
    PIN_WEIGHT,
    REACH_MARGIN,
    ROOT_MOVE,
    ROOT_TURN,
    SPINE_TURN,
    BodyProblem,
    BodyResult,
    _clearly_inside,
    _limit_rows,
    _radial_cone,
)
from .limits import _TAU, INSIDE_TOLERANCE, apply_joint_limits
from .rotations import NEAR_OPPOSITE

Vec = list[float]
Mat = list[list[float]]
_State = tuple[Vec, Mat, list[Vec], list[Mat], list[Vec], Vec, Vec]
"""root head, root frame, heads, frames, d (anchor -> target), dist, over: as `body._State`."""


def _mm(a: Mat, b: Mat) -> Mat:
    """a @ b (3 x 3)."""
    (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = a
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = b
    return [
        [a00 * b00 + a01 * b10 + a02 * b20, a00 * b01 + a01 * b11 + a02 * b21, a00 * b02 + a01 * b12 + a02 * b22],
        [a10 * b00 + a11 * b10 + a12 * b20, a10 * b01 + a11 * b11 + a12 * b21, a10 * b02 + a11 * b12 + a12 * b22],
        [a20 * b00 + a21 * b10 + a22 * b20, a20 * b01 + a21 * b11 + a22 * b21, a20 * b02 + a21 * b12 + a22 * b22],
    ]


def _mtm(a: Mat, b: Mat) -> Mat:
    """a.T @ b (3 x 3)."""
    (a00, a01, a02), (a10, a11, a12), (a20, a21, a22) = a
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = b
    return [
        [a00 * b00 + a10 * b10 + a20 * b20, a00 * b01 + a10 * b11 + a20 * b21, a00 * b02 + a10 * b12 + a20 * b22],
        [a01 * b00 + a11 * b10 + a21 * b20, a01 * b01 + a11 * b11 + a21 * b21, a01 * b02 + a11 * b12 + a21 * b22],
        [a02 * b00 + a12 * b10 + a22 * b20, a02 * b01 + a12 * b11 + a22 * b21, a02 * b02 + a12 * b12 + a22 * b22],
    ]


def _mtv(m: Mat, v: Vec) -> Vec:
    """m.T @ v."""
    x, y, z = v
    return [m[0][0] * x + m[1][0] * y + m[2][0] * z, m[0][1] * x + m[1][1] * y + m[2][1] * z,
            m[0][2] * x + m[1][2] * y + m[2][2] * z]  # fmt: skip


def _plus_mv(h: Vec, m: Mat, v: Vec) -> Vec:
    """h + m @ v."""
    x, y, z = v
    return [h[0] + (m[0][0] * x + m[0][1] * y + m[0][2] * z), h[1] + (m[1][0] * x + m[1][1] * y + m[1][2] * z),
            h[2] + (m[2][0] * x + m[2][1] * y + m[2][2] * z)]  # fmt: skip


def _turned(v: Vec, f: Mat) -> Mat:
    """R @ f, R Rodrigues' rotation of the rotation vector v, as `rotations.rotvec_matrix` (zero: identity)."""
    x, y, z = v
    angle = math.sqrt(x * x + y * y + z * z)
    if angle > 0.0:
        x, y, z = x / angle, y / angle, z / angle
    else:
        x, y, z = 1.0, 0.0, 0.0
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    sx, sy, sz = s * x, s * y, s * z
    a00, a01, a02 = t * (x * x) + c, t * (x * y) - sz, t * (x * z) + sy
    a10, a11, a12 = t * (y * x) + sz, t * (y * y) + c, t * (y * z) - sx
    a20, a21, a22 = t * (z * x) - sy, t * (z * y) + sx, t * (z * z) + c
    (b00, b01, b02), (b10, b11, b12), (b20, b21, b22) = f
    return [
        [a00 * b00 + a01 * b10 + a02 * b20, a00 * b01 + a01 * b11 + a02 * b21, a00 * b02 + a01 * b12 + a02 * b22],
        [a10 * b00 + a11 * b10 + a12 * b20, a10 * b01 + a11 * b11 + a12 * b21, a10 * b02 + a11 * b12 + a12 * b22],
        [a20 * b00 + a21 * b10 + a22 * b20, a20 * b01 + a21 * b11 + a22 * b21, a20 * b02 + a21 * b12 + a22 * b22],
    ]


def _dot(a: Vec, b: Vec) -> float:
    out: float = sum(map(mul, a, b))
    return out


def _solve_small(a: Mat, b: Mat) -> Mat:
    """(n, m) solution of a small symmetric positive definite system `a x = b`: Gauss-Jordan by rows without
    pivoting (damped), row operations in `body._solve_small`'s order."""
    n = len(a)
    m = [ra + rb for ra, rb in zip(a, b, strict=True)]
    for k in range(n):
        pivot = m[k][k]
        row = [v / pivot for v in m[k]]
        m[k] = row
        for i in range(n):
            f = m[i][k]
            if i != k and f != 0.0:
                m[i] = [v - f * w for v, w in zip(m[i], row, strict=True)]
    return [r[n:] for r in m]


def _coefficients(
    gram: Mat, over: Vec, first: list[bool], second: list[bool], weight: Vec, size: float
) -> tuple[Vec, Vec]:
    """`body._step` in the rows' space: the step is z = g^T c (g the Jacobian's columns times the metric's
    inverse square root, `gram` = g g^T), and this returns c for the whole step and for the first rows' part
    alone (the pins' and leaders', which the line search falls back on). Each second row g_j is taken in
    the first rows' null space as g_j - sum_i (S^-1 gp g_j^T)_i g_i, S their system: the reference's
    gs @ (I - gp^T S^-1 gp), to rounding, with a right-hand side per second row rather than per degree of
    freedom; every product of rows is an entry of `gram`."""
    n_a = len(gram)
    fi = [i for i in range(n_a) if first[i]]
    se = [i for i in range(n_a) if second[i]]
    c = [0.0] * n_a
    # The second rows in the null space, as coefficients over the rows of g.
    rows = [[1.0 if k == j else 0.0 for k in range(n_a)] for j in se]
    if fi:
        damp = _DAMPING * size * size + 1e-12
        system = [[gram[i][k] for k in fi] for i in fi]
        for r, i in enumerate(fi):
            system[r][r] += damp / weight[i]
        solved = _solve_small(system, [[-over[i], *(gram[i][j] for j in se)] for i in fi])
        for r, i in enumerate(fi):
            c[i] = solved[r][0]
            for row, x in zip(rows, solved[r][1:], strict=True):
                row[i] -= x
    lead = list(c)
    if se:
        damp = _FOLLOW_DAMPING * size * size
        products = [[_dot(row, column) for column in gram] for row in rows]  # rows @ gram (gram symmetric)
        system = [[_dot(pr, row) for row in rows] for pr in products]
        for r in range(len(se)):
            system[r][r] += damp
        solved = _solve_small(system, [[-over[j] - _dot(gram[j], lead)] for j in se])
        for row, y in zip(rows, solved, strict=True):
            c = [v + x * y[0] for v, x in zip(c, row, strict=True)]
    return c, lead


def _expand(g: Mat, c: Vec, root: Vec) -> Vec:
    """The step in the degrees of freedom, root * (g^T c)."""
    z = [0.0] * len(root)
    for row, x in zip(g, c, strict=True):
        if x != 0.0:
            z = [v + x * w for v, w in zip(z, row, strict=True)]
    return [v * r for v, r in zip(z, root, strict=True)]


def _turn_between(a: Vec, b: Vec) -> Mat | None:
    """`rotations.minimal_rotation` of unit `a` onto unit `b` (two reflections); None when they are nearly
    opposite (the caller takes the numpy path)."""
    s0, s1, s2 = a[0] + b[0], a[1] + b[1], a[2] + b[2]
    ns = math.sqrt(s0 * s0 + s1 * s1 + s2 * s2)
    if ns < NEAR_OPPOSITE:
        return None
    h = [s0 / ns, s1 / ns, s2 / ns]
    bh2 = 2.0 * (b[0] * h[0] + b[1] * h[1] + b[2] * h[2])
    g = [b[0] - bh2 * h[0], b[1] - bh2 * h[1], b[2] - bh2 * h[2]]
    return [[-2.0 * (b[i] * g[j] + h[i] * h[j]) + (1.0 if i == j else 0.0) for j in range(3)] for i in range(3)]


_TINY_COMPONENT = 8.0 * sys.float_info.epsilon


def _limited(refs: list[Mat], cones: list[Vec | None], twists: list[Vec | None], local: list[Mat]) -> list[Mat] | None:
    """`body_problem._radial_cone` then `limits.apply_joint_limits` on each bone's `local` frame (`refs` its
    reference frames, `cones` and `twists` None where unused), in plain floats; None when a bone needs
    `apply_joint_limits`' exact search for the nearest point of its cone (the caller takes the numpy path)."""
    out: list[Mat] = []
    for ref, cone, twist, m in zip(refs, cones, twists, local, strict=True):
        rel = _mtm(ref, m)
        if cone is not None:
            # _radial_cone: outside, turned back along its azimuth a hair inside.
            x, y, z = rel[0][1], rel[1][1], rel[2][1]
            rho = math.sqrt(x * x + z * z)
            theta = math.atan2(rho, y)
            a = cone[3] if x >= 0.0 else cone[2]
            b = cone[0] if z >= 0.0 else cone[1]
            q = math.sqrt((x / max(a, 1e-150)) ** 2 + (z / max(b, 1e-150)) ** 2)
            most = rho / max(q, 1e-300) * (1.0 - 1e-9)
            if theta > most and rho > 1e-9:
                s_new = math.sin(most) / rho
                turn = _turn_between([x, y, z], [x * s_new, math.cos(most), z * s_new])
                if turn is None:
                    return None
                m = _mm(ref, _mm(turn, rel))
                rel = _mtm(ref, m)
            # apply_joint_limits' inside test (limits._inside, widened by INSIDE_TOLERANCE).
            x, y, z = rel[0][1], rel[1][1], rel[2][1]
            x = 0.0 if abs(x) <= _TINY_COMPONENT else x
            z = 0.0 if abs(z) <= _TINY_COMPONENT else z
            rho2 = x * x + z * z
            theta = math.atan2(math.sqrt(rho2), y)
            qx = x / max((cone[3] if x >= 0.0 else cone[2]) + INSIDE_TOLERANCE, 1e-150)
            qz = z / max((cone[0] if z >= 0.0 else cone[1]) + INSIDE_TOLERANCE, 1e-150)
            if not (theta * theta * (qx * qx + qz * qz) <= rho2 and theta < math.pi):
                return None
        if twist is not None:
            # apply_joint_limits' twist clamp (limits._twist_outside, limits._rot_y).
            tw = math.atan2(rel[0][2] - rel[2][0], rel[0][0] + rel[2][2])
            tmin, tmax = twist
            u = (tw - tmin) % _TAU
            past_max, back_to_min = u - (tmax - tmin), _TAU - u
            if past_max > INSIDE_TOLERANCE and back_to_min > INSIDE_TOLERANCE:
                angle = (tmax if past_max <= back_to_min else tmin) - tw
                c, s = math.cos(angle), math.sin(angle)
                m = _mm(ref, _mm(rel, [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]]))
        out.append(m)
    return out


def _capped(delta: Vec, size: float, move_root: bool) -> Vec:
    """`body._capped`: at most `MAX_TURN` of turn (radians) and of move (times the body's size)."""
    shift = max(abs(delta[0]), abs(delta[1]), abs(delta[2])) / size if move_root else 0.0
    turn = max((abs(v) for v in delta[3:]), default=0.0)
    scale = min(1.0, MAX_TURN / max(shift, turn, 1e-300))
    return [v * scale for v in delta]


def solve_body_floats(problem: BodyProblem) -> BodyResult:
    """`body.solve_body` in plain floats (see the module): the same result to float64 rounding."""
    p = problem
    heads0, frames0 = np.asarray(p.heads, dtype=np.float64), np.asarray(p.frames, dtype=np.float64)
    heads: list[Vec] = heads0.tolist()
    frames: list[Mat] = frames0.tolist()
    parents: list[int] = np.asarray(p.parents).tolist()
    n_b = len(parents)
    # The body (body._Body): each bone's head offset in its parent's frame, and which bones turn which.
    offsets_b = [
        _mtv(frames[k], [h[0] - hk[0], h[1] - hk[1], h[2] - hk[2]])
        for h, k in zip(heads[1:], parents[1:], strict=True)
        for hk in (heads[k],)
    ]
    ancestors: list[set[int]] = []
    for b in range(n_b):
        ancestors.append({b} | (ancestors[parents[b]] if b else set()))
    bones: list[int] = np.asarray(p.anchor_bones).tolist()
    n_a = len(bones)
    turns = [[k in ancestors[b] for k in range(n_b)] for b in bones]
    offsets: list[Vec] = np.asarray(p.anchor_offsets, dtype=np.float64).tolist()
    targets: list[Vec] = np.asarray(p.targets, dtype=np.float64).tolist()
    reach: Vec = np.asarray(p.reach, dtype=np.float64).tolist()
    pinned: list[bool] = np.asarray(p.pinned, dtype=bool).tolist()
    pull = [0.0 if pin else w for pin, w in zip(pinned, np.asarray(p.pull, dtype=np.float64).tolist(), strict=True)]
    minus_inf = -math.inf

    def distances(heads: list[Vec], frames: list[Mat]) -> tuple[list[Vec], Vec]:
        d: list[Vec] = []
        dist: Vec = []
        for b, off, t in zip(bones, offsets, targets, strict=True):
            pt = _plus_mv(heads[b], frames[b], off)
            da = [t[0] - pt[0], t[1] - pt[1], t[2] - pt[2]]
            d.append(da)
            dist.append(math.sqrt(da[0] * da[0] + da[1] * da[1] + da[2] * da[2]))
        return d, dist

    d, dist = distances(heads, frames)
    bound = [max(r, x) if pin else r * (1.0 - REACH_MARGIN) for pin, r, x in zip(pinned, reach, dist, strict=True)]
    part = [pin or w > 0.0 for pin, w in zip(pinned, pull, strict=True)]
    over = [x - bd if pt else minus_inf for pt, x, bd in zip(part, dist, bound, strict=True)]
    tolerance = p.tolerance
    if not any(o > tolerance and w > 0.0 for o, w in zip(over, pull, strict=True)):
        excess = np.array([max(x - r, 0.0) for x, r in zip(dist, reach, strict=True)])
        return BodyResult(heads0, frames0, 0, excess, False, False)
    spans = []
    for b, off in zip(bones, offsets, strict=True):
        pt = _plus_mv(heads[b], frames[b], off)
        x, y, z = pt[0] - heads[0][0], pt[1] - heads[0][1], pt[2] - heads[0][2]
        spans.append(math.sqrt(x * x + y * y + z * z))
    size = max(sum(spans) / n_a, 1e-9)
    move_root = p.move_root
    # The metric's inverse (body.solve_body): root move, root turn, spine turns; its square root scales g.
    inv_metric = [1.0 / (ROOT_MOVE / (size * size)) if move_root else 0.0] * 3
    inv_metric += [1.0 / ROOT_TURN] * 3 + [1.0 / SPINE_TURN] * (3 * (n_b - 1))
    root = [math.sqrt(v) for v in inv_metric]
    ramp = LEAD_RAMP * size
    weight = [
        PIN_WEIGHT if pin else (w * min(max(o / ramp, FOLLOW), 1.0) if w > 0.0 else 0.0)
        for pin, w, o in zip(pinned, pull, over, strict=True)
    ]
    leaders = [w > 0.0 and o > tolerance for w, o in zip(pull, over, strict=True)]
    cost_weight = [0.0 if pin else w for pin, w in zip(pinned, weight, strict=True)]
    # A pull within a tenth of the tolerance counts as in reach (the limb then reaches well within it).
    enough = 0.1 * tolerance
    limits = p.limits
    cones: list[Vec | None] = [None] * (n_b - 1)
    twists: list[Vec | None] = [None] * (n_b - 1)
    if limits is not None:
        use_cone, use_twist = limits.use_cone[0, 1:].tolist(), limits.use_twist[0, 1:].tolist()
        cones = [c if u else None for c, u in zip(limits.cone[0, 1:].tolist(), use_cone, strict=True)]
        twists = [t if u else None for t, u in zip(limits.twist[0, 1:].tolist(), use_twist, strict=True)]
    limited = any(c is not None for c in cones) or any(t is not None for t in twists)
    ref_local = np.asarray(p.ref_local, dtype=np.float64)
    fast = _limit_rows(ref_local[1:], limits) if limited and limits else None
    refs: list[Mat] = ref_local[1:].tolist()
    slack = _SLACK * size
    fix_damp = _DAMPING * size * size

    def move(head: Vec, frames_now: list[Mat], delta: Vec) -> _State:
        """The body after a step `delta`: each bone's frame turns by the sum of its own and its ancestors'
        turns, its local rotation limited, the heads follow by forward kinematics (as `solve_body`'s move)."""
        new_head = [head[0] + delta[0], head[1] + delta[1], head[2] + delta[2]] if move_root else head
        total: list[Vec] = [delta[3:6]]
        for b in range(1, n_b):
            t, k = total[parents[b]], 3 + 3 * b
            total.append([t[0] + delta[k], t[1] + delta[k + 1], t[2] + delta[k + 2]])
        world = [_turned(t, f) for t, f in zip(total, frames_now, strict=True)]
        local = [_mtm(world[parents[b]], world[b]) for b in range(1, n_b)]
        if limited and limits is not None and (fast is None or not _clearly_inside(fast, local)):
            done = _limited(refs, cones, twists, local)
            if done is None:  # a cone's exact nearest point: the reference's functions
                ref = p.ref_local[1:]
                cone, use_cone = limits.cone[0, 1:], limits.use_cone[0, 1:]
                arr = _radial_cone(ref, np.array(local), cone, use_cone)
                twist, use_twist = limits.twist[0, 1:], limits.use_twist[0, 1:]
                done = apply_joint_limits(ref, arr, cone, use_cone, twist, use_twist).tolist()
            local = done
        heads = [new_head]
        frames = [world[0]]
        for b in range(1, n_b):
            k = parents[b]
            frames.append(_mm(frames[k], local[b - 1]))
            heads.append(_plus_mv(heads[k], frames[k], offsets_b[b - 1]))
        d, dist = distances(heads, frames)
        over = [x - bd if pt else minus_inf for pt, x, bd in zip(part, dist, bound, strict=True)]
        return new_head, world[0], heads, frames, d, dist, over

    def scaled_jacobian(heads: list[Vec], frames: list[Mat], d: list[Vec], dist: Vec) -> tuple[Mat, Mat]:
        """`body`'s Jacobian (d distance / d dof per anchor) with its columns times `root`, and its Gram
        matrix (the products of its rows)."""
        g: Mat = []
        for a in range(n_a):
            b = bones[a]
            pt = _plus_mv(heads[b], frames[b], offsets[a])
            r = max(dist[a], 1e-300)
            ux, uy, uz = d[a][0] / r, d[a][1] / r, d[a][2] / r
            row = [-ux * root[0], -uy * root[1], -uz * root[2]]
            for k in range(n_b):
                if turns[a][k]:
                    h, s0 = heads[k], 3 + 3 * k
                    rx, ry, rz = pt[0] - h[0], pt[1] - h[1], pt[2] - h[2]
                    row += [(uy * rz - uz * ry) * root[s0], (uz * rx - ux * rz) * root[s0 + 1],
                            (ux * ry - uy * rx) * root[s0 + 2]]  # fmt: skip
                else:
                    row += [0.0, 0.0, 0.0]
            g.append(row)
        gram = [[0.0] * n_a for _ in range(n_a)]
        for a in range(n_a):
            for b in range(a, n_a):
                gram[a][b] = gram[b][a] = _dot(g[a], g[b])
        return g, gram

    def cost(over_now: Vec) -> float:
        return sum(w * (o if o > 0.0 else 0.0) ** 2 for w, o in zip(cost_weight, over_now, strict=True))

    root_head = heads[0]
    start_heads, start_frames = heads, frames
    moved = False
    iterations = 0
    while iterations < p.max_iterations:
        iterations += 1
        g, gram = scaled_jacobian(heads, frames, d, dist)
        first = [(pin or lead) and o > 0.0 for pin, lead, o in zip(pinned, leaders, over, strict=True)]
        second = [
            not pin and not lead and pt and o > 0.0
            for pin, lead, pt, o in zip(pinned, leaders, part, over, strict=True)
        ]
        c, c_lead = _coefficients(gram, over, first, second, weight, size)
        # Bounds the step would cross join as rows (the active set), then the step is taken again. The
        # Jacobian times the step is gram @ c.
        for _ in range(2):
            crossing = [
                pt and not f and not s and o + _dot(row, c) > 0.0
                for pt, f, s, o, row in zip(part, first, second, over, gram, strict=True)
            ]
            if not any(crossing):
                break
            first = [
                f or (x and (pin or lead)) for f, x, pin, lead in zip(first, crossing, pinned, leaders, strict=True)
            ]
            second = [
                s or (x and not (pin or lead))
                for s, x, pin, lead in zip(second, crossing, pinned, leaders, strict=True)
            ]
            c, c_lead = _coefficients(gram, over, first, second, weight, size)
        full = _capped(_expand(g, c, root), size, move_root)

        def trials(full: Vec = full, c_lead: Vec = c_lead, g: Mat = g, second: list[bool] = second) -> Iterator[Vec]:
            """The whole step, then the pins' and leaders' part alone (worked out only if needed), halved."""
            yield full
            lead = _capped(_expand(g, c_lead, root), size, move_root) if any(second) else full
            for k in range(_HALVINGS):
                half = 0.5**k
                yield [v * half for v in lead]

        new_cost = before = cost(over)
        pins_before = [(o if o > 0.0 else 0.0) if pin else 0.0 for pin, o in zip(pinned, over, strict=True)]
        accepted = False
        for trial in trials():
            state = move(root_head, frames, trial)
            # The pins the step's second order carried past their bound, back on it (the same minimum-norm
            # step on those rows, with the step's Jacobian).
            for _fix in range(_CORRECTIONS):
                s_over = state[6]
                late = [a for a in range(n_a) if pinned[a] and s_over[a] > pins_before[a] + slack]
                if not late:
                    break
                system = [[gram[a][b] for b in late] for a in late]
                for r in range(len(late)):
                    system[r][r] += fix_damp
                solved = _solve_small(system, [[-(s_over[a] - pins_before[a])] for a in late])
                coeffs = [0.0] * n_a
                for a, sol in zip(late, solved, strict=True):
                    coeffs[a] = sol[0]
                state = move(state[0], state[3], _expand(g, coeffs, root))
            s_over = state[6]
            pins_ok = all(
                ((o if o > 0.0 else 0.0) if pin else 0.0) <= pb + slack
                for pin, o, pb in zip(pinned, s_over, pins_before, strict=True)
            )
            new_cost = cost(s_over)
            if pins_ok and new_cost < before:
                accepted = moved = True
                root_head, _frame, heads, frames, d, dist, over = state
                break
        stalled = accepted and math.sqrt(before) - math.sqrt(new_cost) < _STALL * size
        if not accepted or stalled or not any(lead and o > enough for lead, o in zip(leaders, over, strict=True)):
            break
    excess = np.array([max(x - r, 0.0) for x, r in zip(dist, reach, strict=True)])
    short = any(lead and o > enough for lead, o in zip(leaders, over, strict=True))
    at_pin = any(pin and o > -1e-6 * size for pin, o in zip(pinned, over, strict=True))
    if not moved:
        return BodyResult(heads0, frames0, iterations, excess, short and at_pin, False)
    moved = heads != start_heads or frames != start_frames  # exactly: any number differs
    return BodyResult(np.array(heads), np.array(frames), iterations, excess, short and at_pin, moved)
