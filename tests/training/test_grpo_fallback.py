"""One action for a reply that does not parse: in every domain with a language-model training
environment, a model whose replies never parse plays the domain's fallback action both in the
played-policy table the step's charges come from and in the completions it charges (negotiation-gt
used to charge its first legal action, [0, 0, 0], while the table held the paper's [1, 1, 1])."""
from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest

from sepo.policies.replies import Decoding, Reply
from sepo.policies.text_policy import TextPolicy, fallback_action
from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment

NONSENSE = "I would rather not say."

GAMES = {
    "kuhn": {},
    "ipd": {"rounds": 2},
    "auction": {"rounds": 2, "memory": 1},
    "negotiation": {"rounds": 2},
    "negotiation-gt": {"rounds": 2, "items": "1,1,1", "values": "4,3,3"},
}


class Unparsable(TextPolicy):
    """A model stand-in whose every reply, sampled or generated, parses as no action."""

    def __init__(self, text):
        self.text, self.decoding, self.name = text, Decoding(), "unparsable"
        super().__init__(failure_rule="fallback", samples=4)

    def replies(self, decisions, n, seed):
        return [[Reply(NONSENSE, True)] * n for _ in decisions]

    def prompt_ids(self, decision):
        return decision

    def generate(self, prompts, n, seed=None):
        return [[SimpleNamespace(text=NONSENSE, finished=True, completion_ids=(0,))] * n for _ in prompts]


class StubEnvironment(SEPOEnvironment):
    def policy(self, model, samples=None):
        return Unparsable(self.game.text)


class Accelerator:
    device, process_index = "cpu", 0

    def gather(self, tensor):
        return tensor

    def unwrap_model(self, model):
        return model


@pytest.mark.parametrize("game", sorted(GAMES))
def test_a_reply_that_never_parses_is_charged_at_the_tables_action(game):
    config = LLMSEPOConfig(
        model="none",
        game=game,
        game_params=GAMES[game],
        lambda_e=1.0,
        groups=3,
        group_size=2,
        table_samples=4,
        seed=0,
    )
    env = StubEnvironment(config, None, None)
    played = []
    outcome = env.domain_env.outcome

    def spy(table, context, decision, action):
        played.append((context.info_row, decision, action))
        return outcome(table, context, decision, action)

    env.domain_env.outcome = spy
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), accelerator=Accelerator(), model=None,
                              _metrics=defaultdict(lambda: defaultdict(list)))
    prompts = [f'{{"group": {g}}}' for g in range(config.groups) for _ in range(config.group_size)]
    fields = env.rollout(prompts, trainer)
    table = np.array(env.last_step_metrics["table"])
    assert fields["invalid"] == [1.0] * len(prompts)
    assert len(played) == len(prompts)
    for row, decision, action in played:
        assert action == fallback_action(env.game.text, decision)
        # the table's action, charged 0 once centred
        assert table[row, decision.legal_actions.index(action)] == 1.0
    assert fields["exploit"] == [0.0] * len(prompts)
