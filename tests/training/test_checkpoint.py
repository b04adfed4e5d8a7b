"""Resuming a trainer from a checkpoint is quiet about the tied weights it never stores (no
"missing keys ['lm_head.weight']" on every SFT resume of the tiny model), and still warns about
any other missing key. A run's metrics log, cut back to its checkpoint, keeps one line a step."""
import json
import logging

import pytest

transformers = pytest.importorskip("transformers")

from sepo.training.checkpoint import MetricsLog, quiet_tied_weights, tied_keys  # noqa: E402


def _model(tie: bool):
    config = transformers.Qwen2Config(
        vocab_size=32,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        intermediate_size=16,
        tie_word_embeddings=tie,
    )
    return transformers.Qwen2ForCausalLM(config)


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("tie, missing, shown", [
    (True, ["lm_head.weight"], False),
    (True, ["lm_head.weight", "model.norm.weight"], True),
    (False, ["lm_head.weight"], True),
])
def test_only_tied_weights_are_not_warned_about(tie, missing, shown):
    model = _model(tie)
    assert tied_keys(model) == ({"lm_head.weight"} if tie else set())
    logger = logging.getLogger("transformers.trainer")
    kept = _Kept()
    logger.addHandler(kept)
    try:
        with quiet_tied_weights(model):
            logger.warning(f"There were missing keys in the checkpoint model loaded: {missing}.")
            logger.warning("something else")
    finally:
        logger.removeHandler(kept)
    assert ("something else" in kept.messages) and (len(kept.messages) == 2) == shown


def test_a_log_cut_back_to_its_checkpoint_keeps_the_first_line_of_each_step(tmp_path):
    """A language-model run logged before the fix wrote its last step twice (the step, then TRL's
    end-of-training summary): extending it kept both lines."""
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 2, "train_runtime": 9.0},
             {"step": 2, "final": True}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert MetricsLog(path).truncate_after(2, one_per_step=True) == lines[:2]
    assert MetricsLog(path).read() == lines[:2]
