"""The product speaks only of itself: no work-log language in what a user reads.

Numbered work periods, tracker issue numbers, who found what, results lost with a machine, load
averages and "Before, ..." asides describe how the project was made, not what it does. History
belongs in CHANGELOG.md, the machine a figure was measured on in benchmarks/README.md.

To cover more of the tree, add a root to ROOTS (a file or a folder, relative to the repository).
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Files and folders checked; sepo/, tests/, configs/ and examples/ are the next roots to add.
ROOTS = ["README.md", "docs"]
# History is the changelog's subject; this file names the patterns it looks for.
EXCLUDED = {"CHANGELOG.md", "tests/test_process_words.py"}
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".jinja"}

PATTERNS = {
    "a numbered work period": r"\bsessions? \d+",
    "a tracker issue number": r"\b(issues?|PR|pull request) #?\d+|(?<![\w/&])#\d{1,4}\b",
    "a result lost with a machine": r"\blost (with|when|along with) (the|its|a|their|that) (previous |old )?(machine|host|computer|box)",
    "a load average": r"\bload averages?\b",
    "a 'Before, ...' aside": r"\bBefore, ",
    "who found it": r"\bfound (by|in) (a|an|the|two)? ?(independent |hostile )?(reviews?|helpers?|sessions?)\b",
    "a helper or reviewer": r"\b(helpers? (found|wrote|fixed)|(hostile|independent) (review|reviewer|pass)s?)\b",
}
COMPILED = {label: re.compile(pattern, re.IGNORECASE) for label, pattern in PATTERNS.items()}


def checked_files():
    """Every text file under ROOTS, as paths relative to the repository, minus EXCLUDED."""
    files = []
    for root in ROOTS:
        path = REPO / root
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            relative = candidate.relative_to(REPO).as_posix()
            if candidate.suffix in SUFFIXES and relative not in EXCLUDED:
                files.append(relative)
    return files


def findings(text):
    """(line number, label, matched text) for every work-log phrase in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for label, pattern in COMPILED.items():
            for match in pattern.finditer(line):
                found.append((number, label, match.group(0)))
    return found


@pytest.mark.parametrize("phrase", [
    "measured in session 17", "Sessions 13 and 14 rebuilt it", "issue 18 part 4", "see issue #36",
    "the models were lost with the machine", "at a load average of 18", "Before, it crashed.",
    "found by a hostile review", "fixed in PR 12", "as #38 asks",
])
def test_each_kind_of_work_log_phrase_is_caught(phrase):
    assert findings(phrase), phrase


@pytest.mark.parametrize("phrase", [
    "every equilibrium, found by support enumeration", "the session cookie", "issue a warning",
    "rounds the agent lost with a bid at least the opponent's",
    "a load of 2 chips", "before the first round", "three_reviewers.yaml", "colour #fff",
    "[the results](results.md#the-real-model-study)",
])
def test_ordinary_prose_is_not_caught(phrase):
    assert not findings(phrase), phrase


def test_the_roots_exist_and_hold_files():
    for root in ROOTS:
        assert (REPO / root).exists(), root
    assert any(f.startswith("docs/") for f in checked_files())


def test_no_work_log_language_in_what_a_user_reads():
    problems = [f"{name}:{number}: {label}: {text!r}"
                for name in checked_files()
                for number, label, text in findings((REPO / name).read_text(encoding="utf-8"))]
    assert not problems, "work-log language (history goes to CHANGELOG.md):\n" + "\n".join(problems)
