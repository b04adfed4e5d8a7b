"""`sepo demo`: the tour across every domain, one domain's own demo, and the run-folder rules.

The fast tests shrink each domain's demo spec (a few episodes, 2 training steps) so they check the
wiring; `test_the_tour_as_shipped` runs the demo a newcomer runs (slow)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from rich.console import Console

import sepo.demo as demo
from sepo.games import domain_names, get_domain
from sepo.games.registry import DemoAgent, DemoSpec
from sepo.runs import read_manifest
from sepo.training.tabular import TabularSEPOConfig
from tests.cli.cli_helpers import _error, _run


def _files(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def small(monkeypatch):
    """Every domain's demo spec with 3 episodes per opponent (the wiring, not the numbers)."""
    real = demo.get_domain

    def shrunk(name):
        domain = real(name)
        return (
            dataclasses.replace(domain, demo=dataclasses.replace(domain.demo, episodes=3))
            if domain.demo
            else domain
        )

    monkeypatch.setattr(demo, "get_domain", shrunk)


def _console():
    return Console(width=200, record=True)


PAPER_DOMAINS = ("kuhn", "ipd", "auction", "negotiation", "negotiation-gt")


def _with_demo() -> list[str]:
    return [name for name in domain_names() if get_domain(name).demo is not None]


def test_every_demo_loads_and_the_papers_five_domains_have_one():
    """A spec typo (an unknown bot, a trainer setting that does not exist) fails here, not in front of a
    newcomer."""
    from sepo.policies.specs import load_agent

    assert set(PAPER_DOMAINS) <= set(_with_demo())
    for name in _with_demo():
        spec = get_domain(name).demo
        assert isinstance(spec, DemoSpec) and spec.agents, name
        game = get_domain(name).game("rigorous", **spec.params)
        for agent in spec.agents:
            load_agent(agent.spec, game)
        if spec.training is not None:
            TabularSEPOConfig(
                game=name, penalty="per-rollout", lambda_e=spec.training.lambda_e, **spec.training.settings
            ).validate()
    assert sum(get_domain(name).demo.featured for name in _with_demo()) == 2


def test_the_tour_audits_every_domain_and_trains_the_featured_ones(small, tmp_path):
    out = tmp_path / "demo"
    console = _console()
    summary = demo.run_demo(out, console, steps=2)
    assert [row["domain"] for row in summary["audits"]] == _with_demo()
    for row in summary["audits"]:
        for protocol in ("rigorous", "paper"):
            assert {"utility", "exploit_pool", "value", "label", "br_gap"} <= set(row[protocol])
        assert row["rigorous"]["value"] is not None and row["rigorous"]["label"] in (
            "exact",
            "lower bound",
        ), row
    featured = [name for name in _with_demo() if get_domain(name).demo.featured]
    assert [t["domain"] for t in summary["trainings"]] == featured
    for training in summary["trainings"]:
        assert [r["penalty"] for r in training["runs"]] == ["per-rollout", "none"]
        assert all(Path(plot).is_file() for plot in training["plots"])
        for run in training["runs"]:
            assert read_manifest(Path(run["folder"]))["part_of"] == "demo"
    text = console.export_text()
    assert (
        "paper's score" in text
        and str(out / "demo_summary.json") in text
        and f"{featured[0]}/sepo_vs_payoff_only.png" in text
    )
    assert json.loads((out / "demo_summary.json").read_text())["audits"] == json.loads(
        json.dumps(summary["audits"])
    )
    listed = set(read_manifest(out)["files"])
    assert {
        "demo_summary.json",
        f"{featured[0]}/sepo_vs_payoff_only.png",
        f"{featured[0]}/payoff_only",
    } <= listed

    before = _files(out)
    again = _console()
    assert demo.run_demo(out, again, steps=2) == json.loads((out / "demo_summary.json").read_text())
    shown = again.export_text()
    assert "already complete" in shown and "paper's score" in shown
    assert _files(out) == before  # read, never retrained or rewritten


def test_a_domains_own_demo_places_its_runs_on_the_frontier(small, tmp_path):
    with_frontier = next(name for name in _with_demo() if get_domain(name).frontier is not None)
    spec = get_domain(with_frontier).demo
    summary = demo.run_demo(tmp_path / "one", _console(), game=with_frontier, steps=2)
    assert [row["agent"] for row in summary["audits"]] == [agent.spec for agent in spec.agents]
    (training,) = summary["trainings"]
    assert len(training["runs"]) == 2 + len(spec.training.frontier_lambdas)
    assert all("frontier_utility" in run and run["gap"] >= -1e-6 for run in training["runs"])
    assert (tmp_path / "one" / "frontier.png").is_file() and (
        tmp_path / "one" / "sepo_vs_payoff_only.png"
    ).is_file()


def test_a_demos_warnings_advise_only_options_the_demo_has(small, tmp_path):
    """The paper protocol's quirks warn while the demo audits both protocols; an option a warning
    names must be one `sepo demo` takes."""
    import re

    result = _run("demo", "--game", "negotiation-gt", "--steps", "2", "--out", tmp_path / "demo")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned, result.stderr
    named = set(re.findall(r"--[a-z][a-z-]*", "\n".join(warned)))
    assert named <= {"--out", "--steps", "--game", "--overwrite"}, warned


def test_the_paper_score_is_set_beside_the_exact_gap_only_where_they_disagree():
    agree = {"exploit_pool": 0.31, "exploit_pool_ci": [0.2, 0.7], "br_gap": 0.625}
    assert demo.disagreement(agree) == "0.310 (agrees)"
    assert demo.disagreement(dict(agree, exploit_pool_ci=[0.25, 0.4])) == "0.310 (exact 0.625)"
    assert demo.disagreement(dict(agree, br_gap=None)) == "0.310 (no exact)"


def test_the_exact_counterpart_of_the_paper_score():
    """A general-sum game's value is the best responder's gap; a zero-sum game's gap is the best
    responder's payoff minus the agent's (twice the exploitability)."""
    general = {
        "utility": 1.0,
        "exploit_pool": 0.3,
        "ci": {},
        "adversarial_gap": 0.625,
        "exact_value": "adversarial_gap",
        "exact_label": "exact",
        "br_payoff": 3.25,
        "agent_payoff_vs_br": 2.0,
    }
    assert demo.measures(general)["br_gap"] == 0.625
    zero_sum = {
        "utility": 0.0,
        "exploit_pool": 0.0,
        "ci": {},
        "exploitability": 0.25,
        "exact_value": "exploitability",
        "exact_label": "exact",
        "br_payoff": 0.25,
        "agent_payoff_vs_br": -0.25,
    }
    assert demo.measures(zero_sum)["br_gap"] == 0.5
    bound = {
        "utility": 1.0,
        "exploit_pool": 2.0,
        "ci": {},
        "adversarial_gap_lower_bound": 3.0,
        "lower_bound_method": "DP",
        "exact_label": "lower bound",
    }
    assert (demo.measures(bound)["value"], demo.measures(bound)["label"]) == (3.0, "lower bound")
    assert demo.value_text(demo.measures(bound)) == "adversarial gap ≥ 3.0000"


def test_a_demo_of_other_steps_is_refused_in_the_folder(small, tmp_path):
    from sepo.runs import open_run

    with open_run(tmp_path / "demo", "demo", demo.demo_config(None, 1500)) as run:
        run.complete()
    _error(_run("demo", "--out", tmp_path / "demo", "--steps", "100"), "steps 1500 there, 100 here")


def test_another_game_is_refused_by_name_first(small, tmp_path):
    from sepo.runs import open_run

    with open_run(tmp_path / "demo", "demo", demo.demo_config(None, 2)) as run:
        run.complete()
    _error(_run("demo", "--out", tmp_path / "demo", "--game", _with_demo()[0], "--steps", "3"),
           f"game None there, {_with_demo()[0]} here; steps 2 there, 3 here")


def test_bad_games_are_one_line(tmp_path, monkeypatch):
    _error(_run("demo", "--game", "chess", "--out", tmp_path / "x"), "chess")
    real = demo.get_domain
    monkeypatch.setattr(demo, "get_domain", lambda name: dataclasses.replace(real(name), demo=None))
    _error(_run("demo", "--game", _with_demo()[0], "--out", tmp_path / "x"), "has no demo")
    assert not (tmp_path / "x").exists()


def test_the_demo_is_above_the_domains():
    """No domain package holds a demo module any more: each gives its piece as data."""
    root = Path(demo.__file__).parent / "games"
    assert not list(root.glob("*/demo.py"))
    assert all(
        isinstance(agent, DemoAgent) for name in _with_demo() for agent in get_domain(name).demo.agents
    )


@pytest.mark.slow
def test_the_tour_as_shipped(tmp_path):
    """`sepo demo` as the README runs it: the paper's score misses an exact gap somewhere, and SEPO's
    exact value ends below payoff-only's in every featured domain."""
    result = _run("demo", "--out", tmp_path / "demo")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "demo" / "demo_summary.json").read_text())
    assert any("(exact " in demo.disagreement(row["paper"]) for row in summary["audits"])
    for training in summary["trainings"]:
        sepo_run, payoff_only = training["runs"][:2]
        assert sepo_run["value"] < payoff_only["value"] / 10, training
