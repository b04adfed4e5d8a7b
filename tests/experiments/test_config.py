"""Experiment configs: bad input is one line naming the field, exit status 2."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError
from sepo.experiments.cells import expand
from sepo.experiments.config import validate_config
from tests.experiments.conftest import tiny_config, tiny_domain


def _data(**changes):
    import yaml

    return yaml.safe_load(tiny_config(**changes))


def test_a_good_config_validates():
    config = validate_config(_data())
    assert config.domains[0].name == tiny_domain()
    assert config.domains[0].lambdas.points() == [(1.0, 0.0, 0.0), (4.0, 0.0, 0.0)]


@pytest.mark.parametrize(
    "change, field",
    [
        ({"- name: DOMAIN": "- name: no-such-game"}, "domains[0].name: unknown domain no-such-game; known:"),
        ({"kind: tabular": "kind: robot"}, "agents[0].kind"),
        ({"[base, sft, grpo, sepo, constant]": "[base, dance]"}, "stages[1]"),
        ({"name: tiny": "name: tiny\ncolour: blue"}, "colour: unknown key"),
        ({"seeds: [0, 1]": "seeds: []"}, "seeds: is empty"),
        ({"e: [1.0, 4.0]": "e: [1.0, -4.0]"}, "domains[0].lambdas.e: λ must be >= 0"),
        ({"tabular: {steps: 8": "tabular: {steps: 0"}, "training.tabular.steps"),
        ({"validation: 4": "validation: 0"}, "episodes.validation"),
        ({"lambdas:": "params: {no_such_param: 3}\n    lambdas:"}, "unknown game parameter no_such_param"),
        # a checkpoint no training cell reaches is named, not dropped without a word
        (
            {"checkpoints: [4]": "checkpoints: [4, 40]"},
            "training.checkpoints: step 40 is not before the last step of any "
            "training cell (the longest trains 8 steps",
        ),
        ({"checkpoints: [4]": "checkpoints: [8]"}, "training.checkpoints: step 8"),
    ],
)
def test_bad_configs_name_the_field(change, field):
    text = tiny_config()
    for old, new in change.items():
        old = old.replace("DOMAIN", tiny_domain())
        assert old in text
        text = text.replace(old, new)
    import yaml

    with pytest.raises(SepoError) as error:
        validate_config(yaml.safe_load(text), "c.yaml")
    message = str(error.value)
    assert "\n" not in message and message.startswith("c.yaml: ")
    assert field in message


def test_the_cli_refuses_bad_configs_with_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(tiny_config().replace("[base, sft, grpo, sepo, constant]", "[]"))
    result = CliRunner().invoke(
        app, ["experiment", "run", str(bad), "--out", str(tmp_path / "out"), "--quiet"]
    )
    assert result.exit_code == 2
    assert "stages: is empty" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_matrix_expands_to_cells_and_lists_what_does_not_apply():
    data = _data()
    data["agents"].append({"name": "ref", "kind": "fixed", "spec": "uniform"})
    plan = expand(validate_config(data))
    stages = [c.stage for c in plan.cells if c.agent == "tab"]
    # base once, sft per seed, grpo per seed (λ does not enter its reward), sepo and constant per λ point and
    # seed
    assert stages.count("base") == 1 and stages.count("sft") == 2 and stages.count("grpo") == 2
    assert stages.count("sepo") == 4 and stages.count("constant") == 4
    assert [c.stage for c in plan.cells if c.agent == "ref"] == ["base"]
    assert {s["stage"] for s in plan.skipped if s["agent"] == "ref"} == {"sft", "grpo", "sepo", "constant"}
    assert len({c.id for c in plan.cells}) == len(plan.cells)


def test_the_config_hash_changes_with_any_setting():
    a = validate_config(_data())
    b = validate_config(_data(**{"seeds: [0, 1]": "seeds: [0, 2]"}))
    assert a.hash() == validate_config(_data()).hash() and a.hash() != b.hash()


def test_the_real_model_config_starts_from_the_sft_model_folder(tmp_path, monkeypatch):
    """configs/real.yaml names the SFT model made beforehand; without it, one line. With it, the study
    covers the five paper domains: base, payoff-only GRPO, SEPO and the shuffled ablation, three seeds."""
    from pathlib import Path

    from sepo.experiments.config import load_config

    config = Path(__file__).resolve().parents[2] / "configs" / "real.yaml"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        SepoError, match="agents.0..model: model 'runs/smollm2-sft-answer/model': no such folder"
    ):
        load_config(config)
    (tmp_path / "runs/smollm2-sft-answer/model").mkdir(parents=True)
    (tmp_path / "runs/smollm2-sft-answer/model/config.json").write_text("{}")
    cells = expand(load_config(config)[0]).cells
    assert len(cells) == 50 and {c.domain for c in cells} == {
        "kuhn",
        "ipd",
        "auction",
        "negotiation",
        "negotiation-gt",
    }
    assert {c.stage for c in cells} == {"base", "grpo", "sepo", "shuffled"}
    assert sorted({c.seed for c in cells if c.stage != "base"}) == [0, 1, 2] and not any(
        c.needs for c in cells
    )


def test_the_shipped_configs_validate_and_expand():
    from pathlib import Path

    from sepo.experiments.config import load_config
    from sepo.games import domain_names, get_domain

    configs = Path(__file__).resolve().parents[2] / "configs"
    smoke, _ = load_config(configs / "smoke.yaml")
    # the smoke run covers every registered domain, with tabular agents wherever the domain has a tabular
    # training environment
    assert {d.name for d in smoke.domains} == set(domain_names())
    plan = expand(smoke)
    tabular = {c.domain for c in plan.cells if c.agent == "tabular"}
    assert tabular == {n for n in domain_names() if get_domain(n).training is not None}
    assert {c.domain for c in plan.cells if c.agent == "tiny"} == set(domain_names())
    # and the tiny model's SEPO cells wherever the domain has a language-model training environment (every
    # domain now)
    llm_domains = {n for n in domain_names() if get_domain(n).llm_training is not None}
    assert {c.domain for c in plan.cells if c.agent == "tiny" and c.stage == "sepo"} == llm_domains
    assert "ipd" in llm_domains
    llm, _ = load_config(configs / "smoke-llm.yaml")
    assert [c.stage for c in expand(llm).cells] == ["base", "sft", "sepo"]
    assert expand(llm).cells[2].needs == (expand(llm).cells[1].id,)  # SEPO starts from the SFT model
    import yaml

    data = yaml.safe_load((configs / "paper.yaml").read_text())
    # domains still being added are refused by name until registered; the rest must validate now
    data["domains"] = [d for d in data["domains"] if d["name"] in domain_names()]
    paper = validate_config(data, "paper.yaml")
    assert (
        paper.protocol == "paper"
        and paper.training.llm.steps == 100
        and paper.training.checkpoints == [25, 50, 75]
    )


@pytest.mark.parametrize("protocol, top_p, penalty", [("rigorous", 1.0, 1.0), ("paper", 0.95, 1.3)])
def test_language_models_are_audited_and_trained_under_the_protocols_decoding(
    protocol, top_p, penalty, monkeypatch
):
    """Under `paper` the audits and the LLM trainer use the paper's filters (top-p 0.95, top-k 50,
    repetition penalty 1.3) and the trainer charges the paper's terms; the config's temperature and
    token limit stay the config's."""
    import sepo.policies.hf as hf
    from sepo.experiments import execute

    config = validate_config({**_data(), "protocol": protocol})
    decoding = execute.audit_decoding(config)
    assert (decoding.top_p, decoding.repetition_penalty) == (top_p, penalty)
    assert (decoding.temperature, decoding.max_new_tokens) == (
        config.decoding.temperature,
        config.decoding.max_new_tokens,
    )
    built = {}
    monkeypatch.setattr(hf, "HFPolicy", lambda *args, **kwargs: built.update(kwargs))
    execute._hf_policy(config, "model", type("G", (), {"text": None})())
    assert built["decoding"].generation == decoding


def test_decoding_the_config_leaves_out_is_the_protocols():
    """A `paper` experiment without a `decoding` section audits at the paper's temperature 0.8 and 256
    tokens, not at the rigorous defaults (1.0, 48 tokens) under the paper's name."""
    from sepo.experiments import execute

    data = {k: v for k, v in _data().items() if k != "decoding"}
    paper = execute.audit_decoding(validate_config({**data, "protocol": "paper"}))
    assert (paper.temperature, paper.max_new_tokens, paper.top_p) == (0.8, 256, 0.95)
    partly = validate_config({**data, "protocol": "paper", "decoding": {"temperature": 0.5}}).decoding
    assert (partly.temperature, partly.max_new_tokens) == (0.5, 256)
    rigorous = validate_config({**data, "protocol": "rigorous"})
    assert (rigorous.decoding.temperature, rigorous.decoding.max_new_tokens) == (1.0, 48)
    assert (
        rigorous.hash()
        == validate_config({**data, "decoding": {"temperature": 1.0, "max_new_tokens": 48}}).hash()
    )


def test_an_experiment_may_audit_greedily_and_set_the_sampling_filters():
    """An experiment takes temperature 0 (greedy, as in `sepo eval`) and a top-p, top-k and repetition
    penalty; unset, the filters are the protocol's and stay out of the recorded config, so experiments
    run before they existed keep their hash."""
    from sepo.experiments import execute

    data = _data()
    greedy = execute.audit_decoding(validate_config({**data, "decoding": {"temperature": 0}}))
    assert greedy.greedy
    filtered = validate_config({**data, "protocol": "paper", "decoding": {"top_p": 0.5, "top_k": 0}})
    decoding = execute.audit_decoding(filtered)
    assert (decoding.top_p, decoding.top_k, decoding.repetition_penalty, decoding.temperature) == (
        0.5,
        0,
        1.3,
        0.8,
    )
    assert (
        filtered.record()["decoding"]["top_p"] == 0.5
        and "repetition_penalty" not in filtered.record()["decoding"]
    )
    plain = validate_config(data)
    assert not set(plain.record()["decoding"]) & {"top_p", "top_k", "repetition_penalty"}
    assert plain.hash() != validate_config({**data, "decoding": {"top_p": 0.5}}).hash()
    for bad in ({"top_p": 0}, {"top_k": -1}, {"repetition_penalty": 0}, {"temperature": -0.1}):
        with pytest.raises(SepoError, match="decoding"):
            validate_config({**data, "decoding": bad})


def test_a_tabular_agent_is_skipped_with_its_reason_where_the_domain_has_no_tabular_environment():
    """A tabular agent's cells in a domain without a tabular training environment are skipped with the
    reason at planning, not planned and then crashed in the runner. Every shipped domain has one, so
    the test plugs in a domain without one (the test game, its trainer removed)."""
    from dataclasses import replace

    from sepo.games.registry import register, unregister
    from tests.games import pennies

    register(replace(pennies.DOMAIN, name="untrainable-pennies", training=None))
    try:
        data = _data()
        data["domains"][0]["name"] = "untrainable-pennies"
        data["domains"][0].pop("params", None)
        plan = expand(validate_config(data))
    finally:
        unregister("untrainable-pennies")
    assert not [c for c in plan.cells if c.agent == "tab"]
    assert {s["stage"] for s in plan.skipped if s["agent"] == "tab"} == {
        "base",
        "sft",
        "grpo",
        "sepo",
        "constant",
    }
    assert all("no tabular training environment" in s["reason"] for s in plan.skipped if s["agent"] == "tab")


# ------------------------------------------------ every field is checked before anything is written

AGENTS_CONFIG = """
domains: [{name: ipd, params: {rounds: 2, memory: 1}}, {name: kuhn}]
agents:
  - {name: u, kind: fixed, spec: uniform}
  - {name: ref, kind: fixed, spec: "SPEC"}
  - {name: lm, kind: hf, model: MODEL}
stages: [base]
episodes: {validation: 1, test: 1}
replicates: 50
"""


@pytest.mark.parametrize(
    "spec, model, field",
    [
        # an ipd bot, not a kuhn one
        ("bot:TFT", "tiny", "agents[1].spec under domains[1] (kuhn): unknown bot 'TFT' for kuhn"),
        ("uniform", "/nonexistent", "agents[2].model: model '/nonexistent': no such folder"),
        (
            "hf:/nonexistent",
            "tiny",
            "agents[1].spec under domains[0] (ipd): model '/nonexistent': no such folder",
        ),
        ("openai:m@ftp://x", "tiny", "agents[1].spec under domains[0] (ipd): agent 'openai:m@ftp://x'"),
        (
            "uniform",
            "bad..name",
            "agents[2].model: model 'bad..name' is neither a folder nor a Hugging Face Hub id",
        ),
        (
            "uniform",
            "MFILE",
            "agents[2].model: model 'MFILE' is a file, not a model folder; convert a GGUF file first",
        ),
    ],
)
def test_plan_and_run_check_every_agent_before_anything_is_written(tmp_path, spec, model, field):
    """`spec: bot:TFT` under kuhn and `model: /nonexistent` are refused by `experiment plan` and by `run`
    before the folder is written (else the corrected config would be refused as a different one)."""
    config = tmp_path / "bad.yaml"
    if model == "MFILE":  # a GGUF file named as the model is named as a file, not "no such folder"
        (tmp_path / "m.gguf").write_bytes(b"GGUF")
        model, field = str(tmp_path / "m.gguf"), field.replace("MFILE", str(tmp_path / "m.gguf"))
    config.write_text(AGENTS_CONFIG.replace("SPEC", spec).replace("MODEL", model))
    for command in (
        ["experiment", "plan", config],
        ["experiment", "run", config, "--out", tmp_path / "out", "--quiet"],
    ):
        result = CliRunner().invoke(app, [str(a) for a in command])
        assert result.exit_code == 2 and field in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_another_config_names_the_differing_agent_field_by_path(tmp_path):
    config = tmp_path / "good.yaml"
    config.write_text(
        AGENTS_CONFIG.replace("SPEC", "bot:NashApprox")
        .replace("MODEL", "tiny")
        .replace("  - {name: lm, kind: hf, model: tiny}\n", "")
        .replace("domains: [{name: ipd, params: {rounds: 2, memory: 1}}, ", "domains: [")
    )
    out = tmp_path / "out"
    assert (
        CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quiet"]).exit_code
        == 0
    )
    config.write_text(config.read_text().replace("bot:NashApprox", "bot:TightPassive"))
    result = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quiet"])
    assert result.exit_code == 2
    assert "agents[1].spec bot:NashApprox there, bot:TightPassive here" in " ".join(result.output.split()), (
        result.output
    )


def test_the_documented_smoke_cell_count_is_the_plans():
    """The smoke's cell count the docs state is the one `experiment plan` lists."""
    import re
    from pathlib import Path

    from sepo.experiments.config import load_config

    root = Path(__file__).resolve().parents[2]
    documented = re.search(
        r"`configs/smoke.yaml` plans \*\*(\d+) cells\*\*", (root / "docs" / "experiments.md").read_text()
    )
    assert documented, "docs/experiments.md states the smoke's cell count"
    assert int(documented.group(1)) == len(expand(load_config(root / "configs" / "smoke.yaml")[0]).cells)


def test_the_advantage_alignment_stage_is_planned_where_the_environment_gives_advantages():
    data = _data(**{"[base, sft, grpo, sepo, constant]": "[base, grpo, sepo, aa]"})
    data["domains"] = [
        {"name": "ipd", "params": {"rounds": 3, "memory": 1}, "lambdas": {"e": 5.0}},
        {"name": "kuhn"},
    ]
    plan = expand(validate_config(data))
    aa = [c for c in plan.cells if c.stage == "aa"]
    assert [(c.domain, c.seed, c.lambdas) for c in aa] == [
        ("ipd", 0, (0.0, 0.0, 0.0)),
        ("ipd", 1, (0.0, 0.0, 0.0)),
    ]
    assert [s["domain"] for s in plan.skipped if s["stage"] == "aa"] == ["kuhn"]
    assert "advantages" in plan.skipped[0]["reason"]


def _domain_without_the_default_mixture():
    from sepo.games import domain_names, get_domain

    found = [
        n
        for n in domain_names()
        if get_domain(n).training is not None and "paper" not in get_domain(n).demos()
    ]
    if not found:
        pytest.skip("every registered domain has the default demonstration mixture")
    return found[0]


def test_a_domains_demonstration_mixture_is_checked_before_anything_runs():
    """The smoke config once planned, then failed at its first SFT cell of a game without the
    paper's mixture; now validation names the field and the per-domain override."""
    import yaml

    from sepo.games import get_domain

    name = _domain_without_the_default_mixture()
    with pytest.raises(SepoError) as error:
        validate_config(yaml.safe_load(tiny_config(name)))
    assert "sft.mixture" in str(error.value) and "domains[0].sft_mixture" in str(error.value)
    own = next(iter(get_domain(name).demos()))
    text = tiny_config(name).replace("lambdas:", f"sft_mixture: {own}\n    lambdas:", 1)
    config = validate_config(yaml.safe_load(text))
    assert config.domains[0].sft_mixture == own and any(c.stage == "sft" for c in expand(config).cells)
    with pytest.raises(SepoError, match=r"domains\[0\]\.sft_mixture: .* no demonstration mixture nope"):
        validate_config(
            yaml.safe_load(tiny_config(name).replace("lambdas:", "sft_mixture: nope\n    lambdas:", 1))
        )


def test_an_unset_per_domain_mixture_leaves_the_config_hash_as_it_was():
    config = validate_config(_data())
    assert "sft_mixture" not in config.model_dump(mode="json")["domains"][0]


def test_a_setting_added_later_is_recorded_only_when_set():
    """`training.llm.answer_rest` came after experiments were run: at its default it is left out of
    the recorded config and its hash, so those experiments resume; set, it is recorded."""
    config = validate_config(_data())
    assert "answer_rest" not in config.record()["training"]["llm"]
    data = _data()
    data["training"]["llm"] = {"answer_rest": 0.05}
    changed = validate_config(data)
    assert changed.record()["training"]["llm"]["answer_rest"] == 0.05 and changed.hash() != config.hash()


def test_the_audits_read_answer_lines_exactly_only_within_the_configs_answer_rest(monkeypatch):
    """`decoding.answer_rest` is the share of replies an audit's exact read of the answer lines may
    leave to the failure rule: unset, nothing (the recorded config and its hash unchanged); set,
    that share, recorded."""
    import sepo.policies.hf as hf
    from sepo.experiments import execute
    from sepo.policies.text_policy import EXACT_REST

    built = {}
    monkeypatch.setattr(hf, "HFPolicy", lambda *args, **kwargs: built.update(kwargs))
    config = validate_config(_data())
    execute._hf_policy(config, "model", type("G", (), {"text": None})())
    assert built["decoding"].exact_tolerance == EXACT_REST
    assert "answer_rest" not in config.record()["decoding"]
    data = _data()
    data["decoding"] = {**data.get("decoding", {}), "answer_rest": 0.1}
    loose = validate_config(data)
    execute._hf_policy(loose, "model", type("G", (), {"text": None})())
    assert built["decoding"].exact_tolerance == 0.1
    assert loose.record()["decoding"]["answer_rest"] == 0.1 and loose.hash() != config.hash()


def test_checkpoints_need_no_training_cell_to_reach_them_when_there_is_none():
    """A config without training stages keeps its (unused) checkpoints: nothing is dropped there."""
    import yaml

    text = (
        tiny_config()
        .replace("[base, sft, grpo, sepo, constant]", "[base]")
        .replace("checkpoints: [4]", "checkpoints: [40]")
    )
    assert validate_config(yaml.safe_load(text)).training.checkpoints == [40]


def test_a_lambda_whose_term_cannot_act_is_refused_when_the_study_is_planned(tmp_path):
    """Kuhn poker under the rigorous protocol has no collusion event: a study that would train SEPO
    there with λc > 0 is refused at plan time, naming the field, before any cell runs."""
    from sepo.experiments.config import load_config

    config = tmp_path / "study.yaml"
    config.write_text("""name: study
protocol: rigorous
domains:
  - name: kuhn
    lambdas: {e: 1.0, c: 2.4, x: 0.0}
agents:
  - {name: tab, kind: tabular}
stages: [grpo, sepo]
seeds: [0]
episodes: {validation: 2, test: 2}
training: {tabular: {steps: 4, groups: 4, group_size: 2}}
""")
    with pytest.raises(
        SepoError, match=r"domains\[0\]\.lambdas\.c 2\.4 cannot act: collusion does not apply in kuhn"
    ):
        load_config(config)
    config.write_text(config.read_text().replace("c: 2.4", "c: 0.0"))
    assert len(expand(load_config(config)[0]).cells) == 2


def test_final_samples_is_accepted_with_a_warning_that_it_has_no_effect(tmp_path):
    """Cells audit every checkpoint instead of the trainer's final read, so `training.llm.final_samples`
    changes nothing: a config that sets it still plans (it may be resuming), and the plan says so."""
    config = tmp_path / "c.yaml"
    config.write_text(
        "domains: [{name: kuhn}]\nagents: [{name: lm, kind: hf, model: tiny}]\nstages: [sepo]\n"
        "episodes: {validation: 1, test: 1}\nreplicates: 50\n"
        "training: {llm: {steps: 1, groups: 1, group_size: 2, final_samples: 100000}}\n"
    )
    result = CliRunner().invoke(app, ["experiment", "plan", str(config)])
    assert result.exit_code == 0, result.output
    assert "final_samples has no effect" in " ".join(result.output.split())
    (tmp_path / "d.yaml").write_text(config.read_text().replace(", final_samples: 100000", ""))
    quiet = CliRunner().invoke(app, ["experiment", "plan", str(tmp_path / "d.yaml")])
    assert quiet.exit_code == 0 and "final_samples" not in quiet.output, quiet.output
