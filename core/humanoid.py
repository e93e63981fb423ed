"""Finding a humanoid in a skeleton: arms, legs, spine, neck and head, by bone names or by topology.

bpy-free: the input is the skeleton as plain data (names, parents, rest heads and tails in armature space),
the output a `Humanoid` of bone indices, or a `NotHumanoid` that says why. `rig/` reads the armature,
`operators/setup.py` creates the chains. Names are read with `core.names` (every convention there); when
they do not give two arms and two legs, the topology decides: mirrored sibling branches (equal shape, equal
bone lengths, heads mirrored through one plane) are limbs, the pair that hangs lower in the hierarchy is
the legs. Everything in the middle comes from the limbs: the hips are where the legs meet, the chest where
the arms meet, the spine the bones from just above the hips up to the chest, the neck the bones from the
chest to the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .names import is_joint_named, read_name

F64 = NDArray[np.float64]

SIDES = ("L", "R")


@dataclass(frozen=True)
class SkeletonInfo:
    """A skeleton as the recognition reads it: names, parents (-1 for roots), rest heads/tails (armature)."""

    names: tuple[str, ...]
    parent: tuple[int, ...]
    head: F64  # (B,3)
    tail: F64  # (B,3)

    _kids: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for i, p in enumerate(self.parent):
            self._kids.setdefault(p, []).append(i)

    @property
    def length(self) -> F64:
        return np.asarray(np.linalg.norm(self.tail - self.head, axis=1), dtype=np.float64)

    def children(self, b: int) -> list[int]:
        """The bones whose parent is `b` (the root bones for -1)."""
        return self._kids.get(b, [])

    def line(self, b: int) -> list[int]:
        """`b` and its ancestors, up to the root."""
        out = [b]
        while self.parent[out[-1]] >= 0:
            out.append(self.parent[out[-1]])
        return out


@dataclass(frozen=True)
class Limb:
    """One arm or leg: the bones of its upper and lower segments (root first), and the end bone.

    A segment is one bone, except in rigs that split it into a bend and a twist bone in line (Daz Genesis:
    lShldrBend -> lShldrTwist); `clavicle` is the bone above an arm that is not part of its chain.
    """

    kind: str  # 'arm' or 'leg'
    side: str  # 'L' or 'R'
    upper: tuple[int, ...]
    lower: tuple[int, ...]
    end: int  # hand or foot, -1 when the lower segment is a leaf
    clavicle: int = -1

    @property
    def bones(self) -> tuple[int, ...]:
        return self.upper + self.lower

    @property
    def two_bone(self) -> bool:
        return len(self.upper) == 1 and len(self.lower) == 1


@dataclass(frozen=True)
class Humanoid:
    """Bone indices of a recognised humanoid. `by` says how: a naming convention's name or 'topology'."""

    by: str
    arms: dict[str, Limb]
    legs: dict[str, Limb]
    hips: int
    chest: int
    spine: tuple[int, ...]  # from the first bone above the hips up to the chest, root first
    neck: tuple[int, ...] = ()  # from the first bone above the chest up to the head (the head included)
    head: int = -1
    root: int = -1  # the bone above the hips every bone hangs from, -1 when the hips are the top
    fingers: dict[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class NotHumanoid:
    """Why a skeleton was not taken for a humanoid (a sentence a user can act on)."""

    why: str


# ---------------------------------------------------------------------------------------------------------
# Conventions, for the report: which one a rig's names follow (the first whose markers match).
# ---------------------------------------------------------------------------------------------------------

#: (label, markers, whole): a marker is a prefix of a lower-case name, or with `whole` the whole name.
#: A whole-name convention needs two of its markers: one name alone (`UpperArm_L` in a skeleton whose legs are
#: `LowerLeg_R`) does not make a skeleton Unreal's.
CONVENTIONS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("Mixamo", ("mixamorig",), False),
    ("Character Creator", ("cc_base_",), False),
    ("VRM/VRoid", ("j_bip_",), False),
    # Unreal's own words (`upperarm_l` alone is any tool's upper arm).
    ("Unreal mannequin", ("calf_l", "thigh_l", "spine_01", "clavicle_l", "calf_r", "thigh_r"), True),
    ("Rigify/Blender .L/.R", ("upper_arm.l", "forearm.l", "shin.l", "thigh.l"), True),
    ("Daz Genesis", ("lshldrbend", "lforearmbend", "lthighbend", "lshldr", "lshin", "lforearm"), True),
    ("3ds Max Biped", ("bip01", "bip001"), False),
)

#: The label of joint-named skeletons (`names.is_joint_named`).
JOINT_NAMED = "CMU/BVH joint"
#: The label when names give the limbs but follow none of the conventions above.
GENERIC = "generic"


def convention_of(names: tuple[str, ...]) -> str:
    """Which convention's names a skeleton uses, for the report ('generic' when none is clear)."""
    lower = [n.lower() for n in names]
    if is_joint_named(names):
        return JOINT_NAMED
    for label, markers, whole in CONVENTIONS:
        hits = {m for m in markers for n in lower if (n == m if whole else n.startswith(m))}
        if len(hits) >= (2 if whole else 1):
            return label
    return GENERIC


# ---------------------------------------------------------------------------------------------------------
# By names
# ---------------------------------------------------------------------------------------------------------


def _by_names(sk: SkeletonInfo) -> tuple[dict[str, Limb], dict[str, Limb]]:
    """Arms and legs whose bones the names give, each only if the bones hang from each other as a limb."""
    found: dict[tuple[str, str], list[int]] = {}
    joint_named = is_joint_named(sk.names)
    for i, name in enumerate(sk.names):
        r = read_name(name, joint_named)
        if r.side and r.role:
            found.setdefault((r.role, r.side), []).append(i)
    arms: dict[str, Limb] = {}
    legs: dict[str, Limb] = {}
    for side in SIDES:
        for kind, (upper_role, lower_role, end_role) in (
            ("arm", ("upper_arm", "forearm", "hand")),
            ("leg", ("thigh", "shin", "foot")),
        ):
            limb = _limb_from_roles(sk, found, kind, side, upper_role, lower_role, end_role, joint_named)
            if limb is not None:
                (arms if kind == "arm" else legs)[side] = limb
    return arms, legs


def _limb_from_roles(
    sk: SkeletonInfo,
    found: dict[tuple[str, str], list[int]],
    kind: str,
    side: str,
    upper_role: str,
    lower_role: str,
    end_role: str,
    joint_named: bool = False,
) -> Limb | None:
    for upper in found.get((upper_role, side), []):
        for lower in found.get((lower_role, side), []):
            # The lower segment hangs from the upper one, with at most one (twist) bone between.
            line = sk.line(lower)
            if upper not in line[1:3]:
                continue
            upper_seg = tuple(reversed(line[1 : line.index(upper) + 1]))
            # The nearest end below (CMU's `LeftWrist` before its child `lhand`: both read as hands).
            ends = sorted(
                (e for e in found.get((end_role, side), []) if lower in sk.line(e)[1:3]), key=lambda e: len(sk.line(e))
            )
            if ends:
                end = ends[0]
                lower_seg = tuple(reversed(sk.line(end)[1 : sk.line(end).index(lower) + 1]))
            else:
                end, lower_seg = -1, (lower,)
            clavicle = -1
            if kind == "arm":
                above = sk.parent[upper_seg[0]]
                if above >= 0 and read_name(sk.names[above], joint_named).role == "clavicle":
                    clavicle = above
            return Limb(kind, side, upper_seg, lower_seg, end, clavicle)
    return None


# ---------------------------------------------------------------------------------------------------------
# By topology
# ---------------------------------------------------------------------------------------------------------


def _main_path(sk: SkeletonInfo, b: int) -> list[int]:
    """`b` and the bones below it, following at each fork the child with the longest path to a leaf."""
    memo: dict[int, int] = {}

    def height(i: int) -> int:
        if i not in memo:
            memo[i] = 1 + max((height(c) for c in sk.children(i)), default=0)
        return memo[i]

    path = [b]
    while True:
        kids = sk.children(path[-1])
        if not kids:
            return path
        path.append(max(kids, key=height))


#: How much mirrored bones may differ in length: a real actor's left and right limbs differ by a few per
#: cent (CMU subject 131: up to 9 % on a foot), and a mocap end stub by its whole length next to the longest.
MIRROR_LENGTH_TOLERANCE = 0.15
MIRROR_STUB = 0.03  # of the skeleton's longest bone


def _alike(sk: SkeletonInfo, a: int, b: int, scale: float) -> bool:
    """Whether the subtrees at `a` and `b` have one shape, bone lengths equal within the tolerances."""
    la, lb = float(sk.length[a]), float(sk.length[b])
    if abs(la - lb) > MIRROR_LENGTH_TOLERANCE * max(la, lb) + MIRROR_STUB * scale:
        return False
    ka, kb = sk.children(a), sk.children(b)
    if len(ka) != len(kb):
        return False
    # Children paired by the size of their subtrees, then their length (siblings rarely tie on both).
    order = [sorted(kids, key=lambda c: (len(_subtree(sk, c)), float(sk.length[c]))) for kids in (ka, kb)]
    return all(_alike(sk, x, y, scale) for x, y in zip(order[0], order[1], strict=True))


def _mirrored_pairs(sk: SkeletonInfo) -> list[tuple[int, int]]:
    """Sibling bones whose subtrees have one shape and whose heads lie apart (a left and a right).

    A side's branch may hang from a bone of its own at the body (CMU's `LHipJoint` and `RHipJoint`, starting
    at the hips' head): such siblings whose heads meet are compared too, when their tails lie apart."""
    scale = max(float(sk.length.max()), 1e-9)
    pairs = []
    for p in sorted(set(sk.parent)):
        kids = sk.children(p)
        for ai, a in enumerate(kids):
            for b in kids[ai + 1 :]:
                apart = float(np.linalg.norm(sk.head[a] - sk.head[b]))
                if apart < 0.05 * scale and float(np.linalg.norm(sk.tail[a] - sk.tail[b])) < 0.05 * scale:
                    continue
                if len(_main_path(sk, a)) >= 3 and _alike(sk, a, b, scale):
                    pairs.append((a, b))
    return pairs


def _limb_on_path(sk: SkeletonInfo, kind: str, side: str, path: list[int], best: int) -> Limb:
    """Bones `best` and `best + 1` of a branch's main path are the limb (a clavicle above them)."""
    upper, lower = path[best], path[best + 1]
    end = path[best + 2] if best + 2 < len(path) else -1
    clavicle = path[best - 1] if kind == "arm" and best > 0 else -1
    return Limb(kind, side, (upper,), (lower,), end, clavicle)


def _limb_start(sk: SkeletonInfo, left: list[int], right: list[int]) -> int:
    """Where both sides' limbs start on their main paths: the two longest consecutive bones of the two sides
    together (one place for both, so a collar a little longer on one side does not shift that side's arm)."""
    n = min(len(left), len(right))
    return max(
        range(n - 1),
        key=lambda i: float(
            sk.length[left[i]] + sk.length[left[i + 1]] + sk.length[right[i]] + sk.length[right[i + 1]]
        ),
    )


def _by_topology(sk: SkeletonInfo) -> tuple[dict[str, Limb], dict[str, Limb]] | str:
    pairs = _mirrored_pairs(sk)
    if len(pairs) < 2:
        return f"found {len(pairs)} mirrored limb branch pair(s), a humanoid has 2 (arms and legs)"
    # Limbs are long: pairs much shorter than the longest (ears, breasts, fingers) are not limbs.
    reach = [float(sum(sk.length[i] for i in _main_path(sk, a))) for a, _ in pairs]
    pairs = [ab for ab, r in zip(pairs, reach, strict=True) if r >= 0.3 * max(reach)]
    if len(pairs) < 2:
        return "found one long mirrored branch pair, a humanoid has 2 (arms and legs)"
    # Legs hang higher in the hierarchy than arms (the hips are above the chest): the shallowest pair is the
    # legs; the arms are the longest pair among those that hang below the legs' parent.
    depth = [len(sk.line(a)) for a, _ in pairs]
    order = sorted(range(len(pairs)), key=lambda k: depth[k])
    legs_pair = pairs[order[0]]
    arm_candidates = [
        pairs[k] for k in order[1:] if sk.parent[legs_pair[0]] in sk.line(pairs[k][0]) or sk.parent[legs_pair[0]] < 0
    ]
    if not arm_candidates:
        return "found mirrored branches, but no second pair above the first (arms above the legs)"
    arms_pair = max(arm_candidates, key=lambda ab: sum(sk.length[i] for i in _main_path(sk, ab[0])))
    # The side: which of the two is left is a convention (+X is the character's left in Blender's metarigs).
    out: list[dict[str, Limb]] = []
    for kind, (a, b) in (("arm", arms_pair), ("leg", legs_pair)):
        # Heads may meet (CMU's hip joints start at the hips' head): the whole branch's side decides.
        centre_a = np.mean(sk.tail[_subtree(sk, a)], axis=0)
        centre_b = np.mean(sk.tail[_subtree(sk, b)], axis=0)
        left, right = (a, b) if centre_a[0] >= centre_b[0] else (b, a)
        lpath, rpath = _main_path(sk, left), _main_path(sk, right)
        best = _limb_start(sk, lpath, rpath)
        out.append({"L": _limb_on_path(sk, kind, "L", lpath, best), "R": _limb_on_path(sk, kind, "R", rpath, best)})
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------------------
# The middle: hips, spine, chest, neck, head
# ---------------------------------------------------------------------------------------------------------


def _common_ancestor(sk: SkeletonInfo, a: int, b: int) -> int:
    above_b = set(sk.line(b))
    return next((x for x in sk.line(a) if x in above_b), -1)


def _head_of(sk: SkeletonInfo, chest: int, limbs: set[int]) -> int:
    """The head: by name below the chest, else the end of the longest branch above the chest off the arms."""
    named = [
        i for i, n in enumerate(sk.names) if read_name(n).role == "head" and chest in sk.line(i)[1:] and i not in limbs
    ]
    if named:
        return min(named, key=lambda i: len(sk.line(i)))
    kids = [c for c in sk.children(chest) if not (set(_subtree(sk, c)) & limbs)]
    if not kids:
        return -1
    path = _main_path(sk, max(kids, key=lambda c: len(_main_path(sk, c))))
    # Up to where the path forks (face bones, eyes) or ends: the longest bone there is the head (the neck's
    # bones are short; a nub like HeadTop_End at the end is not a candidate).
    fork = next((i for i, b in enumerate(path) if len(sk.children(b)) != 1), len(path) - 1)
    candidates = path[: fork + 1]
    last = candidates[-1]
    if len(candidates) > 1 and not sk.children(last) and sk.length[last] < 0.6 * sk.length[candidates[-2]]:
        candidates = candidates[:-1]
    return max(candidates, key=lambda b: float(sk.length[b]))


def _subtree(sk: SkeletonInfo, b: int) -> list[int]:
    out = [b]
    for c in sk.children(b):
        out += _subtree(sk, c)
    return out


def _fingers(sk: SkeletonInfo, hand: int) -> tuple[tuple[int, ...], ...]:
    """Each finger below `hand`: its bones from the first below the hand (palms skipped) to its leaf."""
    out = []
    for leaf in (i for i in _subtree(sk, hand) if i != hand and not sk.children(i)):
        line = sk.line(leaf)
        bones = line[: line.index(hand)]
        bones = [b for b in bones if "palm" not in sk.names[b].lower() and "metacarpal" not in sk.names[b].lower()]
        if len(bones) >= 2:
            out.append(tuple(reversed(bones[:4])))
    return tuple(out)


def recognise(sk: SkeletonInfo) -> Humanoid | NotHumanoid:
    """Arms, legs, spine, neck and head of `sk`, by names first and topology when names do not give them."""
    arms, legs = _by_names(sk)
    by = convention_of(sk.names)
    if len(arms) < 2 or len(legs) < 2:
        topo = _by_topology(sk)
        if isinstance(topo, str):
            named = ", ".join(f"{k} {s}" for k, d in (("arm", arms), ("leg", legs)) for s in d) or "no limb"
            return NotHumanoid(
                f"not a humanoid: its bone names give {named} (a humanoid has two arms and two legs), and by "
                f"shape it {topo}"
            )
        arms, legs = topo
        by = "topology"
    hips = _common_ancestor(sk, legs["L"].upper[0], legs["R"].upper[0])
    arm_root = {s: arms[s].clavicle if arms[s].clavicle >= 0 else arms[s].upper[0] for s in SIDES}
    chest = _common_ancestor(sk, arm_root["L"], arm_root["R"])
    if hips < 0 or chest < 0:
        return NotHumanoid("not a humanoid: its arms (or legs) do not hang from one body (no common parent bone)")
    base = _common_ancestor(sk, hips, chest)
    if base < 0 or chest == base:
        return NotHumanoid(
            f"not a humanoid: the arms meet at '{sk.names[chest]}', which is not above the hips "
            f"'{sk.names[hips]}' (no spine between them)"
        )
    line = sk.line(chest)
    spine = tuple(reversed(line[: line.index(base)]))
    limb_bones = {b for limb in (*arms.values(), *legs.values()) for b in _subtree(sk, limb.bones[0])}
    limb_bones |= {arm_root[s] for s in SIDES}
    head = _head_of(sk, chest, limb_bones)
    neck: tuple[int, ...] = ()
    if head >= 0:
        hl = sk.line(head)
        neck = tuple(reversed(hl[: hl.index(chest)]))
    root = base
    while sk.parent[root] >= 0:
        root = sk.parent[root]
    # The hips' own bone is the lowest common one; a root above it (root, CC_Base_BoneRoot) carries controls.
    hips_bone = base if base != chest else hips
    fingers = {s: _fingers(sk, arms[s].end) for s in SIDES if arms[s].end >= 0}
    return Humanoid(
        by=by,
        arms=arms,
        legs=legs,
        hips=hips_bone,
        chest=chest,
        spine=spine,
        neck=neck,
        head=head,
        root=root if root != hips_bone else -1,
        fingers=fingers,
    )
