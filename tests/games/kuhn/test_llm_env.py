"""Kuhn's language-model training environment charges a decision the hand's events to go: a PASS
that invites a bet the agent then folds to carries that fold, as the tabular trainer's one-hand
rollouts count it (before the fix only the decision's own FOLD was charged). Collusion under
`paper` is a rate over the agent's decisions, charged by its ratio gradient: (FOLDs to go − c·
decisions to go)/D (`training.KuhnCharges`)."""
import numpy as np
import pytest

from sepo.games import get_domain
from sepo.games.credit import Charges
from sepo.games.kuhn.llm_env import DecisionContext
from sepo.games.kuhn.rules import INFO_STATES
from sepo.opponents.pools import parse_bot


# LooseAggressive bets after a pass with Q or K
@pytest.mark.parametrize("agent_card, opponent_card", [(0, 1), (1, 2), (2, 1)])
def test_a_pass_is_charged_the_fold_it_leads_to(agent_card, opponent_card):
    domain = get_domain("kuhn")
    pool = [parse_bot("kuhn", "LooseAggressive")]
    charges = Charges(collusion=True)
    env = domain.llm_training(domain.game("paper"), pool, pool, (), charges)
    table = np.random.default_rng(agent_card).dirichlet(np.ones(2), size=len(INFO_STATES))
    bet = env.opponents[0][INFO_STATES.index(f"{opponent_card}p"), 1]
    fold = table[INFO_STATES.index(f"{agent_card}pb"), 0]
    context = DecisionContext(INFO_STATES.index(str(agent_card)), 0, agent_card, opponent_card, 0)
    decision = env.training_decision(context, np.random.default_rng(0))
    rate, decisions = env.charges._rates(table)[:2]
    credit = env.charges.mixture.collusion[0]
    assert bet > 0 and env.outcome(table, context, decision, 0)[1] == pytest.approx(
        # a pass: one more decision if it is bet into
        credit * (bet * fold - rate * (1 + bet)) / decisions, abs=1e-12)
    # a bet: the opponent calls or folds, the agent never does
    assert env.outcome(table, context, decision, 1)[1] == pytest.approx(-credit * rate / decisions, abs=1e-12)
    rigorous = domain.llm_training(domain.game("rigorous"), pool, pool, (), charges)
    assert rigorous.outcome(table, context, decision, 0)[1] == 0.0  # no collusion charge under rigorous
