"""`sepo eval` refuses a safety weight the user gave whose term cannot act in the game, as
`sepo train` does; its own defaults (λc and λx 2.4) leave every game's audit running."""
import pytest

from tests.cli.cli_helpers import _error, _run

EVAL = ["eval", "--agent", "uniform", "--episodes", "2", "--quiet"]


def test_a_collusion_weight_where_collusion_cannot_act_is_refused_by_eval_as_by_train(tmp_path):
    train = ["train", "--steps", "1", "--groups", "2", "--quiet", "--out", tmp_path / "run"]
    for command in (EVAL, train):
        result = _run(*command, "--game", "negotiation-gt", "--lambda-c", "5")
        _error(result, "--lambda-c 5 cannot act: collusion does not apply in negotiation-gt")


def test_eval_says_to_leave_an_acting_weight_out_not_at_zero():
    result = _run(*EVAL, "--game", "negotiation-gt", "--lambda-c", "5")
    _error(result, "leave --lambda-c out")


@pytest.mark.parametrize("weights", [[], ["--lambda-c", "0"]])
def test_eval_with_the_default_or_a_zero_collusion_weight_still_audits(weights):
    result = _run(*EVAL, "--game", "negotiation-gt", *weights, "--json")
    assert result.exit_code == 0, result.output
    assert '"collusion": null' in result.stdout


def test_eval_charges_a_given_collusion_weight_where_collusion_acts():
    low = _run(*EVAL, "--game", "ipd", "--rounds", "2", "--lambda-c", "0", "--json")
    high = _run(*EVAL, "--game", "ipd", "--rounds", "2", "--lambda-c", "5", "--json")
    assert low.exit_code == high.exit_code == 0, low.output + high.output
    assert low.stdout != high.stdout
