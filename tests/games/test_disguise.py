"""Disguised-rule variants in every domain (and the plug-in, which opts in with its one hook): the
prompts name none of the plain terms, answers round-trip, a plain name is no answer, the renaming
follows the seed, and an agent that reads the rules audits identically under both names."""
from __future__ import annotations

import re

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.evaluation.disguise import compare, disguised_audit
from sepo.evaluation.evaluate import EvalConfig
from sepo.games import domain_names, get_domain, register
from sepo.games.base import ParseResult, TextView
from sepo.games.disguise import DisguisedView, DisguiseTerms, renaming
from sepo.games.registry import unregister
from sepo.policies.replies import Decoding, Reply
from sepo.policies.text_policy import TextPolicy
from tests.games import pennies
from tests.policies.test_reprompt import first_decisions

DOMAINS = [*domain_names(), "pennies"]
SMALL = {"kuhn": {"hands": 2}, "ipd": {"rounds": 2}, "auction": {"rounds": 1}, "negotiation": {"rounds": 2},
         "negotiation-gt": {"rounds": 1}, "pennies": {"rounds": 2}}


REQUIRED = {"kuhn", "ipd", "auction", "negotiation", "negotiation-gt", "pricing", "pennies"}
"""The paper's five domains, the pricing market and the plug-in must be disguisable; a domain added later is
checked once its text view opts in (`disguise_terms`)."""


@pytest.fixture(params=DOMAINS)
def domain(request):
    if request.param == "pennies":
        register(pennies.DOMAIN)
        yield pennies.DOMAIN
        unregister("pennies")
        return
    found = get_domain(request.param)
    if request.param not in REQUIRED and found.game("rigorous").text.disguise_terms() is None:
        pytest.skip(f"{request.param}'s text view has not opted in to disguised variants")
    yield found


def _plain_words(terms: DisguiseTerms) -> re.Pattern:
    return re.compile(r"(?<!\w)(" + "|".join(re.escape(t) for t in terms.all()) + r")(?:e?s|ed|ing)?(?!\w)",
                      re.IGNORECASE)


@pytest.mark.parametrize("protocol", ["rigorous", "paper"])
def test_disguised_text_names_none_of_the_plain_terms_and_answers_round_trip(domain, protocol):
    game = domain.game(protocol) if domain.name != "pennies" else domain.game("rigorous")
    view = game.text.disguised(7)
    plain = _plain_words(game.text.disguise_terms())
    decisions = first_decisions(game, 6, seed=3)
    texts = [view.system_prompt(), view.vocabulary()]
    for d in decisions:
        texts += [view.user_prompt(d), view.reason(d), *(view.canonical_reply(d, a) for a in d.legal_actions)]
        for a in d.legal_actions:
            assert view.parse(view.answer_text(d, a), d) == ParseResult(
                "ok", a, view.parse(view.answer_text(d, a), d).names_found
            )
            plain_answer = game.text.answer_text(d, a)
            if plain.fullmatch(plain_answer):  # an action word: in the disguised game it names nothing
                assert not view.parse(plain_answer, d).ok
    for text in texts:
        assert not plain.search(text), plain.search(text)
    assert set(view.record()["names"]) == set(game.text.disguise_terms().all())


def test_the_renaming_follows_the_seed_alone(domain):
    terms = domain.game("rigorous").text.disguise_terms()
    assert renaming(terms, 3) == renaming(terms, 3)
    assert len({tuple(sorted(renaming(terms, s).items())) for s in range(10)}) > 1
    names = renaming(terms, 3)
    # a permutation: no two actions share a name
    assert len(set(names[t] for t in terms.actions)) == len(terms.actions)
    assert not {v.lower() for v in names.values()} & {t.lower() for t in terms.all()}


class ReadsTheRules:
    """A greedy `ReplySource` that plays by the state, not by the names: a reason line, then the
    answer its view writes for a choice made from the state (through the plain view's prompt
    length, the same in both games: its last legal action when even, its first when odd)."""

    decoding = Decoding(temperature=0)

    def __init__(self, view, plain):
        self.name, self.text, self.plain = "reads-the-rules", view, plain

    def replies(self, decisions, n, seed):
        out = []
        for d in decisions:
            index = -1 if len(self.plain.user_prompt(d)) % 2 == 0 else 0
            out.append(
                [Reply(f"Thinking it over.\n{self.text.answer_text(d, d.legal_actions[index])}", True)] * n
            )
        return out


def test_an_agent_that_reads_the_rules_audits_the_same_under_both_names(domain):
    game = domain.game("rigorous", **SMALL.get(domain.name, {}))
    config = EvalConfig(episodes=2, replicates=50, seed=1)
    result = disguised_audit(
        game,
        TextPolicy(ReadsTheRules(game.text, game.text), failure_rule="fallback"),
        lambda view: TextPolicy(ReadsTheRules(view, game.text), failure_rule="fallback"),
        config,
        seed=5,
    )
    rows = result["disguise"]["metrics"]
    assert "utility" in rows and "invalid_action_rate" in rows
    for name, row in rows.items():
        assert row["difference"] == 0.0, (name, row)
    assert result["disguise"]["disguised"]["invalid_action_rate"] == 0.0
    assert result["disguise"]["seed"] == 5 and result["disguise"]["names"]


def test_a_plain_name_in_a_disguised_game_is_a_counted_failure():
    """The memorisation signal: an agent answering with the famous game's word names no action in
    the disguised game; its invalid-action rate and its play change, and the comparison shows it."""
    game = get_domain("ipd").game("rigorous", rounds=2)

    class Memorised(ReadsTheRules):
        def replies(self, decisions, n, seed):
            return [[Reply("DEFECT", True)] * n for _ in decisions]

    result = disguised_audit(game, TextPolicy(Memorised(game.text, game.text), failure_rule="fallback"),
                             lambda view: TextPolicy(Memorised(view, game.text), failure_rule="fallback"),
                             EvalConfig(episodes=2, replicates=50), seed=0)
    rows = result["disguise"]["metrics"]
    assert (rows["invalid_action_rate"]["plain"], rows["invalid_action_rate"]["disguised"]) == (0.0, 1.0)
    # the fallback, COOPERATE, earns less than DEFECT against the train pool
    assert rows["utility"]["difference"] < 0
    assert rows["adversarial_gap"]["difference"] > 0  # and is exploitable


def test_a_view_without_terms_is_refused_in_one_line():
    class Bare(TextView):
        def system_prompt(self):
            return ""

        def user_prompt(self, decision):
            return ""

        def parse(self, reply, decision):
            return ParseResult("no_action")

        def answer_text(self, decision, action):
            return ""

    with pytest.raises(SepoError, match="cannot be disguised.*disguise_terms"):
        Bare().disguised(0)
    with pytest.raises(SepoError, match=">= 0"):
        DisguisedView(get_domain("kuhn").game("rigorous").text, -1)


def test_compare_joins_the_intervals_at_their_far_ends():
    plain = {"utility": 1.0, "ci": {"utility": [0.5, 1.5]}}
    disguised = {"utility": 0.8, "ci": {"utility": [0.6, 1.0]}}
    row = compare(plain, disguised)["utility"]
    assert row["difference"] == pytest.approx(-0.2) and row["difference_ci"] == pytest.approx([-0.9, 0.5])
    assert compare({"exploitability": 0.1, "ci": {}}, {"exploitability": 0.3, "ci": {}})["exploitability"][
        "difference_ci"] is None
    assert np.isfinite(row["plain"])


def test_progress_of_a_disguised_audit_counts_both_audits_and_never_passes_its_total():
    """Both audits fed one bar with one audit's total ("done: 10/6 (167%)"): the per-opponent
    callback now counts against both audits' episodes, each shown counter stays within its total,
    and the stages say which audit runs."""
    from sepo import progress as reporting
    from sepo.policies.specs import load_agent

    class Recorder(reporting.Reporter):
        def __init__(self):
            self.tasks, self.stages = {}, []

        def stage(self, text):
            self.stages.append(text)

        def add_task(self, description, total=None, **kwargs):
            # description, total, completed, most
            self.tasks[len(self.tasks)] = [description, total, 0.0, 0.0]
            return len(self.tasks) - 1

        def update(self, task, *, completed=None, total=None, advance=None, grow=None, **kwargs):
            row = self.tasks[task]
            row[1] = total if total is not None else (row[1] or 0) + grow if grow is not None else row[1]
            row[2] = completed if completed is not None else row[2] + (advance or 0)
            row[3] = max(row[3], row[2] / row[1]) if row[1] else row[3]

    game = get_domain("ipd").game("rigorous", rounds=2)
    bot = load_agent("bot:TFT", game)
    calls = []
    with Recorder() as recorder:
        disguised_audit(game, bot, lambda view: bot, EvalConfig(episodes=2, replicates=20, seed=1), seed=3,
                        progress=lambda pool, opponent, done, total: calls.append((pool, done, total)))
    done = sum(d for _, d, _ in calls)
    assert {t for _, _, t in calls} == {done} and any(p.startswith("disguised ") for p, _, _ in calls)
    assert all(most <= 1.0 for _, _, _, most in recorder.tasks.values()), recorder.tasks
    assert any("plain audit (1 of 2" in s for s in recorder.stages)
    assert any("disguised audit (2 of 2)" in s for s in recorder.stages)
