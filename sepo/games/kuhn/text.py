"""Kuhn poker as text: the prompts an LLM reads and the strict parser of its reply.

Parsing rule (strict, documented in docs/parsing.md): drop anything up to a closing `</think>`
(a reply still inside an open `<think>` block has no answer: "truncated"); take the last non-empty line; find
the whole words PASS, BET, CALL, FOLD in it (any case). Exactly one distinct word that is legal here is an
action. No word is "no_action", two or more distinct words are "ambiguous", one word that is not legal here
(CALL when nobody bet) is "illegal". Reasoning on earlier lines never becomes an action.
"""
from __future__ import annotations

import re

from sepo.games.base import Decision, ParseResult, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.games.kuhn.rules import CARD_NAMES, action_names
from sepo.policies.replies import answer_line

ACTION_WORDS = ("PASS", "BET", "CALL", "FOLD")
_WORD = re.compile(r"\b(PASS|BET|CALL|FOLD)\b", re.IGNORECASE)

_SYSTEM = (
    "You are playing Kuhn poker, a two-player card game, over several hands.\n"
    "The deck has three cards: J (lowest), Q and K (highest). Each hand, both players put 1 chip in the "
    "pot and get one private card.\n"
    "The first player may PASS or BET 1 chip.\n"
    "- If the first player PASSES, the second player may PASS (the higher card wins the 2-chip pot, a gain "
    "of 1) or BET 1 chip.\n"
    "- Facing a BET, a player may CALL (match it; the higher card wins the 4-chip pot, a gain of 2) or "
    "FOLD (give up the pot, a loss of 1).\n"
    "You alternate between acting first and second from one hand to the next.\n"
    "Your goal is to win as many chips as possible over all hands.\n"
    "Think briefly if you wish, then end your response with your action alone on the last line: PASS, BET, "
    "CALL or FOLD."
)


def _history_words(history: str, seat: int, name_actors: bool) -> list[str]:
    words = []
    for index, move in enumerate(history):
        name = action_names(history[:index])["pb".index(move)]
        if name_actors:
            actor = "you" if index % 2 == seat else "opponent"
            name = f"{actor} {name}"
        words.append(name)
    return words


class KuhnText(TextView):
    """Prompts for Kuhn poker. `style="paper"` reproduces the paper's user prompt fields exactly
    (betting listed without naming who acted); `"rigorous"` also names the actor of each move."""

    def __init__(self, style: str = "rigorous"):
        if style not in ("rigorous", "paper"):
            raise ValueError(f"kuhn text style must be 'rigorous' or 'paper', got {style!r}")
        self.style = style

    def system_prompt(self) -> str:
        return _SYSTEM

    def user_prompt(self, decision: Decision) -> str:
        obs = decision.observation
        lines = [f"Hand {obs['hand']} of {obs['hands']}.", f"Your card: {CARD_NAMES[obs['card']]}"]
        if obs["history"]:
            moves = _history_words(obs["history"], obs["seat"], name_actors=self.style == "rigorous")
            lines.append("Betting so far this hand: " + ", ".join(moves))
        else:
            lines.append("You are first to act this hand. No bets yet.")
        if obs["hand"] > 1:
            net = obs["prior_net"]
            lines.append(
                f"Score across {obs['hand'] - 1} prior hands: {obs['prior_wins']}W/{obs['prior_losses']}L, "
                f"net {'+' if net >= 0 else ''}{net:g} chips"
            )
        lines.append("")
        shown = ("CALL", "FOLD") if obs["facing_bet"] else ("PASS", "BET")  # the paper's order
        lines.append(f"Legal actions: {' or '.join(shown)}.")
        lines.append("What is your action?")
        return "\n".join(lines)

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        line = answer_line(reply)
        if isinstance(line, ParseResult):
            return line
        found = tuple(dict.fromkeys(word.upper() for word in _WORD.findall(line)))
        if not found:
            return ParseResult("no_action")
        if len(found) > 1:
            return ParseResult("ambiguous", names_found=found)
        if found[0] not in decision.action_names:
            return ParseResult("illegal", names_found=found)
        return ParseResult("ok", decision.action_named(found[0]), found)

    def disguise_terms(self) -> DisguiseTerms:
        """The game's name, its four action words, the three cards, and "Betting" (which names
        an action inside the history line)."""
        return DisguiseTerms(
            game=("Kuhn poker",), actions=ACTION_WORDS, names=CARD_NAMES, fixed={"Betting": "Moves"}
        )

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def reason(self, decision: Decision) -> str:
        return kuhn_reason(decision)

    def vocabulary(self) -> str:
        return VOCABULARY


VOCABULARY = """I have the highest card, so I bet for value.
I hold the lowest card; I fold to a bet and may bluff when first to act.
With the middle card I check and call a bet sometimes.
The opponent bet; my card is strong enough to call.
The opponent passed, so I can bet or check behind.
Nobody has bet yet. My card is weak. My card is strong. My card is medium.
A bluff keeps the opponent guessing. Calling catches bluffs. Folding saves a chip.
I am first to act this hand. I am second to act this hand. The pot has 2 chips. The pot has 4 chips.
"""
"""Short, state-describing phrases so that reasons in SFT data tokenize compactly (the tiny
model's tokenizer is trained on them); any other text still encodes (byte-level, lossless)."""

_STRENGTH = {0: "the lowest card", 1: "the middle card", 2: "the highest card"}
_OUTLOOK = {0: "it loses to any card the opponent can hold", 1: "it beats only a bluff with J",
            2: "it beats any card the opponent can hold"}


def kuhn_reason(decision: Decision) -> str:
    """One sentence from the state alone: the card, its strength, and the betting faced. It never
    names or hints at the action, so it cannot contradict the action that follows it."""
    obs = decision.observation
    card = obs["card"]
    holding = f"I hold {CARD_NAMES[card]}, {_STRENGTH[card]}"
    if obs["facing_bet"]:
        after = " after passing" if obs["history"] == "pb" else ""
        return f"{holding}; facing a bet{after}, {_OUTLOOK[card]}."
    if obs["history"] == "p":
        return f"{holding}; the opponent passed to me."
    return f"{holding}; I act first."
