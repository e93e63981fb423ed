"""The manual's configuration agrees with the manifest, the pending pages and the files in docs/."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mkdocs() -> str:
    return (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_manifest_website_is_the_manual() -> None:
    manifest = tomllib.loads((ROOT / "blender_manifest.toml").read_text(encoding="utf-8"))
    site_url = re.search(r"^site_url:\s*(\S+)", _mkdocs(), re.M)
    assert site_url, "mkdocs.yml has no site_url"
    assert manifest.get("website") == site_url.group(1), "the manifest's website is not the manual's site_url"
    assert manifest["website"].startswith("https://"), "Blender wants an absolute URL"


def test_every_page_is_in_the_navigation() -> None:
    nav = set(re.findall(r"([\w/-]+\.md)\s*$", _mkdocs(), re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert not pages - nav, f"pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    pending = set(re.findall(r"^\s+- ([\w/-]+\.md)\s*$", _mkdocs().split("pending_pages:")[1].split("nav:")[0], re.M))
    assert "troubleshooting.md" not in pages, "docs/troubleshooting.md is generated at build time: do not commit it"
    missing = nav - pages - pending - {"troubleshooting.md"}
    assert not missing, (
        f"nav entries with no page (add them to extra.pending_pages if another branch writes them): {missing}"
    )


def _slug(heading: str) -> str:
    # Python-Markdown's toc slugs, as MkDocs makes the anchors (and close to GitHub's for plain headings).
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def test_the_readme_is_short_and_its_links_and_pictures_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "the README is for a five-minute read: move detail into docs/"
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links, "no links found in the README"
    for link in links:
        if link.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"the README links to {link}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+\s+(.+)$", target.read_text(encoding="utf-8"), re.M)
            assert anchor in {_slug(h) for h in headings}, f"the README links to {link}: no such heading"
