"""The pricing market as text: prompts and the strict parser.

Prompts: the system prompt (one per game, written for firm 0, the seat sepo's agent holds; with
asymmetric firms another seat's cost and profits are in its user prompt's history) says the firm's cost, how
demand splits (logit: a lower price than the rivals' wins customers, and some customers buy nothing), the
price list, the profit in a few symmetric cases, any institutions in force, and asks for the price alone on
the last line; the user prompt gives the period, every past period's prices and the firm's profit, the scores,
and asks for the price.

Parser (both protocols; the paper has no pricing game): drop anything up to a closing
`</think>`; take the last non-empty line; read its numbers (a leading currency sign is fine). One
distinct number that equals a listed price (to the cent) is the action; none is "no_action",
several distinct numbers "ambiguous", one number not on the list "illegal". Reasoning on earlier
lines never becomes a price.
"""
from __future__ import annotations

import re

from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.policies.replies import answer_line

ACTION_WORDS = tuple("0123456789")
"""A price is written as a decimal numeral, which every Qwen-style pre-tokenizer splits into digits
(and the point): the tiny model's tokenizer checks the digits."""
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*\d)")


class PricingText(TextView):
    """Prompts and parser for one pricing market."""

    def __init__(self, game):
        self.game = game

    def system_prompt(self) -> str:
        g = self.game
        rivals = "one competitor" if g.num_players == 2 else f"{g.num_players - 1} competitors"
        names = g.action_names
        examples = []
        for index in sorted({0, g.k // 2, g.k - 1}):
            prices = [g.grid[index]] * g.num_players
            examples.append(f"all firms charge {names[index]}: you earn {g.payoffs(prices)[0]:.3f}")
        lines = [
            f"You run a firm that sets the price of its product each period, for {g.rounds} periods, against "
            f"{rivals}.",
            "Each period all firms set their prices at the same time; then all prices are public. Your cost "
            f"is {g.market.cost[0]:.2f} per unit.",
            "Customers choose between the firms' products and buying nothing: the lower your price against "
            "the others', the larger your share (logit demand); your profit is (your price - cost) x your "
            "share.",
            f"Allowed prices: {', '.join(names)}.",
            "For example, in one period, if " + "; if ".join(examples) + ".",
        ]
        lines += self._institutions()
        lines += [
            "Your goal is to maximise your total profit over all periods.",
            "Think briefly if you wish, then end your response with your price alone on the last line, "
            "exactly as "
            "listed (for example " + names[g.k // 2] + ").",
        ]
        return "\n".join(lines)

    def _institutions(self) -> list[str]:
        g = self.game
        lines = []
        if g.cap is not None:
            lines.append(f"A price cap of {g.cap:.2f} is in force: no higher price is allowed.")
        if g.threshold is not None and g.fine > 0:
            lines.append(
                f"The competition authority fines a firm {g.fine:g} in any period in which its price is "
                f"above {g.threshold:.2f}, if it detects it (probability {g.detection:g})."
            )
            if g.leniency > 0:
                lines.append(
                    f"Leniency: when two or more firms price above {g.threshold:.2f}, the one with the "
                    "lowest such price reports the others, who are then fined for certain; its own fine is "
                    f"cut by {100 * g.leniency:g}%."
                )
        return lines

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        lines = [f"Period {obs['round']} of {obs['rounds']}."]
        if obs["prices"]:
            for period, ((own, rivals), profit) in enumerate(zip(obs["prices"], obs["my_profits"]), start=1):
                others = ", ".join(f"{p:.2f}" for p in rivals)
                lines.append(
                    f"Period {period}: you {own:.2f}, {'rival' if len(rivals) == 1 else 'rivals'} {others}; "
                    f"your profit {profit:.3f}"
                )
            lines.append(f"Total profit so far - you: {obs['my_score']:.3f}, "
                         f"{'rival' if obs['firms'] == 2 else 'rivals together'}: {obs['rival_score']:.3f}")
        else:
            lines.append("This is the first period. No history yet.")
        lines += ["", "What price do you set?"]
        return "\n".join(lines)

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        return strict_parse(reply, decision.action_names)

    def disguise_terms(self) -> DisguiseTerms:
        """The words that say "a market": firms, their product, prices and profits, customers,
        rivals and the authority; "logit demand" and "leniency" (terms of the economics
        literature). The amounts stay numbers: the rules are written in them."""
        return DisguiseTerms(names=("firm", "product", "price", "profit", "customer", "competitor", "rival"),
                             fixed={"logit demand": "share rule", "competition authority": "overseer",
                                    "Leniency": "Reporting"})

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return pricing_reason(decision)

    def vocabulary(self) -> str:
        return "\n".join(["price", "prices", "profit", "period", "rival", *self.game.action_names])


def strict_parse(reply: str, names) -> ParseResult:
    """Exactly one distinct number on the last non-empty line, equal to a listed price to the cent."""
    line = answer_line(reply)
    if isinstance(line, ParseResult):
        return line
    found = tuple(dict.fromkeys(float(n) for n in _NUMBER.findall(line)))
    if not found:
        return ParseResult("no_action")
    text = tuple(f"{n:g}" for n in found)
    if len(found) > 1:
        return ParseResult("ambiguous", names_found=text)
    cents = [round(float(name) * 100) for name in names]
    value = found[0] * 100
    if abs(value - round(value)) > 1e-6 or round(value) not in cents:
        return ParseResult("illegal", names_found=text)
    return ParseResult("ok", cents.index(round(value)), text)


def pricing_reason(decision: Decision) -> str:
    """One sentence from the state alone: the period, the last period's prices and the scores. It
    names no intended price, so it cannot contradict the price on the next line."""
    obs = decision.observation
    where = f"Period {obs['round']} of {obs['rounds']}" + (
        ", the last period" if obs["round"] == obs["rounds"] else ""
    )
    if not obs["prices"]:
        return f"{where}; no history yet."
    own, rivals = obs["prices"][-1]
    lowest = min(rivals)
    relation = "below" if lowest < own else ("above" if lowest > own else "level with")
    return (
        f"{where}; last period the lowest rival price was {lowest:.2f}, {relation} my {own:.2f}; total "
        f"profit {obs['my_score']:.3f} to the rivals' {obs['rival_score']:.3f}."
    )
