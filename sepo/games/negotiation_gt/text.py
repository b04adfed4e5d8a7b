"""The three-item negotiation as text: prompts, the strict parser and the paper's parser.

Strict parser (rigorous): drop anything up to a closing `</think>` (a reply still inside an open
`<think>` block has no answer: "truncated"); the last non-empty line must hold exactly one bracketed
triple of non-negative integers, `[books, hats, balls]`. None is "no_action", two different ones
"ambiguous", a demand outside the pool "illegal". Numbers in the reasoning never become a demand.

Paper parser (`--protocol paper`, the authors' rule): the last match of the first stage that
matches anywhere in the reply wins: (1) a bracketed triple; (2) "Books: x, Hats: y, Balls: z"
(with ':' or '='); (3) any "x, y, z"; (4) the first three integers on the last line that has at
least three. Each demand is clamped into 0..pool_i. If nothing matches the reply is "no_action";
the paper then plays [1, 1, 1] (`fallback_action`, clamped into the pool), which sepo counts as a
parse failure handled by the `fallback` rule.

Cheap talk: when a decision carries an opponent's message (`sepo.games.talk`), both prompts show
it quoted, as the opponent's words, after the state and before the question.
"""
from __future__ import annotations

import re

from sepo.games import talk
from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.games.negotiation_gt.rules import ITEMS, name_of
from sepo.policies.replies import answer_line

ACTION_WORDS = ("[", "]")
"""A demand is written as a bracketed triple of numerals; the tiny model's tokenizer keeps the
brackets single tokens (numerals are split into digits by every Qwen-style pre-tokenizer)."""
_BRACKET = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]")
_LABELLED = (
    re.compile(r"books?\s*[:=]\s*(\d+)\D{0,12}?hats?\s*[:=]\s*(\d+)\D{0,12}?balls?\s*[:=]\s*(\d+)", re.I),
    re.compile(r"(\d+)\s*books?\D{0,12}?(\d+)\s*hats?\D{0,12}?(\d+)\s*balls?", re.I),
)
_TRIPLE = re.compile(r"(?<![\d.])(\d+)\s*,\s*(\d+)\s*,\s*(\d+)(?![\d.])")
_INT = re.compile(r"\d+")

_PAPER_SYSTEM = (
    "You are negotiating over a pool of items with one opponent for {rounds} rounds.\n"
    "The items are Books, Hats and Balls. The pool is the same in every round.\n"
    "You have private values for each item type; your values sum to {total}. The opponent has its own "
    "private values, hidden from you.\n"
    "Each round you and the opponent each demand a number of each item at the same time.\n"
    "If for every item the two demands together do not exceed the pool, it is a DEAL and each of you "
    "scores the sum of your demanded items times your own values.\n"
    "Otherwise it is a BREAKDOWN and both of you score 0 that round.\n"
    "Your goal is to maximise your total score over all rounds.\n"
    "Think briefly about the opponent's demands, then end your response with your demand on the last line "
    "as: [books, hats, balls]\n"
    "Respond only in English."
)

_RIGOROUS_SYSTEM = (
    "You negotiate with one opponent over a pool of books, hats and balls for {rounds} rounds.\n"
    "At the start both of you learn the pool (the same every round) and your own values per item; each "
    "player's values sum to {total} and stay fixed for the whole game. You never see the opponent's "
    "values.\n"
    "Each round both of you demand, at the same time, how many of each item you want (0 up to the pool).\n"
    "If for every item the two demands fit into the pool, the round is a deal and each of you scores its "
    "demanded items times its own values; otherwise both score 0.{third}\n"
    "After each round both demands are shown. Your goal is to score as much as possible over all rounds.\n"
    "Think briefly if you wish, then end your response with your demand alone on the last line as [books, "
    "hats, balls]."
)

_THIRD = " Items a deal leaves unclaimed go to the public."


class NegotiationText(TextView):
    """Prompts in the paper's style or the rigorous style, and their parsers."""

    def __init__(self, game, style: str = "rigorous"):
        if style not in ("rigorous", "paper"):
            raise ValueError(f"negotiation-gt text style must be 'rigorous' or 'paper', got {style!r}")
        self.game = game
        self.style = style

    def system_prompt(self) -> str:
        rules = self.game.rules
        if self.style == "paper":
            return _PAPER_SYSTEM.format(rounds=rules.rounds, total=rules.total)
        return _RIGOROUS_SYSTEM.format(
            rounds=rules.rounds, total=rules.total, third=_THIRD if rules.third_party else ""
        )

    def user_prompt(self, decision: Decision) -> str:
        lines = self._paper_lines(decision) if self.style == "paper" else self._rigorous_lines(decision)
        lines[-1:-1] = talk.prompt_lines(decision.observation)
        return "\n".join(lines)

    def _paper_lines(self, decision: Decision) -> list[str]:
        obs = decision.observation
        pool, values = obs["pool"], obs["values"]
        lines = [f"Round {obs['round']} of {obs['rounds']}.",
                 f"Item pool: {pool[0]} Books, {pool[1]} Hats, {pool[2]} Balls",
                 f"Your private values: Books={values[0]}, Hats={values[1]}, Balls={values[2]}",
                 "(Opponent has different private values — unknown to you)"]
        if obs["history"]:
            if obs.get("opponent_payoffs") is None:
                raise talk_free_error()
            lines.append("Round history:")
            for r, (own, other, deal) in enumerate(obs["history"], 1):
                lines.append(f"Round {r}: you demanded {name_of(own)}, opponent demanded {name_of(other)} → "
                             f"{'DEAL' if deal else 'BREAKDOWN'}")
            lines.append(
                f"Scores so far — you: {sum(obs['my_payoffs']):.1f}, opponent: "
                f"{sum(obs['opponent_payoffs']):.1f}"
            )
        else:
            lines.append("This is the first round. No history yet.")
        lines.append("What is your demand? [books, hats, balls]")
        return lines

    def _rigorous_lines(self, decision: Decision) -> list[str]:
        obs = decision.observation
        pool, values = obs["pool"], obs["values"]
        lines = [f"Round {obs['round']} of {obs['rounds']}.",
                 "Pool: " + ", ".join(f"{n} {item}" for n, item in zip(pool, ITEMS)) + ".",
                 "Your values per item: " + ", ".join(f"{item} {v}" for item, v in zip(ITEMS, values)) + "."]
        if obs["history"]:
            lines.append("Earlier rounds:")
            for r, (own, other, deal) in enumerate(obs["history"], 1):
                lines.append(
                    f"- round {r}: you demanded {name_of(own)}, the opponent demanded {name_of(other)}: "
                    f"{'deal' if deal else 'breakdown'}, your score {obs['my_payoffs'][r - 1]:g}"
                )
            lines.append(f"Your total so far: {sum(obs['my_payoffs']):g}.")
        else:
            lines.append("This is the first round.")
        lines.append("What is your demand [books, hats, balls]?")
        return lines

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        return (
            self._paper_parse(reply, decision)
            if self.style == "paper"
            else self._strict_parse(reply, decision)
        )

    def _strict_parse(self, reply: str, decision: Decision) -> ParseResult:
        line = answer_line(reply)
        if isinstance(line, ParseResult):
            return line
        found = tuple(dict.fromkeys(tuple(int(x) for x in m) for m in _BRACKET.findall(line)))
        names = tuple(name_of(d) for d in found)
        if not found:
            return ParseResult("no_action")
        if len(found) > 1:
            return ParseResult("ambiguous", names_found=names)
        demand = found[0]
        if any(d > p for d, p in zip(demand, decision.observation["pool"])):
            return ParseResult("illegal", names_found=names)
        return ParseResult("ok", self.game.rules.encode(demand), names)

    def _paper_parse(self, reply: str, decision: Decision) -> ParseResult:
        demand = paper_demand(reply)
        if demand is None:
            return ParseResult("no_action")
        clamped = tuple(min(max(d, 0), p) for d, p in zip(demand, decision.observation["pool"]))
        return ParseResult("ok", self.game.rules.encode(clamped), (name_of(demand),))

    def fallback_action(self, decision: Decision) -> int:
        """The paper's fallback demand [1, 1, 1], clamped into the pool."""
        return self.game.rules.encode(tuple(min(1, p) for p in decision.observation["pool"]))

    def disguise_terms(self) -> DisguiseTerms:
        """The three items and the two outcome words. Demands are counts the rules add up, so
        they keep their numbers (and their [first, second, third] order)."""
        return DisguiseTerms(names=(*(item.rstrip("s") for item in ITEMS), "DEAL", "BREAKDOWN"))

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return negotiation_reason(decision)

    def vocabulary(self) -> str:
        return "\n".join(["[books, hats, balls]", "Books Hats Balls DEAL BREAKDOWN deal breakdown",
                          *(name_of((a, b, c)) for a in range(5) for b in range(5) for c in range(5))])


def paper_demand(reply: str) -> tuple[int, int, int] | None:
    """The authors' four-stage search (see the module docstring); None if nothing matches."""
    for pattern in (_BRACKET, *_LABELLED, _TRIPLE):
        matches = pattern.findall(reply)
        if matches:
            return tuple(int(x) for x in matches[-1])
    for line in reversed(reply.splitlines()):
        numbers = _INT.findall(line)
        if len(numbers) >= 3:
            return tuple(int(x) for x in numbers[:3])
    return None


def talk_free_error():
    from sepo.errors import SepoError

    return SepoError(
        "the paper's prompt shows the opponent's score, which depends on its private values; this decision "
        "does not carry it (the lower-bound search covers agents that do not read it): use --protocol "
        "rigorous"
    )


def negotiation_reason(decision: Decision) -> str:
    """One sentence from the state alone: the pool, the agent's values and where its value lies,
    and the opponent's last demand with how that round ended. It never names the demand that
    follows, so it cannot contradict it."""
    obs = decision.observation
    pool, values = obs["pool"], obs["values"]
    worth = [p * v for p, v in zip(pool, values)]
    best = ITEMS[max(range(len(ITEMS)), key=lambda i: (worth[i], -i))]
    head = (f"The pool is worth {sum(worth)} to me if I got all of it, most of it in {best} "
            f"({' + '.join(f'{p}x{v}' for p, v in zip(pool, values))})")
    history = obs["history"]
    if not history:
        return f"{head}; there is no history yet."
    own, other, deal = history[-1]
    return (
        f"{head}; last round the opponent asked for {other[0]} books, {other[1]} hats and {other[2]} balls "
        f"and it ended in {'a deal' if deal else 'a breakdown'}."
    )
