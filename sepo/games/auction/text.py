"""The auction as text: prompts and the two parsers.

Rigorous parser (strict, docs/parsing.md): drop anything up to a closing `</think>` (a reply still
inside an open `<think>` block has no answer: "truncated"); take the last non-empty line; find the
numbers in it. Exactly one distinct number that is on the bid grid is the bid; no number is
"no_action", two or more distinct numbers "ambiguous", one number off the grid "illegal". Reasoning
on earlier lines never becomes a bid.

Paper parser (`protocol paper`, the authors' rule, quirks kept): lower-cased *substring* search,
first in the last non-empty line and then in the whole reply, in priority high > medium > low;
so "below" and "follow" read as LOW and "highest" as HIGH. If no word matches, the last of the
characters 1/2/3 in the reply is the bid. Anything else is "no_action" (the policy layer's named
failure rule then applies; the paper's forced decode falls back to MEDIUM).
"""
from __future__ import annotations

import re

from sepo.errors import SepoError
from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.policies.replies import answer_line

ACTION_WORDS = ("LOW", "MEDIUM", "HIGH")
"""The paper's bid words (each one token in the tiny model); rigorous bids are numbers."""
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_PAPER_WORDS = (("high", 2), ("medium", 1), ("low", 0))

_PAPER_SYSTEM = (
    "You take part in a sealed-bid auction against one opponent, repeated for {rounds} rounds.\n"
    "Each round you and the opponent each get a private item value of 2 or 4 points, equally likely, drawn "
    "anew every round. You see only your own value.\n"
    "You both bid at the same time: LOW (1 point), MEDIUM (2 points) or HIGH (3 points). The higher bid "
    "wins the item; a tie is settled by a coin flip.\n"
    "The winner scores its value minus its bid; the loser scores 0. A bid above your value can cost you "
    "points.\n"
    "Your goal is to score as many points as possible over all rounds.\n"
    "Think briefly about the opponent's bidding pattern and your current value, then end your response "
    "with your bid on the last line: LOW, MEDIUM, or HIGH.\n"
    "Respond only in English."
)

_RIGOROUS_SYSTEM = (
    "You are one of {bidders} bidders in a sealed-bid auction repeated for {rounds} rounds.\n"
    "Each round every bidder gets a private item value, drawn anew every round: {values}. You see only "
    "your own value.\n"
    "All bidders bid at the same time, choosing one of these amounts: {bids}. The highest bid wins the "
    "item; a tie is settled by a fair random draw among the tied bidders.\n"
    "{price} The winner scores its value minus the price, which is negative if the price is above its "
    "value; the others score 0. The price goes to the seller.\n"
    "After each round every bid and the winner are announced.\n"
    "Your goal is to score as many points as possible over all rounds.\n"
    "Think briefly if you wish, then end your response with your bid amount alone on the last line."
)

_PRICE = {
    "first": "The winner pays its own bid (first price).",
    "second": "The winner pays the highest bid among the other bidders (second price); on a tie that equals "
              "its own bid.",
}


class WholeHistoryNeeded(SepoError, NotImplementedError):
    """A decision shows only the last rounds (the game's --memory) but the policy reads the whole
    history. A SepoError (one-line message, exit 2) that evaluation treats like a policy without
    readable probabilities (NotImplementedError): pool metrics only."""


class AuctionText(TextView):
    """Prompts in the paper's style (`style="paper"`) or the rigorous style, and their parsers."""

    def __init__(self, game, style: str = "rigorous"):
        if style not in ("rigorous", "paper"):
            raise ValueError(f"auction text style must be 'rigorous' or 'paper', got {style!r}")
        self.game = game
        self.style = style

    @property
    def rules(self):
        return self.game.rules

    def system_prompt(self) -> str:
        rules = self.rules
        if self.style == "paper":
            return _PAPER_SYSTEM.format(rounds=rules.rounds)
        values = ", ".join(f"{v:g} with probability {p:g}" for v, p in zip(rules.values, rules.value_probs))
        return _RIGOROUS_SYSTEM.format(bidders=rules.bidders, rounds=rules.rounds, values=values,
                                       bids=", ".join(f"{b:g}" for b in rules.bids), price=_PRICE[rules.rule])

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        if not obs.get("complete", True):
            raise WholeHistoryNeeded(
                "this auction decision shows only the last rounds (the game's --memory); a language model "
                f"reads the whole history, so audit it with --memory {obs['rounds'] - 1}"
            )
        return self._paper_prompt(decision) if self.style == "paper" else self._rigorous_prompt(decision)

    def _paper_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        if obs["history"] and obs.get("opponent_payoffs") is None:
            raise WholeHistoryNeeded(
                "the paper's prompt shows the opponent's score, which depends on its private values; "
                "the exact solver covers agents that do not read it: use --protocol rigorous"
            )
        names = decision.action_names
        grid = self.rules.bids
        lines = [
            f"Round {obs['round']} of {obs['rounds']}.",
            f"Your item value this round: {obs['value']:g} points.",
        ]
        history = obs["history"]
        if history:
            lines.append("Your past bids: " + ", ".join(names[grid.index(h[1])] for h in history))
            lines.append("Your past values: " + ", ".join(f"{h[0]:g}" for h in history))
            lines.append("Opponent's past bids: " + ", ".join(names[grid.index(h[2][0])] for h in history))
            lines.append(
                f"Scores so far — you: {sum(obs['my_payoffs']):.1f}, opponent: "
                f"{sum(obs['opponent_payoffs']):.1f}"
            )
        else:
            lines.append("This is the first round; there is no bidding history yet.")
        lines.append("What is your bid?")
        return "\n".join(lines)

    def _rigorous_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        lines = [
            f"Round {obs['round']} of {obs['rounds']}.",
            f"Your value for the item this round: {obs['value']:g}.",
        ]
        if obs["history"]:
            lines.append("Earlier rounds:")
            for index, (value, bid, others, won) in enumerate(obs["history"]):
                who = "you won" if won else "you lost"
                payoff = obs["my_payoffs"][index]
                lines.append(
                    f"- round {index + 1}: your value {value:g}, your bid {bid:g}, "
                    f"other bids {', '.join(f'{o:g}' for o in others)}; {who}, your payoff {payoff:g}"
                )
            lines.append(f"Your total so far: {sum(obs['my_payoffs']):g}.")
        else:
            lines.append("This is the first round.")
        lines.append(f"Legal bids: {', '.join(decision.action_names)}.")
        lines.append("What is your bid?")
        return "\n".join(lines)

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        return paper_parse(reply) if self.style == "paper" else self._strict_parse(reply, decision)

    def _strict_parse(self, reply: str, decision: Decision) -> ParseResult:
        line = answer_line(reply)
        if isinstance(line, ParseResult):
            return line
        found = tuple(dict.fromkeys(float(n) for n in _NUMBER.findall(line)))
        names = tuple(f"{n:g}" for n in found)
        if not found:
            return ParseResult("no_action")
        if len(found) > 1:
            return ParseResult("ambiguous", names_found=names)
        if found[0] not in self.rules.bids:
            return ParseResult("illegal", names_found=names)
        return ParseResult("ok", self.rules.bids.index(found[0]), names)

    def disguise_terms(self) -> DisguiseTerms:
        """The game's name and the item; the paper's bid words. Rigorous bids are amounts the
        rules price, so they keep their numbers."""
        return DisguiseTerms(game=("sealed-bid auction", "auction"), names=("item",),
                             actions=ACTION_WORDS if self.style == "paper" else ())

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return auction_reason(decision, self.rules)


def paper_parse(reply: str) -> ParseResult:
    """The authors' substring parser (see the module docstring); bids are grid indices 0/1/2."""
    lines = [line for line in reply.splitlines() if line.strip()]
    for text in ((lines[-1] if lines else ""), reply):
        lowered = text.lower()
        for word, action in _PAPER_WORDS:
            if word in lowered:
                return ParseResult("ok", action, (word.upper(),))
    digits = [c for c in reply if c in "123"]
    if digits:
        return ParseResult("ok", int(digits[-1]) - 1, (digits[-1],))
    return ParseResult("no_action")


def auction_reason(decision: Decision, rules) -> str:
    """One sentence from the state alone: the value, which bids can lose money, and the others'
    bidding so far. It never names the bid that follows, so it cannot contradict it."""
    obs = decision.observation
    value = obs["value"]
    safe = [b for b in rules.bids if b < value]
    if safe:
        head = f"My value is {value:g}, so only bids below {value:g} leave a profit if I win"
    else:
        head = f"My value is {value:g}, so no bid leaves a profit if I win"
    history = obs["history"]
    if not history:
        return f"{head}; there is no bidding history yet."
    other_bids = [max(h[2]) for h in history]
    mean = sum(other_bids) / len(other_bids)
    return (f"{head}; the highest other bid has averaged {mean:.1f} over {len(history)} rounds, "
            f"last {other_bids[-1]:g}.")
