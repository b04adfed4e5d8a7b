"""Size wording and refusals of `sepo.limits`: a suggested option value can be pasted back, a
byte count past a petabyte reads once as approximate."""
import re

import pytest

import sepo.limits
from sepo.errors import SepoError
from sepo.games import load_game
from sepo.limits import check_episodes, size_text


def test_a_huge_byte_count_carries_no_about_of_its_own():
    assert size_text(3 * 10**17) == "10^17 bytes"
    with pytest.raises(SepoError) as refused:
        sepo.limits.refuse("this table", 3 * 10**17, budget=10**9)
    assert "about 10^17 bytes" in str(refused.value) and "about about" not in str(refused.value)


def test_an_episode_refusal_suggests_values_without_thousands_separators(monkeypatch):
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: 10**11)
    game = load_game("kuhn", "rigorous", hands=10**4)
    with pytest.raises(SepoError) as refused:
        check_episodes(game, 10**4, 1, "this evaluation")
    message = str(refused.value)
    suggested = re.findall(r"(--episodes|--hands) (\S+) or fewer", message)
    assert {option for option, _ in suggested} == {"--episodes", "--hands"}, message
    assert all(value.isdigit() and int(value) >= 1000 for _, value in suggested), message
