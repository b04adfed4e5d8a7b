"""The repeated-game DP against closed forms, OpenSpiel's best response, brute force and finite
differences."""

import itertools

import numpy as np
import pytest

from sepo.metrics.repeated import StageGame, play_value, read_agent, solve, state_tree

PD = StageGame([[3, 0], [5, 1]], [[3, 5], [0, 1]])  # agent action C=0 / D=1 by row, opponent by column


def reader(rule):
    """A reader from a rule (t, history) -> P(action) vector."""
    return lambda queries: np.array([rule(t, h) for t, h in queries], dtype=float)


def tft(t, h):
    return [1.0, 0.0] if not h or h[-1][1] == 0 else [0.0, 1.0]


def grim(t, h):
    return [1.0, 0.0] if all(o == 0 for _, o in h) else [0.0, 1.0]


def always(action):
    return lambda t, h: [1.0 - action, float(action)]


def random_history_policy(seed, n_actions=2):
    """A stochastic policy with an independent random distribution at every history."""
    def rule(t, h):
        rng = np.random.default_rng([seed, t, *[a * 10 + o for a, o in h]])
        return rng.dirichlet(np.ones(n_actions))
    return rule


@pytest.mark.parametrize(
    "rule, gap, br", [(always(1), 0.0, 1.0), (always(0), 5.0, 5.0), (tft, 0.625, 3.25), (grim, 0.625, 3.25)]
)
def test_paper_closed_forms_eight_rounds(rule, gap, br):
    result = solve(read_agent(PD, 8, reader(rule)))
    assert result.gap == pytest.approx(gap, abs=1e-12)
    assert result.br_payoff == pytest.approx(br, abs=1e-12)
    assert result.gap_bound == 0.0


def _brute_force(stage, rounds, rule, objective):
    """max over every deterministic opponent strategy (a function of the full history), by enumeration."""
    n_a, n_o = stage.shape
    histories = [
        h
        for t in range(rounds)
        for h in itertools.product(itertools.product(range(n_a), range(n_o)), repeat=t)
    ]
    best = -np.inf
    for actions in itertools.product(range(n_o), repeat=len(histories)):
        sigma = dict(zip(histories, actions))
        def value(h):
            if len(h) == rounds:
                return 0.0
            o, p = sigma[h], np.asarray(rule(len(h), h))
            return sum(p[a] * (objective[a, o] + value(h + ((a, o),))) for a in range(n_a))
        best = max(best, value(()))
    return best / rounds


def test_matches_brute_force_over_all_opponent_strategies():
    rule = random_history_policy(3)
    result = solve(read_agent(PD, 2, reader(rule)))
    assert result.gap == pytest.approx(_brute_force(PD, 2, rule, PD.opponent - PD.agent), abs=1e-12)
    assert result.br_payoff == pytest.approx(_brute_force(PD, 2, rule, PD.opponent), abs=1e-12)


def _openspiel_br_value(stage, rounds, rule, opponent_payoff):
    """OpenSpiel's best-response value of player 1 on the turn-based repeated matrix game."""
    pyspiel = pytest.importorskip("pyspiel")
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import best_response

    n_a, n_o = stage.shape
    matrix = pyspiel.create_matrix_game(
        "stage",
        "stage",
        [str(a) for a in range(n_a)],
        [str(o) for o in range(n_o)],
        stage.agent.tolist(),
        np.asarray(opponent_payoff).tolist(),
    )
    game = pyspiel.convert_to_turn_based(
        pyspiel.create_repeated_game(matrix, {"num_repetitions": rounds, "recall": rounds})
    )

    class Agent(os_policy.Policy):
        def __init__(self):
            super().__init__(game, [0, 1])

        def action_probabilities(self, state, player_id=None):
            actions = state.history()
            history = tuple((actions[i], actions[i + 1]) for i in range(0, len(actions) - 1, 2))
            return dict(enumerate(np.asarray(rule(len(history), history), dtype=float)))

    return best_response.BestResponsePolicy(game, 1, Agent()).value(game.new_initial_state()) / rounds


POLICIES = {
    "tft": tft,
    "grim": grim,
    "random0": random_history_policy(0),
    "random1": random_history_policy(1),
    "alternate": lambda t, h: [float(t % 2), 1.0 - t % 2],
    "mixed": lambda t, h: [0.3, 0.7],
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_best_response_payoff_and_gap_equal_openspiel(name):
    rule, rounds = POLICIES[name], 4
    result = solve(read_agent(PD, rounds, reader(rule)))
    assert result.br_payoff == pytest.approx(_openspiel_br_value(PD, rounds, rule, PD.opponent), abs=1e-9)
    assert result.gap == pytest.approx(
        _openspiel_br_value(PD, rounds, rule, PD.opponent - PD.agent), abs=1e-9
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_eight_round_values_equal_openspiel(name):
    rule = POLICIES[name]
    result = solve(read_agent(PD, 8, reader(rule)))
    assert result.br_payoff == pytest.approx(_openspiel_br_value(PD, 8, rule, PD.opponent), abs=1e-9)


def test_general_stage_games_with_three_agent_actions_equal_openspiel():
    rng = np.random.default_rng(7)
    stage = StageGame(rng.integers(-3, 6, (3, 2)), rng.integers(-3, 6, (3, 2)))
    rule = random_history_policy(11, n_actions=3)
    result = solve(read_agent(stage, 3, reader(rule)))
    assert result.br_payoff == pytest.approx(_openspiel_br_value(stage, 3, rule, stage.opponent), abs=1e-9)
    assert result.gap == pytest.approx(
        _openspiel_br_value(stage, 3, rule, stage.opponent - stage.agent), abs=1e-9
    )


def test_memory_states_equal_the_full_tree_for_a_memory_policy():
    def memory2(t, h):
        key = [a * 2 + o for a, o in h[-2:]]
        return np.random.default_rng([5, t >= 2, len(h[-2:]), *key]).dirichlet([1, 1])
    full = solve(read_agent(PD, 7, reader(memory2)))
    small = solve(read_agent(PD, 7, reader(memory2), memory=2))
    assert small.states < full.states / 50
    for field in ("gap", "br_payoff", "br_agent_payoff", "gap_agent_payoff"):
        assert getattr(small, field) == pytest.approx(getattr(full, field), abs=1e-12)


def test_pruning_error_stays_within_the_reported_bound():
    rule = random_history_policy(2)
    exact = solve(read_agent(PD, 6, reader(rule)))
    for threshold in (1e-3, 1e-2, 5e-2):
        pruned = solve(read_agent(PD, 6, reader(rule), threshold=threshold))
        assert pruned.states < exact.states
        assert pruned.gap_bound > 0
        assert abs(pruned.gap - exact.gap) <= pruned.gap_bound + 1e-12
        assert abs(pruned.br_payoff - exact.br_payoff) <= pruned.br_bound + 1e-12


def test_the_gap_maximiser_achieves_the_gap_when_it_plays():
    rule = random_history_policy(4)
    tree = read_agent(PD, 5, reader(rule))
    result = solve(tree)
    achieved = play_value(tree, result.gap_table, PD.opponent) - play_value(tree, result.gap_table, PD.agent)
    assert achieved == pytest.approx(result.gap, abs=1e-12)
    assert result.gap_opponent_payoff - result.gap_agent_payoff == pytest.approx(result.gap, abs=1e-12)
    assert play_value(tree, result.br_table, PD.opponent) == pytest.approx(result.br_payoff, abs=1e-12)


def test_gradient_is_the_derivative_with_the_maximiser_fixed():
    rule = random_history_policy(9)
    rounds = 4
    base = read_agent(PD, rounds, reader(rule))
    result = solve(base)
    rng = np.random.default_rng(0)
    direction = [rng.normal(size=level.probs.shape) for level in base.levels]
    direction = [d - d.mean(1, keepdims=True) for d in direction]  # stays on the simplex
    analytic = sum(float((g * d).sum()) for g, d in zip(result.gradient, direction))
    eps = 1e-6
    values = []
    for sign in (1, -1):
        probs = np.concatenate([level.probs + sign * eps * d for level, d in zip(base.levels, direction)])
        tree = read_agent(PD, rounds, lambda q, p=probs: p)
        values.append(play_value(tree, result.gap_table, PD.opponent - PD.agent))
    assert analytic == pytest.approx((values[0] - values[1]) / (2 * eps), rel=1e-6, abs=1e-9)
    # Danskin: with a unique maximiser the gap itself moves the same way
    probs = np.concatenate([level.probs + eps * d for level, d in zip(base.levels, direction)])
    moved = solve(read_agent(PD, rounds, lambda q: probs)).gap
    assert (moved - result.gap) / eps == pytest.approx(analytic, rel=1e-4, abs=1e-7)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="rounds"):
        read_agent(PD, 0, reader(tft))
    with pytest.raises(ValueError, match="shape"):
        read_agent(PD, 2, lambda q: np.ones((len(q), 3)) / 3)
    with pytest.raises(ValueError, match="sum to 1"):
        read_agent(PD, 2, lambda q: np.ones((len(q), 2)))
    with pytest.raises(ValueError, match="full history"):
        read_agent(PD, 4, reader(tft), memory=1, threshold=0.01)


def _grim(history):
    return any(o == 1 for _, o in history)


def _grim_reader(queries):
    return np.array([[0.0, 1.0] if _grim(h) else [1.0, 0.0] for _, h in queries])


@pytest.mark.parametrize("state_of, reader, closed_form", [
    # uniform: defect each round, (5+1)/2 - (0+1)/2
    (lambda h: (), lambda queries: np.full((len(queries), 2), 0.5), lambda T: 2.5),
    # Grim Trigger: defect first, then mutual defection
    (_grim, _grim_reader, lambda T: (5 + (T - 1) * 1 - (0 + (T - 1) * 1)) / T),
])
def test_declared_state_rows_are_linear_in_the_rounds(state_of, reader, closed_form):
    """A declared small state keys the best response by (round, state): 1,000 rounds give at most
    2 rows a round, none carrying a history, and the value matches the closed form and the whole tree."""
    result = solve(state_tree(PD, 1000, reader, state_of))
    rows = result.br_table.to_json()
    assert len(rows) <= 2 * 1000 and all("history" not in row for row in rows)
    assert max(len(repr(row)) for row in rows) < 80
    assert result.gap == pytest.approx(closed_form(1000))
    assert result.gap_table.action(999, ((0, 1),) * 999) == 1
    small = solve(state_tree(PD, 5, reader, state_of))
    whole = solve(read_agent(PD, 5, reader))
    assert small.gap == pytest.approx(whole.gap) and small.br_payoff == pytest.approx(whole.br_payoff)


def test_a_memory_tree_too_big_names_the_largest_memory_that_fits(monkeypatch):
    """Someone who gave --memory M is told which smaller M fits, not to "give --memory M"."""
    from sepo.errors import SepoError
    from sepo.metrics import repeated

    stage = StageGame(np.zeros((15, 15)), np.zeros((15, 15)))
    monkeypatch.setattr(repeated, "memory_budget", lambda: repeated._memory_need(stage, 10, 2, False))
    with pytest.raises(SepoError) as error:
        repeated.check_tree_fits(stage, 10, memory=3)
    assert "--memory 3 keeps too many; give --memory 2 or less, or fewer --rounds" in str(error.value)
    assert "give --memory M" not in str(error.value)


def test_state_tree_counts_progress_in_history_rounds():
    """Reading round t builds decisions of t rounds of history: progress counted per round gave an
    ETA that grew as the rounds got longer (13 -> 24 minutes in 90 s at 10,000 rounds)."""
    from sepo import progress

    class Recorder(progress.Reporter):
        def add_task(self, description, total=None, **kwargs):
            self.total, self.done = total, 0
            return 1

        def update(self, task, *, advance=None, **kwargs):
            self.done += advance or 0

    stage = StageGame(np.array([[3.0, 0.0], [5.0, 1.0]]), np.array([[3.0, 5.0], [0.0, 1.0]]))
    with Recorder() as recorder:
        state_tree(
            stage, 6, lambda queries: np.tile([0.5, 0.5], (len(queries), 1)), lambda history: len(history)
        )
    assert recorder.total == recorder.done == 6 * 7 // 2
