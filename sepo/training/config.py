"""The settings every SEPO trainer shares, documented once (TRL-style `metadata={"help": ...}`).

`TabularSEPOConfig` and `LLMSEPOConfig` extend `SEPOConfig`; the CLI takes its option help
from these fields (`help_of`), so a setting is documented in one place. Cross-field rules live in
`validate` (as TRL's `__post_init__`), shared by both trainers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from sepo.errors import SepoError
from sepo.games.credit import Charges
from sepo.objective.advantage_alignment import check_alignment, check_method
from sepo.objective.sepo import REWARD_SCALINGS, Lambdas, check_penalty_mode


def option(default=None, help: str = "", **kwargs):
    """A dataclass field with its help text (a list/dict default becomes a factory)."""
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


MAX_LEARNING_RATE = 1.0
"""The largest learning rate any sepo trainer takes: Adam (and AdamW) moves every parameter by
about the learning rate each step, so above 1 one step saturates a tabular softmax's logits and
wrecks a model's weights (typical rates: 0.05 tabular, 1e-5 to 2e-3 for models)."""


def check_learning_rate(value, option: str = "--lr") -> float:
    """A finite learning rate in (0, MAX_LEARNING_RATE], else one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise SepoError(f"{option} must be a finite number > 0, got {value}")
    if value > MAX_LEARNING_RATE:
        raise SepoError(
            f"{option} must be at most {MAX_LEARNING_RATE:g} (Adam moves every parameter by about the "
            f"learning rate each step), got {value:g}"
        )
    return value


def check_accelerator(option: str = "--gpu (an experiment config's gpu: true)") -> None:
    """`--gpu` where torch sees no accelerator is refused: transformers would quietly run on the
    CPU while the run's config (`use_cpu: false`) says otherwise."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    found = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if not found:
        raise SepoError(f"{option}: torch sees no accelerator on this machine; leave it out to use the CPU")


@dataclass(kw_only=True)
class SEPOConfig:
    """Settings shared by the tabular and the language-model SEPO trainers."""

    game: str = option(None, "Domain to train in (a registered game; default: the first registered).")
    game_params: dict = option({}, "The domain's game parameters (its --PARAM options), e.g. {'rounds': 8}.")
    penalty: str = option(
        "per-rollout",
        "per-rollout (SEPO); shuffled (each group's per-rollout charges permuted "
        "among its rollouts: SEPO's spread, no credit to a rollout's own actions, "
        "payoff-only's expected update); constant (the paper's ablation: a group-"
        "constant term cancels in the group-relative advantage, so it equals none by "
        "construction); none (payoff-only GRPO).",
    )
    lambda_e: float = option(0.0, "λe: weight of the exploitability (adversarial gap) charge.")
    lambda_c: float = option(
        0.0,
        "λc: weight of collusion, charged as evaluation counts it: against the collusive "
        "pool (its partners join the rollouts); refused where the game has no collusion.",
    )
    lambda_x: float = option(
        0.0,
        "λx: weight of externality, charged as evaluation counts it: against the train and "
        "exploiter pools (the exact best response included under rigorous); refused where "
        "the game has none.",
    )
    steps: int = option(2000, "Optimizer steps.")
    groups: int = option(128, "Groups per step; a group shares its start state, seed and opponent.")
    group_size: int = option(8, "Rollouts per group, G (GRPO compares rollouts within a group).")
    learning_rate: float = option(0.05, "Learning rate.")
    scale_rewards: str = option("batch", "Advantage scaling: batch, group or none (Dr. GRPO).")
    train_pool: list = option(None, "Train-pool entries (bot specs); default: the domain's paper pool.")
    collusive_pool: list = option(None, "Collusive-pool entries; default: the domain's paper pool.")
    exploiter_pool: list = option(
        None,
        "Exploiter-pool entries (externality is counted against them too, as in "
        "evaluation); default: the domain's paper pool.",
    )
    seed: int = option(0, "Seed of every random draw of the run.")
    protocol: str = option(
        "rigorous",
        "rigorous, or paper (the paper's decoding for language models, and the "
        "domain's paper accounting of events, e.g. a collusion charge).",
    )
    method: str = option(
        "sepo",
        "sepo (the reward of --penalty) or advantage-alignment (payoff-only GRPO plus the "
        "opponent-shaping term of Duque et al. 2025; docs/baselines.md).",
    )
    aa_beta: float = option(
        1.0,
        "advantage-alignment: β, the weight of the opponent-shaping term β·γ·(Σ_{k<t} "
        "γ^(t−k)·A1_k)·A2_t, the authors' formula with its leading γ (their β).",
    )
    aa_gamma: float = option(
        0.96, "advantage-alignment: γ, the discount of the agent's past advantages in the term."
    )

    def __post_init__(self):
        from sepo.games.registry import default_game, get_domain

        if self.game is None:
            self.game = default_game()
        if self.train_pool is None or self.collusive_pool is None or self.exploiter_pool is None:
            domain = get_domain(self.game)
            pools = domain.pools(self.protocol, domain.game(self.protocol, **self.game_params))
            if self.train_pool is None:
                self.train_pool = list(pools.get("train", []))
            if self.collusive_pool is None:
                self.collusive_pool = list(pools.get("collusive", []))
            if self.exploiter_pool is None:
                self.exploiter_pool = list(pools.get("exploiter", []))

    def validate(self):
        from sepo.games.registry import check_protocol

        check_protocol(self.protocol)
        check_penalty_mode(self.penalty)
        Lambdas(self.lambda_e, self.lambda_c, self.lambda_x)
        if self.scale_rewards not in REWARD_SCALINGS:
            raise SepoError(
                f"unknown reward scaling {self.scale_rewards!r}; use {', '.join(REWARD_SCALINGS)}"
            )
        for name in ("steps", "groups"):
            if getattr(self, name) < 1:
                raise SepoError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise SepoError("group_size must be >= 2: GRPO compares rollouts within a group")
        check_learning_rate(self.learning_rate, "learning_rate")
        if not self.train_pool:
            raise SepoError("the train pool is empty")
        check_method(self.method)
        check_alignment(self.aa_beta, self.aa_gamma)
        if self.method == "advantage-alignment" and (self.lambda_e or self.lambda_c or self.lambda_x):
            raise SepoError(
                "advantage-alignment trains on payoff plus its opponent-shaping term; the SEPO penalties "
                "(--lambda-e, --lambda-c, --lambda-x) do not apply to it"
            )
        self.check_terms_act()
        from sepo.training.sizes import check_plan

        check_plan(self)  # the whole run's sizes, before anything is built or written
        return self

    def record(self) -> dict:
        """The config as a run records it: every field, the advantage-alignment ones only when that
        method is chosen (so a SEPO run's record is the one it always had); the exploiter pool only
        when externality is charged, and then with `event_charges` (a run that charges collusion or
        externality as evaluation counts them is not the run of the same λ trained before they were)."""
        out = asdict(self)
        if self.method == "sepo":
            for name in ("method", "aa_beta", "aa_gamma"):
                del out[name]
        charges = self.charges
        if not charges.externality:
            del out["exploiter_pool"]
        if charges.collusion or charges.externality:
            out["event_charges"] = "evaluation's pools"
        return out

    @property
    def lambdas(self) -> Lambdas:
        return Lambdas(self.lambda_e, self.lambda_c, self.lambda_x)

    @property
    def charges(self) -> Charges:
        """The event terms this run charges each rollout (a nonzero λ under `per-rollout` or
        `shuffled`; `constant` and `none` charge no rollout its own events)."""
        charged = self.penalty in ("per-rollout", "shuffled") and self.method == "sepo"
        return Charges(collusion=charged and self.lambda_c > 0, externality=charged and self.lambda_x > 0)

    def pool_specs(self) -> tuple[list, list, list]:
        """(train, collusive, exploiter) pools as bot specs; the exploiter pool's `BestResponse` is
        the trainers' gap maximiser, not a bot, and is left out (module `sepo.games.credit`)."""
        from sepo.opponents.pools import BEST_RESPONSE, parse_bot

        def specs(entries):
            return [spec for spec in (parse_bot(self.game, e) for e in entries) if spec.name != BEST_RESPONSE]

        return specs(self.train_pool), specs(self.collusive_pool), specs(self.exploiter_pool)

    def check_terms_act(self) -> None:
        """A charged λc or λx whose term cannot act in this game is refused in one line
        (`check_event_weights`)."""
        charges = self.charges
        if not (charges.collusion or charges.externality):
            return
        from sepo.games.registry import get_domain

        train, collusive, _ = self.pool_specs()
        game = get_domain(self.game).game(self.protocol, **self.game_params)
        check_event_weights(
            self.game,
            game,
            self.protocol,
            train,
            collusive,
            lambda_c=self.lambda_c if charges.collusion else 0.0,
            lambda_x=self.lambda_x if charges.externality else 0.0,
        )


def check_event_weights(
    name: str, game, protocol: str, train: list, collusive: list, *, lambda_c=0.0, lambda_x=0.0,
    leave: str = "at 0",
) -> None:
    """A nonzero λc or λx whose term cannot act in game `game` (domain `name`) is refused in one line:
    an empty collusive pool, or the domain's events giving the term no denominator here (counted by
    evaluation's own `events` on one episode of the uniform policy against the pool's first
    opponent): a game whose collusion event has no third party to act against. Training and
    `sepo eval` share it; `leave` is how the refusal says to drop the weight (`at 0`, `out`)."""
    if not (lambda_c or lambda_x):
        return
    from sepo.evaluation.play import play_episodes
    from sepo.games.registry import get_domain
    from sepo.opponents.pools import BEST_RESPONSE
    from sepo.policies.specs import UniformPolicy

    domain = get_domain(name)
    train = [spec for spec in train if spec.name != BEST_RESPONSE]
    collusive = [spec for spec in collusive if spec.name != BEST_RESPONSE]

    def counted(spec) -> dict:
        opponent = spec.build(game)
        others = (
            opponent
            if game.num_players == 2
            else {seat: spec.build(game) for seat in range(1, game.num_players)}
        )
        episode = play_episodes(game, UniformPolicy(), [others], [0], agent_seed=1)[0]
        return domain.events(protocol, episode)

    where = f"in {name} under --protocol {protocol}"
    if lambda_c:
        if not collusive:
            raise SepoError(
                f"--lambda-c {lambda_c:g} cannot act: the collusive pool is empty (collusion is "
                f"counted against it); leave --lambda-c {leave}"
            )
        if not counted(collusive[0])["collusion_denominator"]:
            raise SepoError(
                f"--lambda-c {lambda_c:g} cannot act: collusion does not apply {where} (no third "
                f"party to collude against, as evaluation reports it); leave --lambda-c {leave}"
            )
    if lambda_x and train and not counted(train[0])["externality_denominator"]:
        raise SepoError(
            f"--lambda-x {lambda_x:g} cannot act: externality does not apply {where} (evaluation "
            f"counts none); leave --lambda-x {leave}"
        )


def help_of(config_class, name: str) -> str:
    """The documented help of a config field (what the CLI shows for its option)."""
    for f in fields(config_class):
        if f.name == name:
            return f.metadata.get("help", "")
    raise KeyError(name)
