"""SEPO on tabular Kuhn policies: GRPO-style group-normalised policy gradient with exact penalties.

Each step:
  1. π ← softmax(θ); the exploitability attribution of every (state, action) is computed exactly
     at π (best response, Danskin derivative, training reach).
  2. Sample `groups` start states (opponent from the pool, agent seat, deal); play `group_size`
     rollouts (hands) from each.
  3. Reward each rollout R = s·U − λe·s·E − λc·C − λx·X (or the `constant` / `none` ablations).
  4. Advantages: group-centred rewards, scaled (see `group_advantages`).
  5. θ ← θ + Adam step on mean_r A_r ∇θ log π(rollout r's actions).
It is the same objective and normalisation as the LLM trainer, on a policy small enough that
every number can be checked exactly. Randomness of step t comes from default_rng([seed, t]),
so a run resumed from its checkpoint is identical to one that was never interrupted.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from sepo.errors import SepoError
from sepo.games.kuhn.rules import INFO_STATES, KuhnPoker
from sepo.games.kuhn import exact as kuhn_exact
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import REWARD_SCALINGS, Lambdas, check_penalty_mode, group_advantages, sepo_rewards
from sepo.games.kuhn.pools import PAPER_POOLS
from sepo.opponents.pools import parse_bot
from sepo.policies.tabular import TabularPolicy, softmax
from sepo.training.checkpoint import MetricsLog, atomic_write_json, check_same_run, read_json
from sepo.games.kuhn.rollouts import play_hands

CHECKPOINT = "checkpoint.json"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
POLICY = "policy.json"


@dataclass
class TabularSEPOConfig:
    """Settings of an exact tabular SEPO run (Kuhn poker)."""

    game: str = "kuhn"
    penalty: str = "per-rollout"
    lambda_e: float = 0.0
    lambda_c: float = 0.0
    lambda_x: float = 0.0
    steps: int = 2000
    groups: int = 128
    group_size: int = 8
    learning_rate: float = 0.05
    final_learning_rate: float = 0.005
    scale_rewards: str = "batch"
    train_pool: list = field(default_factory=lambda: list(PAPER_POOLS["train"]))
    collusive_pool: list = field(default_factory=lambda: list(PAPER_POOLS["collusive"]))
    seed: int = 0
    checkpoint_every: int = 100

    def validate(self) -> "TabularSEPOConfig":
        if self.game != "kuhn":
            raise SepoError(f"the tabular trainer supports game 'kuhn' only, got {self.game!r}")
        check_penalty_mode(self.penalty)
        Lambdas(self.lambda_e, self.lambda_c, self.lambda_x)
        if self.scale_rewards not in REWARD_SCALINGS:
            raise SepoError(f"unknown reward scaling {self.scale_rewards!r}; use {', '.join(REWARD_SCALINGS)}")
        for name in ("steps", "groups", "group_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise SepoError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise SepoError("group_size must be >= 2: GRPO compares rollouts within a group")
        if not self.learning_rate > 0:
            raise SepoError(f"learning_rate must be > 0, got {self.learning_rate}")
        return self

    @property
    def lambdas(self) -> Lambdas:
        return Lambdas(self.lambda_e, self.lambda_c, self.lambda_x)


class Adam:
    """Adam on a numpy array (a dozen lines; no deep-learning framework needed for 24 numbers)."""

    def __init__(self, shape, beta1=0.9, beta2=0.999, eps=1e-8):
        self.m, self.v, self.t = np.zeros(shape), np.zeros(shape), 0
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def ascent(self, gradient: np.ndarray, learning_rate: float) -> np.ndarray:
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        return learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)

    def state(self) -> dict:
        return {"m": self.m.tolist(), "v": self.v.tolist(), "t": self.t}

    def load(self, state: dict) -> None:
        self.m, self.v, self.t = np.array(state["m"]), np.array(state["v"]), int(state["t"])


class TabularSEPOTrainer:
    """Runs (or resumes) a tabular SEPO run in `out_dir`."""

    def __init__(self, config: TabularSEPOConfig, out_dir: str | Path, init_logits: np.ndarray | None = None):
        self.config = config.validate()
        self.out = Path(out_dir)
        self.game = KuhnPoker(hands=1)
        self.scale = self.game.payoff_scale
        train = [parse_bot("kuhn", entry) for entry in config.train_pool]
        if not train:
            raise SepoError("the train pool is empty")
        collusive_labels = {parse_bot("kuhn", entry).label for entry in config.collusive_pool}
        self.opponents = np.stack([spec.build().table for spec in train])
        self.opponent_labels = [spec.label for spec in train]
        self.is_collusive = np.array([label in collusive_labels for label in self.opponent_labels])
        self.reach_external = kuhn_exact.external_reach(self.opponents)
        self.logits = np.zeros((12, 2)) if init_logits is None else np.array(init_logits, dtype=float)
        self.adam = Adam(self.logits.shape)
        self.step = 0
        self.log = MetricsLog(self.out / METRICS)

    # -- run directory -------------------------------------------------------------------------
    def _prepare(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        config = asdict(self.config)
        check_same_run(self.out / CONFIG, config)
        atomic_write_json(self.out / CONFIG, config)
        if (self.out / CHECKPOINT).exists():
            state = read_json(self.out / CHECKPOINT, "checkpoint")
            try:
                self.logits = np.array(state["logits"], dtype=float).reshape(12, 2)
                self.adam.load(state["adam"])
                self.step = int(state["step"])
            except (KeyError, TypeError, ValueError) as error:
                raise SepoError(f"unreadable checkpoint {self.out / CHECKPOINT}: {error}") from None
            self.log.truncate_after(self.step - 1)
        else:
            self.log.truncate_after(-1)

    def _save_checkpoint(self) -> None:
        atomic_write_json(self.out / CHECKPOINT, {"step": self.step, "logits": self.logits.tolist(), "adam": self.adam.state()})

    # -- one step ------------------------------------------------------------------------------
    def learning_rate(self, step: int) -> float:
        """Linear decay from `learning_rate` to `final_learning_rate` over the run."""
        c = self.config
        fraction = step / max(c.steps - 1, 1)
        return c.learning_rate + fraction * (c.final_learning_rate - c.learning_rate)

    def attribution(self, policy: np.ndarray) -> np.ndarray:
        gradient = kuhn_exact.exploitability_gradient(policy)
        reach = kuhn_exact.own_reach(policy) * self.reach_external
        return exploitation_attribution(policy, gradient, reach)

    def train_step(self) -> dict:
        c = self.config
        rng = np.random.default_rng([c.seed, self.step])
        policy = softmax(self.logits)
        charge = self.attribution(policy)

        group_opponent = rng.integers(len(self.opponents), size=c.groups)
        group_seat = rng.integers(2, size=c.groups)
        group_deal = rng.integers(6, size=c.groups)
        groups = np.repeat(np.arange(c.groups), c.group_size)
        hands = play_hands(policy, self.opponents, group_opponent[groups], group_seat[groups], group_deal[groups],
                           rng.random((len(groups), 3)))

        utility = hands.payoff
        exploit = (charge[hands.states, hands.actions] * hands.mask).sum(1)
        decisions = hands.mask.sum(1)
        collusion = np.where(self.is_collusive[group_opponent[groups]], hands.folds / decisions, 0.0)
        externality = (hands.payoff <= -2).astype(float)
        rewards = sepo_rewards(utility, exploit, collusion, externality, groups, c.lambdas, self.scale, c.penalty)
        advantages = group_advantages(rewards, groups, c.scale_rewards)

        score = np.zeros_like(self.logits)  # Σ_r A_r ∇θ log π(a|I) for softmax logits
        for k in range(hands.states.shape[1]):
            weight = advantages * hands.mask[:, k]
            np.add.at(score, (hands.states[:, k], hands.actions[:, k]), weight)
            np.add.at(score, hands.states[:, k], -weight[:, None] * policy[hands.states[:, k]])
        self.logits = self.logits + self.adam.ascent(score / len(groups), self.learning_rate(self.step))

        record = {"step": self.step, "reward_mean": float(rewards.mean()), "sampled_utility": float(utility.mean()),
                  "sampled_exploit_charge": float(exploit.mean())}
        record.update(self.exact_metrics(softmax(self.logits)))
        return record

    def exact_metrics(self, policy: np.ndarray) -> dict:
        utility = float(kuhn_exact.head_to_head(policy, self.opponents).mean())
        nash_conv = float(kuhn_exact.nash_conv(policy))
        e = nash_conv / 2
        return {"utility": utility, "exploitability": e, "nash_conv": nash_conv,
                "objective": self.scale * (utility - self.config.lambda_e * e)}

    # -- the loop ------------------------------------------------------------------------------
    def train(self, on_step: Callable[[dict], None] | None = None, stop_after: int | None = None) -> dict:
        """Train to `config.steps`, resuming from the run directory's checkpoint if present.
        `stop_after` ends early after that many steps (used to test resumption)."""
        self._prepare()
        started, done = time.time(), 0
        while self.step < self.config.steps:
            record = self.train_step()
            self.step += 1
            self.log.append(record)
            if on_step:
                on_step(record)
            done += 1
            if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                self._save_checkpoint()
            if stop_after is not None and done >= stop_after:
                break
        policy = TabularPolicy.from_logits(self.logits, INFO_STATES, name=f"run:{self.out}")
        if self.step >= self.config.steps:
            policy.save(self.out / POLICY)
        summary = {"steps": self.step, "seconds": time.time() - started, **self.exact_metrics(policy.table)}
        if self.step >= self.config.steps:
            atomic_write_json(self.out / "summary.json", summary)
        return summary


def load_run_policy(run_dir: str | Path) -> TabularPolicy:
    """The final (or, for an unfinished run, latest checkpointed) policy of a run directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SepoError(f"run directory not found: {run_dir}")
    if (run_dir / POLICY).exists():
        policy = TabularPolicy.load(run_dir / POLICY)
    elif (run_dir / CHECKPOINT).exists():
        state = read_json(run_dir / CHECKPOINT, "checkpoint")
        try:
            policy = TabularPolicy.from_logits(np.array(state["logits"], dtype=float).reshape(12, 2), INFO_STATES)
        except (KeyError, TypeError, ValueError) as error:
            raise SepoError(f"unreadable checkpoint {run_dir / CHECKPOINT}: {error}") from None
    else:
        raise SepoError(f"{run_dir} holds no policy.json or checkpoint.json")
    policy.name = f"run:{run_dir.name}"
    return policy
