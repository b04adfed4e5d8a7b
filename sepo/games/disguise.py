"""Disguised-rule variants: the same game under new names (a memorisation check).

A model that plays a famous game well may be recalling the game rather than reading its rules. A
disguised view plays the same rules, the same payoffs and the same states under new names: the
game's name becomes a neutral one, its action words a seeded permutation of neutral words, and
its other telling names (playing pieces, items, outcomes, units) neutral nouns. Only text changes;
the structured view (`Decision`) that bots, tables and solvers read is untouched, so an agent that
reads the rules plays the disguised game exactly as the plain one, and a gap between the two is
the part of its play that rests on the names.

A text view opts in with one hook, `TextView.disguise_terms()`, returning a `DisguiseTerms`: the
words that name the game, its actions and its other telling names, as they appear in its prompts.
`DisguisedView(view, seed)` then rewrites every prompt, answer line and reason the view writes
(whole words in any case, with their plural and verb endings), and reads a reply by mapping the
disguised words back before the view's own strict parser sees it. A plain name in a disguised
reply is not an answer: it is blanked before parsing, so a model that answers with the famous
game's word has named no action. Numbers are never renamed: where the actions are amounts (bids,
demands), the rules speak of those amounts, so only the names around them change.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, ParseResult, TextView

GAME_NAMES = (
    "Tarn",
    "Velloc",
    "Orrin",
    "Brask",
    "Quillet",
    "Morrow",
    "Saffen",
    "Dunmore",
    "Kestrel",
    "Larkspur",
)
ACTION_WORDS = (
    "ALDER",
    "BIRCH",
    "CEDAR",
    "HAZEL",
    "MAPLE",
    "ROWAN",
    "SPRUCE",
    "WILLOW",
    "ASPEN",
    "LARCH",
    "POPLAR",
    "JUNIPER",
)
NOUNS = (
    "tarp",
    "quill",
    "spool",
    "flint",
    "brick",
    "prism",
    "token",
    "wedge",
    "knot",
    "reed",
    "shard",
    "pebble",
)
_SUFFIXES = ("es", "s", "ed", "ing")
_BLANK = "\u25c6"
"""What a plain name in a disguised reply becomes before parsing: a sign no parser reads as an action."""


@dataclass(frozen=True)
class DisguiseTerms:
    """The words a text view's prompts use to name the game and what is in it (see module doc).

    `game`: names of the game as the prompts write them, all renamed to one neutral name. `actions`: action
    words, given neutral words by a seeded permutation. `names`: other telling names (pieces,
    items, outcomes, units), given neutral nouns by a seeded permutation. `fixed`: further telling
    words with the neutral word the domain chose for them."""

    game: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    fixed: Mapping[str, str] = field(default_factory=dict)

    def all(self) -> tuple[str, ...]:
        return (*self.game, *self.actions, *self.names, *self.fixed)


def renaming(terms: DisguiseTerms, seed: int) -> dict[str, str]:
    """term -> neutral word, drawn from `seed` alone (no neutral word equals a term)."""
    if seed < 0:
        raise SepoError(f"--disguise seed must be >= 0, got {seed}")
    rng = np.random.default_rng([seed, 0xD15C])
    taken = {t.lower() for t in terms.all()}
    mapping: dict[str, str] = {}
    for words, pool in ((terms.game, GAME_NAMES), (terms.actions, ACTION_WORDS), (terms.names, NOUNS)):
        free = [w for w in pool if w.lower() not in taken]
        needed = 1 if words is terms.game else len(words)
        if words and needed > len(free):
            raise SepoError(f"a disguise needs {needed} neutral words and has {len(free)}")
        if not words:
            continue
        order = rng.permutation(len(free))[:needed]
        chosen = [free[i] for i in order]
        for i, word in enumerate(words):
            mapping[word] = chosen[0 if words is terms.game else i]
    mapping.update(terms.fixed)
    return mapping


def _styled(word: str, like: str) -> str:
    """`word` in the case style of `like`: UPPER, Capitalised or lower."""
    if len(like) > 1 and like.isupper():
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word.lower()


def _inflected(word: str, suffix: str) -> str:
    if suffix.lower() in ("s", "es"):
        plural = "es" if re.search(r"(s|x|z|ch|sh)$", word, re.IGNORECASE) else "s"
        return word + (plural.upper() if suffix.isupper() else plural)
    return word + suffix


def _pattern(words) -> re.Pattern:
    """Whole words in any case, longest first; words of two letters or more also with an ending."""
    endings = "(?:" + "|".join(_SUFFIXES) + ")?"
    alternatives = [re.escape(w) + (endings if len(w) > 1 and w[-1].isalpha() else "")
                    for w in sorted(set(words), key=len, reverse=True)]
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


class _Rewriter:
    """Case-insensitive whole-word rewriting by a table, keeping case style and word endings."""

    def __init__(self, table: dict[str, str], proper=()):
        self.table = {k.lower(): v for k, v in table.items()}
        self.proper = set(proper)
        self.pattern = _pattern(table)

    def __call__(self, text: str) -> str:
        return self.pattern.sub(self._replace, text)

    def _replace(self, match: re.Match) -> str:
        found = match.group(0)
        stem, ending = found, ""
        if found.lower() not in self.table:
            size = next(
                len(e)
                for e in _SUFFIXES
                if found.lower().endswith(e) and found[: -len(e)].lower() in self.table
            )
            stem, ending = found[:-size], found[-size:]
        target = self.table[stem.lower()]
        if target == _BLANK:
            return _BLANK
        word = _styled(target, stem if target not in self.proper or stem.isupper() else "Aa")
        return _inflected(word, ending) if ending else word


class DisguisedView(TextView):
    """`view` under new names, drawn from `seed` (see module doc). Everything the view writes is
    rewritten; a reply is mapped back (plain names blanked) and read by the view's own parser.
    Other attributes (the game, the style, a `fallback_action`) are the view's."""

    def __init__(self, view: TextView, seed: int):
        terms = view.disguise_terms()
        if terms is None or not terms.all():
            raise SepoError(
                f"the text view {type(view).__name__} cannot be disguised: it names no terms to rename "
                "(a domain opts in with TextView.disguise_terms, see docs/domains.md)"
            )
        self.view, self.seed, self.terms = view, seed, terms
        self.names = renaming(terms, seed)
        self._forward = _Rewriter(self.names, proper={self.names[g] for g in terms.game})
        back = {term: _BLANK for term in terms.all()}
        back.update({neutral: term for term, neutral in self.names.items() if term not in terms.game})
        self._back = _Rewriter(back)

    def __getattr__(self, name):
        if name == "view":  # not yet set: no recursion while unpickling or copying
            raise AttributeError(name)
        return getattr(self.view, name)

    def record(self) -> dict:
        """What goes into a result: the seed and every renaming."""
        return {"seed": self.seed, "names": dict(self.names)}

    def system_prompt(self) -> str:
        return self._forward(self.view.system_prompt())

    def user_prompt(self, decision: Decision) -> str:
        return self._forward(self.view.user_prompt(decision))

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        return self.view.parse(self._back(reply), decision)

    def answer_text(self, decision: Decision, action: int) -> str:
        return self._forward(self.view.answer_text(decision, action))

    def reason(self, decision: Decision) -> str:
        return self._forward(self.view.reason(decision))

    def vocabulary(self) -> str:
        return self._forward(self.view.vocabulary())

    def disguise_terms(self) -> DisguiseTerms | None:
        return None  # a disguise of a disguise would rename the neutral words: not offered

    def plain(self, text: str) -> str:
        """`text` with the disguised words mapped back to the plain ones (plain names blanked)."""
        return self._back(text)
