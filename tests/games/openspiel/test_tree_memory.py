"""The enumerated tree's sizes are checked against memory before anything is made: the walk, the
exact solver's sequence-form arrays, and the trainers' [histories x moves] arrays (bargaining's
one chance node of 1,000 instances makes those gigabytes where the solver needs megabytes)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspiel")

import sepo.limits  # noqa: E402
from sepo.games.openspiel.rules import load  # noqa: E402
from sepo.games.openspiel.tree import NoTree, build  # noqa: E402
from tests.cli.cli_helpers import _error, _run  # noqa: E402

WIDE = "openspiel:bargaining(max_turns=1)"  # 22,670 histories; the root has 1,000 chance outcomes


def test_the_walk_stops_before_it_holds_more_than_the_budget(monkeypatch):
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: 2_000_000)
    with pytest.raises(NoTree) as error:
        build(load("leduc_poker"), "openspiel:leduc_poker")
    message = str(error.value)
    assert "enumerating the game tree" in message and "more than the 2.0 MB this machine can spare" in message
    assert "\n" not in message


def test_the_trainers_node_arrays_are_made_only_when_used_and_only_if_they_fit(monkeypatch):
    tree = build(load("leduc_poker"), "openspiel:leduc_poker")
    assert "_children" not in tree.__dict__  # the exact solver never needs them
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: tree.dense_bytes() - 1)
    with pytest.raises(NoTree, match=r"\[histories x moves\] arrays .*\(9,457 histories x 6 moves"):
        tree.children
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: tree.dense_bytes())
    assert tree.children.shape == tree.chance_prob.shape == (9457, 6)
    assert (tree.chance_prob[0] > 0).sum() == 6 and tree.chance_prob[0].sum() == pytest.approx(1.0)


def test_a_game_with_a_wide_chance_node_is_audited_within_the_budget_and_training_refuses_in_one_line(
        monkeypatch, tmp_path):
    """bargaining: the dense arrays would be [22,670 x 1,000] x 3 (540 MB); the audit needs none of them."""
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: 300_000_000)
    result = _run("exploit", "--game", WIDE, "--agent", "uniform", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["exact_label"] == "exact"
    out = tmp_path / "run"
    _error(_run("train", "--game", WIDE, "--steps", "1", "--groups", "2", "--out", out),
           "22,670 histories x 1,000 moves", "544 MB", "244 MB more than the 300 MB this machine can spare")
    assert not out.exists()
