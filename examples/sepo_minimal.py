"""SEPO on tabular Kuhn poker in one file: the algorithm of `sepo train --game kuhn`, written out.

A tabular policy (12 information states x {pass/fold, bet/call}) is trained against the train pool
(NashApprox, TightPassive, LooseAggressive) with SEPO's per-rollout reward

    R_r = s·U_r − λe·s·E_r

where U_r is rollout r's payoff, s = 3 / max payoff = 1.5 the reward scale, and E_r the exact
exploitability attribution of r's own decisions: at each decision (I, a) the Danskin derivative
of exploitability ∂e/∂π(a|I), centred over the actions at I and divided by the probability ρ(I)
that a training hand reaches I. The expected policy-gradient update on R is then an unbiased ascent
step on s·(u − λe·e). Each step:
  1. sample `groups` start states (opponent, seat, deal) and play `group_size` hands from each;
  2. reward every hand with R_r (λe = 0: payoff-only GRPO);
  3. advantages: rewards minus their group's mean, divided by one standard deviation of the batch;
  4. Adam ascent on the logits along mean_r A_r Σ_k ∇θ log π(a_{r,k} | I_{r,k}).
Exploitability, its gradient and the head-to-head values come from sepo's closed-form Kuhn solver
(`sepo.games.kuhn.exact`); the hands are played by sepo's vectorised Kuhn rules.

With the defaults this is the Kuhn training of `sepo demo --game kuhn` (seed 0, 1500 steps, λe = 5
against λe = 0), with the same random draws in the same order, so it prints the demo's numbers to
the digits the demo shows:

    SEPO (λe=5)         exploitability 0.0003   utility vs train pool 0.0318
    payoff-only GRPO    exploitability 0.3396   utility vs train pool 0.1294

and `--lambda-e 0.25`, `1` and `4` (with `--only`) print the demo's frontier runs (0.1672/0.1110,
0.0002/0.0366, 0.0003/0.0349).

tests/examples/test_sepo_minimal.py checks it step for step against sepo's trainer
(`sepo.training.tabular`), logits to 1e-9.

    python examples/sepo_minimal.py                      # both runs, a second or two of CPU each
    python examples/sepo_minimal.py --lambda-e 1 --steps 500
"""
import argparse
import ast
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from sepo.games.kuhn import exact
from sepo.games.kuhn.bots import BOTS
from sepo.games.kuhn.rollouts import play_hands
from sepo.games.kuhn.rules import DEALS, INFO_STATES


@dataclass
class Args:
    lambda_e: float = 5.0
    """λe: weight of the exploitability charge (0 is payoff-only GRPO)."""
    steps: int = 1500
    """Adam steps."""
    groups: int = 128
    """start states per step; a group's hands share opponent, seat and deal."""
    group_size: int = 8
    """hands per group (GRPO compares rollouts within a group)."""
    learning_rate: float = 0.05
    """learning rate at the first step, decayed linearly ..."""
    final_learning_rate: float = 0.005
    """... to this at the last step."""
    seed: int = 0
    """step t draws from numpy's default_rng([seed, t])."""
    train_pool: tuple = ("NashApprox", "TightPassive", "LooseAggressive")
    """the opponents, drawn uniformly per group."""


SCALE = 3.0 / 2.0  # s: Kuhn's largest payoff is 2 chips; rewards are scaled to a largest payoff of 3


def softmax(logits: np.ndarray) -> np.ndarray:
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def exploitability_attribution(policy: np.ndarray, opponents: np.ndarray) -> np.ndarray:
    """`[12, 2]`: E(I, a) = (∂e/∂π(a|I) − Σ_b π(b|I) ∂e/∂π(b|I)) / ρ(I), with ρ(I) the chance that a
    training hand (uniform opponent, seat and deal) reaches I."""
    gradient = exact.exploitability_gradient(policy)  # Danskin: the best response held fixed
    reach = exact.own_reach(policy) * exact.external_reach(opponents)
    centred = gradient - (policy * gradient).sum(-1, keepdims=True)
    return np.where(reach[:, None] > 0, centred / np.where(reach > 0, reach, 1.0)[:, None], 0.0)


def group_mean(values: np.ndarray, group_of: np.ndarray) -> np.ndarray:
    return np.bincount(group_of, weights=values) / np.maximum(np.bincount(group_of), 1)


def advantages(rewards: np.ndarray, group_of: np.ndarray) -> np.ndarray:
    """Group-centred rewards over one standard deviation of the whole batch's centred rewards."""
    centred = rewards - group_mean(rewards, group_of)[group_of]
    return centred / (centred.std() + 1e-8)


def score(policy: np.ndarray, states: np.ndarray, actions: np.ndarray, credit: np.ndarray) -> np.ndarray:
    """Σ_r Σ_k credit[r, k] ∇θ log π(a_{r,k} | I_{r,k}); for softmax logits that is e_a − π(·|I)."""
    out = np.zeros_like(policy)
    for k in range(states.shape[1]):
        np.add.at(out, (states[:, k], actions[:, k]), credit[:, k])
        np.add.at(out, states[:, k], -credit[:, k, None] * policy[states[:, k]])
    return out


class Adam:
    def __init__(self, shape, beta1=0.9, beta2=0.999, eps=1e-8):
        self.m, self.v, self.t = np.zeros(shape), np.zeros(shape), 0
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def ascent(self, gradient: np.ndarray, learning_rate: float) -> np.ndarray:
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat, v_hat = self.m / (1 - self.beta1**self.t), self.v / (1 - self.beta2**self.t)
        return learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)


def train(args: Args, on_step=None) -> dict:
    """Train from the uniform table; returns the final policy with its exact exploitability and its
    utility against the train pool (chips per hand). `on_step(step, logits)` sees every step."""
    opponents = np.stack([BOTS[name]().table for name in args.train_pool])  # [K, 12, 2]
    logits = np.zeros((len(INFO_STATES), 2))
    adam = Adam(logits.shape)
    rollouts = args.groups * args.group_size
    group_of = np.repeat(np.arange(args.groups), args.group_size)
    for step in range(args.steps):
        rng = np.random.default_rng([args.seed, step])
        policy = softmax(logits)
        charge = exploitability_attribution(policy, opponents)

        # 1. sample: each group draws its opponent, the agent's seat and the deal; its hands share them
        opponent = rng.integers(len(opponents), size=args.groups)[group_of]
        seat = rng.integers(2, size=args.groups)[group_of]
        deal = rng.integers(len(DEALS), size=args.groups)[group_of]
        hands = play_hands(policy, opponents, opponent, seat, deal, rng.random((rollouts, 3)))

        # 2. reward: payoff minus the exploitability charge of the hand's own decisions
        exploit = (charge[hands.states, hands.actions] * hands.mask).sum(1)
        rewards = SCALE * hands.payoff - args.lambda_e * SCALE * exploit

        # 3-4. group-normalised advantages, every decision of a hand credited with its advantage; Adam ascent
        credit = advantages(rewards, group_of)[:, None] * hands.mask
        fraction = step / max(args.steps - 1, 1)
        learning_rate = args.learning_rate + fraction * (args.final_learning_rate - args.learning_rate)
        logits = logits + adam.ascent(
            score(policy, hands.states, hands.actions, credit) / rollouts, learning_rate
        )
        if on_step is not None:
            on_step(step, logits)

    policy = softmax(logits)
    return {"policy": policy, "exploitability": float(exact.exploitability(policy)),
            "utility": float(exact.head_to_head(policy, opponents).mean())}


def field_docs() -> dict[str, str]:
    """Each Args field's docstring (the string under it), for --help."""
    module = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    body = next(node for node in module.body if isinstance(node, ast.ClassDef) and node.name == "Args").body
    return {node.target.id: body[i + 1].value.value for i, node in enumerate(body[:-1])
            if isinstance(node, ast.AnnAssign) and isinstance(body[i + 1], ast.Expr)}


def parse_args() -> tuple[Args, bool]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    docs = field_docs()
    for field in fields(Args):
        if field.name != "train_pool":
            flag = "--" + field.name.replace("_", "-")
            parser.add_argument(flag, type=type(field.default), default=field.default,
                                help=f"{docs[field.name]} (default: {field.default})")
    parser.add_argument(
        "--only", action="store_true", help="train --lambda-e alone, without the λe = 0 baseline"
    )
    namespace = vars(parser.parse_args())
    only = namespace.pop("only")
    return Args(**namespace), only


def main() -> None:
    args, only = parse_args()
    runs = [(f"SEPO (λe={args.lambda_e:g})", args)]
    if not only and args.lambda_e != 0:
        runs.append(("payoff-only GRPO", Args(**{**vars(args), "lambda_e": 0.0})))
    for name, run_args in runs:
        result = train(run_args)
        print(
            f"{name:<20}exploitability {result['exploitability']:.4f}   "
            f"utility vs train pool {result['utility']:.4f}   ({run_args.steps} steps, seed {run_args.seed})"
        )


if __name__ == "__main__":
    main()
