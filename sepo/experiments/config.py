"""Experiment configs: one YAML file names a whole study (domains × agents × stages × λ × seeds).

Validated with pydantic; every problem is one line naming the field (`domains[1].name: unknown
domain 'x'; known: ...`), raised as a SepoError (exit 2). Configs are data: they may name games,
the code here never does.

    name: smoke
    protocol: rigorous                 # rigorous | paper
    domains:
      - name: DOMAIN                   # any registered domain
        params: {rounds: 4}            # its game parameters (the CLI's --PARAM options)
        lambdas: {e: [1, 4], c: 2.4, x: 2.4}   # training λ grid (a number or a list each)
        eval_lambdas: {e: 2.4, c: 2.4, x: 2.4} # λ of the reported safety (default: the first grid point)
    agents:
      - {name: tab, kind: tabular}                     # trained exactly (uniform start)
      - {name: tiny, kind: hf, model: tiny}            # `tiny`: the tiny local model, built per experiment
      - {name: qwen, kind: hf, model: Qwen/Qwen3-4B}   # any local folder or hub id
      - {name: ref, kind: fixed, spec: "bot:TFT"}      # any agent spec `sepo eval` takes (base only)
      - {name: api, kind: endpoint, spec: "openai:m@http://host/v1"}   # base only
    stages: [base, sft, grpo, sepo, shuffled]   # also constant (= grpo by construction), aa
    seeds: [0, 1, 2]
    episodes: {validation: 20, test: 50}
    training: {...}; sft: {...}; decoding: {...}
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import warnings
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sepo.errors import SepoError, brief

STAGES = ("base", "sft", "grpo", "sepo", "shuffled", "constant", "aa")
"""base: the agent as given; sft: supervised on the domain's demonstrations; grpo: payoff-only
GRPO (penalty none); sepo: per-rollout SEPO penalties; shuffled: SEPO's charges permuted within
each group (its spread, no credit to a rollout's own actions: the ablation of per-rollout credit
that can fail); constant: the paper's constant-penalty ablation (equal to grpo by construction,
so not worth running); aa: the Advantage Alignment baseline (payoff-only GRPO plus its opponent-shaping term,
at the trainers' default β and γ; domains whose environments give both players' advantages)."""
TRAINED = ("grpo", "sepo", "shuffled", "constant", "aa")
PENALTY_OF_STAGE = {
    "grpo": "none",
    "sepo": "per-rollout",
    "shuffled": "shuffled",
    "constant": "constant",
    "aa": "none",
}
METHOD_OF_STAGE = {"aa": "advantage-alignment"}
AGENT_KINDS = ("tabular", "hf", "fixed", "endpoint")
TINY = "tiny"
"""`model: tiny` builds the tiny local model (sepo.models.tiny) inside the experiment folder."""

Number = Union[float, int]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # "1" is not the number 1


def _non_negative_list(value, field_name: str) -> list[float]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ValueError(f"{field_name} is an empty list")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"must be finite numbers, got {brief(v)}")
        if v < 0:
            raise ValueError(f"λ must be >= 0, got {v}")
        out.append(float(v))
    return out


class LambdaGrid(_Strict):
    e: list[float] = [0.0]
    c: list[float] = [0.0]
    x: list[float] = [0.0]

    @field_validator("e", "c", "x", mode="before")
    @classmethod
    def _grid(cls, value, info):
        return _non_negative_list(value, info.field_name)

    def points(self) -> list[tuple[float, float, float]]:
        return list(itertools.product(self.e, self.c, self.x))


class Lambdas(_Strict):
    e: float = 2.4
    c: float = 2.4
    x: float = 2.4

    @field_validator("e", "c", "x")
    @classmethod
    def _finite(cls, value):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"λ must be a finite number >= 0, got {value}")
        return value


class DomainConfig(_Strict):
    name: str
    params: dict[str, Any] = {}
    lambdas: LambdaGrid = LambdaGrid()
    eval_lambdas: Optional[Lambdas] = None
    llm: dict[str, Any] = {}
    """This domain's changes to `training.llm` (the paper trains one game with another lr and β)."""
    sft_mixture: Optional[str] = None
    """This domain's demonstration mixture (default: `sft.mixture`); a game the paper does not
    have, and so no `paper` mixture, names one of its own."""

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """Unset, `sft_mixture` is left out of the dump, so configs written before it existed keep
        their hash (and their runs resume)."""
        data = handler(self)
        if data.get("sft_mixture") is None:
            data.pop("sft_mixture", None)
        return data

    @field_validator("name")
    @classmethod
    def _known(cls, name):
        from sepo.games import domain_names, family_names, get_domain

        if name not in domain_names():
            try:
                # a family's member, e.g. PREFIX:GAME, under its one (canonical) name
                return get_domain(name).name
            except SepoError as error:
                # the family's own reason (a game it cannot play)
                if name.partition(":")[0] in family_names():
                    raise ValueError(str(error)) from None
                raise ValueError(
                    f"unknown domain {brief(name)}; known: {', '.join(domain_names())}"
                ) from None
        return name

    @model_validator(mode="after")
    def _params(self):
        from sepo.games import get_domain

        known = {p.name for p in get_domain(self.name).params}
        unknown = sorted(set(self.params) - known)
        if unknown:
            raise ValueError(
                f"unknown game parameter {brief(unknown[0])} for {self.name}; known: "
                f"{', '.join(sorted(known)) or 'none'}"
            )
        return self

    @property
    def safety_lambdas(self) -> tuple[float, float, float]:
        if self.eval_lambdas is not None:
            return (self.eval_lambdas.e, self.eval_lambdas.c, self.eval_lambdas.x)
        return self.lambdas.points()[0]


class AgentConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,40}$")
    kind: Literal["tabular", "hf", "fixed", "endpoint"]
    model: Optional[str] = None
    spec: Optional[str] = None
    stages: Optional[list[Literal["base", "sft", "grpo", "sepo", "shuffled", "constant", "aa"]]] = None
    """This agent's stages (default: the experiment's); a language model may run fewer than a tabular
    agent."""
    seeds: Optional[list[int]] = None
    """This agent's training seeds (default: the experiment's)."""
    episodes: Optional["Episodes"] = None
    """This agent's audit episodes per opponent (default: the experiment's); same seeds, fewer episodes."""

    @field_validator("stages", "seeds")
    @classmethod
    def _override(cls, value, info):
        if value is None:
            return value
        if not value:
            raise ValueError("is empty: leave it out to use the experiment's")
        if len(set(value)) != len(value):
            raise ValueError("lists an entry twice")
        if info.field_name == "seeds" and any(s < 0 or s >= 2**31 for s in value):
            raise ValueError("seeds must be in [0, 2**31)")
        return value

    @model_validator(mode="after")
    def _fields(self):
        if self.kind == "hf" and not self.model:
            raise ValueError("an hf agent needs `model` (a folder, a hub id, or tiny)")
        if self.kind in ("fixed", "endpoint") and not self.spec:
            raise ValueError(
                f"a {self.kind} agent needs `spec` (an agent spec such as bot:NAME or openai:MODEL@URL)"
            )
        if self.kind == "endpoint" and not self.spec.startswith("openai:"):
            raise ValueError("an endpoint agent's spec is openai:MODEL@URL")
        if self.kind in ("tabular", "hf") and self.spec:
            raise ValueError(f"a {self.kind} agent takes no `spec`")
        if self.kind != "hf" and self.model:
            raise ValueError(f"a {self.kind} agent takes no `model`")
        return self

    @property
    def trainable(self) -> bool:
        return self.kind in ("tabular", "hf")


class Episodes(_Strict):
    validation: int = Field(20, ge=1, le=100_000)
    test: int = Field(50, ge=1, le=100_000)


class TabularTraining(_Strict):
    steps: int = Field(200, ge=1, le=10**6)
    groups: int = Field(64, ge=1, le=10**5)
    group_size: int = Field(8, ge=2, le=1024)
    learning_rate: float = Field(0.05, gt=0, le=100)
    final_learning_rate: float = Field(0.005, gt=0, le=100)
    scale_rewards: Literal["batch", "group", "none"] = "batch"


class LLMTraining(_Strict):
    steps: int = Field(20, ge=1, le=10**5)
    groups: int = Field(8, ge=1, le=4096)
    group_size: int = Field(4, ge=2, le=256)
    learning_rate: float = Field(1e-4, gt=0, le=1)
    beta: float = Field(0.0, ge=0, le=100)
    temperature: float = Field(1.0, gt=0, le=10)
    max_new_tokens: int = Field(48, ge=1, le=8192)
    lora: bool = False
    scale_rewards: Literal["batch", "group", "none"] = "none"
    gpu: bool = False
    table_samples: int = Field(64, ge=1, le=100_000)
    """Replies per information state for each step's estimate of the played policy."""
    answer_rest: float = Field(0.0, ge=0, lt=1)
    """Read each step's policy from the answer lines' exact probabilities when they leave at most
    this share of the replies (the trainer's `answer_rest`); 0: only an answer-only model."""
    final_samples: int | None = Field(None, ge=1, le=100_000)
    """Not used: a cell audits each checkpoint on both splits instead of the trainer's final read of
    the trained model. Accepted (with a warning) so that configs which set it still load and resume."""


FINAL_SAMPLES_UNUSED = (
    "training.llm.final_samples has no effect: an experiment cell audits each checkpoint on both "
    "splits instead of the trainer's final read (kept so that configs which set it still load)"
)

ADDED_DEFAULTS = {"answer_rest": 0.0}
"""`LLMTraining` settings added after experiments were run, and their defaults."""


def llm_training(config: "ExperimentConfig", domain: DomainConfig) -> "LLMTraining":
    """`training.llm` with the domain's overrides."""
    return LLMTraining.model_validate({**config.training.llm.model_dump(), **domain.llm})


class Training(_Strict):
    checkpoints: list[int] = []
    """Steps (besides the last) whose policies are candidates for held-out selection."""
    tabular: TabularTraining = TabularTraining()
    llm: LLMTraining = LLMTraining()

    @field_validator("checkpoints")
    @classmethod
    def _positive(cls, value):
        if any(v < 1 for v in value):
            raise ValueError("checkpoint steps must be >= 1")
        return sorted(set(value))


class SFT(_Strict):
    mixture: str = "paper"
    episodes: int = Field(50, ge=1, le=10**6)
    """Demonstration episodes per driving opponent (`sepo data sft --episodes`)."""
    epochs: float = Field(2.0, gt=0, le=1000)
    max_steps: int = Field(-1, ge=-1, le=10**6)
    batch_size: int = Field(16, ge=1, le=4096)
    learning_rate: float = Field(2e-3, gt=0, le=1)
    lora: bool = False
    gpu: bool = False

    @field_validator("max_steps")
    @classmethod
    def _not_zero(cls, value):
        if value == 0:
            raise ValueError("must be >= 1, or -1 to train for `epochs`")
        return value


class Decoding(_Strict):
    """How language-model agents are read in the audits (the policy is what they play under it)."""
    temperature: float = Field(1.0, ge=0, le=10)
    """0: greedy, whose played policy is read exactly (one reply per state)."""
    max_new_tokens: int = Field(48, ge=1, le=8192)
    samples: int = Field(512, ge=1, le=100_000)
    """Replies sampled per information state where the played policy cannot be read exactly."""
    answer_rest: float = Field(0.0, ge=0, lt=1)
    """Read the audited policy from the answer lines' exact probabilities where they leave at most
    this share of the replies at every prompt, and sample replies where they leave more. The audits
    decide an unparsed reply by forced decoding, which needs the reply, so that share is
    renormalised over the answer lines: each action's probability is within it of the played
    policy's. The value is labelled `estimated`, with the share recorded. 0: only where the answer
    lines leave nothing."""
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=100_000)
    repetition_penalty: float | None = Field(None, gt=0, le=100)
    """The sampling filters; None (left out) is the protocol's (the paper's top-p 0.95, top-k 50 and
    repetition penalty 1.3 under `paper`, none under `rigorous`)."""


ADDED_DECODING = {"top_p": None, "top_k": None, "repetition_penalty": None, "answer_rest": 0.0}
"""`decoding` settings added after experiments were run, and their defaults: left out of the record
while at them."""


AgentConfig.model_rebuild()


class ExperimentConfig(_Strict):
    name: str = Field("experiment", pattern=r"^[A-Za-z0-9_.-]{1,60}$")
    protocol: Literal["rigorous", "paper"] = "rigorous"
    domains: list[DomainConfig]
    agents: list[AgentConfig]
    stages: list[Literal["base", "sft", "grpo", "sepo", "shuffled", "constant", "aa"]]
    seeds: list[int] = [0]
    episodes: Episodes = Episodes()
    eval_seed: int = Field(0, ge=0, le=10**6)
    """Test episodes use this seed, validation episodes eval_seed + 1 (disjoint, checked)."""
    replicates: int = Field(1000, ge=50, le=100_000)
    training: Training = Training()
    sft: SFT = SFT()
    decoding: Decoding = Decoding()

    @field_validator("domains", "agents", "stages", "seeds")
    @classmethod
    def _non_empty(cls, value, info):
        if not value:
            raise ValueError("is empty: the experiment matrix has no cells")
        if info.field_name in ("stages", "seeds") and len(set(value)) != len(value):
            raise ValueError("lists an entry twice")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value):
        if any(s < 0 or s >= 2**31 for s in value):
            raise ValueError("seeds must be in [0, 2**31)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _protocol_decoding(cls, data):
        """Decoding the config leaves out is the protocol's (under `paper` the paper's temperature 0.8 and
        256 new tokens), as in `sepo eval --protocol`, so that a `paper` experiment without a `decoding`
        section is not audited at the rigorous defaults (1.0, 48 tokens) under the paper protocol's name."""
        if (
            isinstance(data, dict)
            and data.get("protocol") == "paper"
            and isinstance(data.get("decoding", {}), dict)
        ):
            from sepo.policies.replies import PAPER_DECODING

            paper = {
                "temperature": PAPER_DECODING.temperature,
                "max_new_tokens": PAPER_DECODING.max_new_tokens,
            }
            data = {**data, "decoding": {**paper, **data.get("decoding", {})}}
        return data

    @model_validator(mode="after")
    def _unique_names(self):
        for what, items in (
            ("domains", [d.name for d in self.domains]),
            ("agents", [a.name for a in self.agents]),
        ):
            seen = {n for n in items if items.count(n) > 1}
            if seen:
                raise ValueError(f"{what}: {sorted(seen)[0]} is listed twice")
        return self

    def record(self) -> dict:
        """The config as run folders record it: every field, except settings added after experiments
        were run where they are at their default (`ADDED_DEFAULTS`, `ADDED_DECODING`), so that those
        experiments resume."""
        data = self.model_dump(mode="json")
        llm = data["training"]["llm"]
        for name, default in ADDED_DEFAULTS.items():
            if llm.get(name) == default:
                del llm[name]
        for name, default in ADDED_DECODING.items():
            if data["decoding"].get(name) == default:
                del data["decoding"][name]
        return data

    def hash(self) -> str:
        """A short digest of the config's canonical JSON (`record`): the results table's `config_hash`."""
        return hashlib.sha256(json.dumps(self.record(), sort_keys=True).encode()).hexdigest()[:16]


def _field_path(loc) -> str:
    parts = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        elif item in ("function-after", "function-before") or str(item).startswith(
            ("function-", "literal[", "float", "int")
        ):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts) or "config"


def validate_config(data: Any, source: str = "config") -> ExperimentConfig:
    """The validated config, or a one-line SepoError naming the first bad field."""
    if not isinstance(data, dict):
        raise SepoError(f"{source}: an experiment config is a mapping (name, domains, agents, stages, ...)")
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key"
        elif first["type"] == "missing":
            message = "is required"
        raise SepoError(f"{source}: {_field_path(first['loc'])}: {brief(message, 200)}") from None
    _check_domain_params(config, source)
    _check_mixtures(config, source)
    _check_checkpoints(config, source)
    return config


TRAINED_STAGES = ("grpo", "sepo", "shuffled", "constant", "aa")


def _check_checkpoints(config: "ExperimentConfig", source: str) -> None:
    """Every `training.checkpoints` step comes before the last step of at least one training cell
    (a list shared by trainers of different lengths keeps the steps some cell reaches; a step that
    none reaches was dropped without a word before)."""
    from sepo.experiments.cells import expand

    if not config.training.checkpoints:
        return
    kinds = {agent.name: agent.kind for agent in config.agents}
    domains = {domain.name: domain for domain in config.domains}
    lengths = set()
    for cell in expand(config).cells:
        if cell.stage in TRAINED_STAGES and kinds.get(cell.agent) in ("tabular", "hf"):
            lengths.add(config.training.tabular.steps if kinds[cell.agent] == "tabular"
                        else llm_training(config, domains[cell.domain]).steps)
    if not lengths:
        return
    unreached = [step for step in config.training.checkpoints if step >= max(lengths)]
    if unreached:
        raise SepoError(
            f"{source}: training.checkpoints: step {unreached[0]} is not before the last step of any "
            f"training cell (the longest trains {max(lengths)} steps, and its last step is always a "
            "candidate); remove it, or train longer"
        )


def sft_mixture(config: "ExperimentConfig", domain: DomainConfig) -> str:
    """The demonstration mixture of `domain`'s SFT cells."""
    return domain.sft_mixture or config.sft.mixture


def _check_mixtures(config: "ExperimentConfig", source: str) -> None:
    """Every domain that has an SFT cell has the mixture it names, before anything is written."""
    from sepo.experiments.cells import expand
    from sepo.games import get_domain

    with_sft = {cell.domain for cell in expand(config).cells if cell.stage == "sft"}
    for i, domain in enumerate(config.domains):
        if domain.name not in with_sft:
            continue
        mixture = sft_mixture(config, domain)
        known = get_domain(domain.name).demos()
        if mixture not in known:
            where = f"domains[{i}].sft_mixture" if domain.sft_mixture else "sft.mixture"
            hint = "" if domain.sft_mixture else f" (give domains[{i}].sft_mixture)"
            raise SepoError(
                f"{source}: {where}: {domain.name} has no demonstration mixture {brief(mixture)}; "
                f"known: {', '.join(known) or 'none'}{hint}"
            )


def _check_domain_params(config: ExperimentConfig, source: str) -> None:
    """Game parameters are checked by the domain itself (its make_game), before any cell runs."""
    from sepo.games import get_domain

    for i, domain in enumerate(config.domains):
        try:
            get_domain(domain.name).game(config.protocol, **domain.params)
        except SepoError as error:
            raise SepoError(f"{source}: domains[{i}].params: {error}") from None
        except (TypeError, ValueError) as error:
            raise SepoError(f"{source}: domains[{i}].params: {brief(str(error), 200)}") from None
        try:
            llm_training(config, domain)
        except ValidationError as error:
            first = error.errors()[0]
            message = (
                "unknown key"
                if first["type"] == "extra_forbidden"
                else first["msg"].removeprefix("Value error, ")
            )
            raise SepoError(
                f"{source}: domains[{i}].llm.{_field_path(first['loc'])}: {brief(message, 200)}"
            ) from None


def _check_sizes(config: ExperimentConfig, source: str) -> None:
    """Every size the config sets, checked against this machine's memory before anything is
    written (`sepo.training.sizes`, `sepo.limits`): per domain, its audits' episodes, and for the
    agents it trains, the exact solver, the history tree, a step's rollouts or completions and a
    language model's reads. One line naming the domain and the fields that would fit; a config
    refused here leaves no folder behind, so the corrected config starts afresh."""
    from sepo.experiments.cells import expand
    from sepo.games import get_domain
    from sepo.limits import check_episodes
    from sepo.metrics.exact import check_exact_size
    from sepo.opponents.pools import default_pools
    from sepo.training import sizes

    kinds = {agent.name: agent.kind for agent in config.agents}
    most_episodes = max(
        [config.episodes.validation, config.episodes.test]
        + [max(a.episodes.validation, a.episodes.test) for a in config.agents if a.episodes is not None]
    )
    cells = expand(config).cells
    for i, domain in enumerate(config.domains):
        here = [cell for cell in cells if cell.domain == domain.name]
        if not here:
            continue
        where = f"{source}: domains[{i}] ({domain.name})"
        game = get_domain(domain.name).game(config.protocol, **domain.params)
        params = {"rounds": f"domains[{i}].params.rounds", "memory": f"domains[{i}].params.memory"}
        trained = {kinds[cell.agent] for cell in here if cell.stage in TRAINED_STAGES}
        try:
            pools = default_pools(domain.name, config.protocol, game)
            check_episodes(
                game,
                most_episodes,
                sum(len(pools.get(n, [])) for n in ("train", "collusive", "exploiter")),
                "an audit",
                "episodes.test",
            )
            if "tabular" in trained:
                t = config.training.tabular
                names = {**sizes.CLI_OPTIONS, **params, "groups": "training.tabular.groups",
                         "group_size": "training.tabular.group_size"}
                check_exact_size(game)
                held = sizes.check_tree(get_domain(domain.name), game, False, names, t.groups * t.group_size)
                sizes.check_rollouts(game, t.groups, t.group_size, held, names, get_domain(domain.name))
            if "hf" in trained:
                from sepo.training.config import SEPOConfig

                t = llm_training(config, domain)
                names = {
                    **sizes.CLI_OPTIONS,
                    **params,
                    "groups": "training.llm.groups",
                    "group_size": "training.llm.group_size",
                    "steps": "training.llm.steps",
                    "table_samples": "training.llm.table_samples",
                }
                check_exact_size(game)
                held = sizes.check_tree(get_domain(domain.name), game, True, names)
                sizes.check_language_model_batches(
                    t.steps, t.groups, t.group_size, t.max_new_tokens, held, names
                )
                plan = SEPOConfig(game=domain.name, game_params=dict(domain.params), protocol=config.protocol,
                                  groups=t.groups, group_size=t.group_size)
                step, _ = sizes.read_states(plan, game)
                sizes.check_replies(step, t.table_samples, "at every step", names["table_samples"])
                if t.final_samples is not None:
                    warnings.warn(FINAL_SAMPLES_UNUSED, stacklevel=2)
            charged = {cell.stage for cell in here} & {"sepo", "shuffled"}
            if charged:
                from sepo.training.config import SEPOConfig

                for e, c, x in domain.lambdas.points():  # a λ whose term cannot act is refused at plan time
                    SEPOConfig(game=domain.name, game_params=dict(domain.params), protocol=config.protocol,
                               penalty="per-rollout", lambda_e=e, lambda_c=c, lambda_x=x).check_terms_act()
        except SepoError as error:
            message = str(error).replace("--lambda-c ", f"domains[{i}].lambdas.c ").replace(
                "--lambda-x ", f"domains[{i}].lambdas.x ")
            # a game's own hint names its CLI option: here, the field
            for param in get_domain(domain.name).params:
                message = message.replace(
                    f"--{param.name.replace('_', '-')} ", f"domains[{i}].params.{param.name} "
                )
            raise SepoError(f"{where}: {message}") from None


def check_agents(config: ExperimentConfig, source: str = "config") -> None:
    """Every agent against every domain it plays in, before anything is written: a fixed agent's
    spec as `sepo eval` would read it in that domain (`bot:TFT` is no bot of every game), a
    language model's folder (a Hub id by its form). One line naming the field by its path."""
    from sepo.experiments.cells import expand
    from sepo.games import get_domain
    from sepo.policies.specs import check_agent, check_model_source

    plays = {(cell.domain, cell.agent) for cell in expand(config).cells}
    games = {}
    for i, agent in enumerate(config.agents):
        if agent.kind == "hf" and agent.model != TINY:
            try:
                check_model_source(agent.model)
            except SepoError as error:
                raise SepoError(f"{source}: agents[{i}].model: {error}") from None
        if agent.kind not in ("fixed", "endpoint"):
            continue
        for j, domain in enumerate(config.domains):
            if (domain.name, agent.name) not in plays:
                continue
            if domain.name not in games:
                games[domain.name] = get_domain(domain.name).game(config.protocol, **domain.params)
            try:
                check_agent(agent.spec, games[domain.name])
            except SepoError as error:
                raise SepoError(
                    f"{source}: agents[{i}].spec under domains[{j}] ({domain.name}): {error}"
                ) from None


def load_config(path: str | Path) -> tuple[ExperimentConfig, str]:
    """Read and validate a YAML experiment config, its agents and its sizes included (before `plan`
    lists it or `run` makes its folder); returns it and the file's text."""
    from sepo.inputs import read_structured, read_text

    text = read_text(Path(path), "experiment config")
    config = validate_config(read_structured(path, "experiment config"), str(path))
    check_agents(config, str(path))
    _check_sizes(config, str(path))
    return config, text
