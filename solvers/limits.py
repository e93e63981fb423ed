"""Joint limits: an elliptical swing cone and a twist range per bone, in the bone's reference frame.

The reference frame of a bone is its rest frame carried by its parent's pose (see
``docs/design/solvers.md``). All functions here work in that frame, with Blender's bone conventions:
+Y runs along the bone, ``right`` is toward +X, ``left`` toward -X, ``up`` toward +Z, ``down`` toward -Z.

Swing cone
----------
A direction ``d`` at swing angle ``theta`` from +Y, toward azimuth ``phi`` in the X-Z plane, has *swing
coordinates* ``(theta_x, theta_z) = (theta cos(phi), theta sin(phi))`` (the azimuthal equidistant
projection around +Y; ``d = (sin(theta) cos(phi), cos(theta), sin(theta) sin(phi))``). In the quadrant
``theta_x >= 0, theta_z >= 0`` the direction is inside when ``(theta_x/right)**2 + (theta_z/up)**2 <= 1``,
and likewise with ``left``/``down`` in the other quadrants; a zero half-angle allows no swing toward that
side. Each half-angle is in ``[0, pi)``, so +Y is always inside and -Y always outside.

A direction outside is moved to the *nearest* direction of the cone on the unit sphere (geodesic distance),
found by maximising ``d . b`` over the boundary curve ``b``. The boundary is, per quadrant, the arc
``(theta_x, theta_z) = (A cos(psi), B sin(psi))`` mapped to the sphere. The search samples the four arcs
coarsely, keeps every local maximum of the samples that can still hold the nearest point (a Lipschitz
bound drops the rest; the distance along a wide cone's boundary is multimodal), resamples each kept
bracket finely, and polishes it with a bracketed Newton iteration from the vertex of a parabola; the four
extreme directions (where every corner lies) are candidates too. Zero half-angles need no special case: an
arc with a zero semi-axis is the straight edge of a half-cone (or a hinge's arc), and one with two zero
semi-axes is the single point +Y. Directions already inside return at once, without a search.

Twist
-----
With ``rel = ref.T @ frame`` the bone's rotation relative to its reference frame and ``q`` its quaternion,
the twist is ``2 atan2(q.y, q.w)`` wrapped to ``(-pi, pi]``: the angle of the twist about local Y in the
swing-twist decomposition ``q = swing * twist`` (twist applied first). It is computed from the matrix as
``atan2(R02 - R20, R00 + R22)``, which is the same angle without building a quaternion.

Frames are 3x3 rotations whose *columns* are the X, Y, Z axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .rotations import cross

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]

#: Column order of the half-angles in a cone array.
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3
CONE_SIDES = ("up", "down", "left", "right")

#: Directions within this geodesic distance (radians) of a cone, and twists within this angle of their
#: range, count as inside in :func:`apply_joint_limits`, so a frame it clamped earlier (which lies on the
#: boundary only up to rounding) passes through unchanged the next time instead of being clamped again.
#: It is this large because the test widens the half-angles, and near the tip of a thin (or zero-width)
#: side a direction 1e-16 off the plane needs the tip widened by ~(1e-32 * tip / 2)**(1/3) to pass.
INSIDE_TOLERANCE = 1e-9

#: Twist bounds up to this far (radians) outside ``[-pi, pi]`` are taken as ``-pi`` or ``pi``. Callers that
#: store angles as float32 (Blender's properties) hand over +-180 degrees as +-3.1415927, 8.7e-8 beyond pi;
#: refusing that would refuse the end of the range their own UI offers. 1e-6 rad (5.7e-5 degrees) covers
#: float32 rounding with room to spare and is far below any angle a user sets on purpose.
TWIST_BOUND_SLACK = 1e-6

# Boundary samples per quadrant arc for the coarse search (pi/16 apart in the parameter). The coarse grid
# only has to put each basin next to a local maximum of the samples, since every such basin that can hold
# the nearest point is kept; its cost is per row, so it is kept small (16 gave the same answers, slower).
_SAMPLES_PER_QUADRANT = 8
# Samples of the zoom level inside each coarse bracket: the bracket shrinks to 2/15 of its width, so the
# parabola that starts Newton is within ~1e-5 (relative) of a smooth maximum and Newton needs ~2 steps.
_ZOOM_SAMPLES = 16
# Cap on the bracketed Newton iterations; the loop stops once every step is below _NEWTON_STEP_TOL
# (radians of psi): the point returned is after that step, and with quadratic convergence its error is of
# the order of the step squared (~1e-14).
_NEWTON_ITERATIONS = 60
_NEWTON_STEP_TOL = 1e-7
# Working sets larger than this drop converged candidates between Newton iterations.
_COMPACT_ABOVE = 256

_TAU = 2.0 * math.pi


# --------------------------------------------------------------------------------------------------------
# Limits container
# --------------------------------------------------------------------------------------------------------


def _angle(value: float) -> str:
    """An angle for a message: radians and degrees, 4 digits (never a repr: numpy 2 prints np.float64(...))."""
    v = float(value)
    return f"{v:.4g} rad ({math.degrees(v):.4g}°)" if math.isfinite(v) else f"{v} rad"


@dataclass(frozen=True)
class JointLimits:
    """Per-bone joint limits for K chains of N bones.

    Parameters
    ----------
    cone : ndarray, shape (K, N, 4)
        Half-angles ``[up, down, left, right]`` in radians, each in ``[0, pi)``.
    use_cone : ndarray of bool, shape (K, N)
        Whether the cone applies to the bone.
    twist : ndarray, shape (K, N, 2)
        ``[min, max]`` twist about the bone's Y axis in radians, ``-pi <= min <= max <= pi``. Bounds within
        ``TWIST_BOUND_SLACK`` outside that range (float32 rounding of +-pi) are stored as +-pi.
    use_twist : ndarray of bool, shape (K, N)
        Whether the twist range applies to the bone.

    Raises
    ------
    ValueError
        If a shape disagrees or a value is out of range; the message names the ``[k, n]`` index.
    """

    cone: FloatArray
    use_cone: BoolArray
    twist: FloatArray
    use_twist: BoolArray

    def __post_init__(self) -> None:
        # Store float64/bool copies so callers cannot alias (and later mutate) the validated arrays.
        cone = np.array(self.cone, dtype=np.float64)
        use_cone = np.array(self.use_cone, dtype=np.bool_)
        twist = np.array(self.twist, dtype=np.float64)
        use_twist = np.array(self.use_twist, dtype=np.bool_)
        if cone.ndim != 3 or cone.shape[2] != 4:
            raise ValueError(f"JointLimits.cone must have shape (K, N, 4), got {cone.shape}")
        k, n = cone.shape[:2]
        for name, arr, shape in (
            ("use_cone", use_cone, (k, n)),
            ("twist", twist, (k, n, 2)),
            ("use_twist", use_twist, (k, n)),
        ):
            if arr.shape != shape:
                raise ValueError(f"JointLimits.{name} must have shape {shape} (from cone), got {arr.shape}")
        bad = ~np.isfinite(cone) | (cone < 0.0) | (cone >= math.pi)
        if bad.any():
            i, j, s = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(
                f"JointLimits.cone[{i}, {j}] ({CONE_SIDES[s]}) = {_angle(cone[i, j, s])}: "
                "half-angles must be finite and in [0, pi) (0 to just under 180 degrees)"
            )
        # float32 +-pi (a caller's +-180 degrees) lands just outside [-pi, pi]: snap it to the range first.
        near = np.abs(twist) <= math.pi + TWIST_BOUND_SLACK
        twist = np.where(near, np.clip(twist, -math.pi, math.pi), twist)
        bad2 = ~np.isfinite(twist) | (twist < -math.pi) | (twist > math.pi)
        if bad2.any():
            i, j, s = (int(v) for v in np.argwhere(bad2)[0])
            raise ValueError(
                f"JointLimits.twist[{i}, {j}] ({('min', 'max')[s]}) = {_angle(twist[i, j, s])}: "
                "twist bounds must be finite and in [-pi, pi]"
            )
        bad3 = twist[..., 0] > twist[..., 1]
        if bad3.any():
            i, j = (int(v) for v in np.argwhere(bad3)[0])
            raise ValueError(
                f"JointLimits.twist[{i}, {j}]: min {_angle(twist[i, j, 0])} > max {_angle(twist[i, j, 1])}; "
                "swap them so that min <= max"
            )
        for arr in (cone, use_cone, twist, use_twist):
            arr.flags.writeable = False
        object.__setattr__(self, "cone", cone)
        object.__setattr__(self, "use_cone", use_cone)
        object.__setattr__(self, "twist", twist)
        object.__setattr__(self, "use_twist", use_twist)

    @staticmethod
    def none(k: int, n: int) -> JointLimits:
        """Return limits that constrain nothing, for K chains of N bones."""
        return JointLimits(
            cone=np.zeros((k, n, 4)),
            use_cone=np.zeros((k, n), dtype=np.bool_),
            twist=np.zeros((k, n, 2)),
            use_twist=np.zeros((k, n), dtype=np.bool_),
        )

    @property
    def shape(self) -> tuple[int, int]:
        """``(K, N)``."""
        return (int(self.cone.shape[0]), int(self.cone.shape[1]))


# --------------------------------------------------------------------------------------------------------
# Argument checks (cheap: the solvers call these functions per bone and per iteration)
# --------------------------------------------------------------------------------------------------------


def _as_rows(name: str, value: ArrayLike, tail: tuple[int, ...]) -> FloatArray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 1 + len(tail) or arr.shape[1:] != tail:
        want = ", ".join(["M", *(str(t) for t in tail)])
        raise ValueError(f"{name} must have shape ({want}), got {arr.shape}")
    return arr


def _check_rows(m: int, **arrays: NDArray[np.generic]) -> None:
    for name, arr in arrays.items():
        if arr.shape[0] != m:
            raise ValueError(f"{name} has {arr.shape[0]} rows, expected {m} (one per direction/frame)")


# --------------------------------------------------------------------------------------------------------
# Swing cone
# --------------------------------------------------------------------------------------------------------


def _inside(d: FloatArray, cone: FloatArray, tol: float) -> BoolArray:
    """Inside test with every half-angle widened by ``tol`` (no search)."""
    x, y, z = d[:, 0], d[:, 1], d[:, 2]
    if tol:
        # A component within rounding of zero (a frame clamped onto a zero-width side comes back 1e-16 off
        # its plane) is zero: that turns the direction by ~1e-15 rad, far inside `tol`, but near the tip of a
        # thin side its square over the widened semi-axis can still outweigh the whole widening (seen with a
        # zero side opposite a side near 180 degrees, with some CPUs' rounding).
        tiny = 8.0 * float(np.finfo(np.float64).eps)
        x = np.where(np.abs(x) <= tiny, 0.0, x)
        z = np.where(np.abs(z) <= tiny, 0.0, z)
    rho2 = x * x + z * z
    theta = np.arctan2(np.sqrt(rho2), y)
    # Widening the semi-axes by tol stays within tol of the cone: the widened ellipse lies in the
    # tol-neighbourhood of the original in the swing plane (support functions), and the exponential map of
    # the sphere does not lengthen distances.
    a = np.where(x >= 0.0, cone[:, RIGHT], cone[:, LEFT])
    b = np.where(z >= 0.0, cone[:, UP], cone[:, DOWN])
    if tol:
        a = a + tol
        b = b + tol
    # (theta_x/a)^2 + (theta_z/b)^2 <= 1 multiplied through by rho^2 (no division by the azimuth). A zero
    # semi-axis means "no swing that way": floored at 1e-150, it lets only an exactly zero component pass.
    qx = x / np.maximum(a, 1e-150)
    qz = z / np.maximum(b, 1e-150)
    inside: BoolArray = theta * theta * (qx * qx + qz * qz) <= rho2
    # Exactly -Y (rho = 0, theta = pi) would pass the product form; it is always outside.
    inside &= theta < math.pi
    return inside


def cone_contains(d_local: ArrayLike, cone: ArrayLike, tol: float = 0.0) -> BoolArray:
    """Return whether unit directions lie inside their elliptical cones.

    Parameters
    ----------
    d_local : array_like, shape (M, 3)
        Unit directions in the bone's reference frame.
    cone : array_like, shape (M, 4)
        Half-angles ``[up, down, left, right]`` in radians.
    tol : float, optional
        Widen every half-angle by this many radians. A direction accepted with ``tol`` is within ``tol``
        (geodesic) of the cone.

    Returns
    -------
    ndarray of bool, shape (M,)
    """
    d = _as_rows("d_local", d_local, (3,))
    c = _as_rows("cone", cone, (4,))
    _check_rows(d.shape[0], cone=c)
    return _inside(d, c, float(tol))


def _boundary_point(psi: FloatArray, a: FloatArray, b: FloatArray, quadrant: IntArray) -> FloatArray:
    """Boundary directions at parameters ``psi`` of quadrant arcs with semi-axes ``a`` (x), ``b`` (z).

    The signs come from the quadrant, not from cos/sin: at psi = pi/2, cos(psi) is 6e-17, which would put
    an arc of the left side a hair to the right (outside a half-cone with right = 0).
    """
    px = a * _X_SIGN[quadrant] * np.abs(np.cos(psi))
    pz = b * _Z_SIGN[quadrant] * np.abs(np.sin(psi))
    th = np.sqrt(px * px + pz * pz)
    sinc = np.sin(th) / np.maximum(th, 1e-30)
    out = np.empty((*th.shape, 3))
    np.multiply(sinc, px, out=out[..., 0])
    np.cos(th, out=out[..., 1])
    np.multiply(sinc, pz, out=out[..., 2])
    return out


def _sample_table(n: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Parameters ``psi`` (4, n+1) sampling the four quadrant arcs, each with both of its end points, and
    their cosines and sines with exact zeros on the axes (a zero half-angle then gives exactly zero swing
    toward its side)."""
    i = np.arange(n + 1)
    psi = np.arange(4)[:, None] * (math.pi / 2) + i[None, :] * (math.pi / 2 / n)
    cos_psi = np.cos(psi)
    sin_psi = np.sin(psi)
    sin_psi[[0, 1, 2, 3], [0, n, 0, n]] = 0.0  # on the x axis
    cos_psi[[0, 1, 2, 3], [n, 0, n, 0]] = 0.0  # on the z axis
    return psi, cos_psi, sin_psi


_PSI, _COS, _SIN = _sample_table(_SAMPLES_PER_QUADRANT)
_H = math.pi / 2 / _SAMPLES_PER_QUADRANT
# Cone columns of each quadrant arc's x and z semi-axes, and the signs of x and z on it.
_A_SIDE = np.array([RIGHT, LEFT, LEFT, RIGHT], dtype=np.intp)
_B_SIDE = np.array([UP, UP, DOWN, DOWN], dtype=np.intp)
_X_SIGN = np.array([1.0, -1.0, -1.0, 1.0])
_Z_SIGN = np.array([1.0, 1.0, -1.0, -1.0])
# The four extreme directions (right, up, left, down) as (quadrant, sample): every corner of the boundary
# and every fold of a zero-width arc is one of them.
_AXIS_Q = np.array([0, 0, 1, 2])
_AXIS_I = np.array([0, _SAMPLES_PER_QUADRANT, _SAMPLES_PER_QUADRANT, _SAMPLES_PER_QUADRANT])
_QUADS = np.arange(4)
# cos/sin of the zoom offsets for a bracket of one and of two coarse steps (2, Z).
_ZOOM_ANGLES = np.array([1.0, 2.0])[:, None] * np.linspace(0.0, _H, _ZOOM_SAMPLES)
_ZOOM_COS, _ZOOM_SIN = np.cos(_ZOOM_ANGLES), np.sin(_ZOOM_ANGLES)


def _slope_curvature(psi: FloatArray, k: tuple[FloatArray, ...]) -> tuple[FloatArray, FloatArray]:
    """First and second derivatives in ``psi`` of ``f = d . b(psi)`` on an arc.

    ``k = (alpha, beta, mu, nu2, nu4, dyh)`` are per-arc constants: with semi-axes a, b the swing
    coordinates are ``p = (a cos, b sin)``, ``w = d_xz . p = alpha cos + beta sin`` and
    ``r2 = |p|^2 = mu - nu2/2 cos(2 psi)``. The boundary direction is ``(sinc p_x, cos, sinc p_z)`` of
    ``t = sqrt(r2)``; sinc and cos are smooth in ``r2`` (d cos / d r2 = -sinc / 2), so the derivatives
    stay finite on the axis. The closed forms of d sinc / d r2 (``d1``) and d2 sinc / d r2^2 (``d2``)
    cancel for small t (to ~eps/t^2 and ~eps/t^4), but they are always multiplied by powers of t that
    bring the error back to ~eps times the arc's speed, so no series branch is needed.
    """
    alpha, beta, mu, nu2, nu4, dyh = k
    c, s = np.cos(psi), np.sin(psi)
    two = psi + psi
    cos2 = np.cos(two)
    r2 = np.maximum(mu + 0.5 * nu2 * np.negative(cos2), 0.0)
    r2_1 = nu2 * np.sin(two)
    r2_2 = nu4 * cos2
    w = alpha * c + beta * s
    w1 = beta * c - alpha * s
    t = np.maximum(np.sqrt(r2), 1e-30)
    st, ct = np.sin(t), np.cos(t)
    tc = t * ct
    tt = t * t
    t3 = tt * t
    sinc = st / t
    d1 = (tc - st) / (t3 + t3)
    d2 = (3.0 * (st - tc) - tt * st) / (4.0 * t3 * tt)
    g = d1 * w - dyh * sinc
    slope = r2_1 * g + sinc * w1
    curvature = r2_1 * r2_1 * (d2 * w - dyh * d1) + r2_2 * g + 2.0 * d1 * r2_1 * w1 - sinc * w
    return slope, curvature


def _nearest_general(d: FloatArray, cone: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Nearest boundary direction to each ``d`` (all outside their cones) and the squared chord to it.

    Maximises ``f(psi) = d . b(psi)`` over each of the four closed quadrant arcs and keeps the best. This
    is the general search, for the rows :func:`_nearest_on_boundary` cannot settle on its fast path.
    """
    m = d.shape[0]
    n = _SAMPLES_PER_QUADRANT
    rows = np.arange(m)
    a = cone[:, _A_SIDE]  # (M, 4) semi-axes of each quadrant's arc
    b = cone[:, _B_SIDE]

    # Coarse samples (M, 4, n+1) of the four arcs (exact zeros on the axes via the tables).
    px = a[:, :, None] * _COS
    pz = b[:, :, None] * _SIN
    th = np.sqrt(px * px + pz * pz)
    f = np.sin(th) / np.maximum(th, 1e-30) * (d[:, 0, None, None] * px + d[:, 2, None, None] * pz)
    f += d[:, 1, None, None] * np.cos(th)

    # Every local maximum of the samples along an arc (its end points compare with their one neighbour)
    # brackets a basin between its neighbouring samples, clipped to the arc, where a, b are constant and
    # the arc is smooth. A wide arc can hold two or more basins, so all are kept, except those that cannot
    # hold the nearest point: every point of an arc is within half a sample spacing of a sample (at most
    # h * max(a, b) / 2, as the exponential map does not lengthen), so a basin whose sample is farther than
    # that beyond the best sample is dropped.
    is_max = np.ones(f.shape, dtype=np.bool_)
    rising = f[:, :, 1:] >= f[:, :, :-1]
    is_max[:, :, 1:] = rising
    is_max[:, :, :-1] &= f[:, :, :-1] >= f[:, :, 1:]
    dist = np.arccos(np.clip(f, -1.0, 1.0))  # rounding can push d . b just past +-1
    reach = (0.5 * _H) * np.maximum(a, b)
    best = dist.min(axis=(1, 2))
    keep = is_max & (dist <= (best[:, None] + 1e-7)[:, :, None] + reach[:, :, None])
    r, q, ik = np.nonzero(keep)  # candidates: (row, arc, sample)
    ak, bk = a[r, q], b[r, q]
    dx, dy, dz = d[r, 0], d[r, 1], d[r, 2]
    i_lo = np.maximum(ik - 1, 0)
    i_hi = np.minimum(ik + 1, n)
    lo = _PSI[q, i_lo]

    # Zoom: resample each bracket with _ZOOM_SAMPLES points (K, Z). The bracket is one or two coarse steps
    # from an exact table sample, so cos/sin come from the angle-sum formula and two small tables.
    c0, s0 = _COS[q, i_lo, None], _SIN[q, i_lo, None]
    width = i_hi - i_lo - 1
    zc, zs = _ZOOM_COS[width], _ZOOM_SIN[width]
    zpx = ak[:, None] * (c0 * zc - s0 * zs)
    zpz = bk[:, None] * (s0 * zc + c0 * zs)
    zth = np.sqrt(zpx * zpx + zpz * zpz)
    fz = np.sin(zth) / np.maximum(zth, 1e-30) * (dx[:, None] * zpx + dz[:, None] * zpz)
    fz += dy[:, None] * np.cos(zth)
    j = np.argmax(fz, axis=1)
    last = _ZOOM_SAMPLES - 1
    jl, jr = np.maximum(j - 1, 0), np.minimum(j + 1, last)
    step_z = (i_hi - i_lo) * (_H / last)
    hi = lo + step_z * jr
    lo = lo + step_z * jl
    kk = np.arange(r.shape[0])
    fc, fl, fr = fz[kk, j], fz[kk, jl], fz[kk, jr]
    # Start at the vertex of the parabola through the zoomed sample and its neighbours (within O(h^3) of
    # a smooth maximum), or halfway into the bracket at its ends.
    den = fl - 2.0 * fc + fr
    interior = (j > 0) & (j < last) & (den < 0.0)
    off = np.where(interior, 0.5 * (fl - fr) / np.where(interior, den, -1.0), 0.0)
    psi = np.where(interior, lo + step_z * (1.0 + np.clip(off, -1.0, 1.0)), 0.5 * (lo + hi))

    # Newton's method on the slope, kept inside the shrinking bracket [lo, hi]. A step that would leave
    # the bracket (or a non-concave spot) jumps to the bracket's end uphill instead: the maximum is often
    # exactly there (a corner, an arc's end, the fold of a zero-width arc), and bisecting toward it would
    # take dozens of halvings. A second such step in a row bisects, so it cannot bounce between the ends.
    a2, b2 = ak * ak, bk * bk
    consts: tuple[FloatArray, ...] = (dx * ak, dz * bk, 0.5 * (a2 + b2), b2 - a2, 2.0 * (b2 - a2), 0.5 * dy)
    jumped = np.zeros(psi.shape, dtype=np.bool_)
    result = psi.copy()
    active = kk
    for _ in range(_NEWTON_ITERATIONS):
        slope, curv = _slope_curvature(psi, consts)
        up = slope > 0.0
        lo = np.where(up, psi, lo)
        hi = np.where(up, hi, psi)
        newton = psi - slope / np.where(curv < 0.0, curv, -1.0)
        ok = (curv < 0.0) & (newton >= lo) & (newton <= hi)
        fallback = np.where(jumped, 0.5 * (lo + hi), np.where(up, hi, lo))
        new = np.where(ok, newton, fallback)
        done = np.abs(new - psi) <= _NEWTON_STEP_TOL
        jumped = ~ok & ~jumped
        psi = new
        n_done = int(np.count_nonzero(done))
        if n_done == done.shape[0]:
            break
        if done.shape[0] > _COMPACT_ABOVE and 2 * n_done >= done.shape[0]:
            # A large working set shrinks to the unconverged candidates (the gathers pay off only then).
            result[active[done]] = psi[done]
            keep_w = ~done
            active = active[keep_w]
            psi, lo, hi, jumped = psi[keep_w], lo[keep_w], hi[keep_w], jumped[keep_w]
            consts = tuple(v[keep_w] for v in consts)
    result[active] = psi

    # The nearest of the polished maxima (candidates are grouped by row, in row order), then of the four
    # extreme directions (exact points; every corner and fold is one of them). Ranked by the squared chord,
    # not by d . b: near 1 the dot product cannot tell apart points within ~1e-8 rad of d, the chord can.
    cand = _boundary_point(result, ak, bk, q)  # (K, 3)
    diff = cand - d[r]
    c2 = np.einsum("kj,kj->k", diff, diff)
    if r.shape[0] == m:
        # One candidate per row (the usual case): they are already in row order.
        out: FloatArray = cand
        out_c2 = c2
    else:
        order = np.lexsort((c2, r))
        sorted_rows = r[order]
        starts = np.ones(sorted_rows.shape, dtype=np.bool_)
        np.not_equal(sorted_rows[1:], sorted_rows[:-1], out=starts[1:])
        first = order[starts]  # each row's nearest candidate
        out = cand[first]
        out_c2 = c2[first]
    ax_px = a[:, _AXIS_Q] * _COS[_AXIS_Q, _AXIS_I]
    ax_pz = b[:, _AXIS_Q] * _SIN[_AXIS_Q, _AXIS_I]
    ax_th = np.sqrt(ax_px * ax_px + ax_pz * ax_pz)
    ax_sinc = np.sin(ax_th) / np.maximum(ax_th, 1e-30)
    ax_pts = np.empty((m, 4, 3))  # (M, 4, 3)
    np.multiply(ax_sinc, ax_px, out=ax_pts[..., 0])
    np.cos(ax_th, out=ax_pts[..., 1])
    np.multiply(ax_sinc, ax_pz, out=ax_pts[..., 2])
    ax_diff = ax_pts - d[:, None, :]
    ax_c2 = np.einsum("mcj,mcj->mc", ax_diff, ax_diff)
    pick = np.argmin(ax_c2, axis=1)
    use_axis = ax_c2[rows, pick] < out_c2
    if use_axis.any():
        out[use_axis] = ax_pts[rows[use_axis], pick[use_axis]]
        out_c2 = np.where(use_axis, ax_c2[rows, pick], out_c2)
    return out, out_c2


def _ring_tables(n: int) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """The coarse samples of the four quadrant arcs as one closed ring of ``4 n`` parameters
    ``psi_j = j * pi / (2 n)`` (each extreme direction once): their cosines and sines (exact zeros on the
    axes) and the cone columns of their x and z semi-axes, chosen by the signs of cos and sin."""
    cos_r = _COS[:, :n].reshape(-1)
    sin_r = _SIN[:, :n].reshape(-1)
    x_side = np.where(cos_r >= 0.0, RIGHT, LEFT).astype(np.intp)
    z_side = np.where(sin_r >= 0.0, UP, DOWN).astype(np.intp)
    return cos_r, sin_r, x_side, z_side


_RING_COS, _RING_SIN, _RING_X, _RING_Z = _ring_tables(_SAMPLES_PER_QUADRANT)
_RING = 4 * _SAMPLES_PER_QUADRANT
_RING_PREV = (np.arange(_RING) - 1) % _RING
_RING_NEXT = (np.arange(_RING) + 1) % _RING
# The fast path's zoom: _FAST_SAMPLES points across +-_FAST_HALF around the best coarse sample (the
# sample nearest a smooth maximum is within about half a coarse step of it; a maximum beyond shows as a
# best zoomed sample at an end, and sends the row to the general search), plus two more beyond each end,
# so that every inner sample has the two neighbours each side that the five-point derivatives need. 24
# samples over +-0.55 coarse steps put the Halley start within ~1e-7 of the maximum for all but a few
# percent of moderate cones (fewer samples or a wider zoom send more rows to the general search).
_FAST_SAMPLES = 40
_FAST_HALF = _H
_FAST_STEP = 2.0 * _FAST_HALF / (_FAST_SAMPLES - 1)
_FAST_T = (np.arange(_FAST_SAMPLES + 4) - 0.5 * (_FAST_SAMPLES + 3)) * _FAST_STEP
_STENCIL = np.arange(-2, 3)
# Widest side of a cone the fast path takes. Wider cones wrap toward -Y, where two basins can share one
# coarse bracket; the general search's zoom has been checked against brute force there, so they go to it.
_FAST_MAX_SIDE = 0.5 * math.pi
_QUARTER = 0.5 * math.pi
# Largest final Newton step of a settled row (radians of psi); the error left is ~its square.
_FAST_STEP_TOL = 1e-6
# Most rows the fast path takes in one call. It saves numpy calls, not arithmetic (its zoom is denser than
# the general search's), and one unsettled row costs a general search on top: it pays for a few rows only.
_FAST_ROWS = 4


def _slope(psi: FloatArray, a: FloatArray, b: FloatArray, d: FloatArray) -> FloatArray:
    """The slope of ``f = d . b(psi)`` on arcs with semi-axes ``a`` (x), ``b`` (z): the first derivative of
    :func:`_slope_curvature`, computed from ``p = (a cos, b sin)`` directly."""
    c, s = np.cos(psi), np.sin(psi)
    px, pz = a * c, b * s
    tt = px * px + pz * pz
    t = np.maximum(np.sqrt(tt), 1e-30)
    st = np.sin(t)
    sinc = st / t
    d1 = (t * np.cos(t) - st) / (2.0 * t * np.maximum(tt, 1e-60))
    w = d[:, 0] * px + d[:, 2] * pz
    w1 = d[:, 2] * (b * c) - d[:, 0] * (a * s)
    r2_1 = 2.0 * (b * b - a * a) * (s * c)
    slope: FloatArray = r2_1 * (d1 * w - (0.5 * d[:, 1]) * sinc) + sinc * w1
    return slope


def _nearest_on_boundary(d: FloatArray, cone: FloatArray) -> FloatArray:
    """Nearest boundary direction to each ``d`` (all outside their cones).

    A fast path settles, in a fixed number of vectorized steps (no per-row loop, no iteration count that
    depends on the data), every row whose nearest point is the smooth maximum of a single basin inside one
    arc. The four arcs are sampled as one closed ring (the coarse samples and the Lipschitz rule of
    :func:`_nearest_general`, so the same basins survive); a row with one surviving basin is zoomed into
    around its best sample; five-point first, second and third derivatives at the best zoomed sample give
    a Halley step to within ~1e-7 of the maximum; and one Newton step with the exact slope polishes it. The
    row is settled when that step is below ``_FAST_STEP_TOL`` (so the error is of the order of its square),
    at a maximum (negative curvature), within a zoom step of the best zoomed sample, with the stencil on
    one arc. Every other row (several candidate basins; a maximum at or next to an extreme direction, where
    the corners, the arcs' ends and the folds of zero-width arcs lie; a step that did not settle) goes to
    the general search, which has none of these restrictions.
    """
    m = d.shape[0]
    if m > _FAST_ROWS:
        return _nearest_general(d, cone)[0]
    rows = np.arange(m)
    dx, dy, dz = d[:, 0, None], d[:, 1, None], d[:, 2, None]
    # Coarse samples (M, 4n) of the ring.
    px = cone[:, _RING_X] * _RING_COS
    pz = cone[:, _RING_Z] * _RING_SIN
    th = np.sqrt(px * px + pz * pz)
    f = np.sin(th) / np.maximum(th, 1e-30) * (dx * px + dz * pz) + dy * np.cos(th)
    # The local maxima that can hold the nearest point (see _nearest_general), compared in d . b rather
    # than in distance: one arccos and one cos per row instead of an arccos per sample. The reach uses the
    # row's widest side, never less than the general search's per-arc reach.
    best = np.argmax(f, axis=1)
    limit = np.arccos(np.minimum(np.maximum(f[rows, best], -1.0), 1.0)) + ((0.5 * _H) * cone.max(axis=1) + 1e-7)
    floor = np.cos(np.minimum(limit, math.pi))
    floor[limit >= math.pi] = -np.inf
    candidates = (f >= f[:, _RING_PREV]) & (f >= f[:, _RING_NEXT]) & (f >= floor[:, None])
    settled = (np.count_nonzero(candidates, axis=1) == 1) & (cone.max(axis=1) <= _FAST_MAX_SIDE)

    out = np.empty((m, 3))
    fast = rows if settled.all() else np.flatnonzero(settled)
    if fast.shape[0]:
        df, cf = d[fast], cone[fast]
        k = fast.shape[0]
        kk = rows[:k, None] if k == m else np.arange(k)[:, None]
        # Zoom around the best sample. The samples may run across an axis, so the semi-axes follow the
        # signs of cos and sin.
        psi = (best[fast] * _H)[:, None] + _FAST_T
        c, s = np.cos(psi), np.sin(psi)
        zx = np.where(c >= 0.0, cf[:, RIGHT, None], cf[:, LEFT, None]) * c
        zz = np.where(s >= 0.0, cf[:, UP, None], cf[:, DOWN, None]) * s
        zt = np.sqrt(zx * zx + zz * zz)
        fz = np.sin(zt) / np.maximum(zt, 1e-30) * (df[:, 0, None] * zx + df[:, 2, None] * zz)
        fz += df[:, 1, None] * np.cos(zt)
        j = np.argmax(fz[:, 2:-2], axis=1)[:, None] + 2
        # Five-point first, second and third derivatives at the best zoomed sample (times step**k), and
        # one Halley step from it: the maximum is within a step, so the start is within ~step**3 of it.
        fm2, fm1, f0, fp1, fp2 = fz[kk, j + _STENCIL].T
        slope = (8.0 * (fp1 - fm1) - (fp2 - fm2)) * (1.0 / 12.0)
        curv = (16.0 * (fp1 + fm1) - 30.0 * f0 - (fp2 + fm2)) * (1.0 / 12.0)
        third = (fp2 - fm2) * 0.5 - (fp1 - fm1)
        concave = np.where(curv < 0.0, curv, -1.0)
        newton = slope / concave
        offset = -_FAST_STEP * newton / np.maximum(1.0 - 0.5 * newton * third / concave, 0.5)
        centre = psi[kk, j][:, 0]
        lo = centre - _FAST_STEP
        hi = centre + _FAST_STEP
        # The stencil must lie on one arc (one pair of semi-axes: across an axis the speed of psi jumps
        # and the derivatives are wrong); within 1e-9 of an axis counts as crossing it. The best zoomed
        # sample must not be at an end of the zoom, nor the start more than a step from it.
        q_lo = np.floor((lo - (_FAST_STEP + 1e-9)) * (1.0 / _QUARTER))
        q_hi = np.floor((hi + (_FAST_STEP + 1e-9)) * (1.0 / _QUARTER))
        jj = j[:, 0]
        ok = (q_lo == q_hi) & (curv < 0.0) & (np.abs(offset) <= _FAST_STEP) & (jj > 2) & (jj <= _FAST_SAMPLES)
        q = q_hi.astype(np.intp) & 3
        a = cf[kk[:, 0], _A_SIDE[q]]
        b = cf[kk[:, 0], _B_SIDE[q]]
        # Newton steps with the exact slope and the stencil's curvature carried to the start (its relative
        # error, ~1e-6, multiplies an error that is already ~1e-7 or less).
        psi0 = centre + offset
        curv0 = (curv + third * (offset * (1.0 / _FAST_STEP))) * (1.0 / (_FAST_STEP * _FAST_STEP))
        concave0 = np.where(curv0 < 0.0, curv0, -1.0)
        psi1 = psi0 - _slope(psi0, a, b, df) / concave0
        # A second step with the same curvature takes the error to rounding (~1e-6 of ~1e-10 or less),
        # so a direction on the boundary is found within ~1e-16 of itself.
        psi2 = psi1 - _slope(psi1, a, b, df) / concave0
        ok &= (np.abs(psi1 - psi0) <= _FAST_STEP_TOL) & (np.abs(psi2 - psi1) <= 1e-3 * _FAST_STEP_TOL)
        ok &= (curv0 < 0.0) & (psi2 >= lo) & (psi2 <= hi)
        psi1 = psi2
        # Strictly inside the arc, cos and sin carry the quadrant's signs.
        bx, bz = a * np.cos(psi1), b * np.sin(psi1)
        bt = np.sqrt(bx * bx + bz * bz)
        sinc = np.sin(bt) / np.maximum(bt, 1e-30)
        pts = out if k == m else np.empty((k, 3))
        np.multiply(sinc, bx, out=pts[:, 0])
        np.cos(bt, out=pts[:, 1])
        np.multiply(sinc, bz, out=pts[:, 2])
        if k < m:
            out[fast] = pts
        if not ok.all():
            settled[fast[~ok]] = False
    if not settled.all():
        slow = np.flatnonzero(~settled)
        out[slow] = _nearest_general(d[slow], cone[slow])[0]
    return out


def clamp_cone(d_local: ArrayLike, cone: ArrayLike, tol: float = 0.0) -> FloatArray:
    """Move directions outside their cones to the nearest direction on the cone (geodesic distance).

    Parameters
    ----------
    d_local : array_like, shape (M, 3)
        Unit directions in the bone's reference frame.
    cone : array_like, shape (M, 4)
        Half-angles ``[up, down, left, right]`` in radians, each in ``[0, pi)``.
    tol : float, optional
        Directions accepted by ``cone_contains(d, cone, tol)`` are returned unchanged.

    Returns
    -------
    ndarray, shape (M, 3)
        Unit directions inside the cone (on its boundary for those that were outside). Rows that were
        inside are bit-identical to the input. Exactly -Y (always outside) goes to the boundary
        direction of largest swing, the first one found if several tie.
    """
    d = _as_rows("d_local", d_local, (3,))
    c = _as_rows("cone", cone, (4,))
    _check_rows(d.shape[0], cone=c)
    out = d.copy()
    outside = ~_inside(d, c, float(tol))
    if outside.any():
        out[outside] = _nearest_on_boundary(d[outside], c[outside])
    return out


def cone_violation(d_local: ArrayLike, cone: ArrayLike) -> FloatArray:
    """Geodesic distance (radians) from each direction to its cone; 0 inside.

    Parameters
    ----------
    d_local : array_like, shape (M, 3)
        Unit directions in the bone's reference frame.
    cone : array_like, shape (M, 4)
        Half-angles ``[up, down, left, right]`` in radians.

    Returns
    -------
    ndarray, shape (M,)
    """
    d = _as_rows("d_local", d_local, (3,))
    c = _as_rows("cone", cone, (4,))
    _check_rows(d.shape[0], cone=c)
    out = np.zeros(d.shape[0])
    outside = ~_inside(d, c, 0.0)
    if outside.any():
        do = d[outside]
        nearest = _nearest_on_boundary(do, c[outside])
        out[outside] = _angle_between(do, nearest)
    return out


def _angle_between(u: FloatArray, v: FloatArray) -> FloatArray:
    # atan2 of |u x v| and u . v stays accurate for tiny and near-pi angles, unlike arccos.
    cross = np.cross(u, v)
    angle: FloatArray = np.arctan2(np.sqrt(np.einsum("ij,ij->i", cross, cross)), np.einsum("ij,ij->i", u, v))
    return angle


# --------------------------------------------------------------------------------------------------------
# Twist
# --------------------------------------------------------------------------------------------------------


def twist_angle(rel: ArrayLike) -> FloatArray:
    """Twist about local Y of rotations relative to their reference frames.

    Parameters
    ----------
    rel : array_like, shape (M, 3, 3)
        ``ref.T @ frame``, columns = axes.

    Returns
    -------
    ndarray, shape (M,)
        ``2 atan2(q.y, q.w)`` wrapped to ``(-pi, pi]``. A swing of exactly 180 degrees makes the
        decomposition ambiguous; it reports 0 there.
    """
    r = _as_rows("rel", rel, (3, 3))
    # 2 atan2(y, w) == atan2(2wy, w^2 - y^2), and 4wy = R02 - R20, 2(w^2 - y^2) = R00 + R22.
    tw = np.arctan2(r[:, 0, 2] - r[:, 2, 0], r[:, 0, 0] + r[:, 2, 2])
    out: FloatArray = np.where(tw <= -math.pi, math.pi, tw)
    return out


def _rot_y(angle: FloatArray) -> FloatArray:
    c, s = np.cos(angle), np.sin(angle)
    rot = np.zeros((angle.shape[0], 3, 3))
    rot[:, 0, 0] = c
    rot[:, 0, 2] = s
    rot[:, 1, 1] = 1.0
    rot[:, 2, 0] = -s
    rot[:, 2, 2] = c
    return rot


def _twist_outside(
    tw: FloatArray, tmin: FloatArray, tmax: FloatArray, tol: float
) -> tuple[BoolArray, FloatArray, FloatArray]:
    """Whether ``tw`` is outside [tmin, tmax] by more than ``tol``, measured around the circle.

    Also returns the distances to ``tmax`` (forward) and back to ``tmin``. Going around the circle makes
    a range that touches +-pi behave: a twist clamped to pi may read back as -pi + 1e-16, which is inside.
    """
    u = np.mod(tw - tmin, _TAU)  # how far past tmin, going forward, in [0, 2 pi)
    past_max = u - (tmax - tmin)
    back_to_min = _TAU - u
    outside = (past_max > tol) & (back_to_min > tol)
    return outside, past_max, back_to_min


def _twist_target(tw: FloatArray, tmin: FloatArray, tmax: FloatArray, tol: float = 0.0) -> tuple[FloatArray, BoolArray]:
    """Nearest angle of [tmin, tmax] to ``tw`` on the circle, and whether ``tw`` was outside (by > tol)."""
    outside, past_max, back_to_min = _twist_outside(tw, tmin, tmax, tol)
    # Nearest end around the circle, not along the line: for a range [100, 170] degrees a twist of -170
    # is 20 degrees past 170 and goes there, not to 100.
    target = np.where(past_max <= back_to_min, tmax, tmin)
    return np.where(outside, target, tw), outside


def clamp_twist(rel: ArrayLike, tmin: ArrayLike, tmax: ArrayLike) -> FloatArray:
    """Clamp the twist of rotations (relative to their reference frames) into ``[tmin, tmax]``.

    Parameters
    ----------
    rel : array_like, shape (M, 3, 3)
        ``ref.T @ frame``.
    tmin, tmax : array_like, shape (M,)
        Twist range in radians, within ``[-pi, pi]``.

    Returns
    -------
    ndarray, shape (M, 3, 3)
        ``rel`` twisted about its own Y axis (so Y is unchanged) to the nearest angle of the range, going
        around the circle. Rows already within range are bit-identical.
    """
    r = _as_rows("rel", rel, (3, 3))
    lo = np.asarray(tmin, dtype=np.float64).reshape(-1)
    hi = np.asarray(tmax, dtype=np.float64).reshape(-1)
    _check_rows(r.shape[0], tmin=lo, tmax=hi)
    out = r.copy()
    tw = twist_angle(r)
    target, outside = _twist_target(tw, lo, hi)
    if outside.any():
        # rel = swing @ Ry(tw); rel @ Ry(delta) = swing @ Ry(tw + delta) keeps the swing (and so Y).
        out[outside] = r[outside] @ _rot_y(target[outside] - tw[outside])
    return out


def _twist_violation(tw: FloatArray, tmin: FloatArray, tmax: FloatArray) -> FloatArray:
    outside, past_max, back_to_min = _twist_outside(tw, tmin, tmax, 0.0)
    out: FloatArray = np.where(outside, np.minimum(past_max, back_to_min), 0.0)
    return out


# --------------------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------------------


# Entries of the cross-product matrix [a]x: rows, columns, which component of a, and its sign.
_CROSS_R = np.array([0, 0, 1, 1, 2, 2])
_CROSS_C = np.array([1, 2, 0, 2, 0, 1])
_CROSS_K = np.array([2, 1, 2, 0, 1, 0])
_CROSS_S = np.array([-1.0, 1.0, 1.0, -1.0, -1.0, 1.0])


def _min_rotation(u: FloatArray, v: FloatArray) -> FloatArray:
    """Rotation matrices taking unit vectors ``u`` to ``v`` by the smallest angle (axis u x v).

    ``R = c I + [a]x + a a^T / (1 + c)`` with ``a = u x v`` and ``c = u . v``. The clamp never asks for a
    half turn (the nearest cone direction is less than pi away), so ``1 + c`` stays away from 0.
    """
    axis = cross(u, v)  # bit-identical to np.cross, without its ~20 us per call
    c = np.einsum("ij,ij->i", u, v)
    rot: FloatArray = axis[:, :, None] * (axis / (1.0 + c)[:, None])[:, None, :]
    rot[:, _CROSS_R, _CROSS_C] += axis[:, _CROSS_K] * _CROSS_S
    rot[:, [0, 1, 2], [0, 1, 2]] += c[:, None]
    return rot


def apply_joint_limits(
    ref: ArrayLike,
    frame: ArrayLike,
    cone: ArrayLike,
    use_cone: ArrayLike,
    twist: ArrayLike,
    use_twist: ArrayLike,
) -> FloatArray:
    """Clamp bone frames into their joint limits.

    The frame's Y axis, expressed in ``ref``, is clamped into the cone and the minimal rotation taking the
    old Y to the clamped Y is applied to the whole frame; then the twist relative to ``ref`` is clamped.

    Parameters
    ----------
    ref : array_like, shape (M, 3, 3)
        Reference frames (parent's pose @ rest), columns = axes.
    frame : array_like, shape (M, 3, 3)
        Bone frames to limit.
    cone : array_like, shape (M, 4)
        Half-angles ``[up, down, left, right]`` in radians.
    use_cone : array_like of bool, shape (M,)
    twist : array_like, shape (M, 2)
        ``[min, max]`` twist in radians.
    use_twist : array_like of bool, shape (M,)

    Returns
    -------
    ndarray, shape (M, 3, 3)
        Limited frames. Rows that are not limited, or already within their limits (to
        ``INSIDE_TOLERANCE``), are bit-identical to ``frame``.
    """
    ref_a = _as_rows("ref", ref, (3, 3))
    fr = _as_rows("frame", frame, (3, 3))
    c = _as_rows("cone", cone, (4,))
    tw_range = _as_rows("twist", twist, (2,))
    uc = np.asarray(use_cone, dtype=np.bool_).reshape(-1)
    ut = np.asarray(use_twist, dtype=np.bool_).reshape(-1)
    m = fr.shape[0]
    _check_rows(m, ref=ref_a, cone=c, use_cone=uc, twist=tw_range, use_twist=ut)
    out = fr.copy()
    any_cone, any_twist = bool(uc.any()), bool(ut.any())
    if not (any_cone or any_twist):
        return out
    # Every row is tested (cheaper than selecting the limited ones first); the use flags mask the result.
    rel = np.matmul(ref_a.transpose(0, 2, 1), fr)
    changed: BoolArray | None = None

    if any_cone:
        outside = ~_inside(rel[:, :, 1], c, INSIDE_TOLERANCE)
        outside &= uc
        if outside.any():
            idx = np.flatnonzero(outside)
            y_out = rel[idx, :, 1]
            y_new = _nearest_on_boundary(y_out, c[idx])
            rel[idx] = np.matmul(_min_rotation(y_out, y_new), rel[idx])
            changed = outside

    if any_twist:
        tw = np.arctan2(rel[:, 0, 2] - rel[:, 2, 0], rel[:, 0, 0] + rel[:, 2, 2])  # see twist_angle
        tmin, tmax = tw_range[:, 0], tw_range[:, 1]
        outside_t, past_max, back_to_min = _twist_outside(tw, tmin, tmax, INSIDE_TOLERANCE)
        outside_t &= ut
        if outside_t.any():
            idx = np.flatnonzero(outside_t)
            target = np.where(past_max[idx] <= back_to_min[idx], tmax[idx], tmin[idx])
            rel[idx] = np.matmul(rel[idx], _rot_y(target - tw[idx]))
            changed = outside_t if changed is None else changed | outside_t

    if changed is not None:
        idx = np.flatnonzero(changed)
        out[idx] = np.matmul(ref_a[idx], rel[idx])
    return out


def limit_violation(
    ref: ArrayLike,
    frame: ArrayLike,
    cone: ArrayLike,
    use_cone: ArrayLike,
    twist: ArrayLike,
    use_twist: ArrayLike,
) -> tuple[FloatArray, FloatArray]:
    """How far frames are outside their limits (radians), measured from the frames themselves.

    Parameters are as for :func:`apply_joint_limits`.

    Returns
    -------
    cone_violation : ndarray, shape (M,)
        Geodesic distance of the frame's Y axis (in ``ref``) to the cone; 0 inside or where unused.
    twist_violation : ndarray, shape (M,)
        Angle from the twist to the nearest end of its range around the circle; 0 inside or where unused.
    """
    ref_a = _as_rows("ref", ref, (3, 3))
    fr = _as_rows("frame", frame, (3, 3))
    c = _as_rows("cone", cone, (4,))
    tw_range = _as_rows("twist", twist, (2,))
    uc = np.asarray(use_cone, dtype=np.bool_).reshape(-1)
    ut = np.asarray(use_twist, dtype=np.bool_).reshape(-1)
    m = fr.shape[0]
    _check_rows(m, ref=ref_a, cone=c, use_cone=uc, twist=tw_range, use_twist=ut)
    rel = np.einsum("mji,mjk->mik", ref_a, fr)
    y = rel[:, :, 1]
    y = y / np.linalg.norm(y, axis=1, keepdims=True)
    cone_v = np.where(uc, cone_violation(y, c), 0.0)
    tw_v = np.where(ut, _twist_violation(twist_angle(rel), tw_range[:, 0], tw_range[:, 1]), 0.0)
    return cone_v, tw_v


# --------------------------------------------------------------------------------------------------------
# Drawing geometry
# --------------------------------------------------------------------------------------------------------


def cone_ring(cone: ArrayLike, n: int = 64) -> FloatArray:
    """Boundary directions of one cone, ordered around it, for drawing.

    Parameters
    ----------
    cone : array_like, shape (4,)
        Half-angles ``[up, down, left, right]`` in radians.
    n : int, optional
        Number of points; a multiple of 4 puts points exactly on the four extreme directions.

    Returns
    -------
    ndarray, shape (n, 3)
        Unit directions in the reference frame, counter-clockwise seen from +Y's tip looking back
        (right, up, left, down). Zero sides give straight edges through +Y (a half-cone) or an arc
        traced out and back (a hinge).
    """
    c = np.asarray(cone, dtype=np.float64).reshape(4)
    if n < 3:
        raise ValueError(f"cone_ring needs n >= 3 points, got {n}")
    psi = np.arange(n) * (_TAU / n)
    cos_psi, sin_psi = np.cos(psi), np.sin(psi)
    # Exact zeros on the axes so a zero side gives exactly zero swing toward it.
    cos_psi[np.isclose(np.abs(np.mod(psi, math.pi) - math.pi / 2), 0.0, atol=1e-12)] = 0.0
    sin_psi[np.isclose(np.abs(np.mod(psi + math.pi / 2, math.pi) - math.pi / 2), 0.0, atol=1e-12)] = 0.0
    a = np.where(cos_psi >= 0.0, c[RIGHT], c[LEFT])
    b = np.where(sin_psi >= 0.0, c[UP], c[DOWN])
    px, pz = a * cos_psi, b * sin_psi
    th = np.sqrt(px * px + pz * pz)
    sinc = np.sinc(th / math.pi)
    ring: FloatArray = np.stack((sinc * px, np.cos(th), sinc * pz), axis=-1)
    return ring


def cone_fan(cone: ArrayLike, n: int = 64, length: float = 1.0) -> tuple[FloatArray, NDArray[np.int32]]:
    """Triangle fan of a cone's surface for a translucent overlay.

    Parameters
    ----------
    cone : array_like, shape (4,)
        Half-angles ``[up, down, left, right]`` in radians.
    n : int, optional
        Number of boundary points (and triangles).
    length : float, optional
        Distance of the boundary points from the apex.

    Returns
    -------
    vertices : ndarray, shape (n + 1, 3)
        The apex (origin) first, then :func:`cone_ring` scaled by ``length``.
    triangles : ndarray of int32, shape (n, 3)
        ``(apex, ring[i], ring[i + 1])``, closing back to ``ring[0]``. Zero sides give degenerate
        (zero-area) triangles, which draw as nothing.
    """
    ring = cone_ring(cone, n) * float(length)
    vertices: FloatArray = np.concatenate((np.zeros((1, 3)), ring), axis=0)
    i = np.arange(n, dtype=np.int32)
    triangles = np.stack((np.zeros(n, dtype=np.int32), i + 1, (i + 1) % n + 1), axis=1).astype(np.int32)
    return vertices, triangles
