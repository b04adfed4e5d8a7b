"""The iterated prisoner's dilemma as text: prompts and the two parsers.

Prompts (both protocols, docs/paper-protocol.md §3.1): the system prompt names the game, the two moves
and the four payoff rules in words, and asks for the action on the last line; the user prompt
gives the round, both players' past moves, the scores so far, and asks for the action.

Parsers.
- `rigorous` (strict): drop anything up to a closing `</think>` (a reply still inside an open
  `<think>` block has no answer: "truncated"); take the last non-empty line; find the whole words
  COOPERATE and DEFECT (any case). Exactly one distinct word is the action; none is "no_action",
  both are "ambiguous". Reasoning on earlier lines never becomes an action.
- `paper` (the authors' priority parser): look at the upper-cased last non-empty line, then at
  the whole reply; the first rule that matches wins: the word COOPERATE, the word DEFECT,
  DEFLECT, SILENT (cooperate), TESTIFY (defect), a word starting COOPERAT, a word starting
  DEFECTI, the bare letter C, the bare letter D. So "I won't DEFECT, I COOPERATE" is COOPERATE.
"""
from __future__ import annotations

import re

from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.games.ipd.rules import ACTION_NAMES, COOPERATE, DEFECT
from sepo.policies.replies import answer_line

_STRICT = re.compile(r"\b(COOPERATE|DEFECT)\b", re.IGNORECASE)
_PAPER_RULES = (
    (re.compile(r"\bCOOPERATE\b"), COOPERATE, "COOPERATE"),
    (re.compile(r"\bDEFECT\b"), DEFECT, "DEFECT"),
    (re.compile(r"\bDEFLECT\b"), DEFECT, "DEFLECT"),
    (re.compile(r"\bSILENT\b"), COOPERATE, "SILENT"),
    (re.compile(r"\bTESTIFY\b"), DEFECT, "TESTIFY"),
    (re.compile(r"\bCOOPERAT\w*"), COOPERATE, "COOPERAT*"),
    (re.compile(r"\bDEFECTI\w*"), DEFECT, "DEFECTI*"),
    (re.compile(r"^\W*C\W*$"), COOPERATE, "C"),
    (re.compile(r"^\W*D\W*$"), DEFECT, "D"),
)
_LABEL_WIDTH = len("Opponent's past actions:") + 2


def _points(value: float) -> str:
    return f"{value:g} point" + ("" if value == 1 else "s")


class IPDText(TextView):
    """Prompts and parser for one IPD game; `style` is the protocol ("rigorous" or "paper")."""

    def __init__(self, game, style: str = "rigorous"):
        if style not in ("rigorous", "paper"):
            raise ValueError(f"ipd text style must be 'rigorous' or 'paper', got {style!r}")
        self.game, self.style = game, style

    def system_prompt(self) -> str:
        v = self.game.payoffs.rstp(0)
        rules = [
            f"- If you both COOPERATE, you each get {_points(v['R'])}.",
            f"- If you DEFECT and the opponent COOPERATES, you get {_points(v['T'])} and the opponent gets "
            f"{_points(v['S'])}.",
            f"- If you COOPERATE and the opponent DEFECTS, you get {_points(v['S'])} and the opponent gets "
            f"{_points(v['T'])}.",
            f"- If you both DEFECT, you each get {_points(v['P'])}.",
        ]
        if not self.game.payoffs.is_symmetric:
            rules = self._asymmetric_rules()
        if self.style == "paper":
            ending = (
                "Think briefly about the opponent's pattern, then end your response with your action on the "
                "last line: COOPERATE or DEFECT.\nRespond only in English."
            )
        else:
            ending = ("Think briefly if you wish, then end your response with your action alone on the "
                      "last line: COOPERATE or DEFECT.")
        return "\n".join(
            [
                "You are playing the iterated Prisoner's Dilemma against one opponent for "
                f"{self.game.rounds} rounds.",
                "Each round, you and the opponent each choose COOPERATE or DEFECT at the same time.",
                *rules,
                "Your goal is to maximise your total score over all rounds.",
                ending,
            ]
        )

    def _asymmetric_rules(self) -> list[str]:
        lines = []
        for own in (COOPERATE, DEFECT):
            for other in (COOPERATE, DEFECT):
                m = self.game.payoffs.matrix[own, other]
                lines.append(f"- You {ACTION_NAMES[own]}, the opponent {ACTION_NAMES[other]}S: you get "
                             f"{_points(m[0])} and the opponent gets {_points(m[1])}.")
        return lines

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        lines = [f"Round {obs['round']} of {obs['rounds']}."]
        history = obs["history"]
        if history:
            lines.append(
                "Your past actions:".ljust(_LABEL_WIDTH) + ", ".join(ACTION_NAMES[own] for own, _ in history)
            )
            lines.append(
                "Opponent's past actions:".ljust(_LABEL_WIDTH)
                + ", ".join(ACTION_NAMES[other] for _, other in history)
            )
            lines.append(f"Scores so far — you: {obs['my_score']:g}, opponent: {obs['opponent_score']:g}")
        else:
            lines.append("This is the first round. No history yet.")
        lines += ["", "What is your action?"]
        return "\n".join(lines)

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        if self.style == "paper":
            return paper_parse(reply)
        return strict_parse(reply)

    def disguise_terms(self) -> DisguiseTerms:
        """The game's name and its two action words."""
        return DisguiseTerms(game=("Prisoner's Dilemma",), actions=tuple(ACTION_NAMES))

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return ipd_reason(decision)


def strict_parse(reply: str) -> ParseResult:
    """The rigorous parser: exactly one of COOPERATE / DEFECT as a whole word on the last line."""
    line = answer_line(reply)
    if isinstance(line, ParseResult):
        return line
    found = tuple(dict.fromkeys(word.upper() for word in _STRICT.findall(line)))
    if not found:
        return ParseResult("no_action")
    if len(found) > 1:
        return ParseResult("ambiguous", names_found=found)
    return ParseResult("ok", ACTION_NAMES.index(found[0]), found)


def paper_parse(reply: str) -> ParseResult:
    """The paper's priority parser (see the module docstring); `names_found` holds the rule that matched."""
    lines = [line.strip() for line in reply.upper().splitlines() if line.strip()]
    for text in ([lines[-1]] if lines else []) + [reply.upper().strip()]:
        for pattern, action, rule in _PAPER_RULES:
            if pattern.search(text):
                return ParseResult("ok", action, (rule,))
    return ParseResult("no_action")


def ipd_reason(decision: Decision) -> str:
    """One sentence from the state alone: the round, who broke trust how often and most
    recently, and the score. It uses no action word, so it can neither parse as a move nor
    contradict the move that follows it."""
    obs = decision.observation
    where = f"Round {obs['round']} of {obs['rounds']}" + (
        ", the last round" if obs["round"] == obs["rounds"] else ""
    )
    history = obs["history"]
    if not history:
        return f"{where}; no history yet."
    theirs = sum(other for _, other in history)
    mine = sum(own for own, _ in history)
    last = "betrayed me last round" if history[-1][1] else "kept faith last round"
    return (
        f"{where}; the opponent {last} and betrayed me in {theirs} of {len(history)} rounds, I betrayed it "
        f"in {mine}; the score is {obs['my_score']:g} to {obs['opponent_score']:g}."
    )
