"""A chain's message says its miss as a number, never "nan" or "inf" (issue 29: an absurd armature scale)."""

from __future__ import annotations

import math

from solver_fixtures import addon_module

core = addon_module("core.messages")


def test_a_miss_that_cannot_be_measured_is_said_in_words() -> None:
    for status, stretched in (("UNREACHABLE", 1.0), ("UNREACHABLE", 1.5), ("STALLED", 1.0), ("CAP", 1.0), ("", 1.0)):
        for residual in (math.nan, math.inf):
            text = core.chain_message(residual, status, False, 1, 0, "hand", stretched=stretched)
            words = text.replace(",", " ").split()
            assert "nan" not in words and "inf" not in words, text
            assert "an unmeasurable distance" in text and "'hand'" in text, text
    assert "stops 0.25 short" in core.chain_message(0.25, "UNREACHABLE", False, 1, 0, "hand")
