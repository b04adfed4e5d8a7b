"""Generic layers never name a game: no module outside the domain packages mentions a registered
domain's name, a registered family's member (`PREFIX:...`), Kuhn's vocabulary or the built-in games'
names in prose: bargaining, the prisoner's dilemma, bidders, a market (code, docstrings and comments
alike)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sepo.games import domain_names, family_names

ROOT = Path(__file__).resolve().parents[2] / "sepo"
VOCABULARY = (
    "card",
    "cards",
    "facing_bet",
    "INFO_STATES",
    "poker",
    "chip",
    "chips",
    "bargaining",
    "bidder",
    "bidders",
    "prisoner",
    "market",
)
# The one place that registers the built-in domains by name.
ALLOWED = {ROOT / "games" / "__init__.py"}


def _generic_modules() -> list[Path]:
    domain_packages = {path.parent for path in (ROOT / "games").glob("*/__init__.py")}
    return sorted(path for path in ROOT.rglob("*.py")
                  if path not in ALLOWED and not any(package in path.parents for package in domain_packages))


def test_the_scan_sees_the_generic_layers():
    names = {str(p.relative_to(ROOT)) for p in _generic_modules()}
    assert {"evaluation/play.py", "evaluation/evaluate.py", "training/tabular.py", "cli/main.py",
            "games/base.py", "games/registry.py", "metrics/pool_metrics.py"} <= names
    assert not any(name.startswith("games/kuhn/") for name in names)


@pytest.mark.parametrize("path", _generic_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_generic_module_names_a_game(path):
    # a family's members, not its library
    words = [*domain_names(), *(f"{family}:" for family in family_names()), *VOCABULARY]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, "\n".join(hits)
