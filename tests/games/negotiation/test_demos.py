"""Split bargaining's SFT data: the paper's mixture, and reasons that agree with the prompt's state."""
import re

import pytest

from sepo.games import get_domain
from sepo.training.sft_data import generate_traces


@pytest.mark.parametrize("protocol", ["rigorous", "paper"])
def test_paper_mixture_traces_agree_with_their_prompts(protocol):
    mixtures = get_domain("negotiation").demos()
    assert {cls.name: w for cls, w in mixtures["paper"]} == {
        "Fair": 0.32,
        "ReciprocalBalanced": 0.27,
        "ConcedeStep": 0.18,
        "Complement": 0.15,
        "RandomMiddle": 0.08,
    }
    examples = [
        ex
        for episode in generate_traces("negotiation", "paper", 6, seed=0, protocol=protocol)
        for ex in episode
    ]
    assert len(examples) == 3 * 6 * 4  # 3 driving opponents, 6 episodes each, 4 rounds
    assert {ex["strategy"] for ex in examples} <= {cls.name for cls, _ in mixtures["paper"]}
    for ex in examples:
        user, reply = ex["messages"][1]["content"], ex["messages"][2]["content"]
        reason, answer = reply.rsplit("\n", 1)
        assert re.fullmatch(r"[1-9]", answer)
        history = re.findall(r"you=(\d+), opp=(\d+) → (DEAL|BREAKDOWN)", user)
        if not history:
            assert "no history yet" in reason
            continue
        own, other, outcome = history[-1]
        assert (
            f"last round I asked for {own} and the opponent for {other}, a "
            f"{'deal' if outcome == 'DEAL' else 'breakdown'}"
            in reason
        )
        deals = sum(h[2] == "DEAL" for h in history)
        assert f"{deals} of {len(history)} rounds were deals" in reason
        score = re.search(r"you: (-?[\d.]+), opponent: (-?[\d.]+)", user).groups()
        assert f"the score is {score[0]} to {score[1]}" in reason
