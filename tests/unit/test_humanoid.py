"""Humanoid recognition, name reading and mirroring on name lists and skeleton data, without Blender.

The skeletons come from `demo/humanoids.py`, which writes each convention's names as its tool does (Mixamo,
the Unreal mannequin, VRoid/VRM, Character Creator, Daz Genesis 8, generic prefixes and words, Blender's
.L/.R) and one with names that say nothing (``Bone.001``...), for the topology fallback.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.character import SetupOptions, facing, plan
from core.humanoid import Humanoid, NotHumanoid, SkeletonInfo, recognise
from core.mirror import mirror_limits
from core.names import mirror_name, read_name
from demo import humanoids

NAMED = sorted(humanoids.CONVENTIONS)


def skeleton(rows: list[humanoids.Row]) -> SkeletonInfo:
    names = tuple(r[0] for r in rows)
    index = {n: i for i, n in enumerate(names)}
    return SkeletonInfo(
        names,
        tuple(index.get(r[1], -1) for r in rows),
        np.array([r[2] for r in rows], dtype=np.float64),
        np.array([r[3] for r in rows], dtype=np.float64),
    )


def found(convention: str, bent: bool = True) -> tuple[Humanoid, SkeletonInfo]:
    sk = skeleton(humanoids.bones(convention, bent))
    h = recognise(sk)
    assert isinstance(h, Humanoid), f"{convention}: {h}"
    return h, sk


@pytest.mark.parametrize("convention", NAMED)
@pytest.mark.parametrize("bent", [True, False])
def test_every_convention_gives_its_limbs_spine_and_head(convention: str, bent: bool) -> None:
    h, sk = found(convention, bent)
    want = humanoids.role_names(convention)
    names = sk.names
    assert h.by != "topology", f"{convention}: the names alone must give the limbs"
    for side in ("L", "R"):
        arm, leg = h.arms[side], h.legs[side]
        assert names[arm.upper[0]] == want[f"upperarm.{side}"]
        assert names[arm.lower[0]] == want[f"forearm.{side}"]
        assert names[arm.end] == want[f"hand.{side}"]
        assert names[leg.upper[0]] == want[f"thigh.{side}"]
        assert names[leg.lower[0]] == want[f"shin.{side}"]
        assert names[leg.end] == want[f"foot.{side}"]
        # Daz splits each segment into a bend and a twist bone in line: both are in the chain.
        assert arm.two_bone == ("upperarm_twist_inline" not in humanoids.CONVENTIONS[convention])
    assert names[h.chest] == want["chest"]
    assert names[h.spine[0]] == want["spine1"], "the spine starts at the first bone above the hips"
    assert names[h.head] == want["head"]
    assert names[h.neck[0]] == want["neck1"]


def test_names_with_nothing_to_say_are_read_by_topology() -> None:
    h, _sk = found("anonymous")
    ref, _ = found("generic_dot")
    assert h.by == "topology"
    # The same skeleton with names: topology finds the same bones (index for index).
    for side in ("L", "R"):
        assert h.arms[side].bones == ref.arms[side].bones
        assert h.legs[side].bones == ref.legs[side].bones
    assert h.spine == ref.spine and h.head == ref.head


def test_case_and_prefixes_do_not_matter() -> None:
    rows = [
        (n.replace("mixamorig:", "mixamorig1:").upper() if "Left" in n or "Right" in n else n, p, h, t)
        for n, p, h, t in humanoids.bones("mixamo")
    ]
    # Parents keep their original names in `rows`' second column: rename them the same way.
    rename = {o[0]: r[0] for o, r in zip(humanoids.bones("mixamo"), rows, strict=True)}
    rows = [(n, rename.get(p, p), h, t) for n, p, h, t in rows]
    h = recognise(skeleton(rows))
    assert isinstance(h, Humanoid) and h.by == "Mixamo"


def test_a_skeleton_that_is_not_a_humanoid_says_why() -> None:
    # A tail: one line of bones. A spider-like star: eight mirrored legs off one body.
    line = [(f"b{i}", f"b{i - 1}" if i else "", (0.0, 0.0, i * 0.1), (0.0, 0.0, i * 0.1 + 0.1)) for i in range(8)]
    out = recognise(skeleton(line))
    assert isinstance(out, NotHumanoid) and "not a humanoid" in out.why and "2 (arms and legs)" in out.why
    star: list[humanoids.Row] = [("body", "", (0.0, 0.0, 0.5), (0.0, 0.1, 0.5))]
    for k in range(4):
        for side, sx in (("L", 1.0), ("R", -1.0)):
            y = -0.1 + 0.07 * k
            star.append((f"leg{k}.{side}", "body", (0.05 * sx, y, 0.5), (0.3 * sx, y, 0.6)))
            star.append((f"leg{k}b.{side}", f"leg{k}.{side}", (0.3 * sx, y, 0.6), (0.5 * sx, y, 0.0)))
            star.append((f"leg{k}c.{side}", f"leg{k}b.{side}", (0.5 * sx, y, 0.0), (0.55 * sx, y, 0.0)))
    out = recognise(skeleton(star))
    assert isinstance(out, NotHumanoid), "eight legs off one bone have no spine between arms and legs"


@pytest.mark.parametrize(
    ("name", "side", "role"),
    [
        ("mixamorig:LeftForeArm", "L", "forearm"),
        ("mixamorig1:RightUpLeg", "R", "thigh"),
        ("upperarm_l", "L", "upper_arm"),
        ("calf_r", "R", "shin"),
        ("upper_arm.L", "L", "upper_arm"),
        ("shin.R", "R", "shin"),
        ("J_Bip_L_LowerArm", "L", "forearm"),
        ("CC_Base_R_Calf", "R", "shin"),
        ("lShldrBend", "L", "upper_arm"),
        ("rForearmBend", "R", "forearm"),
        ("Bip01 L Thigh", "L", "thigh"),
        ("Armature_L_Hand", "L", "hand"),
        ("Hand_Left", "L", "hand"),
        ("DEF-thigh.L", "L", "thigh"),
        ("leg", "", "shin"),  # no side: not read as Daz's "l" + "eg"
        ("lowerarm", "", "forearm"),
        ("pelvis.L", "L", "hips"),  # Rigify's pelvis.L is not the hips: callers need a side-less hips
        ("spine_01", "", "spine"),
    ],
)
def test_read_name(name: str, side: str, role: str) -> None:
    r = read_name(name)
    assert (r.side, r.role) == (side, role), f"{name}: {r}"


@pytest.mark.parametrize(
    ("name", "other"),
    [
        ("upper_arm.L", "upper_arm.R"),
        ("hand_r", "hand_l"),
        ("mixamorig:LeftArm", "mixamorig:RightArm"),
        ("CC_Base_L_Upperarm", "CC_Base_R_Upperarm"),
        ("J_Bip_R_Hand", "J_Bip_L_Hand"),
        ("lShldrBend", "rShldrBend"),
        ("IK-hand.L", "IK-hand.R"),
        ("Bip01 L Thigh", "Bip01 R Thigh"),
        ("thigh.L.001", "thigh.R.001"),
        ("ARM_LEFT", "ARM_RIGHT"),
        ("spine", ""),
    ],
)
def test_mirror_name(name: str, other: str) -> None:
    assert mirror_name(name) == other


def test_mirror_name_prefers_an_existing_bone() -> None:
    # "Bone_L_x" could mirror at the letter or not at all; the existing bone decides.
    assert mirror_name("mixamorig:LeftHand", lambda n: n == "mixamorig:RightHand") == "mixamorig:RightHand"
    assert mirror_name("upper_arm.L", lambda n: False) == ""


def _bone_rest(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    y = y / np.linalg.norm(y)
    z = z - y * (z @ y)
    z = z / np.linalg.norm(z)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2] = np.cross(y, z), y, z
    return m


def test_mirror_limits_with_mirrored_rolls_swaps_left_and_right_and_negates_twist() -> None:
    rng = np.random.default_rng(7)
    y, z = rng.normal(size=3), rng.normal(size=3)
    a = _bone_rest(y, z)
    mx = np.diag([-1.0, 1.0, 1.0])
    b = _bone_rest(mx @ y, mx @ z)  # Blender's Symmetrize: head/tail mirrored, Z mirrored (roll negated)
    values: dict[str, float | bool] = {
        "use_cone": True,
        "cone_up": 0.1,
        "cone_down": 0.2,
        "cone_left": 0.3,
        "cone_right": 0.4,
        "use_twist": True,
        "twist_min": -0.5,
        "twist_max": 0.25,
    }
    out = mirror_limits(values, a, b)
    assert (out["cone_up"], out["cone_down"]) == (0.1, 0.2), "up and down stay"
    assert (out["cone_left"], out["cone_right"]) == (0.4, 0.3), "left and right swap"
    assert (out["twist_min"], out["twist_max"]) == (-0.25, 0.5), "twist range negated"
    # A twin rolled a quarter turn: the sides follow the geometry, not the labels.
    b_rolled = b.copy()
    b_rolled[:3, 0], b_rolled[:3, 2] = b[:3, 2], -b[:3, 0]
    out = mirror_limits(values, a, b_rolled)
    assert sorted(float(out[f"cone_{s}"]) for s in ("up", "down", "left", "right")) == [0.1, 0.2, 0.3, 0.4]
    assert out["cone_up"] != 0.1


def test_plan_bends_knees_forward_and_elbows_back_on_a_straight_limb() -> None:
    h, sk = found("generic_dot", bent=False)
    rest = np.array(
        [
            _bone_rest(
                t - hd,
                np.array([0.0, 0.0, 1.0])
                if abs(t - hd)[2] < 0.9 * np.linalg.norm(t - hd)
                else np.array([0.0, -1.0, 0.0]),
            )
            for hd, t in zip(sk.head, sk.tail, strict=True)
        ]
    )
    for i in range(len(rest)):
        rest[i, :3, 3] = sk.head[i]
    up, left, forward = facing(h, rest)
    assert np.allclose(up, [0, 0, 1], atol=0.1) and np.allclose(forward, [0, -1, 0], atol=0.05)
    assert left[0] > 0.99
    p = plan(h, sk.names, sk.parent, rest, sk.length, rest, SetupOptions())
    by_name = {c.name: c for c in p.chains}
    assert set(by_name) == {"arm.L", "arm.R", "leg.L", "leg.R", "spine", "neck"}
    for side in ("L", "R"):
        knee = sk.head[h.legs[side].lower[0]]
        elbow = sk.head[h.arms[side].lower[0]]
        leg_pole, arm_pole = by_name[f"leg.{side}"].pole_at, by_name[f"arm.{side}"].pole_at
        assert leg_pole is not None and arm_pole is not None
        assert (leg_pole - knee) @ forward > 0.1, "a straight leg's pole is in front of the knee"
        assert (arm_pole - elbow) @ forward < -0.1, "a straight arm's pole is behind the elbow"
        # The knee's hinge opens toward the back of the shin (the shin swings back), 150 degrees.
        shin = h.legs[side].lower[0]
        lim = p.limits[shin]
        widest = max(("up", "down", "left", "right"), key=lambda s: float(lim[f"cone_{s}"]))
        axis = {"up": 2, "down": 2, "left": 0, "right": 0}[widest]
        sign = 1.0 if widest in {"up", "right"} else -1.0
        assert rest[shin, :3, axis] @ forward * sign < -0.9
        assert math.isclose(float(lim[f"cone_{widest}"]), math.radians(150.0))


def _cmu_rows(names: dict[str, str] | None = None, stretch: float = 1.06) -> list[humanoids.Row]:
    """A CMU-shaped skeleton as Blender's BVH importer makes it (Z up, facing -Y): bones named after the joint
    at their head, hip joints and collars starting at the body's head, the right side `stretch` times longer
    (a real actor's sides differ); `names` renames bones (all to 'b<i>' for topology)."""
    rows: list[humanoids.Row] = [("Hips", "", (0.0, 0.0, 0.0), (0.0, 0.0, 0.1))]

    def chain(
        parent: str, start: tuple[float, float, float], joints: list[tuple[str, tuple[float, float, float]]]
    ) -> None:
        at = start
        for (name, off), nxt in zip(joints, [*joints[1:], ("", (0.0, 0.0, 0.0))], strict=True):
            tail = (at[0] + off[0], at[1] + off[1], at[2] + off[2])
            rows.append((name, parent, at, tail))
            parent, at = name, tail
            del nxt

    for side, sx, k in (("Left", 1.0, 1.0), ("Right", -1.0, stretch)):
        s = side[0]
        chain(
            "Hips",
            (0.0, 0.0, 0.0),
            [
                (f"{s}HipJoint", (1.2 * sx, -0.7, -1.6)),
                (f"{side}Hip", (2.5 * sx * k, 0.0, -6.9 * k)),
                (f"{side}Knee", (2.4 * sx * k, 0.0, -6.5 * k)),
                (f"{side}Ankle", (0.15 * sx, -2.2, -0.4)),
                (f"{side}Toe", (0.0, -1.1, 0.0)),
            ],
        )
    chain(
        "Hips",
        (0.0, 0.0, 0.0),
        [("lowerback", (0.0, 0.0, 2.0)), ("Chest", (0.0, 0.0, 2.0)), ("Chest2", (0.0, 0.0, 0.1))],
    )
    chain(
        "Chest2",
        (0.0, 0.0, 4.0),
        [("lowerneck", (0.0, -0.1, 1.6)), ("Neck", (0.0, 0.0, 1.6)), ("Head", (0.0, 0.0, 1.6))],
    )
    for side, sx, k in (("Left", 1.0, 1.0), ("Right", -1.0, stretch)):
        chain(
            "Chest2",
            (0.0, 0.0, 4.0),
            [
                (f"{side}Collar", (3.0 * sx, 0.0, 1.5)),
                (f"{side}Shoulder", (0.0, 0.0, -4.3 * k)),
                (f"{side}Elbow", (0.0, 0.0, -3.3 * k)),
                (f"{side}Wrist", (0.0, 0.0, 0.1)),
            ],
        )
        rows.append(
            (f"{side[0].lower()}hand", f"{side}Wrist", rows[-1][2], (rows[-1][2][0], 0.0, rows[-1][2][2] - 0.66))
        )
    if names is not None:
        rows = [(names.get(n, n), names.get(p, p), h, t) for n, p, h, t in rows]
    return rows


def test_cmu_joint_names_are_read_as_the_bones_below_the_joint() -> None:
    sk = skeleton(_cmu_rows())
    h = recognise(sk)
    assert isinstance(h, Humanoid), h
    assert h.by == "CMU/BVH joint", "the report names the convention truthfully"
    n = sk.names
    for side, word in (("L", "Left"), ("R", "Right")):
        arm, leg = h.arms[side], h.legs[side]
        assert [n[b] for b in arm.bones] == [f"{word}Shoulder", f"{word}Elbow"], "LeftShoulder is the upper arm"
        assert n[arm.end] == f"{word}Wrist" and n[arm.clavicle] == f"{word}Collar"
        assert [n[b] for b in leg.bones] == [f"{word}Hip", f"{word}Knee"], "LeftHip is the thigh"
        assert n[leg.end] == f"{word}Ankle"
    assert n[h.hips] == "Hips" and n[h.chest] == "Chest2"
    assert [n[b] for b in h.spine] == ["lowerback", "Chest", "Chest2"]
    assert [n[b] for b in h.neck] == ["lowerneck", "Neck", "Head"]


def test_mirrored_limbs_a_few_per_cent_apart_are_found_by_topology() -> None:
    rows = _cmu_rows()
    anonymous = {r[0]: f"b{i}" for i, r in enumerate(rows)}
    sk = skeleton(_cmu_rows(anonymous, stretch=1.07))
    h = recognise(sk)
    assert isinstance(h, Humanoid), h
    assert h.by == "topology"
    ref = recognise(skeleton(rows))
    assert isinstance(ref, Humanoid)
    for side in ("L", "R"):
        assert h.arms[side].bones == ref.arms[side].bones, "arms: the same bones on both sides (no collar)"
        assert h.legs[side].bones == ref.legs[side].bones


@pytest.mark.parametrize(
    ("names", "label"),
    [
        (("upperarm_l", "lowerarm_l", "calf_l", "thigh_l"), "Unreal mannequin"),
        (("UpperArm_L", "LowerArm_L", "UpperLeg_L", "LowerLeg_L"), "generic"),  # one Unreal-like name is not Unreal
        (("LeftHip", "RightHip", "LeftKnee", "RightKnee", "LeftElbow", "RightElbow"), "CMU/BVH joint"),
        (("mixamorig:LeftArm", "mixamorig:LeftLeg"), "Mixamo"),
    ],
)
def test_the_convention_label_is_truthful(names: tuple[str, ...], label: str) -> None:
    from core.humanoid import convention_of

    assert convention_of(names) == label


def test_joint_words_keep_their_own_roles_outside_joint_named_skeletons() -> None:
    # Mixamo's LeftShoulder is a clavicle, and a Daz or Rigify skeleton never reads `hip` as a thigh.
    assert read_name("mixamorig:LeftShoulder").role == "clavicle"
    assert read_name("LeftShoulder", joint_named=True).role == "upper_arm"
    assert read_name("LeftHip", joint_named=True).role == "thigh"
    assert read_name("lhand", joint_named=True).role == "hand"
