"""Expert traces for supervised warm starts: chat examples from strategy mixtures.

One strategy is drawn per episode from the mixture and plays the whole episode (as in the
paper) against each driving opponent. Every decision becomes one chat example:
[system prompt, user prompt, assistant: a one-sentence reason + the action on the last line].
Unlike the paper's canned strings, the reply is the text view's `canonical_reply`, whose reason
is written from the state itself, so it can never contradict the state. The mixtures and the
driving opponents are the domain's (`Domain.demos`, `Domain.demo_opponents`).

With `answer_only=True` the assistant turn is the answer line alone (`answer_text`). A model
trained on such data answers with the action line and nothing else, so its played policy is read
exactly, by scoring each legal answer (`HFPolicy.answer_probabilities`), instead of estimated from
sampled replies; its replies are also a few tokens long, which makes play and training cheap.
Each such example also lists its decision's legal answer lines (`legal_replies`), which the
legal-reply term of `sepo sft --legal-weight` reads (`sepo.training.legal_mass`).

With cheap talk (`talk=True`) every round also gives one example of the message turn
(`sepo.games.talk.message_chat`): the assistant writes `MESSAGE: <the strategy's own line>`, or
`MESSAGE: none` for a strategy without one, so a model trained on the data writes messages in
the form the message rule reads.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from sepo.errors import SepoError
from sepo.evaluation.play import play_episodes
from sepo.games.base import Game
from sepo.games.registry import get_domain, unknown_name
from sepo.policies.base import Choice, Policy
from sepo.training.legal_mass import LEGAL_COLUMN


class _Demonstrator(Policy):
    """Plays a strategy and writes the chat example of each decision."""

    def __init__(self, strategy: Policy, game: Game, sink: list, answer_only: bool = False):
        self.strategy, self.game, self.sink, self.answer_only = strategy, game, sink, answer_only
        self.name = strategy.name

    def action_probabilities(self, decision):
        return self.strategy.action_probabilities(decision)

    def act(self, decisions, rng):
        choices = self.strategy.act(decisions, rng)
        for decision, choice in zip(decisions, choices):
            text = self.game.text
            reply = (
                text.answer_text(decision, choice.action)
                if self.answer_only
                else text.canonical_reply(decision, choice.action)
            )
            self.sink.append(
                {
                    "messages": [
                        {"role": "system", "content": self.game.text.system_prompt()},
                        {"role": "user", "content": self.game.text.user_prompt(decision)},
                        {"role": "assistant", "content": reply},
                    ],
                    "strategy": self.strategy.name,
                    "info_key": decision.info_key,
                    **(
                        {LEGAL_COLUMN: [text.answer_text(decision, a) for a in decision.legal_actions]}
                        if self.answer_only
                        else {}
                    ),
                }
            )
        return [Choice(c.action, text=None) for c in choices]

    def message(self, decision):
        """The strategy's own line (cheap talk), and the message turn's chat example."""
        from sepo.games import talk

        line = talk.message_of(self.strategy, decision)
        self.sink.append(
            {
                "messages": [
                    *talk.message_chat(self.game.text, decision),
                    {"role": "assistant", "content": f"{talk.MESSAGE_PREFIX} {line or 'none'}"},
                ],
                "strategy": self.strategy.name,
                "info_key": decision.info_key,
                **({LEGAL_COLUMN: []} if self.answer_only else {}),
            }
        )
        return line


@dataclass
class SFTDataSummary:
    examples: int
    train: int
    validation: int
    by_strategy: dict


def generate_traces(
    game_name: str,
    mixture: str,
    episodes: int,
    seed: int,
    protocol: str = "rigorous",
    on_episode: Callable[[], None] | None = None,
    talk: bool = False,
    answer_only: bool = False,
    **params,
) -> list[list[dict]]:
    """Chat examples grouped by episode: `episodes` per driving opponent of the domain; the
    demonstrator takes each seat in turn (`on_episode` is called after each episode). With
    `talk`, the opponents talk (their own lines, and in half of the episodes a message of the
    prompt-injection suite), and the demonstrations, which never read messages, show play that
    ignores them. With `answer_only`, each reply is the answer line alone."""
    from sepo.games import talk as talk_module
    from sepo.limits import check_episodes

    domain = get_domain(game_name)
    if talk and not domain.talk:
        raise SepoError(f"game {game_name!r} has no cheap-talk channel; --talk does not apply to it")
    if domain.demos is None:
        raise SepoError(f"game {game_name!r} defines no SFT demonstrations")
    mixtures = domain.demos()
    if mixture not in mixtures:
        raise SepoError(unknown_name("mixture", mixture, mixtures, f" for {game_name}"))
    if episodes < 1:
        raise SepoError(f"--episodes must be >= 1, got {episodes}")
    game = domain.game(protocol, **params)
    check_episodes(game, episodes, len(domain.demo_opponents), "these traces")
    strategies, weights = zip(*mixtures[mixture])
    by_episode = []
    for opponent_name in domain.demo_opponents:
        code = zlib.crc32(opponent_name.encode())
        for episode in range(episodes):
            rng = np.random.default_rng([seed, code, episode])
            strategy = strategies[int(rng.choice(len(strategies), p=np.array(weights) / sum(weights)))]()
            sink: list = []
            opponent = domain.build_bot(opponent_name, {}, game)
            if talk and rng.random() < 0.5:
                attacks = sorted(talk_module.INJECTION_SUITE)
                opponent = talk_module.Injecting(opponent, attacks[int(rng.integers(len(attacks)))])
            play_episodes(
                game,
                _Demonstrator(strategy, game, sink, answer_only),
                [opponent],
                [int(rng.integers(2**31))],
                agent_seed=int(rng.integers(2**31)),
                agent_player=episode % game.num_players,
                talk=talk_module.TalkChannel() if talk else None,
            )
            by_episode.append(sink)
            if on_episode:
                on_episode()
    return by_episode


def write_sft_dataset(
    by_episode: list[list[dict]], out: str | Path, seed: int, validation_fraction: float = 0.1
) -> SFTDataSummary:
    """Split by episode (no episode in both splits) and save a Hugging Face DatasetDict into the
    folder `out` (new or empty; the caller makes the write atomic, see `sepo.runs`). Datasets' raw
    "Saving the dataset" bar is switched off here, for every caller (`sepo data sft` says the stage;
    an experiment cell printed the bar into the experiment's progress lines)."""
    from datasets import Dataset, DatasetDict
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()

    order = np.random.default_rng([seed, 7]).permutation(len(by_episode))
    cut = max(1, int(round(len(order) * validation_fraction)))
    validation = [ex for i in order[:cut] for ex in by_episode[i]]
    train = [ex for i in order[cut:] for ex in by_episode[i]]
    DatasetDict(
        {"train": Dataset.from_list(train), "validation": Dataset.from_list(validation)}
    ).save_to_disk(str(out))
    counts: dict = {}
    for example in train + validation:
        counts[example["strategy"]] = counts.get(example["strategy"], 0) + 1
    return SFTDataSummary(len(train) + len(validation), len(train), len(validation), counts)


def read_sft_summary(folder: str | Path) -> dict:
    """The summary of a dataset folder `write_sft_dataset` wrote (for a finished run made before
    sepo recorded it in the manifest)."""
    from datasets import load_from_disk

    data = load_from_disk(str(folder))
    counts: dict = {}
    for split in ("train", "validation"):
        for strategy in data[split]["strategy"]:
            counts[strategy] = counts.get(strategy, 0) + 1
    return {"examples": len(data["train"]) + len(data["validation"]), "train": len(data["train"]),
            "validation": len(data["validation"]), "by_strategy": counts}
