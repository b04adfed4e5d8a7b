"""The product speaks only of itself: no work-log language in what a user reads.

Numbered work periods, tracker issue numbers, who found what, results lost with a machine, load
averages and "Before, ..." asides describe how the project was made, not what it does. History
belongs in CHANGELOG.md, the machine a figure was measured on in benchmarks/README.md.

ROOTS lists what is checked (files or folders, relative to the repository); benchmarks/ is checked
by its scripts, since its README may state the machine and load a figure was measured on.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

ROOTS = ["README.md", "docs", "sepo", "tests", "configs", "examples",
         *sorted(path.relative_to(REPO).as_posix() for path in (REPO / "benchmarks").glob("*.py"))]
# History is the changelog's subject; this file names the patterns it looks for.
EXCLUDED = {"CHANGELOG.md", "tests/test_process_words.py"}
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".jinja"}

PATTERNS = {
    "a numbered work period": r"\bsessions? \d+",
    # a number after '#', but not a colour (`color:#222`, `"#666"`) or an anchor
    "a tracker issue number": r"\b(issues?|PR|pull request) #?\d+|(?<![\w/&:\"'])#\d{1,4}\b(?![;\w])",
    "a result lost with a machine": r"\blost (with|when|along with) (the|its|a|their|that) (previous |old "
                                    r")?(machine|host|computer|box)",
    # the load a number was measured at; code that reads the load average is not history
    "a load average": r"\b(at|under|with|during) (a |the )?(machine )?load( average)? (of )?(about |around "
    r"|~|≈)?\d|\(load( average)? (of )?\d",
    "a 'Before, ...' aside": r"\bBefore, (?![(\[]|\w+ ?[=),.\[]|after\b)",  # not code: `before, after = ...`
    "who found it": r"\bfound (by|in) (a|an|the|two)? ?(independent |hostile[- ]?(user "
                    r")?)?(reviews?|helpers?|sessions?|users?|pass(es)?)\b",
    "a 'Found: ...' story": r"(\"\"\"|#\s*)Found(:| (by|when|while|after|running|stopping|auditing|during)\b"
                            r"| in (the )?(real|a |an |issue|session))",
    "a helper or reviewer": r"\b(helpers? (found|wrote|fixed)|(hostile|independent)[- "
                            r"](users?|review|reviewer|pass)e?s?)\b",
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
    "found by a hostile review", "fixed in PR 12", "as #38 asks", "Found by a hostile-user pass: it crashed",
    "Found by a hostile user", "measured under load 12", "(load average 5.1)",
    '"""Found: `sepo sft` trained twice."""', "# found: the branch took over the record",
])
def test_each_kind_of_work_log_phrase_is_caught(phrase):
    assert findings(phrase), phrase


@pytest.mark.parametrize(
    "phrase",
    [
        "every equilibrium, found by support enumeration",
        "the session cookie",
        "issue a warning",
        "rounds the agent lost with a bid at least the opponent's",
        "a load of 2 chips",
        "before the first round",
        "three_reviewers.yaml",
        "colour #fff",
        "[the results](results.md#the-real-model-study)",
        '"""The profile found by the search."""',
        "# found in the cache: reuse it",
        "color:#222;",
        'color="#666"',
        'seen.append(f"load average {machine.load:.2f}")',
        "before, after = split(times)",
        "changed(before, after)",
        "for before, after in pairs",
        "assert a < before, (before, a)",
        "text.answer_text(before, before.legal_actions[0])",
        "1px solid #888;padding:3px",
        "a hostile message",
    ],
)
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


OUTSIDE = {
    "a reference folder outside the repository": re.compile(r"\bshared/reference\b|/work/(main|shared)\b"),
    # the paper's protocol is docs/paper-protocol.md; pages inside docs/ link it by its own name
    "the paper's protocol not as docs/paper-protocol.md": re.compile(r"(?<![\w/])paper-protocol(\.md\b| §)"),
}


def outside_references(name, text):
    """(line number, label, matched text) for every reference to a file outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for label, pattern in OUTSIDE.items():
            if name.startswith("docs/") and "docs/paper-protocol" in label:
                continue
            found += [(number, label, match.group(0)) for match in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("name, line, caught", [
    ("sepo/games/ipd/pools.py", "the paper's pools (paper-protocol §3.1)", True),
    ("configs/paper.yaml", "# The paper's protocol (paper-protocol.md §4.1)", True),
    ("tests/x.py", "see shared/reference/paper-protocol.md", True),
    ("sepo/games/ipd/pools.py", "the paper's pools (docs/paper-protocol.md §3.1)", False),
    ("docs/ipd.md", "[the paper's protocol](paper-protocol.md)", False),
    ("sepo/cli/main.py", "a domain's paper-protocol collusion measure", False),
])
def test_references_outside_the_repository_are_caught(name, line, caught):
    assert bool(outside_references(name, line)) == caught


def test_every_reference_is_to_a_file_in_the_repository():
    problems = [
        f"{name}:{number}: {label}: {text!r}"
        for name in checked_files()
        for number, label, text in outside_references(name, (REPO / name).read_text(encoding="utf-8"))
    ]
    assert not problems, "references to files outside the repository:\n" + "\n".join(problems)
