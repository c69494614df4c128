"""The house rules a reader of the code meets first (STYLE.md): modules split before 600 lines, and every
comment, doc and README line gives its reason in words, never a tracker number ("(issue 13)")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600
# "issue 13", "Issue 21's", "issues 4 and 5", "(#13)": the tracker does not travel with the code. Across a line
# break too ("issue\n14 §5", "Issue\n21's" in a docstring or a wrapped comment), which a grep of lines misses.
TRACKER = re.compile(r"\b[Ii]ssues?[\s#]+\d+|\(#\d+\)")


def test_no_module_of_pitstop_passes_600_lines() -> None:
    over = {str(path.relative_to(ROOT)): n for path in sorted((ROOT / "pitstop").rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not over, over


def test_no_comment_doc_or_readme_line_gives_a_tracker_number_as_its_reason() -> None:
    files = [*sorted((ROOT / "pitstop").rglob("*.py")), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for match in TRACKER.finditer(text):
            found.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()!r}")
    assert found == []
