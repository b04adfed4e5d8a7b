"""One cell: build its agent (train it where the stage asks), audit every candidate checkpoint
on validation and on test episodes, choose by safety on validation, and write `result.json`.

The library does the work (the same functions `sepo train`, `sepo sft`, `sepo data sft` and
`sepo eval` call); this module only wires them. A cell's folder is its own: a tabular cell
killed midway is redone from scratch (seconds, and bit-identical), a language-model cell resumes
its SFT and GRPO run folders through `sepo.runs`. `result.json` is written last, atomically:
its presence is what "finished" means.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.experiments.cells import Cell
from sepo.experiments.config import (
    METHOD_OF_STAGE,
    PENALTY_OF_STAGE,
    TINY,
    AgentConfig,
    DomainConfig,
    ExperimentConfig,
    llm_training,
    sft_mixture,
)
from sepo.experiments.seeds import split_seed
from sepo.runs import open_run

RESULT = "result.json"
FINAL = "final"
OWNER = "experiment run"
"""The command whose output every cell (and every run inside a cell) is part of."""
CELL = "experiment cell"


def models_dir(out: Path) -> Path:
    return out / "models"


def model_path(config: ExperimentConfig, agent: AgentConfig, out: Path) -> str:
    """Where an hf agent's base model is: the experiment's own tiny model, or the given folder/id."""
    if agent.model == TINY:
        return str(models_dir(out) / TINY)
    path = Path(agent.model).expanduser()
    return str(path.resolve()) if path.exists() else agent.model


MODEL_STAMPS = "models.json"
"""The experiment's record of its hf agents' local model folders (`sepo.training.sft.model_stamp`)."""


def check_models(config: ExperimentConfig, run) -> None:
    """Record the hf agents' local model folders at the experiment's start; on resume, refuse one
    changed since: the config names its path only, so cells run after a model was replaced would
    sit in one results table with cells of the old one."""
    from sepo.errors import SepoError, brief
    from sepo.training.checkpoint import read_json
    from sepo.training.sft import model_stamp

    stamps = {a.name: model_stamp(a.model) for a in config.agents if a.kind == "hf" and a.model != TINY}
    stamps = {name: stamp for name, stamp in stamps.items() if stamp is not None}
    saved = run.root / MODEL_STAMPS
    if not run.fresh and saved.is_file():
        before = read_json(saved, "experiment's model record")
        for name, stamp in stamps.items():
            if name in before and before[name] != stamp:
                raise SepoError(
                    f"the model of agent {name} ({brief(stamp['folder'], 200)}) changed since this "
                    "experiment started; its remaining cells would be mixed with cells of the old one: "
                    "restore it, use another --out, or --overwrite to start over"
                )
    if stamps:
        run.write_json(MODEL_STAMPS, stamps)


def prepare(config: ExperimentConfig, run) -> None:
    """Build what cells share before any runs, in the experiment's run folder `run`: the tiny
    model, if an agent asks for it; check the agents' own models (`check_models`)."""
    check_models(config, run)
    if not any(a.kind == "hf" and a.model == TINY for a in config.agents):
        return
    name = f"{models_dir(Path()).name}/{TINY}"
    if (run.root / name / "sepo_tiny.json").exists() and run.owns(f"{name}/sepo_tiny.json"):
        return
    from sepo.models.tiny import init_tiny_model

    with run.staged(name) as tmp:
        init_tiny_model(tmp, seed=min(config.seeds))


def _lookup(config: ExperimentConfig, cell: Cell) -> tuple[DomainConfig, AgentConfig]:
    domain = next(d for d in config.domains if d.name == cell.domain)
    agent = next(a for a in config.agents if a.name == cell.agent)
    return domain, agent


# -------------------------------------------------------------------------------------- audits

def audit(
    config: ExperimentConfig, domain: DomainConfig, game, policy, split: str, agent: AgentConfig | None = None
) -> dict:
    """`sepo eval` of `policy` on the split's episodes (seeds from `seeds.split_seed`)."""
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.objective.sepo import Lambdas

    counts = agent.episodes if agent is not None and agent.episodes is not None else config.episodes
    episodes = counts.validation if split == "validation" else counts.test
    eval_config = EvalConfig(
        protocol=config.protocol,
        episodes=episodes,
        seed=split_seed(config.eval_seed, split),
        lambdas=Lambdas(*domain.safety_lambdas),
        replicates=config.replicates,
        projection="memory" in domain.params,
    )
    return evaluate(game, policy, eval_config)


SCALARS_SKIPPED = {"episodes_per_opponent", "seed", "payoff_scale"}


def metric_rows(result: dict) -> list[dict]:
    """Every numeric metric of an audit with its 95% interval (a number without one: the point
    twice). `exact` is a claim: only the exact audit's own numbers make it, of a policy read
    exactly. A projection's, a pruned tree's or a lower bound's value (the audit's `exact` false)
    is not exact, nor is any number of a policy estimated from sampled replies (some, such as
    `br_payoff`, have no interval), nor the domain's behaviour table ("<domain>/<key>", counted on
    the played episodes, no interval)."""
    audit_exact = (
        result.get("exact") is True and (result.get("policy") or {}).get("read_exactly", True) is True
    )
    rows = []
    for name, value in result.items():
        if name in SCALARS_SKIPPED or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        ci = result["ci"].get(name)
        value = float(value)
        if ci is None:
            low = high = value
        else:
            low, high = (float("nan") if v is None else float(v) for v in ci)
        exact = ci is None and audit_exact and "/" not in name
        rows.append({"metric": name, "value": value, "low": low, "high": high, "exact": exact})
    for name, value in result["ci"].items():  # metrics that are undefined here (n/a) still get a row
        if result.get(name) is None and name not in SCALARS_SKIPPED:
            rows.append(
                {
                    "metric": name,
                    "value": float("nan"),
                    "low": float("nan"),
                    "high": float("nan"),
                    "exact": False,
                }
            )
    return rows


def _safety(result: dict) -> float:
    value = result.get("safety")
    return -math.inf if value is None or not math.isfinite(value) else float(value)


# ------------------------------------------------------------------------------ agents by stage

def audit_decoding(config: ExperimentConfig):
    """The decoding language models are audited and trained with: the protocol's (the paper's
    top-p 0.95, top-k 50 and repetition penalty 1.3 under `paper`), with every setting the config
    gives in its place."""
    from sepo.policies.replies import decoding_for

    d = config.decoding
    return decoding_for(config.protocol, temperature=d.temperature, max_new_tokens=d.max_new_tokens,
                        top_p=d.top_p, top_k=d.top_k, repetition_penalty=d.repetition_penalty)


def _hf_policy(config: ExperimentConfig, path: str, game, reply_cache: Path | None = None):
    from sepo.policies.hf import HFDecoding, HFPolicy
    from sepo.policies.text_policy import EXACT_REST

    decoding = HFDecoding.of(audit_decoding(config), failure_rule="forced", samples=config.decoding.samples,
                             exact_tolerance=max(EXACT_REST, config.decoding.answer_rest))
    return HFPolicy(path, game.text, mode="sample", decoding=decoding, reply_cache=reply_cache)


def _tabular_env(game_name: str, params: dict, game):
    from sepo.games import get_domain
    from sepo.opponents.pools import parse_bot
    from sepo.training.config import SEPOConfig

    base = SEPOConfig(game=game_name, game_params=params)
    train = [parse_bot(game_name, e) for e in base.train_pool]
    collusive = [parse_bot(game_name, e) for e in base.collusive_pool]
    return get_domain(game_name).training(game, train, collusive)


def demonstration_table(config: ExperimentConfig, domain: DomainConfig, env) -> np.ndarray:
    """The tabular agent's SFT stage: the demonstration mixture's action table, averaged per
    information state with the mixture's weights (what supervised learning on the mixture's
    traces converges to where the demonstrators reach a state equally often). The mixture exists:
    `validate_config` checked it for every domain with an SFT cell."""
    from sepo.games import get_domain
    from sepo.metrics.exact import action_table

    mixtures = get_domain(domain.name).demos()
    mixture = sft_mixture(config, domain)
    decisions = env.solver.decisions()
    total = sum(w for _, w in mixtures[mixture])
    table = sum(w * action_table(factory(), decisions) for factory, w in mixtures[mixture]) / total
    return np.where(np.asarray(env.legal, dtype=bool), table, 0.0)


def _tabular_candidates(config, domain, agent, cell: Cell, game, cell_run):
    """(label, policy) candidates of a tabular cell: trained with the exact tabular trainer."""
    from sepo.policies.specs import UniformPolicy
    from sepo.policies.tabular import TabularPolicy
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

    if cell.stage == "base":
        return [(FINAL, UniformPolicy())]
    env = _tabular_env(domain.name, domain.params, game)
    start = demonstration_table(config, domain, env) if "sft" in (agent.stages or config.stages) else None
    if cell.stage == "sft":
        return [(FINAL, TabularPolicy(start, env.keys, name=f"{cell.agent}:sft"))]
    t = config.training.tabular
    lam_e, lam_c, lam_x = cell.lambdas
    train_config = TabularSEPOConfig(
        game=domain.name,
        game_params=dict(domain.params),
        penalty=PENALTY_OF_STAGE[cell.stage],
        lambda_e=lam_e,
        lambda_c=lam_c,
        lambda_x=lam_x,
        steps=t.steps,
        groups=t.groups,
        group_size=t.group_size,
        learning_rate=t.learning_rate,
        final_learning_rate=t.final_learning_rate,
        scale_rewards=t.scale_rewards,
        seed=cell.seed,
        checkpoint_every=t.steps,
        method=METHOD_OF_STAGE.get(cell.stage, "sepo"),
    )
    init = None if start is None else np.log(np.clip(start, 1e-3, 1.0))
    trainer = TabularSEPOTrainer(train_config, cell_run.path("train"), init_logits=init)
    snapshots = []
    wanted = {s for s in config.training.checkpoints if s < t.steps}

    def on_step(record):
        if record["step"] + 1 in wanted:
            snapshots.append(
                (
                    f"step_{record['step'] + 1}",
                    TabularPolicy(trainer.policy(), trainer.env.keys, name=f"{cell.id}@{record['step'] + 1}"),
                )
            )

    with open_run(trainer.out, "train", trainer.settings(), part_of=OWNER) as run:
        trainer.run = run
        trainer.train(on_step=on_step)
    return [*snapshots, (FINAL, TabularPolicy(trainer.policy(), trainer.env.keys, name=cell.id))]


def _sft_model(
    config: ExperimentConfig, domain: DomainConfig, agent: AgentConfig, seed: int, cell_run, out: Path
) -> str:
    """`sepo data sft` then `sepo sft` into the cell's folder; returns the model folder."""
    from dataclasses import asdict

    from sepo.training.sft import SFTRunConfig, run_sft
    from sepo.training.sft_data import generate_traces, write_sft_dataset

    data = cell_run.path("data")
    data_config = {
        "game": domain.name,
        "game_params": dict(domain.params),
        "mixture": sft_mixture(config, domain),
        "episodes": config.sft.episodes,
        "seed": seed,
        "protocol": config.protocol,
    }
    with open_run(data, "data sft", data_config, part_of=OWNER) as run:
        if not run.finished:
            traces = generate_traces(
                domain.name,
                sft_mixture(config, domain),
                config.sft.episodes,
                seed,
                config.protocol,
                **domain.params,
            )
            with run.staged_contents() as tmp:
                summary = write_sft_dataset(traces, tmp, seed)
            run.complete(asdict(summary))
    s = config.sft
    sft_config = SFTRunConfig(
        model=model_path(config, agent, out),
        data=str(data),
        epochs=s.epochs,
        max_steps=s.max_steps,
        batch_size=s.batch_size,
        learning_rate=s.learning_rate,
        lora=s.lora,
        seed=seed,
        use_cpu=not s.gpu,
    )
    return str(run_sft(sft_config, cell_run.path("sft"), part_of=OWNER).model)


def _hf_candidates(config, domain, agent, cell: Cell, game, cell_run, out: Path, audit_candidate):
    """Candidates of a language-model cell. Training grows one GRPO run folder checkpoint by
    checkpoint (the LLM trainer may extend `steps`: constant learning rate, draws keyed by step),
    auditing the model after each segment."""
    if cell.stage == "base":
        audit_candidate(
            FINAL,
            lambda: _hf_policy(config, model_path(config, agent, out), game, audit_candidate.reply_cache),
        )
        return
    if cell.stage == "sft":
        model = _sft_model(config, domain, agent, cell.seed, cell_run, out)
        audit_candidate(FINAL, lambda: _hf_policy(config, model, game, audit_candidate.reply_cache))
        return
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    start = model_path(config, agent, out)
    if cell.needs:
        start = str(out / "cells" / cell.needs[0] / "sft" / "model")
    t = llm_training(config, domain)
    lam_e, lam_c, lam_x = cell.lambdas
    steps = [s for s in config.training.checkpoints if s < t.steps] + [t.steps]
    for k in steps:
        label = FINAL if k == t.steps else f"step_{k}"
        if audit_candidate.done(label):
            continue
        filters = audit_decoding(config)
        train_config = LLMSEPOConfig(
            game=domain.name,
            game_params=dict(domain.params),
            model=start,
            protocol=config.protocol,
            top_p=filters.top_p,
            top_k=filters.top_k,
            repetition_penalty=filters.repetition_penalty,
            penalty=PENALTY_OF_STAGE[cell.stage],
            method=METHOD_OF_STAGE.get(cell.stage, "sepo"),
            lambda_e=lam_e,
            lambda_c=lam_c,
            lambda_x=lam_x,
            steps=k,
            groups=t.groups,
            group_size=t.group_size,
            learning_rate=t.learning_rate,
            beta=t.beta,
            temperature=t.temperature,
            max_new_tokens=t.max_new_tokens,
            lora=t.lora,
            scale_rewards=t.scale_rewards,
            seed=cell.seed,
            use_cpu=not t.gpu,
            save_steps=max(1, min(steps)),
            keep_checkpoints=1,
            table_samples=t.table_samples,
            final_samples=t.final_samples or config.decoding.samples,
            answer_rest=t.answer_rest,
        )
        # no final read is run (measure=False): the count is only recorded, kept within the read limit
        train_config.final_samples = min(train_config.final_samples, train_config.default_final_samples())
        # each candidate is audited on both splits: the trainer's own read of it would be spent twice
        summary = run_llm_sepo(train_config, cell_run.path("train"), part_of=OWNER, measure=False)
        audit_candidate(
            label, lambda: _hf_policy(config, summary["model"], game, audit_candidate.reply_cache)
        )


REPLY_CACHE = "reply-cache"
"""A language-model cell's kept model calls (`sepo.policies.batch_cache`), in its run folder."""


class _Auditor:
    """Audits candidates on both splits, keeping each candidate's audit in its own file of the
    cell's run folder, so that a resumed language-model cell does not audit a checkpoint twice,
    and the model calls of an audit in progress in `REPLY_CACHE`, so that an audit killed half
    way resumes from its last kept batch with the numbers of an uninterrupted one."""

    def __init__(self, config, domain, agent, game, run):
        self.config, self.domain, self.agent, self.game, self.run = config, domain, agent, game, run

    @property
    def reply_cache(self) -> Path:
        return self.run.path(REPLY_CACHE)

    def _name(self, label: str) -> str:
        return f"audits/{label}.json"

    def done(self, label: str) -> bool:
        return self.run.owns(self._name(label)) and (self.run.root / self._name(label)).is_file()

    def __call__(self, label: str, policy) -> None:
        """`policy` is a policy, or a callable making a fresh one: a language model gets a fresh
        reader per split, so the test audit reuses no reply drawn for validation."""
        try:
            results = {
                split: audit(
                    self.config,
                    self.domain,
                    self.game,
                    policy() if callable(policy) else policy,
                    split,
                    self.agent,
                )
                for split in ("validation", "test")
            }
        finally:
            if self.run.owns(REPLY_CACHE) and (self.run.root / REPLY_CACHE).is_dir():
                self.run.adopt(REPLY_CACHE)
        self.run.write_json(self._name(label), results)

    def results(self) -> dict[str, dict]:
        import json

        names = sorted(n for n in self.run.files if n.startswith("audits/") and n.endswith(".json"))
        return {
            Path(n).stem: json.loads((self.run.root / n).read_text())
            for n in names
            if (self.run.root / n).is_file()
        }


def read_result(path: Path) -> dict:
    """A finished cell's `result.json`, checked: a damaged one is one line naming it (not a traceback in
    `sepo report` or in the results table's rebuild)."""
    import json

    from sepo.inputs import read_text

    try:
        result = json.loads(read_text(path, "cell result"))
    except json.JSONDecodeError as error:
        problem = f"not JSON: {error}"
    else:
        selected = result.get("selected") if isinstance(result, dict) else None
        problem = (
            None
            if (
                isinstance(result, dict)
                and isinstance(result.get("rows"), list)
                and all(isinstance(row, dict) for row in result["rows"])
                and isinstance(selected, dict)
                and all(isinstance(selected.get(k), str) for k in ("validation", "test"))
                and isinstance(result.get("seconds"), (int, float))
                and isinstance(result.get("agent_kind"), str)
            )
            else "not a cell result (rows, selected, seconds, agent_kind)"
        )
    if problem:
        raise SepoError(f"{path} is damaged ({problem}); restore it, or redo the experiment with --overwrite")
    return result


def wait_for_cell(work: Path, poll: float = 1.0) -> None:
    """Return once no process holds the cell folder `work` open for writing (the `sepo.runs` lock):
    an attempt of the cell lost with its cluster node may outlive the node's scheduler for a while,
    and the kernel (or the shared filesystem's lock manager) drops its lock only when it is gone."""
    import fcntl
    import os

    from sepo.runs import LOCK

    try:
        fd = os.open(work / LOCK, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # no lock file: no attempt has opened the folder
        return
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(poll)
            except OSError:  # no locks here (the run's own open refuses a folder in use where it can tell)
                return
    finally:
        os.close(fd)


def run_cell(config: ExperimentConfig, cell: Cell, out: Path) -> dict:
    """Run one cell in its own run folder `out/cells/<id>` (part of the experiment's output);
    returns (and writes) its result."""
    from sepo.games import get_domain

    out = Path(out)
    work = out / "cells" / cell.id
    domain, agent = _lookup(config, cell)
    started = time.time()
    # a killed tabular or audit-only cell is redone from scratch (what it wrote is removed, nothing else)
    with open_run(work, CELL, {"cell": cell.record(), "config_hash": config.hash()}, part_of=OWNER,
                  overwrite=agent.kind != "hf") as run:
        run.commit()
        game = get_domain(domain.name).game(config.protocol, **domain.params)
        auditor = _Auditor(config, domain, agent, game, run)
        if agent.kind == "tabular":
            for label, policy in _tabular_candidates(config, domain, agent, cell, game, run):
                auditor(label, policy)
        elif agent.kind == "hf":
            _hf_candidates(config, domain, agent, cell, game, run, out, auditor)
        else:
            from sepo.policies.specs import load_agent

            auditor(FINAL, lambda: load_agent(agent.spec, game))
        audits = auditor.results()
        by_validation = max(audits, key=lambda label: (_safety(audits[label]["validation"]), label == FINAL))
        by_test = max(audits, key=lambda label: (_safety(audits[label]["test"]), label == FINAL))
        rows = []
        for label, splits in audits.items():
            for split, result in splits.items():
                for row in metric_rows(result):
                    rows.append(
                        {
                            "checkpoint": label,
                            "split": split,
                            "chosen_by_validation": label == by_validation,
                            "chosen_by_test": label == by_test,
                            **row,
                        }
                    )
        test = audits[by_validation]["test"]
        result = {
            "cell": cell.record(),
            "agent_kind": agent.kind,
            "rows": rows,
            "exact_value": test.get("exact_value"),
            "utility_unit": test.get("utility_unit"),
            "safety_uses": test.get("safety_uses"),
            "notes": test.get("notes", []),
            "selected": {"validation": by_validation, "test": by_test},
            "train_run": str((work / "train").relative_to(out))
            if run.owns("train") and (work / "train").is_dir()
            else None,
            "seconds": time.time() - started,
            "resumed": not run.fresh,
        }
        run.write_json(RESULT, result)
        run.complete()
    return result
