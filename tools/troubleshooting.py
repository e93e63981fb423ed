"""The manual's troubleshooting page, generated from the messages in the code (run by tools/docs_hooks.py).

Every message a chain can show in its status line (the panel's Chains box, `chain.message`, the CLI's
`check`) is a string literal in one of `SOURCES`: this module reads them with `ast` (nothing is imported, so
it runs without Blender), puts "…" where the code fills in a name or a number, and pairs each with its
explanation in `troubleshooting_notes.NOTES`. `problems()` lists every message without an explanation and
every explanation that matches no message; a strict docs build and tests/unit/test_troubleshooting.py fail
on any.

    python tools/troubleshooting.py            # the page, on stdout
    python tools/troubleshooting.py --check    # exit 1 and name the problems, if any
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from troubleshooting_notes import NOTES, PARTS, Note  # noqa: E402

# Where a chain's status messages are written (in the order the page lists them): the outcome of a solve
# first, then what the checks before a solve refuse.
SOURCES = ("core/messages.py", "core/blend.py", "rig/chains.py", "core/checks.py", "core/solve.py", "rig/follow.py")
MIN_LENGTH = 25  # shorter literals are names, keys and formats, not messages


@dataclass(frozen=True)
class Message:
    template: str  # the message with "…" for every name or number the code fills in
    where: str  # module:line


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _is_excluded(node: ast.AST) -> bool:
    # Exceptions raised to an operator and console prints are not a chain's status.
    if isinstance(node, ast.Raise):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"


def messages(sources: tuple[str, ...] = SOURCES) -> list[Message]:
    """Every message literal of `sources`, in source order."""
    found: list[Message] = []
    for source in sources:
        tree = ast.parse((ROOT / source).read_text(encoding="utf-8"))
        docs = _docstrings(tree)

        def visit(node: ast.AST, source: str = source, docs: set[int] = docs) -> None:
            if _is_excluded(node):
                return
            text = None
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                text = node.value
            if text is not None:
                text = text.strip()
                if len(text) >= MIN_LENGTH and " " in text:
                    found.append(Message(text, f"{source}:{getattr(node, 'lineno', 0)}"))
                return  # the literals inside an f-string's {…} are parts of it, not messages
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(tree)
    return found


def _pairs() -> tuple[list[tuple[Message, Note | None]], list[Note]]:
    found = messages()
    pairs: list[tuple[Message, Note | None]] = []
    used: set[int] = set()
    for message in found:
        if message.template in PARTS:
            continue
        matching = [i for i, note in enumerate(NOTES) if note.matches(message.template)]
        pairs.append((message, NOTES[matching[0]] if len(matching) == 1 else None))
        used.update(matching)
    return pairs, [note for i, note in enumerate(NOTES) if i not in used]


def problems() -> list[str]:
    """What keeps the page from being complete and true: empty when every message has one explanation."""
    out = []
    pairs, unused = _pairs()
    for message, note in pairs:
        if note is None:
            count = sum(n.matches(message.template) for n in NOTES)
            why = "no explanation" if count == 0 else f"{count} explanations match it"
            out.append(f"{message.where}: {why} in tools/troubleshooting_notes.py for {message.template!r}")
    for note in unused:
        out.append(f"tools/troubleshooting_notes.py: {note.match!r} matches no message in {', '.join(SOURCES)}")
    return out


def render() -> str:
    """The page, in Markdown."""
    pairs, _ = _pairs()
    lines = [
        "# Troubleshooting",
        "",
        "Every message a chain can show under its settings in the **Chains** panel (also `chain.message` from a",
        "script, and `blender -b shot.blend -c reach_ik check` on the command line), what it means and what to do.",
        "This page is generated from the code at every build of the manual, so it lists exactly the messages",
        "this version shows. In the messages below, **…** stands for the bone, object, chain or number the",
        "message names. A message that starts with `worst frame #N:` (a bake) or `frame #N:` is the same message",
        "for the frame it names.",
        "",
        "Whatever the message, a chain that cannot solve changes nothing: the pose stays as it was, the other",
        "chains are still solved, and the chain is solved again at the next update once its input is sound.",
        "When the panel shows a **Fix** button under the message, it sets the bone setting the message asks for",
        "(see [The panel](panel.md)).",
        "",
    ]
    sections = {
        "reach": "## The target is not reached",
        "rig": "## The armature cannot be solved",
        "input": "## A target, pole or bone is missing or broken",
        "setting": "## A chain setting is out of range",
        "bones": "## Bone settings",
        "structure": "## Chains that share, follow or chase each other",
        "stretch": "## Stretch",
    }
    for key, title in sections.items():
        rows = [(m, n) for m, n in pairs if n is not None and n.section == key]
        if not rows:
            continue
        lines += [title, ""]
        for message, note in rows:
            text = note.meaning + (f" See [{note.page_title}]({note.page})." if note.page else "")
            lines += [f"> {_escape(message.template)}", "", text, ""]
    return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;")


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = problems()
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    print(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
