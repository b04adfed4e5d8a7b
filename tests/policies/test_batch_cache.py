"""A local model's kept batches: a re-run reads them, an interrupted run resumes with the same numbers."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from sepo.errors import SepoError  # noqa: E402
from sepo.games.kuhn.exact import canonical_decisions  # noqa: E402
from sepo.games.kuhn.rules import INFO_STATES  # noqa: E402
from sepo.games.kuhn.text import KuhnText  # noqa: E402
from sepo.models.tiny import init_tiny_model  # noqa: E402
from sepo.policies.batch_cache import weights_digest  # noqa: E402
from sepo.policies.hf import HFDecoding, HFPolicy  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = init_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, episodes=60)
    return HFPolicy(folder, KuhnText(), device="cpu")


@pytest.fixture(scope="module")
def decisions():
    table = canonical_decisions()
    return [table[key] for key in INFO_STATES]


def _agent(tiny, cache=None, **kwargs):
    """Another sampling agent on the loaded model: at 2 replies a prompt, 4 prompts a batch (12 states: 3
    batches)."""
    return HFPolicy(tiny.model, KuhnText(), tokenizer=tiny.tokenizer, batch_size=8,
                    decoding=HFDecoding(max_new_tokens=12, **kwargs), reply_cache=cache)


def _texts(groups):
    return [[c.text for c in group] for group in groups]


def _prompts(agent, decisions):
    return [agent.prompt_ids(d) for d in decisions]


def test_replies_with_a_cache_equal_those_without_and_a_rerun_reads_every_batch(tiny, decisions, tmp_path):
    plain = _texts(_agent(tiny).generate(_prompts(tiny, decisions), 2, seed=7))
    first = _agent(tiny, tmp_path)
    assert _texts(first.generate(_prompts(tiny, decisions), 2, seed=7)) == plain
    assert first.batch_cache.record()["batches_stored"] == 3  # 12 prompts x 2 replies, 4 prompts a batch

    again = _agent(tiny, tmp_path)
    again._generate_chunk = lambda *a, **k: pytest.fail("a kept batch was generated again")
    assert _texts(again.generate(_prompts(tiny, decisions), 2, seed=7)) == plain
    assert again.batch_cache.record()["batches_read"] == 3
    other_seed = _texts(_agent(tiny).generate(_prompts(tiny, decisions), 2, seed=8))
    assert other_seed != plain  # the seed is part of the key: another seed is not read from the cache


def test_a_run_killed_after_its_first_batch_resumes_with_the_same_replies(tiny, decisions, tmp_path):
    plain = _texts(_agent(tiny).generate(_prompts(tiny, decisions), 2, seed=3))
    killed = _agent(tiny, tmp_path)
    real = killed._generate_chunk
    calls = []

    def die_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    killed._generate_chunk = die_on_the_second
    with pytest.raises(KeyboardInterrupt):
        killed.generate(_prompts(tiny, decisions), 2, seed=3)
    resumed = _agent(tiny, tmp_path)
    assert _texts(resumed.generate(_prompts(tiny, decisions), 2, seed=3)) == plain
    assert resumed.batch_cache.record() | {"path": None} == {
        "path": None,
        "batches_read": 1,
        "batches_stored": 2,
    }


def test_forced_decoding_is_kept_and_read_back(tiny, decisions, tmp_path):
    replies = ["hmm"] * len(decisions)
    expected = _agent(tiny).forced_actions(decisions, replies)
    assert _agent(tiny, tmp_path).forced_actions(decisions, replies) == expected
    again = _agent(tiny, tmp_path)
    again._forced_pass = lambda *a: pytest.fail("kept forced decoding was computed again")
    assert again.forced_actions(decisions, replies) == expected


def test_changed_weights_never_read_another_models_batches(tiny, decisions, tmp_path):
    before = weights_digest(tiny.model)
    _agent(tiny, tmp_path).generate(_prompts(tiny, decisions[:2]), 1, seed=0)
    parameter = next(tiny.model.parameters())
    with torch.no_grad():
        parameter[0, 0] += 1.0
    try:
        assert weights_digest(tiny.model) != before
        changed = _agent(tiny, tmp_path)
        changed.generate(_prompts(tiny, decisions[:2]), 1, seed=0)
        assert changed.batch_cache.record()["batches_read"] == 0
        assert len(list(tmp_path.glob("*.jsonl"))) == 2  # one file per model
    finally:
        with torch.no_grad():
            parameter[0, 0] -= 1.0
    assert weights_digest(tiny.model) == before


def test_a_file_given_as_the_cache_folder_is_refused(tiny, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SepoError, match="is a file, not a folder"):
        _agent(tiny, tmp_path / "f")


def test_eval_with_a_reply_cache_reproduces_its_numbers_from_the_cache(tiny, tmp_path):
    from typer.testing import CliRunner

    from sepo.cli.main import app

    folder = tmp_path / "model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    args = ["eval", "--game", "kuhn", "--agent", f"hf:{folder}", "--episodes", "1", "--temperature", "0",
            "--max-new-tokens", "6", "--reply-cache", str(tmp_path / "cache"), "--quiet", "--json"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    kept_a, kept_b = a.pop("agent_record")["reply_cache"], b.pop("agent_record")["reply_cache"]
    assert a == b
    assert kept_a["batches_stored"] > 0  # (greedy batches asked twice in one run are read the second time)
    assert kept_b == {
        **kept_a,
        "batches_read": kept_a["batches_stored"] + kept_a["batches_read"],
        "batches_stored": 0,
    }


@pytest.mark.parametrize("folder, message", [("DIR", "--reply-cache applies to text agents only"),
                                             (" ", "--reply-cache needs a folder, got an empty name")])
def test_a_reply_cache_for_an_agent_that_is_not_a_model_or_without_a_name_is_refused(
    tmp_path, folder, message
):
    from typer.testing import CliRunner

    from sepo.cli.main import app

    given = str(tmp_path) if folder == "DIR" else folder
    result = CliRunner().invoke(app, ["eval", "--game", "kuhn", "--agent", "uniform", "--reply-cache", given])
    assert result.exit_code != 0
    assert message in result.output


EDITS = {  # name: (how a kept record is changed, whether its checksum is rewritten to match, the warning)
    "a row short": (lambda r: {**r, "rows": r["rows"][:1]}, True, "is not a batch of 4 replies"),
    "a row reversed": (
        lambda r: {**r, "rows": [r["rows"][0][::-1], *r["rows"][1:]]},
        False,
        "its checksum differs",
    ),
    "no checksum (an older sepo)": (
        lambda r: {k: v for k, v in r.items() if k != "check"},
        False,
        "has no checksum",
    ),
    # each of these is dropped with a warning, neither a traceback nor read as it is
    "a short generator state": (
        lambda r: {**r, "generator": {"cpu": "AAAA"}},
        True,
        "is not a batch of 4 replies",
    ),
    "a generator state not base64": (
        lambda r: {**r, "generator": {"cpu": "!!!notbase64"}},
        True,
        "is not a batch",
    ),
    "a negative token id": (
        lambda r: {**r, "rows": [[-5] * len(r["rows"][0]), *r["rows"][1:]]},
        True,
        "is not a batch",
    ),
    "a token id past the vocabulary": (
        lambda r: {**r, "rows": [[999999], *r["rows"][1:]]},
        True,
        "is not a batch",
    ),
    "booleans for tokens": (lambda r: {**r, "rows": [[True], *r["rows"][1:]]}, True, "is not a batch"),
    "a row longer than max_new_tokens": (
        lambda r: {**r, "rows": [r["rows"][0] * 50, *r["rows"][1:]]},
        True,
        "is not a batch",
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_kept_batch_changed_on_disk_is_generated_again_with_a_warning(tiny, decisions, tmp_path, edit):
    from sepo.policies import batch_cache

    change, rewrite_checksum, warning = EDITS[edit]
    expected = _texts(_agent(tiny).generate(_prompts(tiny, decisions[:2]), 2, seed=5))
    _agent(tiny, tmp_path).generate(_prompts(tiny, decisions[:2]), 2, seed=5)
    (file,) = tmp_path.glob("*.jsonl")
    record = change(json.loads(file.read_text()))
    if rewrite_checksum:
        record["check"] = batch_cache._checksum(record)
    file.write_text(json.dumps(record) + "\n")
    edited = _agent(tiny, tmp_path)
    with pytest.warns(UserWarning, match=warning):
        assert _texts(edited.generate(_prompts(tiny, decisions[:2]), 2, seed=5)) == expected
    assert edited.batch_cache.record()["batches_read"] == 0


def test_a_batch_is_read_only_after_the_batches_that_drew_before_it(tiny, decisions, tmp_path):
    """Two calls with one seed whose second batches have the same prompts but whose first batches
    differ: the second call's second batch starts from another generator state, so it is not read."""
    first, second = decisions[:4] + decisions[8:12], decisions[4:8] + decisions[8:12]
    _agent(tiny, tmp_path).generate(_prompts(tiny, first), 2, seed=9)
    expected = _texts(_agent(tiny).generate(_prompts(tiny, second), 2, seed=9))
    other = _agent(tiny, tmp_path)
    assert _texts(other.generate(_prompts(tiny, second), 2, seed=9)) == expected
    assert other.batch_cache.record()["batches_read"] == 0


def test_another_thread_count_is_another_key(tiny, tmp_path):
    """A CPU reduction split over another number of threads can change a logit's last bits."""
    cache = _agent(tiny, tmp_path).batch_cache
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cache.key("generate", {"prompts": [[1, 2]]})
        torch.set_num_threads(2)
        two = cache.key("generate", {"prompts": [[1, 2]]})
    finally:
        torch.set_num_threads(threads)
    assert one != two


def test_exploit_with_a_reply_cache_says_what_it_read(tiny, tmp_path):
    from typer.testing import CliRunner

    from sepo.cli.main import app

    folder = tmp_path / "model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    args = [
        "exploit",
        "--game",
        "kuhn",
        "--agent",
        f"hf:{folder}",
        "--temperature",
        "0",
        "--max-new-tokens",
        "6",
        "--reply-cache",
        str(tmp_path / "cache"),
    ]
    first = CliRunner().invoke(app, [*args, "--json"])
    assert first.exit_code == 0, first.output
    kept = json.loads(first.stdout)["agent_record"]["reply_cache"]
    assert kept["batches_stored"] > 0
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert (
        f"reply cache: {kept['batches_stored'] + kept['batches_read']:,} batches read, 0 generated"
        in second.output
    )


def test_a_model_moved_to_another_path_reads_what_it_kept(tiny, decisions, tmp_path):
    """The cache file is found by the weights' digest, not the model's path, so an interrupted
    experiment folder moved elsewhere (its models with it) reads back what it kept."""
    import shutil

    tiny.model.save_pretrained(tmp_path / "here")
    tiny.tokenizer.save_pretrained(tmp_path / "here")
    kept = tmp_path / "cache"
    first = HFPolicy(tmp_path / "here", KuhnText(), batch_size=8, decoding=HFDecoding(max_new_tokens=12),
                     reply_cache=kept)
    expected = _texts(first.generate(_prompts(first, decisions), 2, seed=4))
    shutil.move(tmp_path / "here", tmp_path / "there")
    moved = HFPolicy(tmp_path / "there", KuhnText(), batch_size=8, decoding=HFDecoding(max_new_tokens=12),
                     reply_cache=kept)
    assert _texts(moved.generate(_prompts(moved, decisions), 2, seed=4)) == expected
    assert (
        moved.batch_cache.record()["batches_read"] == 3 and moved.batch_cache.record()["batches_stored"] == 0
    )
    assert len(list(kept.glob("*.jsonl"))) == 1
