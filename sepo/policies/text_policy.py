"""The policy of a text agent: the distribution of the action it actually plays.

A text agent (any `ReplySource`: a local model, an endpoint, a scripted agent in tests) plays a
decision by writing one reply under its decoding; the reply is parsed strictly
(`parse_reply`: a cut-off reply or one still inside its reasoning is `truncated`); a reply that
does not parse is counted and the named failure rule supplies the action. Its policy at a
decision state is therefore the distribution of that *played* action, failure-rule actions
included, under the decoding it is evaluated with, at the prompts it meets:

- **exact** when the format allows: greedy decoding (one deterministic reply per prompt), or a
  source that computes the distribution of its replies exactly (`exact_distribution`, e.g. a
  local model whose replies are the action line alone, scored with the turn's real end token);
- **answer lines read exactly** when such a source is allowed to leave a share of its replies
  unscored (`HFDecoding(exact_tolerance=...)`, the trainer's `answer_rest`): that share is played
  by the failure rule where the rule needs no reply (fallback, random-legal) and renormalised away
  where it does (forced decoding); either way each action's probability is within it of the truth,
  and the label says how much it was (`PolicyEstimate.rest`);
- **estimated** otherwise, from `samples` replies per state (batched in one call, cached by
  prompt). The per-state counts of each played outcome are kept (`PolicyEstimate`), so any
  function of the policy (exploitability, safety) gets a sampling interval by resampling the
  replies within each state (`PolicyEstimate.resample`, a nonparametric bootstrap).

The exact read applies wherever the policy is read: at the prompts met in play, and at prompts
a caller draws (`estimate(..., prompts=...)`, the trainer's), where each distinct prompt is
weighted by how often it was drawn.

"The prompts it meets": `act` records every decision it is asked to play; the policy at a state
is then the mixture over the prompts met at that information state (hand number, score line,
...), weighted by how often each was met, and replies are drawn at those prompts. A state never
met is read at the prompt of the decision passed in. Every estimate says which it is: `exact` or
`estimated (n replies per state)`.

Under greedy decoding a prompt has one reply, so it is written once, whether met in play or read
for the policy, and forced decoding of a failed reply is computed once per distinct prompt and
reply: a model that fails most replies (the base model in a repeated game) meets the same
prompts many times in the episodes of a best-response search.

Cheap talk: when the game's message channel is on, a text agent whose source can answer any chat
(`chat_replies`: local and endpoint models) writes one message per round in a turn of its own
(`write_messages`, batched): the prompt of `sepo.games.talk.message_chat`, one reply under the
same decoding as its actions, read by `talk.parse_message`. The message seeds come from the
agent's seed and a count of message calls, so the same seeds give the same messages.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from sepo import progress
from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.policies.base import Choice, Policy
from sepo.policies.replies import Decoding, Reply, ReplySource, parse_reply

FAILURE_RULES = ("forced", "fallback", "random-legal", "reprompt")
DEFAULT_REPROMPTS = 2
"""Correction turns the `reprompt` rule allows per failed reply before the fallback action plays."""
MAX_REPROMPTS = 10
_PROBLEMS = {"no_action": "it names no action", "ambiguous": "it names more than one action",
             "illegal": "the action it names is not legal now", "truncated": "it was cut off before it ended"}
_LISTED = 8
"""Legal actions named in a correction message; a decision with more gets the question's form instead."""
MAX_SAMPLED_REPLIES = 100_000
"""The most replies one estimate samples (states x replies per state; on the tiny CPU model about
10 ms each, so about 17 minutes): Leduc's 936 information states at the default 2,048 replies
each planned 1,916,928 replies and grew to 1.9 GB before any finished."""
EXACT_REST = 1e-6
"""The reply probability an exact read may leave to replies other than the answer lines (float
rounding of the scored answers' sum); a read leaving more is labelled with what it left."""
DEFAULT_SAMPLES = 2048
"""Replies per state for an estimated policy: enough that a scripted agent sampling a known
equilibrium (tests/policies/test_text_policy.py) gets an exploitability interval [0, ≤ 0.02]
whatever the seed (measured: upper end ≤ 0.02 in 81.8% of 400 seeds at 512 replies, 96.5% of
200 at 1024, 200 of 200 at 2048, largest 0.0167). On the tiny CPU model one reply costs about
10 ms."""


def fallback_action(text, decision: Decision) -> int:
    """The `fallback` failure rule's action at `decision`, the domain's one rule: its text view's
    `fallback_action` where it defines one (e.g. a paper's fixed default demand), else the first
    legal action. A played-policy table, a training completion, an audit and an evaluation all
    resolve an unparsable reply with it."""
    rule = getattr(text, "fallback_action", None)
    return rule(decision) if callable(rule) else decision.legal_actions[0]


def correction_message(view, decision: Decision, status: str) -> str:
    """The `reprompt` rule's one short user turn after a reply that did not parse: what was wrong
    with it and the legal answers, written by the text view (`answer_text`, so a disguised view's
    names appear, never the plain game's)."""
    problem = _PROBLEMS.get(status, "it could not be read as an action")
    legal = decision.legal_actions
    if len(legal) <= _LISTED:
        answers = ", ".join(view.answer_text(decision, a) for a in legal)
        return (f"Your reply could not be read: {problem}. End your reply with one action alone on the last "
                f"line: {answers}.")
    return (
        f"Your reply could not be read: {problem}. End your reply with one legal action alone on the last "
        "line, written as the question asks."
    )


@dataclass(frozen=True)
class TextAgentOptions:
    """How a command builds any text agent (a local model, an endpoint model): its decoding,
    the replies per state of its estimated policy, the failure rule, and the seed."""

    decoding: Decoding = field(default_factory=Decoding)
    samples: int = DEFAULT_SAMPLES
    failure_rule: str = "forced"
    seed: int = 0
    reprompts: int = DEFAULT_REPROMPTS
    """Correction turns per failed reply under the `reprompt` rule."""
    max_tokens_total: int | None = None
    """Endpoint agents: the prompt and completion tokens an audit may send before it stops."""
    reply_cache: str | None = None
    """Where the agent keeps what it answered, so a re-run resumes (None: a local model keeps
    nothing, an endpoint agent uses its default cache)."""

    def __post_init__(self):
        if self.failure_rule not in FAILURE_RULES:
            raise SepoError(
                f"failure rule must be one of {', '.join(FAILURE_RULES)}; got {self.failure_rule!r}"
            )
        if self.samples < 1:
            raise SepoError(f"replies per state must be >= 1, got {self.samples}")
        check_reprompts(self.reprompts)

    def record(self) -> dict:
        out = {
            "decoding": self.decoding.record(),
            "replies_per_state": self.samples,
            "failure_rule": self.failure_rule,
        }
        if self.failure_rule == "reprompt":
            out["reprompts"] = self.reprompts
        return out

    def agent_kwargs(self) -> dict:
        """The keywords every text agent's constructor takes from these options."""
        return {
            "failure_rule": self.failure_rule,
            "samples": self.samples,
            "seed": self.seed,
            "reprompts": self.reprompts,
        }


def check_reprompts(reprompts: int) -> None:
    if not isinstance(reprompts, int) or not 1 <= reprompts <= MAX_REPROMPTS:
        raise SepoError(
            f"re-prompts per failed reply must be a whole number from 1 to {MAX_REPROMPTS}, got {reprompts!r}"
        )


@dataclass
class PolicyEstimate:
    """An agent's action distribution at decision states, exact or estimated from replies.

    `outcomes[i]` is `[k, |legal actions of state i|]`: the distinct played distributions seen at
    state i (a point mass for a parsed or forced action, uniform for "random-legal"), and
    `counts[i]` how many replies produced each; the policy is their count-weighted mean.

    `exact` says the policy was read without sampling (no sampling interval). `rest` is the largest
    share of the reply probability, at any prompt read so, that no answer line covers (the source's
    `exact_distribution` plays it by the failure rule): up to `EXACT_REST` the read is exact;
    above it each action's probability is known to within `rest`, and the label says so."""

    decisions: list[Decision]
    outcomes: list[np.ndarray]
    counts: list[np.ndarray]
    exact: bool
    samples: int
    invalid: list[int] = field(default_factory=list)
    prompts: list[int] = field(default_factory=list)
    rest: float = 0.0

    @property
    def claims_exact(self) -> bool:
        """Whether the numbers of this policy are exact: read without sampling, every reply covered."""
        return self.exact and self.rest <= EXACT_REST

    @property
    def label(self) -> str:
        if not self.exact:
            return f"estimated ({self.samples} replies per state)"
        if self.claims_exact:
            return "exact"
        return f"answer lines read exactly, up to {self.rest:.2%} of replies at a prompt outside them"

    @property
    def probabilities(self) -> list[dict[int, float]]:
        return [
            {a: float(p) for a, p in zip(d.legal_actions, row)}
            for d, row in zip(self.decisions, self._rows())
        ]

    def _rows(self) -> list[np.ndarray]:
        return [c @ o / c.sum() for o, c in zip(self.outcomes, self.counts)]

    def table(self) -> np.ndarray:
        """`[states, max legal actions]`, columns in legal-action order."""
        width = max(len(d.legal_actions) for d in self.decisions)
        table = np.zeros((len(self.decisions), width))
        for i, row in enumerate(self._rows()):
            table[i, : len(row)] = row
        return table

    def resample(self, replicates: int, seed: int) -> np.ndarray:
        """`[replicates, states, max legal actions]`: tables from the replies resampled with
        replacement within each state (identical copies of the table when exact)."""
        table = self.table()
        if self.exact:
            return np.broadcast_to(table, (replicates,) + table.shape).copy()
        rng = np.random.default_rng([seed, 0x7E47])
        out = np.zeros((replicates,) + table.shape)
        for i, (o, c) in enumerate(zip(self.outcomes, self.counts)):
            n = int(round(c.sum()))
            draws = rng.multinomial(n, c / c.sum(), size=replicates)
            out[:, i, : o.shape[1]] = draws @ o / n
        return out

    def record(self) -> dict:
        """What goes into result files: how the policy was obtained."""
        total = int(sum(c.sum() for c in self.counts))
        out = {
            "read": self.label,
            "read_exactly": self.claims_exact,
            "replies_per_state": None if self.exact else self.samples,
            "states": len(self.decisions),
            "invalid_replies": int(sum(self.invalid)),
            "replies": total,
            "distinct_prompts": int(sum(self.prompts)),
        }
        if self.exact and not self.claims_exact:
            out["rest"] = self.rest
        return out


def policy_estimate(agent: Policy, decisions: Sequence[Decision]) -> PolicyEstimate:
    """The policy of any agent at `decisions` (an exact solver's information states): a text
    agent's estimate, or the exact distribution a tabular or scripted policy states."""
    estimate = getattr(agent, "estimate", None)
    if callable(estimate):
        return estimate(list(decisions))
    from sepo.metrics.exact import action_table

    table = action_table(agent, decisions)
    outcomes = [table[i : i + 1, : len(d.legal_actions)] for i, d in enumerate(decisions)]
    return PolicyEstimate(list(decisions), outcomes, [np.ones(1) for _ in decisions], True, 0,
                          [0] * len(decisions), [1] * len(decisions))


def check_sampled_replies(states: int, samples: int, name: str) -> None:
    """One line, before any reply is drawn, when estimating a policy at `states` information
    states from `samples` replies each is more than `MAX_SAMPLED_REPLIES` replies, with the
    options that fit: greedy decoding (one exact reply per prompt) or fewer replies per state."""
    count = states * samples
    if count <= MAX_SAMPLED_REPLIES:
        return
    fewer = MAX_SAMPLED_REPLIES // max(1, states)
    options = ["--temperature 0 (greedy decoding: one reply per prompt, the policy exact)"]
    if fewer >= 1:
        options.append(f"--samples {fewer} or fewer (a wider interval)")
    raise SepoError(
        f"estimating {name}'s policy at {states:,} information states from {samples:,} sampled replies each "
        f"means {count:,} model replies (more than {MAX_SAMPLED_REPLIES:,}); use {' or '.join(options)}"
    )


@contextmanager
def reads_at_most(agent: Policy, samples: int):
    """Within the block, an agent estimated from sampled replies reads each state from at most
    `samples` replies; any other agent is unchanged. For searches that only choose an opponent,
    whose value is then measured in play against the agent itself: a coarser read can make the
    opponent weaker, never the measured bound wrong."""
    before = getattr(agent, "samples", None)
    if not isinstance(agent, TextPolicy) or before is None or before <= samples:
        yield
        return
    agent.samples = samples
    try:
        yield
    finally:
        agent.samples = before


class TextPolicy(Policy):
    """A text agent as a `Policy`: plays by writing replies; its action distribution is the
    distribution of the played action (see module doc). `source` is the `ReplySource` (by default
    the object itself, for subclasses that write their own replies)."""

    def __init__(self, source: ReplySource | None = None, *, failure_rule: str = "forced",
                 fallback_action: Callable[[Decision], int] | None = None, samples: int = DEFAULT_SAMPLES,
                 seed: int = 0, name: str | None = None, at_met_prompts: bool = True,
                 reprompts: int = DEFAULT_REPROMPTS):
        if failure_rule not in FAILURE_RULES:
            raise SepoError(f"failure rule must be one of {', '.join(FAILURE_RULES)}; got {failure_rule!r}")
        if samples < 1:
            raise SepoError(f"replies per state must be >= 1, got {samples}")
        check_reprompts(reprompts)
        self.source = self if source is None else source
        if source is not None:
            self.decoding = source.decoding
        if failure_rule == "forced" and not callable(getattr(self.source, "forced_actions", None)):
            raise SepoError(f"{getattr(self.source, 'name', 'this agent')} cannot do forced decoding; "
                            "use failure rule 'fallback' or 'random-legal'")
        if failure_rule == "reprompt" and not callable(getattr(self.source, "chat_replies", None)):
            raise SepoError(f"{getattr(self.source, 'name', 'this agent')} cannot answer a correction turn; "
                            "use failure rule 'fallback' or 'random-legal'")
        self.failure_rule = failure_rule
        self.reprompts = reprompts
        self._reprompt_calls = 0
        self.fallback_action = fallback_action
        self.samples = samples
        self.at_met_prompts = at_met_prompts
        self._estimate_seed = seed
        if name is not None or not getattr(self, "name", None) or self.name == Policy.name:
            self.name = name or getattr(self.source, "name", "text-agent")
        self.counts: Counter = Counter()
        self.met: dict[str, dict[str, list]] = {}
        self._reply_cache: dict[str, list[Reply]] = {}
        self._forced_memo: dict[tuple, int] = {}
        self._last_failed: list[int] = []
        self._message_calls = 0
        self.last_estimate: PolicyEstimate | None = None

    # ------------------------------------------------------------------ the rules

    def _fallback(self, decision: Decision) -> int:
        """The 'fallback' rule's action: the one given, else the domain's (`fallback_action`)."""
        action = (
            self.fallback_action(decision)
            if self.fallback_action
            else fallback_action(getattr(self.source, "text", None), decision)
        )
        if action not in decision.legal_actions:
            raise SepoError(f"{self.name}: fallback action {action!r} is not legal at {decision.info_key!r}")
        return action

    def _rule_outcomes(
        self,
        failed: list[tuple[Decision, str]],
        statuses: Sequence[str] = (),
        where: str = "estimate",
        seed: int | None = None,
    ) -> list[np.ndarray]:
        """The played distribution of each failed reply under the failure rule (`statuses`: each
        reply's parse failure, which the `reprompt` rule's correction names; `where` prefixes its
        counts, `seed` draws its replies)."""
        if not failed:
            return []
        if self.failure_rule == "random-legal":
            return [np.full(len(d.legal_actions), 1.0 / len(d.legal_actions)) for d, _ in failed]
        if self.failure_rule == "forced":
            actions = self._forced(failed)
        elif self.failure_rule == "reprompt":
            actions = self._reprompted(failed, list(statuses) or ["no_action"] * len(failed), where, seed)
        else:
            actions = [self._fallback(d) for d, _ in failed]
        return [np.eye(len(d.legal_actions))[d.legal_actions.index(a)] for (d, _), a in zip(failed, actions)]

    def _forced(self, failed: list[tuple[Decision, str]]) -> list[int]:
        """Forced decoding of each failed reply, computed once per distinct (prompt, legal actions,
        reply): the rule is deterministic, and a greedy model meets the same prompt and writes the
        same failed reply again and again (in play and in the exact read of its policy)."""
        prompt = self.source.text.user_prompt
        keys = [(prompt(d), tuple(d.legal_actions), text) for d, text in failed]
        todo = {key: item for key, item in zip(keys, failed) if key not in self._forced_memo}
        if todo:
            self.counts["forced.computed"] += len(todo)
            fresh = self.source.forced_actions(
                [d for d, _ in todo.values()], [text for _, text in todo.values()]
            )
            self._forced_memo.update(zip(todo, fresh))
        self.counts["forced.reused"] += len(keys) - len(todo)
        return [self._forced_memo[key] for key in keys]

    def _reprompted(self, failed: list[tuple[Decision, str]], statuses: list[str], where: str,
                    seed: int | None) -> list[int]:
        """The `reprompt` rule: each failed reply is answered with one short correction turn
        (`correction_message`) and the model replies again in the same chat, up to `reprompts`
        times; the first reply that parses is the action played, and a reply still failing after
        the last correction plays the fallback action. Counted as `<where>.reprompt.sent`,
        `.recovered` and `.exhausted`. All chats of a round go out in one batched call."""
        view = self.source.text
        if seed is None:
            self._reprompt_calls += 1
            seed = int(
                np.random.SeedSequence([self._estimate_seed, 0x2E9207, self._reprompt_calls]).generate_state(
                    1
                )[0]
            )
        chats = [
            [
                {"role": "system", "content": view.system_prompt()},
                {"role": "user", "content": view.user_prompt(d)},
                {"role": "assistant", "content": text},
                {"role": "user", "content": correction_message(view, d, status)},
            ]
            for (d, text), status in zip(failed, statuses)
        ]
        actions: list[int | None] = [None] * len(failed)
        pending = list(range(len(failed)))
        for turn in range(self.reprompts):
            if not pending:
                break
            turn_seed = int(np.random.SeedSequence([seed, turn]).generate_state(1)[0])
            replies = self.source.chat_replies([chats[i] for i in pending], 1, turn_seed)
            self.counts[f"{where}.reprompt.sent"] += len(pending)
            still = []
            for i, group in zip(pending, replies):
                decision, reply = failed[i][0], group[0]
                parsed = parse_reply(view, reply, decision)
                if parsed.ok:
                    actions[i] = parsed.action
                    self.counts[f"{where}.reprompt.recovered"] += 1
                else:
                    chats[i] = chats[i] + [
                        {"role": "assistant", "content": reply.text},
                        {"role": "user", "content": correction_message(view, decision, parsed.status)},
                    ]
                    still.append(i)
            pending = still
        for i in pending:
            actions[i] = self._fallback(failed[i][0])
            self.counts[f"{where}.reprompt.exhausted"] += 1
        return actions

    # ------------------------------------------------------------------ play

    def act(self, decisions: list[Decision], rng: np.random.Generator) -> list[Choice]:
        """One reply per decision (one batched call), parsed; failures resolved by the rule."""
        if not decisions:
            return []
        self.counts["act.decisions"] += len(decisions)
        for d in decisions:
            self._meet(d)
        seed = int(rng.integers(2**63 - 1))
        if self.source.decoding.greedy:  # one deterministic reply per distinct prompt, written once
            replies = self._cached_replies(decisions)
        else:
            replies = [group[0] for group in self.source.replies(decisions, 1, seed)]
        parsed = [parse_reply(self.source.text, r, d) for r, d in zip(replies, decisions)]
        failed = [i for i, p in enumerate(parsed) if not p.ok]
        rule_actions: dict[int, int] = {}
        if self.failure_rule == "random-legal":
            for i in failed:
                legal = decisions[i].legal_actions
                rule_actions[i] = legal[int(rng.integers(len(legal)))]
        else:
            outcomes = self._rule_outcomes([(decisions[i], replies[i].text) for i in failed],
                                           [parsed[i].status for i in failed], "act", seed)
            for i, o in zip(failed, outcomes):
                rule_actions[i] = decisions[i].legal_actions[int(np.argmax(o))]
        choices = []
        for i, (d, reply, p) in enumerate(zip(decisions, replies, parsed)):
            self.counts[f"act.{p.status}"] += 1
            if p.ok:
                choices.append(Choice(p.action, reply.text, "ok", None))
            else:
                self.counts[f"act.rule.{self.failure_rule}"] += 1
                choices.append(Choice(rule_actions[i], reply.text, p.status, self.failure_rule))
        return choices

    def write_messages(self, decisions: list[Decision]) -> list:
        """This round's message at each decision (`talk.Written`), from one batched call: the
        message turn's chat, one reply each under the agent's decoding, the message rule. A
        source that cannot answer a free chat stays silent (None)."""
        from sepo.games import talk

        chat_replies = getattr(self.source, "chat_replies", None)
        if not decisions or not callable(chat_replies):
            return [None] * len(decisions)
        self._message_calls += 1
        seed = int(
            np.random.SeedSequence([self._estimate_seed, 0x3E55A6E, self._message_calls]).generate_state(1)[0]
        )
        chats = [talk.message_chat(self.source.text, d) for d in decisions]
        written = [
            talk.parse_message(group[0].text, group[0].finished) for group in chat_replies(chats, 1, seed)
        ]
        for w in written:
            self.counts[f"message.{w.status}"] += 1
        return written

    def message(self, decision: Decision) -> str | None:
        """The message this agent sends at `decision` (None: nothing); see `write_messages`."""
        written = self.write_messages([decision])[0]
        return None if written is None else written.message

    def _meet(self, decision: Decision) -> None:
        key = self.source.text.user_prompt(decision)
        entry = self.met.setdefault(decision.info_key, {}).setdefault(key, [decision, 0])
        entry[1] += 1

    # ------------------------------------------------------------------ the policy

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return self.batch_action_probabilities([decision])[0]

    def batch_action_probabilities(self, decisions: list[Decision]) -> list[dict[int, float]]:
        return self.estimate(decisions).probabilities if decisions else []

    def prompts_for(self, decision: Decision, n: int, rng: np.random.Generator) -> list[Decision]:
        """`n` prompts for a state: drawn from those met in play at its information state, in
        proportion to how often each was met; the decision's own prompt if none was met."""
        met = self.met.get(decision.info_key) if self.at_met_prompts else None
        if not met:
            return [decision] * n
        entries = sorted(met.values(), key=lambda e: self.source.text.user_prompt(e[0]))
        weights = np.array([count for _, count in entries], dtype=float)
        draws = rng.multinomial(n, weights / weights.sum())
        return [entry[0] for entry, k in zip(entries, draws) for _ in range(k)]

    def _met_groups(self, decisions: list[Decision]) -> list[list[tuple[Decision, int]]]:
        """Per state: the distinct prompts met at its information state with how often each was
        met (the decision's own prompt, weight 1, when none was met)."""
        prompt = self.source.text.user_prompt
        groups = []
        for d in decisions:
            met = self.met.get(d.info_key) if self.at_met_prompts else None
            groups.append(
                sorted(((e[0], e[1]) for e in met.values()), key=lambda e: prompt(e[0])) if met else [(d, 1)]
            )
        return groups

    def estimate(
        self, decisions: list[Decision], prompts: Sequence[Sequence[Decision]] | None = None
    ) -> PolicyEstimate:
        """The policy at `decisions` (see module doc). `prompts[i]`, if given, lists the prompts
        at which state i's replies are drawn (one reply each; repeats allowed). The latest is
        kept as `last_estimate` (its label goes into outputs that read the agent piecewise)."""
        self.last_estimate = self._estimate(list(decisions), prompts)
        return self.last_estimate

    def _estimate(self, decisions: list[Decision], prompts) -> PolicyEstimate:
        groups = (
            self._met_groups(decisions) if prompts is None else [self._distinct(group) for group in prompts]
        )
        exact = self._exact(decisions, groups)
        if exact is not None:
            return exact
        if prompts is None:
            check_sampled_replies(len(decisions), self.samples, getattr(self, "name", "the agent"))
            rng = np.random.default_rng([self._estimate_seed, 0xE571])
            prompts = [self.prompts_for(d, self.samples, rng) for d in decisions]
        flat = [p for group in prompts for p in group]
        rows = iter(self._played(list(zip(flat, self._cached_replies(flat)))))
        outcomes, counts, distinct = [], [], []
        for d, group in zip(decisions, prompts):
            tally: Counter = Counter()
            for _ in group:
                tally[tuple(next(rows))] += 1
            keys = sorted(tally)
            outcomes.append(np.array(keys, dtype=float))
            counts.append(np.array([tally[o] for o in keys], dtype=float))
            distinct.append(len({self.source.text.user_prompt(p) for p in group}))
        samples = max((len(g) for g in prompts), default=0)
        return PolicyEstimate(
            decisions, outcomes, counts, False, samples, self._split_invalid(prompts), distinct
        )

    def _exact(
        self, decisions: list[Decision], groups: list[list[tuple[Decision, int]]]
    ) -> PolicyEstimate | None:
        """The exact policy when the format allows (see module doc): each distinct prompt's played
        distribution (greedy: its one reply; else the source's `exact_distribution`), weighted by
        how often the prompt was met or drawn; None when it must be estimated."""
        flat = [d for group in groups for d, _ in group]
        if self.source.decoding.greedy:  # one deterministic reply per distinct prompt
            rows = self._played(list(zip(flat, self._cached_replies(flat))))
            return self._weighted(decisions, groups, rows, self._split_invalid(groups))
        compute = getattr(self.source, "exact_distribution", None)
        rows = compute(flat, self.failure_rule, self._fallback) if callable(compute) else None
        if rows is None:
            return None
        return self._weighted(
            decisions,
            groups,
            [np.asarray(r, dtype=float) for r in rows],
            [0] * len(decisions),
            rest=float(getattr(self.source, "exact_rest", 0.0)),
        )

    def _distinct(self, prompts: Sequence[Decision]) -> list[tuple[Decision, int]]:
        """The distinct prompts of a list (by user prompt, sorted), each with how often it occurs."""
        prompt = self.source.text.user_prompt
        found: dict[str, list] = {}
        for d in prompts:
            found.setdefault(prompt(d), [d, 0])[1] += 1
        return [(d, n) for _, (d, n) in sorted(found.items())]

    def _played(self, pairs: list[tuple[Decision, Reply]]) -> list[np.ndarray]:
        """The played distribution of each reply: a point mass on its parsed action, else the
        failure rule's outcome. Remembers which replies failed (`_last_failed`)."""
        parsed = [parse_reply(self.source.text, r, d) for d, r in pairs]
        for p in parsed:
            self.counts[f"estimate.{p.status}"] += 1
        failed = [k for k, p in enumerate(parsed) if not p.ok]
        self._last_failed = failed
        rule = dict(zip(failed, self._rule_outcomes([(pairs[k][0], pairs[k][1].text) for k in failed],
                                                    [parsed[k].status for k in failed])))
        return [rule[k] if k in rule else np.eye(len(d.legal_actions))[d.legal_actions.index(p.action)]
                for k, ((d, _), p) in enumerate(zip(pairs, parsed))]

    def _split_invalid(self, groups) -> list[int]:
        """Failed replies of the last `_played` call, per state."""
        failed, out, start = set(self._last_failed), [], 0
        for group in groups:
            out.append(sum(k in failed for k in range(start, start + len(group))))
            start += len(group)
        return out

    @staticmethod
    def _weighted(decisions, groups, rows, invalid, rest: float = 0.0) -> PolicyEstimate:
        """A policy read without sampling: per state, its prompts' distributions weighted by how
        often each prompt was met (`rest`: what the read left to the failure rule, `PolicyEstimate`)."""
        outcomes, counts, k = [], [], 0
        for group in groups:
            outcomes.append(np.array(rows[k : k + len(group)], dtype=float))
            counts.append(np.array([w for _, w in group], dtype=float))
            k += len(group)
        return PolicyEstimate(decisions, outcomes, counts, True, 0, invalid, [len(g) for g in groups], rest)

    def _cached_replies(self, prompts: list[Decision]) -> list[Reply]:
        """One reply per entry of `prompts`; replies already drawn at a prompt are reused (the
        k-th request at a prompt always gets the k-th reply drawn there; under greedy decoding every
        request gets the prompt's one reply), the rest come from one batched call."""
        keys = [self.source.text.user_prompt(d) for d in prompts]
        need: Counter = Counter(keys)
        if self.source.decoding.greedy:  # every request at a prompt gets its one greedy reply
            need = Counter(dict.fromkeys(need, 1))
        missing = {key: need[key] - len(self._reply_cache.get(key, [])) for key in need}
        todo = [(key, d) for key, d in dict(zip(keys, prompts)).items() if missing[key] > 0]
        # one batched call per distinct number of missing replies, so no prompt gets more replies
        # than it needs (prompts met at different rates need very different numbers)
        by_width: dict[int, list] = {}
        for key, d in todo:
            by_width.setdefault(missing[key], []).append((key, d))
        total, cached = sum(max(0, m) for m in missing.values()), len(self._reply_cache)
        # each call counts its own replies; over several calls, one counter shows the whole draw
        whole = (
            progress.counting("replies in all", total) if len(by_width) > 1 else nullcontext(lambda n=1: None)
        )
        with whole as advance:
            for width, group_todo in sorted(by_width.items()):
                seed = int(
                    np.random.SeedSequence([self._estimate_seed, cached, total, width]).generate_state(1)[0]
                )
                fresh = self.source.replies([d for _, d in group_todo], width, seed)
                for (key, _), group in zip(group_todo, fresh):
                    self._reply_cache.setdefault(key, []).extend(group)
                advance(width * len(group_todo))
        if self.source.decoding.greedy:
            return [self._reply_cache[key][0] for key in keys]
        used: Counter = Counter()
        out = []
        for key in keys:
            out.append(self._reply_cache[key][used[key]])
            used[key] += 1
        return out

    def forget(self) -> None:
        """Drop cached replies and forced choices (after the model behind the source changed)."""
        self._reply_cache.clear()
        self._forced_memo.clear()

    # ------------------------------------------------------------------ bookkeeping

    def forced_record(self) -> dict | None:
        """Under the `forced` rule, the failed replies it decided (`computed`: one pass each) and the
        failed replies met again and decided by an earlier pass (`reused`); None when it decided none."""
        computed, reused = int(self.counts["forced.computed"]), int(self.counts["forced.reused"])
        return {"computed": computed, "reused": reused} if computed + reused else None

    def reprompt_record(self) -> dict | None:
        """Under the `reprompt` rule, what it cost and what it saved: in play (`played`) and in
        reading the policy (`policy`), the correction turns sent, the replies they recovered and
        the failed replies that still fell back; None under another rule."""
        if self.failure_rule != "reprompt":
            return None
        c = self.counts
        out = {"max_reprompts": self.reprompts}
        for where, name in (("act", "played"), ("estimate", "policy")):
            out[name] = {
                "failed_replies": sum(c[f"{where}.{status}"] for status in _PROBLEMS),
                "reprompts_sent": c[f"{where}.reprompt.sent"],
                "recovered": c[f"{where}.reprompt.recovered"],
                "fell_back": c[f"{where}.reprompt.exhausted"],
            }
        return out

    def reply_kinds(self) -> dict[str, dict[str, int]]:
        """How the replies parsed, by kind (`ok`, `truncated`, `no_action`, `ambiguous`,
        `illegal`): in play (`played`, one reply per decision) and in reading the policy (`policy`,
        the replies sampled or decoded at the states read; an exact read of answer-line
        probabilities writes no replies and adds none; a greedy read one per distinct prompt, not
        weighted by how often it was met as the policy record's `replies` is). Correction turns are
        not counted here."""
        out: dict[str, dict[str, int]] = {"played": {}, "policy": {}}
        for key, n in self.counts.items():
            where, _, status = key.partition(".")
            if "." in status or status == "decisions" or n == 0:
                continue
            name = {"act": "played", "estimate": "policy"}.get(where)
            if name is not None:
                out[name][status] = out[name].get(status, 0) + int(n)
        return {name: dict(sorted(kinds.items())) for name, kinds in out.items()}

    def invalid_rate(self) -> float:
        """Fraction of played decisions whose reply did not parse (0 when none were played)."""
        n = self.counts["act.decisions"]
        return 0.0 if n == 0 else 1.0 - self.counts["act.ok"] / n

    def reset_counts(self) -> None:
        self.counts.clear()
