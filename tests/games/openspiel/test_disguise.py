"""OpenSpiel games opt in to disguised variants: the game's names and its move words are
renamed, answers round-trip, and a plain move name in a disguised reply names no move."""
from __future__ import annotations

import pytest

from sepo.games import get_domain
from sepo.games.base import ParseResult
from tests.games.test_disguise import _plain_words
from tests.policies.test_reprompt import first_decisions


@pytest.mark.parametrize(
    "spec", ["openspiel:leduc_poker", "openspiel:liars_dice(dice_sides=3)", "openspiel:matrix_pd"]
)
def test_an_openspiel_game_disguised_names_none_of_its_plain_terms(spec):
    game = get_domain(spec).game("rigorous")
    terms = game.text.disguise_terms()
    assert terms.game and terms.actions
    view = game.text.disguised(5)
    plain = _plain_words(terms)
    texts = [view.system_prompt()]
    for d in first_decisions(game, 6, seed=1):
        texts.append(view.user_prompt(d))
        for a in d.legal_actions:
            parsed = view.parse(view.answer_text(d, a), d)
            assert parsed == ParseResult("ok", a, parsed.names_found)
            plain_answer = game.text.answer_text(d, a)
            if plain.fullmatch(plain_answer):
                assert not view.parse(plain_answer, d).ok
    for text in texts:
        assert not plain.search(text), (spec, plain.search(text))


def test_moves_that_are_numbers_keep_their_numbers():
    terms = (
        get_domain("openspiel:goofspiel(num_cards=3,imp_info=True)").game("rigorous").text.disguise_terms()
    )
    assert not any(ch.isdigit() for word in terms.actions for ch in word)
