"""Bone-name conventions of humanoid skeletons, as data, and the one function that reads a name with them.

Everything a character set-up or Symmetrize knows about names lives here (STYLE: knowledge as data). A name
is read in three steps, all on a lower-cased copy:

1. known prefixes are dropped (a namespace up to the last ``:`` as Mixamo writes it, ``CC_Base_``, ...);
2. a side is read from the first matching side pattern (``.L``, ``_l``, ``Left``, ``L_``, Daz's ``l``...);
3. what is left, without separators and digits at the end, is the *core*: looked up in `ROLES`.

Nothing here imports bpy; `tests/unit/test_humanoid.py` reads name lists of every convention.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: Prefixes dropped before a name is read (lower case, tried in order, repeatedly).
PREFIXES: tuple[str, ...] = (
    "armature_",  # FBX exports from Blender that prefix the armature's name
    "cc_base_",  # Character Creator / iClone (CC_Base_L_Upperarm)
    "j_bip_",  # VRoid / VRM (J_Bip_L_UpperArm, J_Bip_C_Hips)
    "j_sec_",  # VRoid secondary (hair, skirt): read, never a role
    "def-",  # Rigify generated deform bones (DEF-upper_arm.L)
    "org-",  # Rigify generated original bones (ORG-upper_arm.L)
    "bip01 ",  # 3ds Max Biped (Bip01 L UpperArm)
    "bip001 ",
    "bip01_",
    "bip001_",
)

#: Side patterns, tried in order on the prefix-free lower-case name. Each gives (side, rest of the name).
#: ``strict`` patterns only count when the rest is a known role core (Daz's bare ``l``/``r`` prefix would
#: otherwise read ``leg`` as a left ``eg``).
SIDE_PATTERNS: tuple[tuple[re.Pattern[str], bool], ...] = (
    # Blender / Rigify (upper_arm.L, thigh.R.001), Unreal (upperarm_l, calf_r), generic (-L, _R).
    (re.compile(r"^(?P<core>.+?)[._\- ](?P<side>[lr])(?P<num>[._]\d+)?$"), False),
    # Mixamo (LeftArm, RightUpLeg), generic (Left_Hand, left hand).
    (re.compile(r"^(?P<side>left|right)[._\- ]?(?P<core>.+)$"), False),
    # Generic suffix words (Arm_Left, handRight).
    (re.compile(r"^(?P<core>.+?)[._\- ]?(?P<side>left|right)$"), False),
    # Character Creator and VRM once their prefix is gone (l_upperarm), Biped (l upperarm), generic L_Arm.
    (re.compile(r"^(?P<side>[lr])[._\- ](?P<core>.+)$"), False),
    # VRM's centre bones (J_Bip_C_Hips).
    (re.compile(r"^(?P<side>c)[._\- ](?P<core>.+)$"), False),
    # Daz Genesis (lShldrBend, rThigh): only with a known core.
    (re.compile(r"^(?P<side>[lr])(?P<core>[a-z].+)$"), True),
)

#: Role of a bone, by its core (name without prefix, side, separators and trailing digits).
ROLES: dict[str, str] = {
    # Clavicle: Unreal `clavicle_l`, CC `CC_Base_L_Clavicle`; Mixamo `LeftShoulder`, Rigify `shoulder.L`,
    # VRM `J_Bip_L_Shoulder`; Daz `lCollar`.
    "clavicle": "clavicle",
    "shoulder": "clavicle",
    "collar": "clavicle",
    # Upper arm: Unreal `upperarm_l`, Rigify `upper_arm.L`, VRM `J_Bip_L_UpperArm`, CC `CC_Base_L_Upperarm`,
    # Biped `Bip01 L UpperArm`; Mixamo `LeftArm`; Daz Genesis 3/8 `lShldrBend`, Genesis 1/2 `lShldr`.
    "upperarm": "upper_arm",
    "arm": "upper_arm",
    "shldrbend": "upper_arm",
    "shldr": "upper_arm",
    # Forearm: Mixamo `LeftForeArm`, Rigify `forearm.L`, CC `CC_Base_L_Forearm`, Biped `Bip01 L Forearm`;
    # Unreal `lowerarm_l`, VRM `J_Bip_L_LowerArm`; Daz `lForearmBend`.
    "forearm": "forearm",
    "lowerarm": "forearm",
    "forearmbend": "forearm",
    # Hand: every convention (`hand_l`, `LeftHand`, `hand.L`, `J_Bip_L_Hand`, `CC_Base_L_Hand`, `lHand`).
    "hand": "hand",
    # Thigh: Unreal `thigh_l`, Rigify `thigh.L`, CC `CC_Base_L_Thigh`, Daz Genesis 1/2 `lThigh`, Biped
    # `Bip01 L Thigh`; Mixamo `LeftUpLeg`; VRM `J_Bip_L_UpperLeg`; Daz Genesis 3/8 `lThighBend`.
    "thigh": "thigh",
    "upleg": "thigh",
    "upperleg": "thigh",
    "thighbend": "thigh",
    # Shin: Unreal `calf_l`, CC `CC_Base_L_Calf`, Biped `Bip01 L Calf`; Rigify `shin.L`, Daz `lShin`;
    # Mixamo `LeftLeg`; VRM `J_Bip_L_LowerLeg`.
    "calf": "shin",
    "shin": "shin",
    "leg": "shin",
    "lowerleg": "shin",
    # Foot: every convention.
    "foot": "foot",
    # Centre bones. Hips: Mixamo `Hips`, VRM `J_Bip_C_Hips`; Unreal `pelvis`, CC `CC_Base_Pelvis`, Daz
    # `pelvis`; Daz `hip`, CC `CC_Base_Hip` (above the pelvis: the lowest common one wins, see humanoid.py).
    "hips": "hips",
    "pelvis": "hips",
    "hip": "hips",
    # Head and neck: every convention (`head`, `Head`, `neck_01`, `Neck`, `J_Bip_C_Neck`, `CC_Base_NeckTwist01`).
    "head": "head",
    "neck": "neck",
    "necktwist": "neck",
    # Spine words that name no limb: CMU `lowerback`, `upperback`, `Chest`, `Chest2`, `lowerneck`, `upperneck`;
    # read so a report can name them, never used to find limbs.
    "lowerback": "spine",
    "upperback": "spine",
    "spine": "spine",
    "chest": "chest",
    "lowerneck": "neck",
    "upperneck": "neck",
}

#: Joint-named skeletons (CMU's BVH files, and BVH exports that keep their joint names) name each bone after
#: the joint at its head: `LeftHip` is the thigh (it runs from the hip joint to the knee), `LeftKnee` the shin,
#: `LeftAnkle` the foot, `LeftShoulder` the upper arm, `LeftElbow` the forearm, `LeftWrist` the hand and
#: `LeftCollar` the clavicle. Source: the CMU Graphics Lab Motion Capture Database's BVH conversions (the
#: "3ds Max friendly" and Bruce Hahne's), the names as Blender's BVH importer keeps them.
JOINT_ROLES: dict[str, str] = {
    "collar": "clavicle",
    "clavicle": "clavicle",
    "shoulder": "upper_arm",
    "elbow": "forearm",
    "wrist": "hand",
    "hip": "thigh",
    "knee": "shin",
    "ankle": "foot",
}

#: Cores that only a joint-named skeleton gives a side: a skeleton with a left and a right of two of them is
#: read with `JOINT_ROLES` (no convention that names bones calls one `LeftKnee`).
JOINT_MARKERS = frozenset({"knee", "elbow", "wrist", "ankle"})

LIMB_ROLES = ("clavicle", "upper_arm", "forearm", "hand", "thigh", "shin", "foot")
CENTRE_ROLES = ("hips", "head", "neck")

_SEPARATORS = re.compile(r"[._\- ]+")
_TRAILING_DIGITS = re.compile(r"\d+$")


@dataclass(frozen=True)
class NameReading:
    """What a bone name says: its side ('L', 'R' or '' for none/centre), its core, and its role (or '')."""

    side: str
    core: str
    role: str


def strip_prefixes(lower: str) -> str:
    """`lower` without a namespace (``mixamorig1:``) and known prefixes (`PREFIXES`)."""
    name = lower.rsplit(":", 1)[-1]
    changed = True
    while changed:
        changed = False
        for prefix in PREFIXES:
            if name.startswith(prefix) and len(name) > len(prefix):
                name = name[len(prefix) :]
                changed = True
    return name


def core_of(text: str) -> str:
    """`text` without separators and trailing digits (``upper_arm`` -> ``upperarm``, ``neck_01`` -> ``neck``)."""
    return _TRAILING_DIGITS.sub("", _SEPARATORS.sub("", text))


def read_name(name: str, joint_named: bool = False) -> NameReading:
    """Side, core and role of one bone name, by the conventions above (case and prefixes do not matter).

    `joint_named`: the skeleton names bones after the joint at their head (`is_joint_named`), so a sided
    joint word takes its `JOINT_ROLES` role (`LeftHip` is a thigh, not the hips).
    """
    bare = strip_prefixes(name.lower())
    for pattern, strict in SIDE_PATTERNS:
        m = pattern.match(bare)
        if m is None:
            continue
        core = core_of(m.group("core"))
        if strict and core not in ROLES and not (joint_named and core in JOINT_ROLES):
            continue
        side = m.group("side")
        side = "L" if side in {"l", "left"} else "R" if side in {"r", "right"} else ""
        if joint_named and side in {"L", "R"} and core in JOINT_ROLES:
            return NameReading(side, core, JOINT_ROLES[core])
        return NameReading(side, core, ROLES.get(core, ""))
    core = core_of(bare)
    return NameReading("", core, ROLES.get(core, ""))


def is_joint_named(names: Iterable[str]) -> bool:
    """Whether a skeleton's names are joint names (CMU/BVH): a left and a right of two `JOINT_MARKERS`."""
    seen: set[tuple[str, str]] = set()
    for name in names:
        r = read_name(name, joint_named=True)
        if r.side in {"L", "R"} and r.core in JOINT_MARKERS:
            seen.add((r.side, r.core))
    both = {core for side, core in seen if (("R" if side == "L" else "L"), core) in seen}
    return len(both) >= 2


# ---------------------------------------------------------------------------------------------------------
# Mirrored names (Symmetrize)
# ---------------------------------------------------------------------------------------------------------

_SWAP = {"l": "r", "r": "l", "L": "R", "R": "L"}


def _swap_word(word: str) -> str:
    """Left <-> Right in the case `word` is written in (LEFT, Left, left)."""
    other = "right" if word.lower() == "left" else "left"
    if word.isupper():
        return other.upper()
    if word[0].isupper():
        return other.capitalize()
    return other


# Mirror rules on the name as written (case kept), tried in order; each is (pattern, replacement function).
# The first rule whose result names an existing bone wins (see `mirror_name`), so a rule may be ambitious.
_MIRROR_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    # Suffix side: upper_arm.L, upperarm_l, hand-R, thigh.L.001 (Blender, Rigify, Unreal, generic).
    (
        re.compile(r"^(?P<a>.+?[._\- ])(?P<s>[lLrR])(?P<b>([._]\d+)?)$"),
        lambda m: m["a"] + _SWAP[m["s"]] + m["b"],
    ),
    # Left/Right as a word anywhere (Mixamo mixamorig:LeftArm, generic Arm_Left).
    (
        re.compile(r"^(?P<a>.*?)(?P<w>left|right|Left|Right|LEFT|RIGHT)(?P<b>.*)$"),
        lambda m: m["a"] + _swap_word(m["w"]) + m["b"],
    ),
    # Side letter between separators after a prefix: CC_Base_L_Upperarm, J_Bip_L_Hand, Bip01 L Thigh, L_Arm.
    (
        re.compile(r"^(?P<a>(.*[._\- ])?)(?P<s>[lLrR])(?P<b>[._\- ].+)$"),
        lambda m: m["a"] + _SWAP[m["s"]] + m["b"],
    ),
    # Daz's bare side letter (lShldrBend, rThigh), after any namespace.
    (
        re.compile(r"^(?P<a>(.*:)?)(?P<s>[lr])(?P<b>[A-Z].*)$"),
        lambda m: m["a"] + _SWAP[m["s"]] + m["b"],
    ),
)


def mirror_candidates(name: str) -> list[str]:
    """Every mirrored spelling of `name` the rules give, in rule order (may be empty: a centre bone)."""
    out = []
    for pattern, swap in _MIRROR_RULES:
        m = pattern.match(name)
        if m is not None:
            other = swap(m)
            if other != name and other not in out:
                out.append(other)
    return out


def mirror_name(name: str, exists: Callable[[str], bool] | None = None) -> str:
    """The other side's name for `name`, or '' when it has none.

    With `exists`, the first candidate that exists wins (so ``mixamorig:LeftArm`` is not read as a suffix
    side); without it, the first candidate.
    """
    candidates = mirror_candidates(name)
    if exists is None:
        return candidates[0] if candidates else ""
    return next((c for c in candidates if exists(c)), "")
