"""Print one line per test tier and the plain closing line `N passed, N failed, N skipped`."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(results: Path) -> int:
    total = {"passed": 0, "failed": 0, "skipped": 0}
    print("== summary ==")
    lint = results / "lint.txt"
    print(f"tier 1 lint+types: {'ok' if lint.exists() else 'FAILED'}")
    if not lint.exists():
        total["failed"] += 1
    for n, tier in enumerate(("unit", "blender", "e2e", "docs"), start=2):
        path = results / f"{tier}.xml"
        if not path.exists():
            print(f"tier {n} {tier}: no results (the tier crashed before reporting)")
            total["failed"] += 1
            continue
        suite = ET.parse(path).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")  # type: ignore[assignment]
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        passed = tests - failed - skipped
        print(f"tier {n} {tier}: {passed} passed, {failed} failed, {skipped} skipped")
        total["passed"] += passed
        total["failed"] += failed
        total["skipped"] += skipped
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
