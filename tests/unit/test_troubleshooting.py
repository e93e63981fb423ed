"""The troubleshooting page explains every message a chain can show (tools/troubleshooting.py).

The page is generated from the message literals of the code at every docs build; these tests fail when a
message has no explanation, when an explanation matches no message (a message was reworded), and when a
message `core.messages.chain_message` really produces is not explained.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from solver_fixtures import addon_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import troubleshooting
import troubleshooting_notes

messages = addon_module("core.messages")
types = addon_module("solvers.types")


def test_every_message_has_exactly_one_explanation() -> None:
    problems = troubleshooting.problems()
    assert not problems, "fix tools/troubleshooting_notes.py:\n" + "\n".join(problems)


def test_the_messages_are_found() -> None:
    found = troubleshooting.messages()
    assert len(found) >= 50, f"only {len(found)} messages found in {troubleshooting.SOURCES}"
    assert any(m.where.startswith("core/messages.py") for m in found)


def test_every_outcome_message_chain_message_writes_is_explained() -> None:
    # The messages of a solve that missed, as the code writes them (names and numbers filled in).
    written = set()
    for status in types.STATUS_NAMES:
        for stretched in (1.0, 1.5):
            for fixed in (False, True):
                for frames in (1, 250):
                    text = messages.chain_message(0.125, status, False, frames, 7, "hand", fixed, stretched)
                    written.add(text.split(": ", 1)[1] if text.startswith("worst frame #") else text)
                    assert "'hand'" in text and ("0.125" in text), text
    text = messages.chain_message(math.nan, "UNREACHABLE", False, 1, 0, "hand")
    written.add(text)
    for text in written:
        notes = [n for n in troubleshooting_notes.NOTES if n.section == "reach" and n.match.lstrip("^") in text]
        assert len(notes) == 1, f"{len(notes)} explanations for the message {text!r}"


def test_the_page_lists_every_message_with_its_explanation() -> None:
    page = troubleshooting.render()
    for note in troubleshooting_notes.NOTES:
        assert note.meaning in page, f"the explanation of {note.match!r} is not on the page"
    assert "softened: the tip of" in page and "Max Iterations" in page
