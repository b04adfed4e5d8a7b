"""A tiny experiment (one domain with an exact solver, tabular agents, a few steps), run once per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from sepo.games import domain_names, get_domain


def tiny_domain() -> str:
    """The first registered domain with a tabular trainer and a frontier (else any with a trainer): the
    tests name no game."""
    trainable = [n for n in domain_names() if get_domain(n).training is not None]
    with_frontier = [n for n in trainable if get_domain(n).frontier is not None]
    return (with_frontier or trainable)[0]


def tiny_config(domain: str | None = None, **changes) -> str:
    domain = domain or tiny_domain()
    text = f"""
name: tiny
domains:
  - name: {domain}
    lambdas: {{e: [1.0, 4.0], c: 0.0, x: 0.0}}
agents:
  - {{name: tab, kind: tabular}}
stages: [base, sft, grpo, sepo, constant]
seeds: [0, 1]
episodes: {{validation: 4, test: 6}}
replicates: 100
training:
  checkpoints: [4]
  tabular: {{steps: 8, groups: 8}}
"""
    for key, value in changes.items():
        text = text.replace(key, value)
    return text


@pytest.fixture(scope="session")
def finished_experiment(tmp_path_factory) -> Path:
    from sepo.experiments.runner import run_experiment

    root = tmp_path_factory.mktemp("experiment")
    (root / "tiny.yaml").write_text(tiny_config())
    run_experiment(root / "tiny.yaml", root / "out")
    return root / "out"
