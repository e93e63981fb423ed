"""Small, typed adapters over Blender APIs whose stubs or behaviour differ between versions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import bpy


def classes_factory(classes: Sequence[type]) -> tuple[Callable[[], None], Callable[[], None]]:
    """`bpy.utils.register_classes_factory`, typed (fake-bpy-module declares it as returning None)."""
    factory: Callable[[Sequence[type]], tuple[Callable[[], None], Callable[[], None]]]
    factory = bpy.utils.register_classes_factory  # type: ignore[assignment]
    return factory(classes)
