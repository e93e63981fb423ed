"""What a live check of an armature read (`rig.snapshot.read_live`), kept as its fingerprint (`rig.live`):
compared byte for byte with the next check's to decide whether anything changed, and as arrays to find which
chains the change concerns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from . import armature

F64 = NDArray[np.float64]


@dataclass
class Objects:
    mats: F64  # (1 + M, 4, 4): the armature's world matrix, then every chain's target and pole
    rows: dict[int, list[int]]  # chain index -> its rows of `mats`


@dataclass
class Seen:
    """The inputs of an armature's last solve. Bytes compare exactly (NaN too); settings compare as values."""

    channels: bytes | None  # every bone's rotation, location and scale channels, raw (None: as in `arrays`)
    settings: tuple[object, ...]
    structure: bytes  # bone names, rest data and flags (core.model.Skeleton.key)
    world: bytes = b""  # the armature's world matrix
    # The inputs as arrays, to find which chains they concern (`_select`): the armature's, targets' and
    # poles' world matrices, the evaluated pose (when read) and every channel (after our write).
    mats: F64 | None = None
    pose: F64 | None = None
    arrays: armature.Channels | None = None
    solved: tuple[tuple[int, ...], ...] = ()  # chain indices of each group of the plan last solved
    planned: frozenset[int] = frozenset()  # every chain index in `solved`
    # The evaluated pose of the bones above the chains and of control bones (`snapshot._outside_parents`).
    roots: bytes = b""
    objects: Objects | None = None  # the rows of `mats` of each chain

    def after_write(self, channels: armature.Channels) -> None:
        """Our write changed only rotation channels (and the Y scale of stretching chains), in these arrays:
        the values written stand for a re-read."""
        self.channels = None
        self.arrays = channels

    def channel_bytes(self) -> bytes:
        if self.channels is None:
            assert self.arrays is not None
            self.channels = channel_bytes(self.arrays)
        return self.channels

    def same(self, other: Seen) -> bool:
        return (
            self.roots == other.roots
            and mats_bytes(self) == mats_bytes(other)
            and self.channel_bytes() == other.channel_bytes()
            and self.structure == other.structure
            and self.same_settings(other)
        )

    def same_settings(self, other: Seen) -> bool:
        # repr() only when the values differ: a NaN setting is unequal to itself but has an equal repr.
        return self.settings == other.settings or repr(self.settings) == repr(other.settings)


def mats_bytes(seen: Seen) -> bytes:
    """The world, target and pole matrices as compared (exactly: NaN too)."""
    return b"" if seen.mats is None else seen.mats.tobytes()


def channel_bytes(channels: armature.Channels) -> bytes:
    return b"".join(a.tobytes() for a in channels.values())
