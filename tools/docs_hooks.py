"""MkDocs hooks for the manual (mkdocs.yml `hooks:`): the pending pages and the generated troubleshooting page.

- Pages other branches are still writing are listed in mkdocs.yml under `extra.pending_pages`: while such a
  file does not exist its navigation entry is dropped, so a strict build passes; any other missing page
  still fails it.
- `troubleshooting.md` is not a file in docs/: it is generated at every build from the messages in the code
  (`tools/troubleshooting.py`), so the page cannot drift from what a chain shows. A message without an
  explanation (or an explanation that matches no message) is a warning, which fails a strict build.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))

import troubleshooting

log = logging.getLogger("mkdocs.hooks.reach_ik")


def _prune(nav: list[Any], missing: set[str]) -> list[Any]:
    kept: list[Any] = []
    for item in nav:
        if isinstance(item, str):
            if item not in missing:
                kept.append(item)
            continue
        (title, value), *_ = item.items()
        if isinstance(value, list):
            value = _prune(value, missing)
            if value:
                kept.append({title: value})
        elif value not in missing:
            kept.append(item)
    return kept


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    pending = config["extra"].get("pending_pages", []) or []
    missing = {page for page in pending if not (docs / page).exists()}
    if missing:
        log.info("pages not written yet, left out of the navigation: %s", ", ".join(sorted(missing)))
        config["nav"] = _prune(config["nav"], missing)
    return config


def on_files(files: Files, config: Any) -> Files:
    for problem in troubleshooting.problems():
        log.warning("troubleshooting: %s", problem)
    files.append(File.generated(config, "troubleshooting.md", content=troubleshooting.render()))
    return files
