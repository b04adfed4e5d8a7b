"""Language-model SEPO in the three-item negotiation: the per-decision training environment.

The LLM trainer (`sepo.training.grpo`) reads the model's action table at a solver's information
states and charges each completion the exploitability attribution of its action there. The full
game has far too many information states, so training runs on a fixed deal: the pool and the
agent's values fixed (`--items`, `--values`; the opponent's values may stay random), and the
model's policy summarised by its demand distribution per round (`MemoryZeroSolver`: one
canonical decision per round, whose earlier rounds show an even split). Against a policy that
depends on the round only, the opponent learns nothing from the history, so the maximiser of
the gap picks, per round and own values w, the demand y maximising
sum_a pi_t(a) deal(a, y) (y.w - a.v): the gap per round, its Danskin gradient and the
maximiser are exact for that summary (and a memory-0 model of a model that reads the history).

Contexts are agent decisions met on-policy against the train pool (the table's demand drawn per
round, the bot answering); a completion's payoff to go is its round's payoff plus the expected
payoff of the remaining rounds, exact for bots that read at most the agent's last demand (the
paper's), else averaged over 16 sampled continuations. Externality is a breakdown (rigorous) or
both scoring 0 (paper); collusion follows `events.py` against a collusive partner.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import CHANCE
from sepo.games.negotiation_gt.events import shuts_out
from sepo.games.negotiation_gt.rules import make_decision
from sepo.metrics.exact import ExactResult
from sepo.policies.base import Policy


class MemoryZeroSolver:
    """The exact adversarial gap of a per-round demand distribution on a fixed deal (module doc)."""

    value_name = "adversarial_gap"

    def __init__(self, game):
        rules = game.rules
        if rules.pool is None or rules.values is None:
            raise SepoError("negotiation-gt LLM training needs a fixed deal: give --items and --values (the exact "
                            "attribution is over the model's demand distribution per round)")
        self.game, self.rules = game, rules
        self.pool = np.array(rules.pool)
        self.v = np.array(rules.values, dtype=float)
        self.A = np.array([rules.decode(a) for a in rules.legal(rules.pool)])  # columns: legal-action order
        dist = rules.value_distribution(rules.opponent_values)
        self.W = np.array([w for w, _ in dist], dtype=float)
        self.pw = np.array([p for _, p in dist])
        self.deal = np.all(self.A[:, None, :] + self.A[None, :, :] <= self.pool, axis=2).astype(float)  # [a, y]
        self.opp = self.deal[:, :, None] * (self.A @ self.W.T)[None, :, :]  # [a, y, w]: u_O
        self.own = self.deal * (self.A @ self.v)[:, None]  # [a, y]: u_A
        self.method = "exact gap of the per-round demand distribution on a fixed deal (memory 0)"
        self._decisions = None

    def decisions(self):
        if self._decisions is None:
            half = tuple(int(p) // 2 for p in self.pool)
            rest = tuple(int(p) - h for p, h in zip(self.pool, half))
            found = []
            for t in range(self.rules.rounds):
                history = ((half, rest, True),) * t
                paid = (float(np.dot(half, self.v)),) * t
                found.append(make_decision(self.game, 0, tuple(self.rules.pool), tuple(self.rules.values), history, my_payoffs=paid))
            self._decisions = found
        return self._decisions

    def _choice(self, table, objective="gap"):
        """Per round and opponent value: the maximiser's demand index and the per-(a) payoffs."""
        table = np.asarray(table, dtype=float)[:, : len(self.A)]
        gap = self.opp - self.own[:, :, None]  # [a, y, w]
        score = np.einsum("ta,ayw->tyw", table, gap if objective == "gap" else self.opp)
        return table, score.argmax(1)  # [T, W]

    def evaluate(self, table, **_) -> ExactResult:
        T = self.rules.rounds
        out = {}
        for objective in ("gap", "opponent"):
            probs, best = self._choice(table, objective)
            w = np.arange(len(self.W))
            opp = np.einsum("ta,taw->tw", probs, self.opp[:, best, w].transpose(1, 0, 2)) @ self.pw
            own = np.einsum("ta,taw->tw", probs, self.own[:, best].transpose(1, 0, 2)) @ self.pw
            out[objective] = (opp.sum() / T, own.sum() / T)
        gap_opp, gap_own = out["gap"]
        return ExactResult(value=gap_opp - gap_own, value_name=self.value_name, br_payoff=out["opponent"][0],
                           agent_payoff=out["opponent"][1], method=self.method, exact=True,
                           extra={"agent_payoff_vs_gap_maximiser": gap_own, "opponent_payoff_vs_gap_maximiser": gap_opp})

    def gradient(self, table) -> np.ndarray:
        probs, best = self._choice(table)
        w = np.arange(len(self.W))
        grad = np.zeros_like(np.asarray(table, dtype=float))
        for t in range(self.rules.rounds):
            value = self.opp[:, best[t], w] - self.own[:, best[t]]  # [a, w]
            grad[t, : len(self.A)] = value @ self.pw / self.rules.rounds
        return grad

    def own_reach(self, table) -> np.ndarray:
        return np.ones(self.rules.rounds)

    def best_response(self, table) -> Policy:
        _, best = self._choice(table)
        return _RoundTable(self, best)


class _RoundTable(Policy):
    """The maximiser: a demand per round and own value vector."""

    name = "BestResponse"
    classifier = {"stochastic": False}

    def __init__(self, solver: MemoryZeroSolver, best):
        self.solver, self.best = solver, best

    def action_probabilities(self, decision):
        obs = decision.observation
        w = [tuple(int(x) for x in w) for w in self.solver.W].index(tuple(obs["values"]))
        target = self.solver.rules.encode(self.solver.A[self.best[obs["round"] - 1, w]])
        return {a: float(a == target) for a in decision.legal_actions}


@dataclass
class DecisionContext:
    info_row: int
    opponent_index: int
    state: object


class NegotiationLLMEnvironment:
    """The domain's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs):
        self.game = game
        self.solver = MemoryZeroSolver(game)
        self.specs = list(train_specs)
        self.bots = [spec.build(game) for spec in self.specs]
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = [spec.label in collusive for spec in self.specs]
        self.columns = list(game.rules.legal(game.rules.pool))

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return np.ones(self.game.rules.rounds)

    def _play_to_round(self, state, rng):
        while state.current_player() == CHANCE:
            outcomes = state.chance_outcomes()
            state.apply_action(outcomes[rng.choice(len(outcomes), p=[p for _, p in outcomes])][0])
        return state

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list[DecisionContext]:
        contexts = []
        rounds = self.game.rules.rounds
        for _ in range(max(1, -(-count // rounds))):
            index = int(rng.integers(len(self.bots)))
            state = self._play_to_round(self.game.new_initial_state(), rng)
            for t in range(rounds):
                contexts.append(DecisionContext(t, index, state.clone()))
                row = table[t, : len(self.columns)]
                own = self.columns[int(rng.choice(len(row), p=row / row.sum()))]
                other = self.bots[index].act([state.decision(1)], rng)[0].action
                state.apply_actions((own, other))
                state = self._play_to_round(state, rng)
        return contexts

    def training_decision(self, context: DecisionContext, rng: np.random.Generator):
        return context.state.decision(0)

    def context_opponent(self, context: DecisionContext):
        """Cheap talk (`sepo train --talk`): the context's opponent and its own decision this round."""
        return self.bots[context.opponent_index], context.state.decision(1)

    def outcome(self, table: np.ndarray, context: DecisionContext, decision, action: int) -> tuple[float, float, float]:
        """(expected payoff to go, collusion event, externality event) of `action`."""
        bot = self.bots[context.opponent_index]
        state = context.state.clone()
        other = max(bot.action_probabilities(state.decision(1)).items(), key=lambda kv: kv[1])[0]
        state.apply_actions((action, other))
        result = state.rounds()[-1]
        protocol = self.game.protocol
        if protocol == "paper":
            externality = float(all(p == 0 for p in result.payoffs))
            collusion = float(self.is_collusive[context.opponent_index] and any(d > 2 for d in result.info["demands"][0]))
        else:
            externality = float(not result.info["deal"])
            collusion = float(self.is_collusive[context.opponent_index] and bool(self.game.rules.third_party) and shuts_out(result))
        return result.payoffs[0] + self._to_go(table, state, bot, np.random.default_rng(context.info_row)), collusion, externality

    def _to_go(self, table, state, bot, rng, samples: int = 16) -> float:
        """The agent's expected payoff over the rounds left (exact for bots that read at most the
        agent's last demand; else a mean over sampled continuations)."""
        rules = self.game.rules
        if len(state.rounds()) >= rules.rounds:
            return 0.0
        if getattr(bot, "memory", None) in (0, 1) and tuple(getattr(bot, "reads", ())) in (("other",), ("own", "other")) \
                and (bot.memory == 0 or tuple(bot.reads) == ("other",)):
            return self._exact_to_go(table, state, bot)
        total = 0.0
        for _ in range(samples):
            s = state.clone()
            while len(s.rounds()) < rules.rounds:
                s = self._play_to_round(s, rng)
                row = table[len(s.rounds()), : len(self.columns)]
                own = self.columns[int(rng.choice(len(row), p=row / row.sum()))]
                s.apply_actions((own, bot.act([s.decision(1)], rng)[0].action))
                total += s.rounds()[-1].payoffs[0]
        return total / samples

    def _exact_to_go(self, table, state, bot) -> float:
        """Forward over the agent's previous demand (all a memory-0/other-reading bot reacts to)."""
        rules = self.game.rules
        s = self.solver
        start = len(state.rounds())
        last = np.zeros(len(s.A))
        last[s.A.tolist().index(list(state.rounds()[-1].info["demands"][0]))] = 1.0
        seen = state.decision(1).observation["history"]  # the bot's side: (own, agent's, deal)
        total = 0.0
        for t in range(start, rules.rounds):
            probs = table[t, : len(s.A)]
            answers = np.zeros(len(s.A), dtype=int)  # the bot's demand index given the agent's previous demand
            padded = seen + (seen[-1],) * (t - len(seen))
            for i in np.nonzero(last > 0)[0]:
                history = padded[:-1] + ((padded[-1][0], tuple(int(x) for x in s.A[i]), padded[-1][2]),)
                view = make_decision(self.game, 1, tuple(rules.pool), tuple(state.values[1]), history,
                                     first_values=state.first_values[1])
                answers[i] = s.A.tolist().index(list(rules.decode(max(bot.action_probabilities(view).items(), key=lambda kv: kv[1])[0])))
            payoff = s.own[:, answers]  # [a now, previous a]
            total += float(probs @ payoff @ last)
            last = probs.copy()
        return total

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {}


def environment(game, train_specs, collusive_specs):
    return NegotiationLLMEnvironment(game, train_specs, collusive_specs)
