"""Domain text for training the tiny model's tokenizer.

The tokenizer of the locally built test model is trained on what the model will actually read and
write: each registered game's system prompt, the user prompts of decisions reached by random play
(both text protocols), the answer text of every legal action, and the follow-up question of the
forced-decoding rule, and each text view's `vocabulary()` (phrases its SFT reasons use). Nothing
here names a game: every game in the domain registry contributes its text automatically, so a new
domain only needs to be registered (and, if it has special answer words, to list them in
`ACTION_WORDS` beside its text view).
"""
from __future__ import annotations

import warnings
from typing import Iterable, Iterator

import numpy as np

from sepo.games.base import Decision, Game

FORCED_QUESTION = "State your final action ({names}):"
"""The user turn of the paper's forced decoding (docs/paper-protocol.md §1), restricted to legal actions."""

# Words of the repeated games' reasons, shared by their text views until each declares its own.
SHARED_WORDS = "I cooperate, defect, accept, reject, offer, demand, bid low, bid medium, bid high.\n"


def _random_decisions(game: Game, episodes: int, rng: np.random.Generator) -> Iterator[Decision]:
    """Decisions reached by uniformly random play of `episodes` episodes of `game`."""
    for _ in range(episodes):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                probs = np.array([p for _, p in outcomes], dtype=float)
                state.apply_action(outcomes[int(rng.choice(len(outcomes), p=probs / probs.sum()))][0])
                continue
            players = state.acting_players()
            decisions = [state.decision(p) for p in players]
            yield from decisions
            actions = [d.legal_actions[int(rng.integers(len(d.legal_actions)))] for d in decisions]
            if len(players) == 1:
                state.apply_action(actions[0])
            else:
                state.apply_actions(actions)


def game_texts(game: Game, episodes: int = 200, seed: int = 0) -> Iterator[str]:
    """System prompt, user prompts, answers and forced-decoding questions of one game's text view."""
    text = game.text
    yield text.system_prompt()
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    for decision in _random_decisions(game, episodes, rng):
        prompt = text.user_prompt(decision)
        if prompt in seen:
            continue
        seen.add(prompt)
        yield prompt
        answers = [text.answer_text(decision, a) for a in decision.legal_actions]
        yield "\n".join(answers)
        yield FORCED_QUESTION.format(names="/".join(decision.action_names))


def domain_corpus(
    domains: Iterable[str] | None = None,
    episodes: int = 200,
    seed: int = 0,
    protocols: Iterable[str] | None = None,
) -> list[str]:
    """Text of every registered domain (or those named), under every text protocol."""
    from sepo.games import PROTOCOLS, domain_names, load_game

    names = domain_names() if domains is None else list(domains)
    texts: list[str] = ["".join(load_game(name).text.vocabulary() for name in names) + SHARED_WORDS]
    # a paper quirk's warning is for a user who plays that protocol, not for a vocabulary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for index, name in enumerate(names):
            for protocol in (PROTOCOLS if protocols is None else protocols):
                texts.extend(
                    game_texts(
                        load_game(name, protocol=protocol), episodes=episodes, seed=seed + 1000 * index
                    )
                )
    return texts


def frequent_lines(
    texts: Iterable[str], exclude: Iterable[str] = (), min_count: int = 2, max_lines: int = 1024,
    always: Iterable[str] = (),
) -> list[str]:
    """Whole lines worth a token of their own: every line of `always` (the system prompts) and
    every line that occurs at least `min_count` times in `texts`, most frequent first, without
    the action words themselves and without lines that have outer whitespace."""
    from collections import Counter

    excluded = set(exclude)
    counts = Counter(line for text in texts for line in text.split("\n"))
    chosen = [line for line in dict.fromkeys(line for text in always for line in text.split("\n"))]
    chosen += [line for line, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_count]
    out = []
    for line in dict.fromkeys(chosen):
        if len(line) >= 2 and line == line.strip() and line not in excluded and len(out) < max_lines:
            out.append(line)
    return out


def system_prompts(domains: Iterable[str] | None = None) -> list[str]:
    from sepo.games import PROTOCOLS, domain_names, load_game

    names = domain_names() if domains is None else list(domains)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return list(
            dict.fromkeys(load_game(n, protocol=p).text.system_prompt() for n in names for p in PROTOCOLS)
        )


def action_words(domains: Iterable[str] | None = None) -> list[str]:
    """Every action name of the named (or all registered) domains, for the single-token check."""
    from sepo.games import domain_names, load_game

    names = domain_names() if domains is None else list(domains)
    words: list[str] = []
    for name in names:
        game = load_game(name)
        module_words = getattr(
            __import__(type(game.text).__module__, fromlist=["ACTION_WORDS"]), "ACTION_WORDS", None
        )
        if module_words:
            words.extend(module_words)
        else:  # a domain without a declared list: the names seen in random play
            for decision in _random_decisions(game, 20, np.random.default_rng(0)):
                words.extend(decision.action_names)
    return list(dict.fromkeys(words))
