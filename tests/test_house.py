"""The docs and the code speak to a reader who has only the repository: no issue numbers, no
seed files and no paths outside the repository in README.md, docs/ or recalld/. Say what the
reference said instead."""

import re

import pytest

from tests.helpers import REPO

PATTERNS = {
    "an issue number": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a seed file": re.compile(r"\bseeds?\s+#?\d+", re.IGNORECASE),
    "the seeds, which a reader cannot open": re.compile(r"\bthe seeds?\b|\bseeds?'s?(?=\s)", re.IGNORECASE),
    "a path outside the repository": re.compile(r"\.\./shared\b"),
}
# Text a reader reads; recalld/core/wordprior.txt is data (stems and frequencies), not prose.
SUFFIXES = (".py", ".md", ".json", ".toml", ".sh", ".txt", ".cfg")
SKIP = {REPO / "recalld" / "core" / "wordprior.txt"}


def _files():
    yield REPO / "README.md"
    for top in ("docs", "recalld"):
        for p in sorted((REPO / top).rglob("*")):
            if p.is_file() and p.suffix in SUFFIXES and p not in SKIP and "__pycache__" not in p.parts:
                yield p


def hits() -> list:
    out = []
    for p in _files():
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for what, pattern in PATTERNS.items():
                for m in pattern.finditer(line):
                    out.append(f"{p.relative_to(REPO)}:{n}: {what}: {m.group(0)!r}")
    return out


def test_the_grep_finds_what_it_looks_for():
    line = "as issue 18 said (seed 002; the seed's example), see ../shared/design"
    assert [w for w, pat in PATTERNS.items() if pat.search(line)] == list(PATTERNS)
    assert not any(pat.search("the issue is 3 lines long; seeded with numbers; ./shared/x") for pat in PATTERNS.values())


def test_no_issue_numbers_seed_files_or_outside_paths():
    found = hits()
    assert not found, "say what the reference said instead:\n" + "\n".join(found)
