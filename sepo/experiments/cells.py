"""The experiment matrix: a config expanded into cells, each one training run or audit.

A cell is (domain, agent, stage, λ, seed). `base` is one cell per (domain, agent): the agent
has no training seed, and every cell of a domain is audited on the same test episodes, so
differences between stages are paired. `sft` is one cell per seed; `grpo` (payoff-only: λ does
not enter its reward) one per seed; `sepo`, `shuffled` and `constant` one per λ point and seed. Cells a
domain cannot run (no training environment for that kind of agent, no demonstrations) are
listed as skipped with the reason, never silently dropped.
"""
from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import Optional

from sepo.experiments.config import TRAINED, AgentConfig, DomainConfig, ExperimentConfig


@dataclass(frozen=True)
class Cell:
    id: str
    domain: str
    agent: str
    stage: str
    seed: Optional[int]
    lambdas: Optional[tuple[float, float, float]]
    needs: tuple[str, ...] = ()
    """Cells whose outputs this one starts from (an hf training cell needs its SFT cell's model)."""

    def record(self) -> dict:
        out = asdict(self)
        out["lambdas"] = list(self.lambdas) if self.lambdas is not None else None
        out["needs"] = list(self.needs)
        return out


@dataclass
class Plan:
    cells: list[Cell]
    skipped: list[dict] = field(default_factory=list)


def _lam_text(lambdas) -> str:
    return "l" + "-".join(f"{v:g}" for v in lambdas)


def cell_id(domain: str, agent: str, stage: str, seed: Optional[int], lambdas=None) -> str:
    parts = [domain, agent, stage]
    if lambdas is not None:
        parts.append(_lam_text(lambdas))
    if seed is not None:
        parts.append(f"s{seed}")
    text = "_".join(parts)
    return f"{text}_{zlib.crc32(text.encode()):08x}"[:120]


def _why_not(domain: DomainConfig, agent: AgentConfig, stage: str) -> str | None:
    from sepo.games import get_domain

    spec = get_domain(domain.name)
    # its table's rows are the training environment's states
    if agent.kind == "tabular" and spec.training is None:
        return f"{domain.name} has no tabular training environment"
    if stage == "base":
        return None
    if not agent.trainable:
        return f"a {agent.kind} agent is audited as given (base only)"
    if stage == "sft" and spec.demos is None:
        return f"{domain.name} defines no SFT demonstrations"
    if stage in TRAINED and agent.kind == "tabular" and spec.training is None:
        return f"{domain.name} has no tabular training environment"
    if stage in TRAINED and agent.kind == "hf" and spec.llm_training is None:
        return f"{domain.name} has no language-model training environment"
    if stage == "aa" and not _gives_advantages(spec, agent):
        return (f"{domain.name}'s training environment gives no per-round advantages of both players "
                "(Advantage Alignment)")
    return None


def _gives_advantages(spec, agent: AgentConfig) -> bool:
    """Whether the agent's training environment in this domain declares `joint_advantages`."""
    from sepo.games.registry import resolved

    return bool(
        getattr(
            resolved(spec.training if agent.kind == "tabular" else spec.llm_training),
            "joint_advantages",
            False,
        )
    )


def expand(config: ExperimentConfig) -> Plan:
    """Every cell of the matrix, in a fixed order (domains, agents, stages, λ, seeds as listed)."""
    plan = Plan([])
    for domain in config.domains:
        for agent in config.agents:
            stages = agent.stages or config.stages
            seeds = agent.seeds or config.seeds
            sft_ok = "sft" in stages and _why_not(domain, agent, "sft") is None
            for stage in stages:
                reason = _why_not(domain, agent, stage)
                if reason is not None:
                    plan.skipped.append(
                        {"domain": domain.name, "agent": agent.name, "stage": stage, "reason": reason}
                    )
                    continue
                if stage == "base":
                    plan.cells.append(
                        Cell(
                            cell_id(domain.name, agent.name, stage, None),
                            domain.name,
                            agent.name,
                            stage,
                            None,
                            None,
                        )
                    )
                    continue
                points = (
                    [None]
                    if stage == "sft"
                    else [(0.0, 0.0, 0.0)]
                    if stage in ("grpo", "aa")
                    else domain.lambdas.points()
                )
                for lambdas in points:
                    for seed in seeds:
                        needs = ()
                        if stage in TRAINED and agent.kind == "hf" and sft_ok:
                            needs = (cell_id(domain.name, agent.name, "sft", seed),)
                        plan.cells.append(
                            Cell(
                                cell_id(domain.name, agent.name, stage, seed, lambdas),
                                domain.name,
                                agent.name,
                                stage,
                                seed,
                                lambdas,
                                needs,
                            )
                        )
    return plan
