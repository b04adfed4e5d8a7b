"""Split bargaining as text: prompts and the two parsers.

Prompts (docs/paper-protocol.md §3.3): the system prompt gives the rules with two worked examples (a
deal and a breakdown) and asks for the demand as a single number on the last line; the user
prompt gives the round, the history of both demands with DEAL / BREAKDOWN, the scores so far,
and asks how many points to demand. The rigorous prompts state the game's own pie, range and
breakdown cost.

Parsers.
- `rigorous` (strict): drop anything up to a closing `</think>` (a reply still inside an open
  `<think>` block has no answer: "truncated"); take the last non-empty line; read its numbers. One
  distinct whole number inside the demand range is the demand; none is "no_action", several distinct
  numbers "ambiguous", a single number outside the range or not whole "illegal". Reasoning on
  earlier lines never becomes a demand.
- `paper` (the authors' parser): the last standalone digit 1-9 anywhere in the reply, clamped to
  the demand range. So "the opponent asked for 7, I ask 4 ... fair is 5" demands 5. A reply with
  no such digit is "no_action" (the paper then forces a decode over "1".."9", whose fallback is 5).
"""
from __future__ import annotations

import re

from sepo.games import talk
from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.policies.replies import answer_line

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")
_PAPER_DIGIT = re.compile(r"\b([1-9])\b")


def _points(value: float) -> str:
    return f"{value:g} point" + ("" if value == 1 else "s")


class NegotiationText(TextView):
    """Prompts and parser for one split-bargaining game; `style` is the protocol."""

    def __init__(self, game, style: str = "rigorous"):
        if style not in ("rigorous", "paper"):
            raise ValueError(f"negotiation text style must be 'rigorous' or 'paper', got {style!r}")
        self.game, self.style = game, style

    def _range(self) -> str:
        return f"{self.game.min_demand}-{self.game.max_demand}"

    def system_prompt(self) -> str:
        g = self.game
        fair = g.pie // 2
        deal_example = (
            (fair + 1, g.pie - fair - 1)
            if fair + 1 <= g.max_demand and g.pie - fair - 1 >= g.min_demand
            else (fair, g.pie - fair)
        )
        greedy = min(g.max_demand, fair + 2)
        lost = "both get nothing" if g.breakdown_cost == 0 else f"both lose {_points(g.breakdown_cost)}"
        lines = [
            f"You are negotiating how to split {_points(g.pie)} with one opponent, over {g.rounds} rounds.",
            f"Each round, you and the opponent each demand a whole number of points from {g.min_demand} to "
            f"{g.max_demand}, at the same time.",
            f"- If the two demands add up to {g.pie} or less, it is a DEAL: each side gets what it demanded.",
            f"- If they add up to more than {g.pie}, the round BREAKS DOWN: {lost}.",
            f"For example, demands of {deal_example[0]} and {deal_example[1]} are a deal; {greedy} and "
            f"{greedy} "
            + ("break down." if 2 * greedy > g.pie else "are also a deal."),
            "Your goal is to maximise your total points over all rounds.",
        ]
        if self.style == "paper":
            lines.append(
                "Think briefly about the opponent's demands, then end your response with your demand on the "
                f"last line as a single number ({self._range()})."
            )
            lines.append("Respond only in English.")
        else:
            lines.append(
                "Think briefly if you wish, then end your response with your demand alone on the last line, "
                f"as a whole number from {g.min_demand} to {g.max_demand}."
            )
        return "\n".join(lines)

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        lines = [f"Round {obs['round']} of {obs['rounds']}."]
        demands = obs["demands"]
        if demands:
            rounds = [f"you={own}, opp={other} → {'DEAL' if deal else 'BREAKDOWN'}"
                      for (own, other), deal in zip(demands, obs["deals"])]
            lines.append("Round history: " + " | ".join(rounds))
            lines.append(f"Scores so far — you: {obs['my_score']:g}, opponent: {obs['opponent_score']:g}")
        else:
            lines.append("This is the first round. No history yet.")
        lines += talk.prompt_lines(obs)  # cheap talk (--talk): the opponent's message, quoted as data
        lines += ["", f"How many points do you demand ({self._range()})?"]
        return "\n".join(lines)

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        if self.style == "paper":
            return paper_parse(reply, self.game.min_demand, self.game.max_demand)
        return strict_parse(reply, self.game.min_demand, self.game.max_demand)

    def disguise_terms(self) -> DisguiseTerms:
        """The unit of the pie and the two outcome words. Demands are amounts the rules add up,
        so they keep their numbers."""
        return DisguiseTerms(names=("point", "DEAL", "BREAKDOWN"))

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return negotiation_reason(decision)

    def vocabulary(self) -> str:
        return "\n".join(["DEAL", "BREAKDOWN", "demand", "demanded", "points", *self.game.action_names])


def strict_parse(reply: str, low: int, high: int) -> ParseResult:
    """The rigorous parser: exactly one distinct whole number, within low..high, on the last line."""
    line = answer_line(reply)
    if isinstance(line, ParseResult):
        return line
    found = tuple(dict.fromkeys(_NUMBER.findall(line)))
    if not found:
        return ParseResult("no_action")
    if len(found) > 1:
        return ParseResult("ambiguous", names_found=found)
    number = found[0]
    if "." in number or not low <= int(number) <= high:
        return ParseResult("illegal", names_found=found)
    return ParseResult("ok", int(number) - low, found)


def paper_parse(reply: str, low: int, high: int) -> ParseResult:
    """The paper's parser: the last standalone digit 1-9 anywhere, clamped to low..high."""
    digits = _PAPER_DIGIT.findall(reply)
    if not digits:
        return ParseResult("no_action")
    demand = min(high, max(low, int(digits[-1])))
    return ParseResult("ok", demand - low, (digits[-1],))


def negotiation_reason(decision: Decision) -> str:
    """One sentence from the state alone: the round, the last round's demands and outcome, the
    number of deals, and the score. It states no intention, so it cannot contradict the demand
    that follows it on the next line."""
    obs = decision.observation
    where = f"Round {obs['round']} of {obs['rounds']}" + (
        ", the last round" if obs["round"] == obs["rounds"] else ""
    )
    demands = obs["demands"]
    if not demands:
        return (f"{where}; no history yet, and an equal split of the {obs['pie']} points would give each "
                f"side {obs['pie'] / 2:g}.")
    own, other = demands[-1]
    outcome = "a deal" if obs["deals"][-1] else "a breakdown"
    deals = sum(obs["deals"])
    return (
        f"{where}; last round I asked for {own} and the opponent for {other}, {outcome}; {deals} of "
        f"{len(demands)} rounds were deals, and the score is {obs['my_score']:g} to "
        f"{obs['opponent_score']:g}."
    )
