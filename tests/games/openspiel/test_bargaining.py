"""OpenSpiel's `bargaining` (Lewis et al. 2017) against sepo's negotiation-gt where their instances
coincide (docs/negotiation-gt.md, "OpenSpiel's bargaining, rule by rule").

One fixed instance (pool 2,1,3; values 4,3,3 and 1,1,8), one offer: OpenSpiel's game with
`max_turns=2` is an ultimatum (seat 0 claims a share, seat 1 agrees or counter-offers, and the
game ends without a deal), negotiation-gt with `--rounds 1` one round of simultaneous demands.
Against an agent that claims a fixed share d, the gap maximiser of either game takes the rest
(or forces a breakdown when that leads by more): both gaps are max(0, (pool − d)·w − d·v). Against
a mixed agent they differ: the responder of the ultimatum sees the offer, the simultaneous
demander does not, so OpenSpiel's gap is at least negotiation-gt's.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from sepo.games import load_game  # noqa: E402
from sepo.games.negotiation_gt.deals import DealSolver  # noqa: E402
from sepo.games.openspiel.exact import OpenSpielSolver  # noqa: E402

POOL, AGENT, OPPONENT = (2, 1, 3), (4, 3, 3), (1, 1, 8)


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    instances = tmp_path_factory.mktemp("bargaining") / "one.txt"
    instances.write_text(
        ",".join(map(str, POOL)) + " " + ",".join(map(str, AGENT)) + " " + ",".join(map(str, OPPONENT)) + "\n"
    )
    ultimatum = OpenSpielSolver(load_game(f"openspiel:bargaining(instances_file={instances},max_turns=2)"))
    simultaneous = DealSolver(
        load_game(
            "negotiation-gt", items="2,1,3", values="4,3,3", opponent_values="1,1,8", rounds=1, memory=0
        )
    )
    return ultimatum, simultaneous


def _offers(ultimatum):
    """(the proposer's row, {claimed share: column}) of the ultimatum."""
    (row,) = [r for r in range(len(ultimatum.keys)) if ultimatum.tree.seat[r] == 0]
    names = ultimatum.tree.decisions[row].action_names
    shares = {
        tuple(int(part.split(": ")[1]) for part in name[len("Offer: ") :].split(", ")): c
        for c, name in enumerate(names)
    }
    return row, shares


def _demands(simultaneous):
    names = simultaneous.decisions()[0].action_names
    return {tuple(int(x) for x in name.strip("[]").split(",")): c for c, name in enumerate(names)}


def _gaps(ultimatum, simultaneous, probabilities: dict):
    """The responder's gap against a proposer claiming each share with the given probability, in both
    games."""
    row, shares = _offers(ultimatum)
    table = ultimatum.tree.legal / ultimatum.tree.legal.sum(1, keepdims=True)
    table[row] = 0.0
    for share, p in probabilities.items():
        table[row, shares[share]] = p
    plan = ultimatum.tree.realization(table[None])
    theirs, _ = ultimatum.tree.best_response(plan, ultimatum.gain[1], 1)
    demands = _demands(simultaneous)
    ours = np.zeros((1, simultaneous.width))
    for share, p in probabilities.items():
        ours[0, demands[share]] = p
    return float(theirs[0]), simultaneous.evaluate(ours).value


def test_the_instances_hold_the_same_shares(games):
    ultimatum, simultaneous = games
    assert set(_offers(ultimatum)[1]) == set(_demands(simultaneous))


def test_best_response_values_agree_for_every_fixed_claim(games):
    ultimatum, simultaneous = games
    for share in _demands(simultaneous):
        theirs, ours = _gaps(ultimatum, simultaneous, {share: 1.0})
        expected = max(0.0, float(np.dot(np.subtract(POOL, share), OPPONENT) - np.dot(share, AGENT)))
        assert theirs == pytest.approx(expected, abs=1e-12) and ours == pytest.approx(expected, abs=1e-12), (
            share
        )


def test_a_mixed_claim_is_worth_more_to_the_responder_who_sees_it(games):
    ultimatum, simultaneous = games
    # claim nothing (the rest is worth 27 to the responder) or (2, 1, 0) (worth 11; the rest 24):
    # seeing the claim, take everything or the rest, 0.5·27 + 0.5·(24 − 11) = 20; not seeing it, the
    # best single demand is the balls, 0.5·24 + 0.5·(24 − 11) = 18.5
    theirs, ours = _gaps(ultimatum, simultaneous, {(0, 0, 0): 0.5, (2, 1, 0): 0.5})
    assert theirs == pytest.approx(20.0, abs=1e-12) and ours == pytest.approx(18.5, abs=1e-12)
