"""Tabular policies: JSON round trip and strict validation of tabular FILE.json."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.kuhn import exact as kuhn_exact
from sepo.games.kuhn.rules import DEALS, INFO_STATES, KuhnPoker
from sepo.policies.tabular import TabularPolicy, softmax, table_from_mapping


def valid_mapping():
    rng = np.random.default_rng(5)
    table = rng.dirichlet([1.0, 1.0], size=12)
    return {key: [float(p) for p in row] for key, row in zip(INFO_STATES, table)}


def write(tmp_path, data, name="policy.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_json_round_trip(tmp_path):
    table = np.random.default_rng(1).dirichlet([0.5, 0.5], size=12)
    table[3] = [0.0, 1.0]
    policy = TabularPolicy(table, INFO_STATES)
    path = tmp_path / "policy.json"
    policy.save(path)
    data = json.loads(path.read_text())
    assert list(data["policy"]) == list(INFO_STATES)
    assert all(len(row) <= 2 for row in data["policy"].values())
    loaded = TabularPolicy.load(path, INFO_STATES, 2)
    assert loaded.keys == INFO_STATES
    assert np.array_equal(loaded.table, table)
    assert list(loaded.to_json()) == list(policy.to_json())
    assert kuhn_exact.exploitability(loaded.table) == pytest.approx(
        kuhn_exact.exploitability(table), abs=1e-14
    )
    assert "policy.json" in loaded.name


def test_loaded_policy_acts_by_information_state(tmp_path):
    data = valid_mapping()
    data["2pb"] = [0.25, 0.75]
    policy = TabularPolicy.load(write(tmp_path, data), INFO_STATES, 2)
    state = KuhnPoker(hands=1).new_initial_state()
    state.apply_action(DEALS.index((2, 0)))
    state.apply_action(0)
    state.apply_action(1)
    decision = state.decision(state.current_player())
    assert decision.info_key == "2pb"
    assert policy.action_probabilities(decision) == pytest.approx({0: 0.25, 1: 0.75})


def test_from_logits_is_softmax():
    logits = np.random.default_rng(2).normal(size=(12, 2))
    policy = TabularPolicy.from_logits(logits, INFO_STATES)
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert np.allclose(policy.table, expected, atol=1e-15)
    assert np.allclose(softmax(np.array([[1000.0, 0.0]])), [[1.0, 0.0]])  # no overflow


def test_probabilities_within_tolerance_are_accepted_and_renormalised():
    data = valid_mapping()
    data["1p"] = [0.3, 0.7 + 5e-7]
    table = table_from_mapping(data, INFO_STATES)
    assert table[INFO_STATES.index("1p")].sum() == pytest.approx(1.0, abs=1e-15)
    data["1p"] = [0, 1]  # integers are numbers
    assert table_from_mapping(data, INFO_STATES)[INFO_STATES.index("1p")].tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    "mutate,named",
    [
        (lambda d: d.update({"3": [0.5, 0.5]}), "'3'"),              # unknown key
        (lambda d: d.update({"0x": [0.5, 0.5]}), "'0x'"),            # unknown key
        (lambda d: d.pop("2pb"), "'2pb'"),                           # missing key
        (lambda d: d.update({"1b": [-0.1, 1.1]}), "'1b'"),           # negative
        (lambda d: d.update({"0p": [0.6, 0.6]}), "'0p'"),            # rows not summing to 1
        (lambda d: d.update({"0p": [0.2, 0.2]}), "'0p'"),            # rows not summing to 1
        (lambda d: d.update({"1": ["a", 0.5]}), "'1'"),              # non-numeric
        (lambda d: d.update({"1": "0.5,0.5"}), "'1'"),               # a string, not a list
        (lambda d: d.update({"2": None}), "'2'"),                    # null
        (lambda d: d.update({"2": [True, False]}), "'2'"),           # booleans are not numbers
        (lambda d: d.update({"2": [[0.5], [0.5]]}), "'2'"),          # nested
        (lambda d: d.update({"0b": []}), "'0b'"),                    # empty
    ],
    ids=["unknown-3", "unknown-0x", "missing", "negative", "sum>1", "sum<1", "non-numeric", "string",
         "null", "bool", "nested", "empty"],
)
def test_bad_mappings_raise_sepo_error_naming_the_key(tmp_path, mutate, named):
    data = valid_mapping()
    mutate(data)
    with pytest.raises(SepoError) as info:
        TabularPolicy.load(write(tmp_path, data), INFO_STATES, 2)
    message = str(info.value)
    assert named in message
    assert "policy.json" in message
    assert "\n" not in message


def test_non_finite_probability_raises_naming_the_key(tmp_path):
    data = valid_mapping()
    data["1pb"] = [float("nan"), 1.0]
    with pytest.raises(SepoError, match="'1pb'"):
        TabularPolicy.load(write(tmp_path, json.dumps(data)))  # json.dumps writes NaN
    data["1pb"] = [float("inf"), 0.0]
    with pytest.raises(SepoError, match="'1pb'"):
        table_from_mapping(data, INFO_STATES)


def test_rows_of_different_lengths_raise_naming_the_key():
    data = valid_mapping()
    data["2p"] = [0.2, 0.3, 0.5]
    with pytest.raises(SepoError, match="'2p'"):
        table_from_mapping(data, INFO_STATES)


@pytest.mark.parametrize("row", [[0.5, 0.25, 0.25], [1.0]])
def test_kuhn_rows_must_have_exactly_two_probabilities(tmp_path, row):
    data = {key: row for key in INFO_STATES}
    with pytest.raises(SepoError, match="'0'"):
        TabularPolicy.load(write(tmp_path, data), INFO_STATES, 2)


@pytest.mark.parametrize(
    "text", ["{", "not json", '{"0": [0.5, 0.5],}', ""], ids=["truncated", "words", "trailing-comma", "empty"]
)
def test_malformed_json_raises_sepo_error_naming_the_file(tmp_path, text):
    with pytest.raises(SepoError) as info:
        TabularPolicy.load(write(tmp_path, text, name="broken.json"), INFO_STATES, 2)
    assert "broken.json" in str(info.value)


@pytest.mark.parametrize("data", [[[0.5, 0.5]] * 12, "a string", 3, None])
def test_top_level_must_be_an_object(tmp_path, data):
    with pytest.raises(SepoError, match="object"):
        TabularPolicy.load(write(tmp_path, json.dumps(data)))


def test_missing_file_raises_sepo_error(tmp_path):
    with pytest.raises(SepoError, match="missing.json"):
        TabularPolicy.load(tmp_path / "missing.json", INFO_STATES, 2)


def test_unknown_information_state_at_play_time_raises():
    from sepo.games.base import Decision

    policy = TabularPolicy(np.full((12, 2), 0.5), INFO_STATES)
    decision = Decision(
        game="kuhn", player=0, info_key="9pp", legal_actions=(0, 1), action_names=("PASS", "BET")
    )
    with pytest.raises(SepoError, match="9pp"):
        policy.action_probabilities(decision)


def _mixed_table(rng, states=40, width=4):
    """Rows of every kind the compact form writes: uniform over a prefix, padded, deterministic,
    zeros inside, and softmax rows whose sums are 1 only to rounding."""
    table = np.zeros((states, width))
    for row in range(states):
        legal = 1 + row % width
        kind = row % 5
        if kind == 0:
            table[row, :legal] = 1.0 / legal
        elif kind == 1:
            table[row, rng.integers(legal)] = 1.0
        elif kind == 2 and legal > 2:
            table[row, [0, legal - 1]] = 0.5
        else:
            table[row, :legal] = softmax(rng.normal(size=legal))
    return table


def test_compact_round_trip_is_exact(tmp_path):
    keys = tuple(f"state {i}" for i in range(40))
    table = _mixed_table(np.random.default_rng(7))
    path = tmp_path / "policy.json"
    TabularPolicy(table, keys).save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "sepo-tabular/2" and data["actions"] == 4 and list(data["policy"]) == list(keys)
    assert data["policy"]["state 0"] == 1 and data["policy"]["state 5"] == 2  # uniform rows are their width
    for loaded in (TabularPolicy.load(path), TabularPolicy.load(path, keys, 4)):
        assert loaded.keys == keys
        assert np.array_equal(loaded.table, table)  # bit for bit


def test_compact_policy_acts_like_the_saved_one(tmp_path):
    table = np.random.default_rng(1).dirichlet([0.5, 0.5], size=12)
    table[[0, 5]] = 0.5
    table[3] = [1.0, 0.0]
    path = tmp_path / "policy.json"
    TabularPolicy(table, INFO_STATES).save(path)
    loaded = TabularPolicy.load(path, INFO_STATES, 2)
    assert np.array_equal(loaded.table, table)
    assert kuhn_exact.exploitability(loaded.table) == kuhn_exact.exploitability(table)
    assert loaded.to_json() == TabularPolicy(table, INFO_STATES).to_json()


def test_dense_files_of_earlier_versions_still_load(tmp_path):
    keys = tuple(f"state {i}" for i in range(40))
    table = _mixed_table(np.random.default_rng(8))
    path = write(tmp_path, json.dumps(TabularPolicy(table, keys).to_json(), indent=1))  # the old `save`
    assert np.array_equal(TabularPolicy.load(path).table, table)
    with_format_key = {"format": [0.5, 0.5], **{key: [0.5, 0.5] for key in INFO_STATES[1:]}}
    assert TabularPolicy.load(write(tmp_path, with_format_key)).keys[0] == "format"  # a state named "format"


def test_a_compact_file_without_its_format_says_so(tmp_path):
    """It is not read as a plain mapping (and refused for its 'actions' key's value)."""
    with pytest.raises(SepoError, match="unknown tabular policy format None"):
        TabularPolicy.load(write(tmp_path, {"actions": 2, "policy": {"0": 2}}))


@pytest.mark.parametrize(
    "change,named",
    [
        ({"format": "sepo-tabular/9"}, "sepo-tabular/9"),
        ({"actions": 0}, "'actions'"),
        ({"actions": True}, "'actions'"),
        ({"policy": []}, "'policy'"),
        ({"policy": {"0": 3}}, "'0'"),  # uniform over more columns than the table has
        ({"policy": {"0": 0}}, "'0'"),
        ({"policy": {"0": [0.2, 0.3, 0.5]}}, "'0' has 3 probabilities, more than the header's \"actions\" 2"),
        ({"policy": {"0": [0.5]}}, "'0'"),  # padded with 0: sums to 0.5
        ({"policy": {"0": True}}, "'0'"),
        ({"actions": 10**12}, "memory budget"),  # a few bytes would pad every row to a terabyte
        ({"actions": 10**400}, "about 10^400"),
        ({"policy": {"0": [1, 10**400]}}, "'0'"),  # an integer no float holds
    ],
    ids=[
        "format",
        "actions-0",
        "actions-bool",
        "policy-list",
        "uniform-wide",
        "uniform-0",
        "long",
        "short-sum",
        "bool",
        "actions-huge",
        "actions-enormous",
        "row-enormous",
    ],
)
def test_bad_compact_files_raise_sepo_error(tmp_path, change, named):
    data = {"format": "sepo-tabular/2", "actions": 2, "policy": {"0": 2}}
    if isinstance(change.get("policy"), dict):
        change = {"policy": {**data["policy"], **change["policy"]}}
    with pytest.raises(SepoError) as info:
        TabularPolicy.load(write(tmp_path, {**data, **change}))
    assert named in str(info.value) and "\n" not in str(info.value)


def _leduc_table_file(tmp_path, move_first_row: bool):
    """A compact Leduc table written the way training writes it (uniform over each decision's
    legal actions), the first row's mass moved to a column its decision does not have."""
    from sepo.games import load_game
    from sepo.metrics.exact import keys_of, solver_for

    game = load_game("openspiel:leduc_poker", "rigorous")
    decisions = solver_for(game).decisions()
    rows = {d.info_key: len(d.legal_actions) for d in decisions}
    assert rows[decisions[0].info_key] == 2  # the opening decision: call or raise
    if move_first_row:
        rows[decisions[0].info_key] = [0.0, 0.0, 1.0]
    path = write(tmp_path, {"format": "sepo-tabular/2", "actions": 3, "policy": rows})
    return game, decisions, keys_of, path


@pytest.mark.parametrize("kind", ["tabular", "run"])
def test_mass_outside_a_decisions_legal_actions_is_refused(tmp_path, kind):
    """A solver reads only a decision's legal columns: a row whose mass lies beyond them was read
    as a distribution summing to 0 and audited into a silently wrong 'exact' number."""
    from sepo.policies.specs import load_agent

    game, decisions, _, path = _leduc_table_file(tmp_path, move_first_row=True)
    spec = f"tabular:{path}" if kind == "tabular" else f"run:{tmp_path}"
    with pytest.raises(SepoError, match="beyond its 2 legal actions") as info:
        load_agent(spec, game)
    assert "\n" not in str(info.value)


def test_a_table_narrower_than_a_decisions_legal_actions_is_refused(tmp_path):
    from sepo.policies.specs import load_agent

    game, decisions, _, _ = _leduc_table_file(tmp_path, move_first_row=False)
    write(tmp_path, {"format": "sepo-tabular/2", "actions": 2, "policy": {d.info_key: 2 for d in decisions}})
    with pytest.raises(SepoError, match="3 legal actions; the table has 2 columns"):
        load_agent(f"run:{tmp_path}", game)


def test_a_run_table_wider_than_the_game_is_cut_to_its_legal_actions(tmp_path):
    """Kuhn has two actions; a third column of zeros is dropped (the solver reads two), one with
    mass is refused in one line instead of the solver's traceback."""
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    game = load_game("kuhn", "rigorous")
    write(tmp_path, {"format": "sepo-tabular/2", "actions": 3, "policy": {key: 2 for key in INFO_STATES}})
    assert load_agent(f"run:{tmp_path}", game).table.shape == (12, 2)
    write(
        tmp_path,
        {
            "format": "sepo-tabular/2",
            "actions": 3,
            "policy": {**{key: 2 for key in INFO_STATES}, "0": [0, 0, 1]},
        },
    )
    with pytest.raises(SepoError, match="'0' puts probability 1 on columns beyond its 2 legal actions"):
        load_agent(f"run:{tmp_path}", game)


def test_a_tabular_file_wider_than_the_game_is_read_at_its_declared_width(tmp_path):
    """`tabular:` reads a compact file at its header's "actions", as `run:` does: rows of two
    under "actions": 3 are the game's two columns, not rows of three that blame a key."""
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    game = load_game("kuhn", "rigorous")
    rows = {key: [0.25, 0.75] for key in INFO_STATES}
    path = write(tmp_path, {"format": "sepo-tabular/2", "actions": 3, "policy": rows}, name="wide.json")
    policy = load_agent(f"tabular:{path}", game)
    assert policy.table.shape == (12, 2) and np.allclose(policy.table, [0.25, 0.75])
    rows["0"] = [0.0, 0.0, 1.0]
    write(tmp_path, {"format": "sepo-tabular/2", "actions": 3, "policy": rows}, name="wide.json")
    with pytest.raises(SepoError, match="'0' puts probability 1 on columns beyond its 2 legal actions"):
        load_agent(f"tabular:{path}", game)


def test_a_well_formed_leduc_table_loads_unchanged(tmp_path):
    from sepo.policies.specs import load_agent

    game, decisions, keys_of, path = _leduc_table_file(tmp_path, move_first_row=False)
    for spec in (f"tabular:{path}", f"run:{tmp_path}"):
        policy = load_agent(spec, game)
        assert policy.keys == keys_of(decisions) and policy.table.shape == (936, 3)
        assert all(policy.table[i, : len(d.legal_actions)].sum() == 1.0 for i, d in enumerate(decisions))
