"""SEPO on tabular policies: GRPO-style group-normalised policy gradient with exact penalties.

The algorithm; the game comes from the domain's training environment
(`sepo.training.environment`). Each step:
  1. π ← softmax(θ) over the legal actions; the exploitability attribution of every (state,
     action) is computed exactly at π from the solver's Danskin gradient and the training reach.
  2. Sample `groups` start states (opponent, seat, chance); play `group_size` rollouts from each.
     The opponents are the train pool (and the domain's gap maximiser), joined by the collusive
     partners and exploiters when λc or λx is charged, each rollout's terms credited so that the
     charged u, c and x are evaluation's (`sepo.games.credit`).
  3. Reward each rollout R = s·U − λe·s·E − λc·C − λx·X (or the `shuffled` / `constant` / `none`
     ablations, `sepo.objective.sepo`; `shuffled` draws its permutation from the step's generator).
  4. Advantages: group-centred rewards, scaled (see `group_advantages`).
  5. θ ← θ + Adam step on mean_r Σ_k A_{r,k} ∇θ log π(a_{r,k} | I_{r,k}), with A_{r,k} = A_r for
     every decision of rollout r; under `method="advantage-alignment"` each decision adds the
     opponent-shaping term (`sepo.objective.advantage_alignment`), divided by the reward scale.
It is the same objective and normalisation as the LLM trainer, on a policy small enough that
every number can be checked exactly. Randomness of step t comes from default_rng([seed, t]),
so a run resumed from its checkpoint is identical to one that was never interrupted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from sepo import progress
from sepo.errors import SepoError
from sepo.games.records import Rollouts
from sepo.games.registry import get_domain
from sepo.metrics.exact import check_exact_size
from sepo.objective.advantage_alignment import alignment_term
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import advantage_divisor, group_advantages, sepo_rewards
from sepo.policies.tabular import TabularPolicy
from sepo.runs import RunDir, open_run
from sepo.training.checkpoint import MetricsLog, read_json, read_run_config, read_summary
from sepo.training.config import SEPOConfig, option
from sepo.training.environment import build_environment, offers

CHECKPOINT = "checkpoint.json"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
POLICY = "policy.json"


@dataclass(kw_only=True)
class TabularSEPOConfig(SEPOConfig):
    """Settings of an exact tabular SEPO run."""

    final_learning_rate: float = option(
        0.005, "Learning rate at the last step (linear decay from learning_rate)."
    )
    checkpoint_every: int = option(100, "Steps between checkpoints.")
    self_play: bool = option(
        False,
        "Train against the policy itself (held fixed within a step) instead of the train "
        "pool; utility is still reported against the train pool.",
    )

    def validate(self) -> "TabularSEPOConfig":
        super().validate()
        if self.checkpoint_every < 1:
            raise SepoError(f"checkpoint_every must be >= 1, got {self.checkpoint_every}")
        if get_domain(self.game).training is None:
            raise SepoError(f"game {self.game!r} has no tabular training environment")
        return self

    def record(self) -> dict:
        out = super().record()
        if not self.self_play:
            del out["self_play"]
        return out


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
    """Runs (or resumes) a tabular SEPO run in `out` (a folder, or a `RunDir` the caller opened)."""

    def __init__(
        self, config: TabularSEPOConfig, out: str | Path | RunDir, init_logits: np.ndarray | None = None
    ):
        self.config = config.validate()
        self.run = out if isinstance(out, RunDir) else None
        self.out = out.root if isinstance(out, RunDir) else Path(out)
        domain = get_domain(config.game)
        game = domain.game(config.protocol, **config.game_params)
        check_exact_size(game)
        train, collusive, exploiters = config.pool_specs()
        charges = config.charges
        self.env = build_environment(
            domain.training, game, train, collusive, exploiters, charges, "tabular training"
        )
        if config.self_play:
            if not offers(self.env, "self_play"):
                raise SepoError(
                    f"game {config.game!r} has no self-play training (its environment plays the train pool "
                    "only)"
                )
            self.env.use_self_play()
        if config.method == "advantage-alignment" and not offers(self.env, "joint_advantages"):
            raise SepoError(f"game {config.game!r} gives no per-round advantages of both players; "
                            "advantage-alignment trains in games whose environment does")
        self.scale = self.env.scale
        self.legal = np.asarray(self.env.legal, dtype=bool)
        self.logits = (
            np.zeros(self.legal.shape) if init_logits is None else np.array(init_logits, dtype=float)
        )
        self.adam = Adam(self.logits.shape)
        self.step = 0
        self.log = MetricsLog(self.out / METRICS)

    def policy(self, logits: np.ndarray | None = None) -> np.ndarray:
        return masked_softmax(self.logits if logits is None else logits, self.legal)

    # -- run directory -------------------------------------------------------------------------
    def settings(self) -> dict:
        """What the run folder's manifest records: every field that changes the result."""
        return {"policy": "tabular", **self.config.record()}

    def _prepare(self, run: RunDir, read_only: bool = False) -> None:
        """Restore the checkpoint and check the metrics history up to it (cutting steps logged after
        it, unless `read_only`: a finished run's files are only read)."""
        if not read_only:
            run.write_json(CONFIG, self.config.record())
            run.path(METRICS)
        checkpoint = self.out / CHECKPOINT
        if run.resumed and checkpoint.exists():
            state = read_json(checkpoint, "checkpoint")
            try:
                self.logits, adam = checkpoint_arrays(state, self.legal.shape)
                self.adam.load(adam)
                step = state["step"]
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
                raise SepoError(f"unreadable checkpoint {checkpoint}: {error}") from None
            if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= self.config.steps:
                raise SepoError(
                    f"unreadable checkpoint {checkpoint}: step {step!r} is not in 0..{self.config.steps}"
                )
            if not (
                np.all(np.isfinite(self.logits))
                and np.all(np.isfinite(self.adam.m))
                and np.all(np.isfinite(self.adam.v))
            ):
                raise SepoError(f"unreadable checkpoint {checkpoint}: non-finite numbers")
            self.step = step
        if read_only:
            kept = [r["step"] for r in self.log.read() if r["step"] <= self.step - 1 and not r.get("final")]
        else:
            kept = [r["step"] for r in self.log.truncate_after(self.step - 1)]
        if kept != list(range(self.step)):
            missing = sorted(set(range(self.step)) - set(kept))
            raise SepoError(
                f"{self.log.path} lacks steps {missing[0]}-{missing[-1]} before the checkpoint at step "
                f"{self.step}; the run's history cannot be completed (start a new --out)"
            )

    def _save_checkpoint(self, run: RunDir) -> None:
        """Only the rows a step has touched (nonzero logits or Adam moments): the others are still
        at their start, zero, and a game with hundreds of thousands of information states wrote
        78 MB for two steps."""
        progress.stage(f"step {self.step}: writing the checkpoint")
        touched = np.flatnonzero(self.logits.any(-1) | self.adam.m.any(-1) | self.adam.v.any(-1))
        run.write_json(
            CHECKPOINT,
            {
                "step": self.step,
                "shape": list(self.logits.shape),
                "rows": touched.tolist(),
                "logits": self.logits[touched].tolist(),
                "adam": {
                    "m": self.adam.m[touched].tolist(),
                    "v": self.adam.v[touched].tolist(),
                    "t": self.adam.t,
                },
            },
        )
        run.commit()

    # -- one step ------------------------------------------------------------------------------
    def learning_rate(self, step: int) -> float:
        """Linear decay from `learning_rate` to `final_learning_rate` over the run."""
        c = self.config
        fraction = step / max(c.steps - 1, 1)
        return c.learning_rate + fraction * (c.final_learning_rate - c.learning_rate)

    def attribution(self, policy: np.ndarray) -> np.ndarray:
        solver = self.env.solver
        return exploitation_attribution(policy, solver.gradient(policy), self.env.training_reach(policy))

    def train_step(self) -> dict:
        c = self.config
        rng = np.random.default_rng([c.seed, self.step])
        policy = self.policy()
        charge = self.attribution(policy)
        aligned = c.method == "advantage-alignment"
        rollouts = self.env.rollouts(
            policy, c.groups, c.group_size, rng, **({"advantages": True} if aligned else {})
        )

        exploit = (charge[rollouts.states, rollouts.actions] * rollouts.mask).sum(1)
        rewards = sepo_rewards(
            rollouts.utility,
            exploit,
            rollouts.collusion,
            rollouts.externality,
            rollouts.groups,
            c.lambdas,
            self.scale,
            c.penalty,
            rng=rng,
        )
        credit = self.decision_credit(rewards, rollouts)
        self.logits = self.logits + self.adam.ascent(
            policy_score(policy, rollouts, credit) / len(rollouts.groups), self.learning_rate(self.step)
        )
        if not np.all(np.isfinite(self.logits)):
            raise SepoError(
                f"training diverged at step {self.step} (non-finite policy logits); lower --lr or the λ "
                "weights"
            )

        record = {
            "step": self.step,
            "reward_mean": float(rewards.mean()),
            "sampled_utility": float(rollouts.utility.mean()),
            "sampled_exploit_charge": float(exploit.mean()),
        }
        if aligned:
            record["alignment_term_mean"] = float(np.abs(self.alignment(rollouts)).mean())
        record.update(self.exact_metrics(self.policy()))
        return record

    def alignment(self, rollouts: Rollouts) -> np.ndarray:
        """`[rollouts, decisions]`: the Advantage Alignment term of every decision (0 where masked),
        from the scaled advantages s·A of the match's return, divided by the decisions of a
        rollout (T), as s·U is the scaled return per round."""
        own, other = (self.scale * rollouts.advantages[..., i] for i in (0, 1))
        term = (
            alignment_term(own, other, self.config.aa_beta, self.config.aa_gamma) / rollouts.states.shape[1]
        )
        return term * rollouts.mask

    def decision_credit(self, rewards: np.ndarray, rollouts: Rollouts) -> np.ndarray:
        """`[rollouts, decisions]`: what multiplies ∇θ log π at each decision: the rollout's group
        advantage, plus under advantage-alignment the decision's opponent-shaping term divided by
        the same reward scale."""
        c = self.config
        credit = group_advantages(rewards, rollouts.groups, c.scale_rewards)[:, None] * rollouts.mask
        if c.method == "advantage-alignment":
            divisor = advantage_divisor(rewards, rollouts.groups, c.scale_rewards)
            credit = credit + self.alignment(rollouts) / divisor[:, None]
        return credit

    def exact_metrics(self, policy: np.ndarray) -> dict:
        metrics = dict(self.env.exact_metrics(policy))
        value = metrics[self.env.solver.value_name]
        metrics["objective"] = self.scale * (metrics["utility"] - self.config.lambda_e * value)
        metrics["exact_value"] = self.env.solver.value_name
        return metrics

    # -- the loop ------------------------------------------------------------------------------
    def train(self, on_step: Callable[[dict], None] | None = None, stop_after: int | None = None) -> dict:
        """Train to `config.steps`, resuming from the run directory's checkpoint if present.
        `stop_after` ends early after that many steps (used to test resumption)."""
        if self.run is not None:
            return self._train(self.run, on_step, stop_after)
        with open_run(self.out, "train", self.settings()) as run:
            return self._train(run, on_step, stop_after)

    def _train(self, run: RunDir, on_step, stop_after) -> dict:
        if run.finished:  # a finished run is checked and read, never rewritten
            run.finished_output(POLICY)
            read_run_config(run)
            summary = read_summary(run, (self.env.solver.value_name, "utility"))
            self._prepare(run, read_only=True)
            return summary
        self._prepare(run)
        started, done = time.time(), 0
        saved = logged = (self.step, self.logits, self.adam.m, self.adam.v, self.adam.t)
        try:
            while self.step < self.config.steps:
                record = self.train_step()
                self.step += 1
                self.log.append(record)
                # a step replaces, never mutates, them
                logged = (self.step, self.logits, self.adam.m, self.adam.v, self.adam.t)
                if on_step:
                    on_step(record)
                done += 1
                if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                    self._save_checkpoint(run)
                    saved = logged
                if stop_after is not None and done >= stop_after:
                    break
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the steps logged since the last checkpoint are kept
            if logged[0] > saved[0]:
                self.step, self.logits, self.adam.m, self.adam.v, self.adam.t = logged
                self._save_checkpoint(run)
            raise
        policy = TabularPolicy(self.policy(), self.env.keys, name=f"run:{self.out}")
        progress.stage(
            f"step {self.step}: computing the exact value of the policy ({len(self.env.keys):,} information "
            "states)"
        )
        summary = {"steps": self.step, "seconds": time.time() - started, **self.exact_metrics(policy.table)}
        if self.step >= self.config.steps:
            progress.stage("writing the policy")
            run.write_text(POLICY, policy.compact_text())  # key order is the table's row order
            run.write_json("summary.json", summary)
            run.complete()
        return summary


def policy_score(policy: np.ndarray, rollouts: Rollouts, credit: np.ndarray) -> np.ndarray:
    """Σ_r Σ_k credit[r, k] ∇θ log π(a_{r,k} | I_{r,k}) for softmax logits (e_a − π(·|I) per decision)."""
    score = np.zeros_like(policy)
    for k in range(rollouts.states.shape[1]):
        weight = credit[:, k]
        np.add.at(score, (rollouts.states[:, k], rollouts.actions[:, k]), weight)
        np.add.at(score, rollouts.states[:, k], -weight[:, None] * policy[rollouts.states[:, k]])
    return score


def masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax over each row's legal columns (illegal, padded columns get probability 0)."""
    masked = np.where(legal, logits, -np.inf)
    weights = np.exp(masked - masked.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def run_game(run_dir: str | Path) -> str | None:
    """The game a run directory was trained in (its config's), None when it does not say."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        return None
    config = read_json(path, "run config")
    trained = config.get("game") if isinstance(config, dict) else None
    return trained if isinstance(trained, str) else None


def load_run_policy(run_dir: str | Path, game: str | None = None) -> TabularPolicy:
    """The final (or, for an unfinished run, latest checkpointed) policy of a run directory; with
    `game`, a run trained in another game is a one-line error (its table has other states)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SepoError(f"run directory not found: {run_dir}")
    if game is not None:
        trained = run_game(run_dir)
        if trained is not None and trained != game:
            raise SepoError(
                f"{run_dir} is a run of game {trained!r}, not {game!r}; give --game {trained}, or a run "
                f"trained in {game}"
            )
    if (run_dir / POLICY).exists():
        policy = TabularPolicy.load(run_dir / POLICY)
    elif (run_dir / CHECKPOINT).exists():
        policy = _checkpoint_policy(run_dir)
    else:
        raise SepoError(f"{run_dir} holds no policy.json or checkpoint.json{_what_it_holds(run_dir)}")
    policy.name = f"run:{run_dir.name}"
    return policy


def _what_it_holds(run_dir: Path) -> str:
    """What a folder without a tabular policy is instead, and what to give: `run:` takes the folder
    of a tabular `sepo train`; users gave it an experiment's folder or a language-model run."""
    from sepo.runs import read_manifest

    try:
        command = (read_manifest(run_dir) or {}).get("command")
    except SepoError:
        command = None
    if command == "experiment run":
        return (f": it is an experiment's folder; a trained cell's policy is run:{run_dir}/cells/CELL/train "
                f"(CELL from `ls {run_dir}/cells`)")
    if (run_dir / "model").is_dir():
        return f": it is a language-model run; give its model as hf:{run_dir / 'model'}"
    if command:
        return f": it holds the output of `sepo {command}`; run: takes the folder of a tabular `sepo train`"
    return ""


def checkpoint_arrays(state: dict, shape: tuple) -> tuple[np.ndarray, dict]:
    """(logits, Adam state) of a checkpoint: the touched rows scattered into zeros (`rows`), or a
    whole table (checkpoints written before rows were listed)."""
    if "rows" not in state:
        return np.array(state["logits"], dtype=float).reshape(shape), state["adam"]
    if list(state["shape"]) != list(shape):
        raise ValueError(f"its table is {state['shape']}, this game's {list(shape)}")
    rows = np.array(state["rows"], dtype=np.int64).reshape(-1)
    whole = []
    for part in (state["logits"], state["adam"]["m"], state["adam"]["v"]):
        table = np.zeros(shape)
        table[rows] = np.array(part, dtype=float).reshape(len(rows), shape[1])
        whole.append(table)
    return whole[0], {"m": whole[1], "v": whole[2], "t": state["adam"]["t"]}


def _checkpoint_policy(run_dir: Path) -> TabularPolicy:
    """The policy of an unfinished run: its checkpointed logits over the environment's keys."""
    config = read_json(run_dir / CONFIG, "run config")
    state = read_json(run_dir / CHECKPOINT, "checkpoint")
    try:
        fields = {k: v for k, v in config.items() if k in TabularSEPOConfig.__dataclass_fields__}
        trainer = TabularSEPOTrainer(TabularSEPOConfig(**fields), run_dir)
        logits, _ = checkpoint_arrays(state, trainer.legal.shape)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise SepoError(f"unreadable checkpoint {run_dir / CHECKPOINT}: {error}") from None
    return TabularPolicy(trainer.policy(logits), trainer.env.keys)
