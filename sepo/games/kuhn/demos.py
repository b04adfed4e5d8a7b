"""Kuhn poker's SFT demonstrators and mixtures (docs/paper-protocol.md §4.1).

`paper`: the paper's mixture (NashApprox 45%, TightPassive 25%, PotControl 20%, RandomLegal 8%,
AlwaysPassQ 2%); `nash`: the exact alpha = 1/3 equilibrium only."""
from __future__ import annotations

from sepo.games.kuhn.bots import BOTS, KuhnBot, NashApprox


class AlwaysPassQ(KuhnBot):
    """Never bets; facing a bet calls with Q or K (our reading of the paper's 2% 'AlwaysPassQ')."""

    name = "AlwaysPassQ"
    classifier = {"stochastic": False, "bluffs": False, "tight": False}

    def bet_probability(self, card: int, history: str) -> float:
        return float(card >= 1) if history.endswith("b") else 0.0


class NashStrategy(KuhnBot):
    """The exact equilibrium (alpha = 1/3 family member) as a demonstrator."""

    name = "Nash"

    def __init__(self, alpha: float = 1.0 / 3.0):
        from sepo.games.kuhn.exact import nash_policy
        from sepo.games.kuhn.rules import INFO_STATES

        self._bet = {key: row[1] for key, row in zip(INFO_STATES, nash_policy(alpha))}

    def bet_probability(self, card: int, history: str) -> float:
        return float(self._bet[f"{card}{history}"])


MIXTURES = {
    "paper": [(NashApprox, 0.45), (BOTS["TightPassive"], 0.25), (BOTS["PotControl"], 0.20),
              (BOTS["RandomLegal"], 0.08), (AlwaysPassQ, 0.02)],
    "nash": [(NashStrategy, 1.0)],
}


def mixtures() -> dict:
    return dict(MIXTURES)
