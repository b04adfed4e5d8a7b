"""Best-response lower bounds in the three-item negotiation (the tree is too large to solve exactly).

The agent (seat 0) is scored by the adversarial gap max over opponents sigma of E[u_O - u_A] per
round. The opponent sees the pool, its own values and every demand; the agent's values are
hidden from it. With 64 pools, 36 value vectors per player and up to 125 demands per side and
round, the full tree has ~10^16 histories, so sepo reports the strongest *lower bound* it finds,
with the method that found it:

1. **Bounded-memory best response by DP over the opponent's observations** (`dp_best_response`).
   Suppose the agent's demand depends on the pool, its values, the round and only the last `m`
   rounds of the demand history (the parts it reads: its own demands, the other's, or both).
   Then a sufficient statistic of the opponent's observations is (round, that window, the
   posterior over the agent's values), and backward induction over it is exact:

       V_t(s)[w] = max_y  sum_{v,a} mu_s(v) pi(a | s, v) [deal(a, y) (y.w - a.v) + V_{t+1}(s')[w]]

   with s' = (window + (a, y), mu_s(v) pi(a | s, v) normalised) and w the opponent's own values
   (averaged afresh each round when they are redrawn, the paper's version). The agent is read
   once per state and value vector, at the decision of the first history that reaches the
   state, in one batched call per round. For the paper's bots, which declare the rounds and
   parts they read (`memory`, `reads`), for any agent that declares its memory otherwise (uniform
   play reads none), and for tables (a memory-m table reads m rounds, a whole-history table
   rounds − 1), the value is exact, and `lower_bound` reports it before any sampled search. For any other
   agent it is the value against the memory-m agent that plays like it at those decisions, and the maximiser
   found is then *played against the real agent*: the lower end of its measured gap's 95% interval is
   the lower bound. The DP's own value against the model is reported as
   `gap_vs_agent_model_not_a_bound`: it is no bound on the agent's gap (it may exceed it).
2. **Best response learned against the frozen agent** (`learned_best_response`): the agent plays
   `episodes` episodes against a seeded exploration opponent (half uniform demands, half the
   extremes: everything, nothing, one less, half); a memory-1 model of it is fitted (its demand
   frequencies given the round, pool, values and the opponent's last demand, backing off to
   fewer conditions where a combination was not seen), the DP above best-responds to the model
   exactly (its window holds the opponent's last demand, so the maximiser can steer an agent
   that reacts), and that opponent is played against the real agent; its measured gap bounds
   the true gap from below. Where the memory-1 DP exceeds its state budget the model drops the
   values. A memory-0 model is solved too, and the two maximisers are compared on separate
   episodes (a reacting agent needs the memory, an agent whose play depends on its values and
   not on the history is modelled better without it); the better one is then measured afresh,
   so the measured gap is unbiased. The method names the model used.

A sampled bound is a bound: the maximiser is chosen on one set of episodes and
measured on fresh ones, and the reported value is the lower end of the fresh measurement's 95%
interval (`measured_gap` and the interval are beside it). The mean of the chosen maximiser's
own selection episodes, or the larger of two noisy means, would be biased upward: on `--items
1,1,1 --rounds 2` five of six seeds reported more than the exact gap. `lower_bound` runs both
methods (an exact DP value where it applies and nothing else is needed), picks the larger of their
measurements and measures that opponent again on fresh episodes, naming the method. The table interface of
exact solvers (`sepo.metrics.exact`) does not fit this game (an agent table over every information state would
have ~10^8 rows), so the domain exposes these searches as `Domain.lower_bound(game, agent)` for `sepo exploit`
and the rigorous exploiter pool.
"""
from __future__ import annotations

import itertools
import zlib

import numpy as np

from sepo.errors import SepoError
from sepo.games.negotiation_gt.rules import NegotiationGame, make_decision
from sepo.limits import size_text
from sepo.metrics.exact import ExactResult, declared_memory
from sepo.policies.base import Policy
from sepo.policies.tabular import TabularPolicy
from sepo.policies.text_policy import reads_at_most

MAX_STATES = 60_000
"""Most DP states per round (summed over pools) before the search gives up on a memory."""
LEARNED_MAX_STATES = 15_000
"""The same for the learned best response's models (a larger model falls back to a smaller one:
on the full game a memory-1 model that splits the posterior over values by its sparse counts
would otherwise cost minutes per agent)."""
READ_CHUNK = 4096
"""Queries of the agent built and read at a time."""
STATE_OVERHEAD_BYTES = 2_000
"""Memory of a DP state besides its arrays (its key, window, posterior, path, dicts)."""
DP_READ_SAMPLES = 8
"""Sampled replies per state at which the bounded-memory DP reads an agent estimated from replies.
The DP only chooses the opponent; the bound is that opponent's gap measured in fresh play against
the agent itself, so a coarser read can weaken the bound, never make it wrong. At 32 replies the
read of a language model was 92% of a search's replies (every state's prompt is new: its round-2
states grow with the spread of the sampled demands); at 8, replayed on the same model's replies,
its read fell from 15,104 replies to 1,880."""
BOTH = ("own", "other")
MODEL_GAP = "gap_vs_agent_model_not_a_bound"
"""The DP's gap against the model of the agent it solved (a memory-m projection, or one learned
from play): what the maximiser would take if the agent were its model. Not a bound on the
agent's gap: the bound is the maximiser's measured gap against the agent itself."""


def _demands(pool) -> np.ndarray:
    return np.array(list(itertools.product(*(range(p + 1) for p in pool))), dtype=np.int64)


def _belief_key(mu: np.ndarray) -> bytes:
    return np.round(mu / mu.sum(), 10).tobytes()


class _Tree:
    """The DP over one pool: states per round, the agent's play at each, the maximiser."""

    def __init__(self, search: "DPSearch", pool: tuple[int, ...]):
        self.search, self.pool = search, pool
        self.Y = _demands(pool)
        self.Ys = [tuple(int(x) for x in y) for y in self.Y]
        # demand -> its row in Y (the agent's demands are the same set)
        self.index = {y: i for i, y in enumerate(self.Ys)}
        self.levels: list[dict] = []  # per round: key -> state dict
        self.choice: dict = {}  # key -> best opponent demand index per opponent value index


class _View:
    __slots__ = ("observation",)

    def __init__(self, observation):
        self.observation = observation


class DPSearch:
    """Backward induction over (round, window of the last `memory` rounds' read demands, posterior
    over the agent's values), for each pool; see the module docstring."""

    def __init__(self, game: NegotiationGame, memory: int = 1, reads=BOTH, max_states: int = MAX_STATES):
        if memory < 0:
            raise SepoError(f"--memory must be >= 0, got {memory}")
        self.game, self.rules = game, game.rules
        self.memory, self.reads, self.max_states = int(memory), tuple(reads), max_states
        self.V = [np.array(v) for v, _ in self.rules.value_distribution(self.rules.values)]
        self.pv = np.array([p for _, p in self.rules.value_distribution(self.rules.values)])
        self.W = np.array(
            [w for w, _ in self.rules.value_distribution(self.rules.opponent_values)], dtype=float
        )
        self.pw = np.array([p for _, p in self.rules.value_distribution(self.rules.opponent_values)])
        self.redraw = self.rules.redraw_opponent_values
        self.trees: dict[tuple, _Tree] = {}
        self.root_key = ((), _belief_key(self.pv))

    def _window(self, window, a, y) -> tuple:
        if self.memory == 0:
            return ()
        part = tuple(x for name, x in (("own", tuple(a)), ("other", tuple(y))) if name in self.reads)
        return (window + (part,))[-self.memory:]

    # -- forward: states and the agent's play -----------------------------------------------------
    def expand(self, agent: Policy, what: str | None = None) -> None:
        """The states of every round and the agent's play at each, round by round (a progress
        count per round); refused with "states in" (the callers' cue to try a smaller model) when a
        round exceeds `max_states` or all rounds so far exceed the memory budget."""
        from sepo import progress
        from sepo.limits import memory_budget

        rules = self.rules
        pools = rules.pools()
        roots = {}
        for pool, _ in pools:
            tree = _Tree(self, pool)
            self.trees[pool] = tree
            roots[pool] = {self.root_key: {"window": (), "mu": self.pv.copy(), "path": ()}}
        frontier, held, budget = roots, 0, memory_budget()
        with progress.counting(what or f"memory-{self.memory} DP: rounds expanded", rules.rounds) as advance:
            for t in range(rules.rounds):
                count = sum(len(level) for level in frontier.values())
                if count > self.max_states:
                    raise SepoError(
                        f"the memory-{self.memory} DP has {count:,} states in round {t + 1} (limit "
                        f"{self.max_states:,})"
                    )
                held += self._round_bytes(frontier)
                if held > budget:
                    raise SepoError(
                        f"the memory-{self.memory} DP has {count:,} states in round {t + 1}, about "
                        f"{size_text(held)} for rounds 1-{t + 1}, more than the {size_text(budget)} this "
                        "machine can spare"
                    )
                self._read_agent(agent, frontier)
                following, self._budget = {}, self.max_states
                for pool, level in frontier.items():
                    tree = self.trees[pool]
                    tree.levels.append(level)
                    if t + 1 < rules.rounds:
                        following[pool] = self._children(tree, level)
                        self._budget -= len(following[pool])
                frontier = following
                advance(1)

    def _round_bytes(self, frontier: dict) -> int:
        """An upper bound on the memory a round's states will hold, before the agent is read:
        per state one row of the agent's play per value with mass over the pool's demands (rows a
        model shares are counted each time) and the child index table [demands, demands]."""
        total = 0
        for pool, level in frontier.items():
            demands = int(np.prod([p + 1 for p in pool]))
            columns = demands if self.memory and "other" in self.reads else 1
            for state in level.values():
                total += (
                    STATE_OVERHEAD_BYTES
                    + 8 * demands * int(np.count_nonzero(state["mu"]))
                    + 4 * demands * columns
                )
        return total

    def _read_agent(self, agent: Policy, frontier: dict) -> None:
        """pi(a | state, v) for every state of this round and every agent value with mass, read in
        chunks of `READ_CHUNK` queries (the queries of a whole round held at once were most of the
        peak memory: 8,484 states x 36 values)."""
        sparse = getattr(agent, "demand_distribution", None)
        build = self._view if callable(sparse) else self._decision
        where = []
        for pool, level in frontier.items():
            for key, state in level.items():
                state["support"], state["probs"] = None, {}
                where.extend((state, vi, pool) for vi in np.nonzero(state["mu"] > 0)[0])
        for start in range(0, len(where), READ_CHUNK):
            chunk = where[start:start + READ_CHUNK]
            queries = [build(pool, self.V[vi], state["path"]) for state, vi, pool in chunk]
            if callable(sparse):
                rows = [sparse(d) for d in queries]
            else:
                rows = [{self.rules.decode(a): p for a, p in probs.items() if p > 0}
                        for probs in agent.batch_action_probabilities(queries)]
            # a row object met again (a model's shared distribution) is converted once
            converted: dict[int, np.ndarray] = {}
            for (state, vi, pool), row in zip(chunk, rows):
                if id(row) not in converted:
                    tree = self.trees[pool]
                    # over the pool's demands: 8 bytes a demand, not a dict entry's ~130
                    vector = np.zeros(len(tree.Ys))
                    for a, p in row.items():
                        if p > 0:
                            vector[tree.index[tuple(int(x) for x in a)]] = float(p)
                    converted[id(row)] = vector
                state["probs"][int(vi)] = converted[id(row)]

    def _view(self, pool, values, path):
        """What a scripted bot reads (its `demand_distribution` needs only the observation); the
        full `Decision` is built for every other agent."""
        rules = self.rules
        history = tuple((a, y, rules.deal(pool, a, y)) for a, y in path)
        values = tuple(int(v) for v in values)
        return _View(
            {
                "round": len(path) + 1,
                "rounds": rules.rounds,
                "pool": pool,
                "values": values,
                "first_values": values,
                "total": rules.total,
                "history": history,
            }
        )

    def _decision(self, pool, values, path):
        rules = self.rules
        history = tuple((a, y, rules.deal(pool, a, y)) for a, y in path)
        mine = tuple(float(np.dot(a, values)) if deal else 0.0 for a, _, deal in history)
        return make_decision(self.game, 0, pool, tuple(int(v) for v in values), history, my_payoffs=mine)

    def _children(self, tree: _Tree, level: dict) -> dict:
        """The next round's states; each state's `child[j, y]` is the index (in the next level's
        order) of the state after the agent's j-th demand and the opponent's y-th, one column when
        the window does not hold the opponent's demand. The joint mass J is dropped (the backward
        pass recomputes it): kept for every state it was most of the DP's memory."""
        children: dict = {}
        index: dict = {}
        for key, state in level.items():
            self._children_only(tree, state)
            support, J = state["support"], state.pop("J")
            beliefs = [_belief_key(J[:, j]) if J[:, j].sum() > 0 else None for j in range(len(support))]
            ys = tree.Ys if self.memory and "other" in self.reads else tree.Ys[:1]
            if len(children) + len(support) * len(ys) > self._budget and len(children) > self._budget - len(
                support
            ) * len(ys):
                raise SepoError(
                    f"the memory-{self.memory} DP has more than {self.max_states:,} states in a round"
                )
            # a demand the agent never makes: row unused (mass 0)
            child = np.zeros((len(support), len(ys)), dtype=np.int32)
            for j, a in enumerate(support):
                if beliefs[j] is None:
                    continue
                for yi, y in enumerate(ys):
                    ckey = (self._window(state["window"], a, y), beliefs[j])
                    if ckey not in children:
                        index[ckey] = len(children)
                        children[ckey] = {
                            "window": ckey[0],
                            "mu": J[:, j] / J[:, j].sum(),
                            "path": state["path"] + ((a, y),),
                        }
                    child[j, yi] = index[ckey]
            state["child"] = child
        return children

    # -- backward: the maximiser ------------------------------------------------------------------
    def solve(self) -> dict:
        """Per pool the root values per unit mass; fills each tree's `choice` table."""
        totals = np.zeros(3)  # gap, agent payoff, opponent payoff (sums over rounds, expectations)
        for pool, p_pool in self.rules.pools():
            tree = self.trees[pool]
            following = None  # [states of the next round in level order, 3, opponent values]
            for t in reversed(range(self.rules.rounds)):
                values = [
                    self._state_value(tree, state, key, following, t) for key, state in tree.levels[t].items()
                ]
                following = np.stack(values)
                # the opponent's values are drawn afresh: each child is worth its average over them
                if self.redraw:
                    following = np.broadcast_to((following @ self.pw)[..., None], following.shape)
            totals += p_pool * (values[0] @ self.pw)  # the root
        T = self.rules.rounds
        return {"gap": totals[0] / T, "agent": totals[1] / T, "opponent": totals[2] / T}

    def _state_value(self, tree: _Tree, state: dict, key, following, t) -> np.ndarray:
        """[3, opponent values]: gap, agent and opponent payoff-to-go per unit mass, maximiser's choice."""
        if state.get("support") is None or "J" not in state:
            self._children_only(tree, state)
        support, J = state["support"], state.pop("J")
        A = np.array(support, dtype=np.int64).reshape(len(support), 3)
        pool = np.array(tree.pool)
        deal = np.all(A[:, None, :] + tree.Y[None, :, :] <= pool, axis=2).astype(float)  # [A, Y]
        mass_a = J.sum(0)  # [A]
        agent_a = np.einsum("va,va->a", J, np.array([[float(np.dot(a, v)) for a in support] for v in self.V]))
        opp_now = (mass_a @ deal)[:, None] * (tree.Y @ self.W.T)  # [Y, W]
        agent_now = (deal.T @ agent_a)[:, None] * np.ones(len(self.W))  # [Y, W]
        q = np.stack([opp_now - agent_now, agent_now, opp_now])  # [3, Y, W]
        if following is not None:
            # [3, Y or 1, W]: one column when the child does not depend on the opponent's demand
            q = q + np.einsum("a,ayzw->zyw", mass_a, following[state["child"]])
        best = q[0].argmax(0)  # [W]
        tree.choice[(t, key)] = best
        mass = state["mu"].sum()
        return q[:, best, np.arange(len(self.W))] / mass

    def _children_only(self, tree, state) -> None:
        """A state's support (the agent's demands it may see) and joint mass J[value, demand]; all a
        state of the last round needs (it has no children)."""
        rows = list(state["probs"].items())
        columns = np.nonzero(np.any(np.stack([row for _, row in rows]) > 0, axis=0))[0]
        J = np.zeros((len(self.V), len(columns)))
        for vi, row in rows:
            J[vi] = state["mu"][vi] * row[columns]
        state["support"], state["J"] = [tree.Ys[i] for i in columns], J

    def policy(self) -> "DPOpponent":
        return DPOpponent(self)


class DPOpponent(Policy):
    """The maximiser as a stateless policy for the opponent's seat: it rebuilds its DP state (the
    window and the posterior over the agent's values) from the history it sees, using the agent's
    play the DP read. Histories the DP never reached (the agent left the model's support) get
    FairNeg's demand, half of each item."""

    name = "BestResponse"
    classifier = {"stochastic": False}

    def __init__(self, search: DPSearch):
        self.search = search
        self.states = {pool: [level for level in tree.levels] for pool, tree in search.trees.items()}
        self.choices = {pool: tree.choice for pool, tree in search.trees.items()}

    def _key(self, pool, history):
        search = self.search
        levels = self.states[pool]
        key = search.root_key
        for t, (own, other, _) in enumerate(history):
            state = levels[t].get(key)
            if state is None:
                return None
            a, y = tuple(other), tuple(own)
            column = search.trees[pool].index.get(a)
            if column is None:
                return None
            mu = np.array([state["mu"][vi] * state["probs"][vi][column] if vi in state["probs"] else 0.0
                           for vi in range(len(search.V))])
            if mu.sum() <= 0:
                return None
            key = (search._window(state["window"], a, y), _belief_key(mu))
        return key if key in levels[len(history)] else None

    def demand(self, decision) -> tuple[int, ...]:
        obs = decision.observation
        pool = tuple(obs["pool"])
        key = self._key(pool, obs["history"]) if pool in self.states else None
        if key is None:
            return tuple(p // 2 for p in pool)
        wi = [tuple(int(x) for x in w) for w in self.search.W].index(tuple(obs["values"]))
        best = self.choices[pool][(len(obs["history"]), key)][wi]
        return tuple(int(x) for x in self.search.trees[pool].Y[best])

    def action_probabilities(self, decision):
        target = self.search.rules.encode(self.demand(decision))
        return {a: float(a == target) for a in decision.legal_actions}

    def to_json(self, limit: int = 200) -> dict:
        """A few of the maximiser's choices: per pool, round and state, its demand per own value vector."""
        out, shown = {"opponent_values": [list(map(int, w)) for w in self.search.W], "choices": []}, 0
        for pool, choices in self.choices.items():
            for (t, key), best in choices.items():
                if shown >= limit:
                    out["truncated_after"] = limit
                    return out
                Y = self.search.trees[pool].Y
                out["choices"].append(
                    {
                        "pool": list(pool),
                        "round": t + 1,
                        "window": [list(map(list, w)) for w in key[0]],
                        "demand_by_own_values": [list(map(int, Y[b])) for b in best],
                    }
                )
                shown += 1
        return out


def measured_gap(game: NegotiationGame, agent: Policy, opponent: Policy, episodes: int, seed: int,
                 purpose: str = "measure") -> dict:
    """The opponent's gap over the agent, per round, over `episodes` played episodes (95% interval).
    Each `purpose` (selecting, measuring, re-measuring) plays its own episodes, agent draws included."""
    from sepo.evaluation.play import play_episodes

    draws = np.random.SeedSequence([seed, zlib.crc32(purpose.encode())]).generate_state(episodes + 1)
    played = play_episodes(
        game,
        agent,
        [opponent] * episodes,
        [int(s) for s in draws[:episodes]],
        agent_seed=int(draws[-1]),
        opponent_label="BestResponse",
    )
    gaps = np.array([(e.opponent_payoffs - e.agent_payoffs).mean() for e in played])
    half = 1.96 * gaps.std(ddof=1) / np.sqrt(len(gaps)) if len(gaps) > 1 else float("inf")
    return {"gap": float(gaps.mean()), "ci": [float(gaps.mean() - half), float(gaps.mean() + half)],
            "agent": float(np.mean([e.agent_payoffs.mean() for e in played])),
            "opponent": float(np.mean([e.opponent_payoffs.mean() for e in played])), "episodes": episodes}


def _bound(played: dict, method: str, extra: dict) -> ExactResult:
    """A measured maximiser's lower bound: the lower end of its measured gap's 95% interval, with
    the measured mean and the interval beside it."""
    return ExactResult(
        value=played["ci"][0],
        value_name="adversarial_gap",
        br_payoff=played["opponent"],
        agent_payoff=played["agent"],
        method=method,
        exact=False,
        extra={
            **extra,
            "measured_gap": played["gap"],
            "ci_low": played["ci"][0],
            "ci_high": played["ci"][1],
            "measured_episodes": played["episodes"],
        },
    )


def check_search_fits(game: NegotiationGame) -> None:
    """Refuse, in one line with the rounds that fit, a game whose smallest search (memory 0, one
    state per pool and round, every agent value read) would not fit in the memory budget: each
    search keeps every round's states for the maximiser to play from."""
    from sepo.limits import memory_budget

    search = DPSearch(game, 0)
    per_round = sum(
        STATE_OVERHEAD_BYTES + 8 * len(_demands(pool)) * len(search.V) for pool, _ in game.rules.pools()
    )
    budget = memory_budget()
    rounds = game.rules.rounds
    if per_round * rounds > budget:
        fits = budget // per_round
        raise SepoError(
            f"the best-response search over {rounds:,} rounds would hold about "
            f"{size_text(per_round * rounds)} (its smallest model: {size_text(per_round)} a round) and this "
            f"machine can spare {size_text(budget)}; use --rounds {fits} or fewer"
            + ("" if game.rules.pool is not None else " or a fixed --items pool")
        )


def dp_best_response(game: NegotiationGame, agent: Policy, memory: int | None = None, episodes: int = 200,
                     seed: int = 0) -> tuple[ExactResult, Policy]:
    """Method 1 (see the module docstring). Exact when the agent declares that it reads at most
    `memory` rounds (the paper's bots); otherwise the measured gap of the maximiser found."""
    declared = getattr(agent, "memory", "undeclared")
    if declared == "undeclared" and declared_memory(agent) is not None:
        declared = declared_memory(agent)  # e.g. uniform play, which reads no round (memory 0)
    if declared == "undeclared" and isinstance(agent, TabularPolicy):
        # its rows are the game's keys: the last m rounds, or the whole history (rounds − 1 of them)
        declared = game.rules.memory if game.rules.memory is not None else max(game.rules.rounds - 1, 0)
    exact = isinstance(declared, int)
    m = declared if exact else (0 if memory is None else memory)
    reads = getattr(agent, "reads", BOTH)
    search = DPSearch(game, m, reads)
    sampled = getattr(agent, "samples", None)
    with reads_at_most(agent, DP_READ_SAMPLES):
        search.expand(agent, f"memory-{m} best response: rounds expanded")
    solved = search.solve()
    opponent = search.policy()
    played = measured_gap(game, agent, opponent, episodes, seed)
    what = "/".join(reads)
    method = (
        f"bounded-memory best response: DP over the opponent's observations (round, last {m} rounds of "
        f"{what} demands, posterior over the agent's values)"
    )
    if exact:
        return ExactResult(
            value=solved["gap"],
            value_name="adversarial_gap",
            br_payoff=solved["opponent"],
            agent_payoff=solved["agent"],
            method=method + f"; exact: the agent declares memory {m}",
            exact=True,
            extra={
                "measured_gap": played["gap"],
                "measured_ci_low": played["ci"][0],
                "measured_ci_high": played["ci"][1],
                "memory": m,
            },
        ), opponent
    coarse = isinstance(sampled, int) and sampled > DP_READ_SAMPLES
    return _bound(
        played,
        method + (f"; the agent read from {DP_READ_SAMPLES} sampled replies per state" if coarse else "")
        + f"; a lower bound: the lower end of the 95% interval of the gap the maximiser for the "
        f"memory-{m} model took over {episodes} episodes against the agent",
        {MODEL_GAP: solved["gap"], "memory": m, **({"dp_read_samples": DP_READ_SAMPLES} if coarse else {})},
    ), opponent


class ExplorationOpponent(Policy):
    """The probe of the learned best response: each round half the mass on a uniformly random
    demand, half on the extremes a best response tends to use (everything, nothing, one less of
    each item, half of each), so the agent's reaction to every kind of last demand is seen."""

    name = "exploration"

    def action_probabilities(self, decision):
        pool = decision.observation["pool"]
        legal = decision.legal_actions
        probs = {a: 0.5 / len(legal) for a in legal}
        extremes = {
            tuple(pool),
            (0,) * len(pool),
            tuple(max(p - 1, 0) for p in pool),
            tuple(p // 2 for p in pool),
        }
        for demand in extremes:
            probs[decision.action_named("[" + ", ".join(map(str, demand)) + "]")] += 0.5 / len(extremes)
        return probs


class _Model(Policy):
    """The frozen agent's observed demands, given the round, the pool, its values and (memory 1)
    the last round's demands it is modelled to read, backing off to fewer conditions where a
    combination was not seen: (values, window), (window), (values), (), then uniform. With
    `use_values` False it never conditions on the agent's values (so the opponent's posterior
    over them never moves, and the DP stays small)."""

    name = "model"

    def __init__(self, counts: dict, memory: int, reads, use_values: bool = True):
        self.counts, self.memory, self.reads, self.use_values = counts, memory, tuple(reads), use_values
        self._rows: dict = {}  # one distribution object per condition: the DP stores it once, not per state

    @staticmethod
    def window(obs, memory: int, reads) -> tuple:
        if not memory or not obs["history"]:
            return ()
        own, other, _ = obs["history"][-1]
        return tuple(
            tuple(int(x) for x in part) for name, part in (("own", own), ("other", other)) if name in reads
        )

    def keys(self, obs, memory=None, use_values=None) -> list[tuple]:
        """Most specific first: the conditions a demand is counted under and looked up by."""
        memory = self.memory if memory is None else memory
        use_values = self.use_values if use_values is None else use_values
        base = (obs["round"], tuple(obs["pool"]))
        values = tuple(obs["values"])
        window = self.window(obs, memory, self.reads)
        found = []
        if window:
            found += ([base + ("v", values, "w", window)] if use_values else []) + [base + ("w", window)]
        found += ([base + ("v", values)] if use_values else []) + [base]
        return found

    def demand_distribution(self, decision):
        obs = decision.observation
        for key in self.keys(obs):
            counts = self.counts.get(key)
            if counts:
                if key not in self._rows:
                    total = sum(counts.values())
                    self._rows[key] = {d: c / total for d, c in counts.items()}
                return self._rows[key]
        pool = tuple(obs["pool"])
        if pool not in self._rows:
            demands = list(itertools.product(*(range(p + 1) for p in pool)))
            self._rows[pool] = {d: 1.0 / len(demands) for d in demands}
        return self._rows[pool]

    def action_probabilities(self, decision):
        probs = {a: 0.0 for a in decision.legal_actions}
        for d, p in self.demand_distribution(decision).items():
            probs[decision.action_named("[" + ", ".join(map(str, d)) + "]")] += p
        return probs


def learned_best_response(
    game: NegotiationGame,
    agent: Policy,
    episodes: int = 500,
    seed: int = 0,
    memory: int = 1,
    reads=("other",),
) -> tuple[ExactResult, Policy]:
    """Method 2 (see the module docstring): a memory-`memory` model of the agent (its demand
    distribution given the round, pool, values and the last round's `reads` demands) from play
    against a seeded exploration opponent, the exact DP against the model, the maximiser played
    against the agent. Models are tried from the richest down (memory m with the values, m
    without them, then memory 0) until the DP fits in its state budget; the method names the one."""
    from sepo import progress
    from sepo.evaluation.play import play_episodes

    if memory not in (0, 1):
        raise SepoError(f"the learned best response models memory 0 or 1, got {memory}")
    check_search_fits(game)
    seeds = [int(s) for s in np.random.SeedSequence([seed, 3]).generate_state(episodes)]
    probe = ExplorationOpponent()
    progress.stage(
        f"learned best response: the agent plays {episodes} episodes against the exploration opponent"
    )
    explored = play_episodes(
        game, agent, [probe] * episodes, seeds, agent_seed=seed + 5, opponent_label="exploration"
    )
    counts: dict = {}
    counter = _Model({}, memory, reads)
    for episode in explored:
        for d in episode.decisions:
            demand = game.rules.decode(d.action)
            for key in counter.keys(d.observation, memory, True):
                row = counts.setdefault(key, {})
                row[demand] = row.get(demand, 0) + 1
    progress.stage("learned best response: the DP against each model of the agent")
    candidates = []  # (model memory, conditions on values, search): per memory the richest model that fits
    for m, use_values in dict.fromkeys([(memory, True), (memory, False), (0, True), (0, False)]):
        if any(m == c[0] for c in candidates):
            continue
        search = DPSearch(game, m, reads, max_states=LEARNED_MAX_STATES)
        what = (
            f"learned best response: memory-{m} model{' with values' if use_values else ''}, rounds expanded"
        )
        try:
            search.expand(_Model(counts, m, reads, use_values), what)
        except SepoError as error:
            if "states in" not in str(error):
                raise
            continue
        candidates.append((m, use_values, search))
    progress.stage("learned best response: solving the models and measuring their maximisers")
    solved = [search.solve() for _, _, search in candidates]
    chosen, selection = 0, []
    if len(candidates) > 1:  # pick on separate episodes, so that the reported measurement is unbiased
        selection = [
            measured_gap(game, agent, search.policy(), max(episodes // 4, 2), seed, "learned: select")["gap"]
            for _, _, search in candidates
        ]
        chosen = int(np.argmax(selection))
    m, use_values, search = candidates[chosen]
    opponent = search.policy()
    played = measured_gap(game, agent, opponent, max(episodes // 2, 2), seed, "learned: measure")
    what = f"memory-{m} model (its demands given the round, pool{', its values' if use_values else ''}" + \
           (f" and the last round's {'/'.join(reads)} demands)" if m else ")")
    picked = (
        f"; chosen over the memory-{candidates[1 - chosen][0]} model by its gap on {max(episodes // 4, 2)} "
        "other episodes"
        if selection
        else ""
    )
    extra = {MODEL_GAP: solved[chosen]["gap"], "model_memory": m}
    if selection:
        extra.update({f"selection_gap_memory_{c[0]}_model": g for c, g in zip(candidates, selection)})
    return _bound(
        played,
        f"learned best response (a lower bound): exact DP against a {what} of the agent, fit on {episodes} "
        f"episodes against a seeded exploration opponent{picked}, played {played['episodes']} fresh episodes "
        "(the bound is the lower end of their 95% interval)",
        extra,
    ), opponent


def lower_bound(
    game: NegotiationGame, agent: Policy, episodes: int = 100, seed: int = 0, memory: int | None = None
) -> tuple[ExactResult, Policy]:
    """The strongest lower bound of both methods on the agent's adversarial gap, with the method
    named: an exact DP value where the DP applies exactly; otherwise the opponent whose measured
    gap was larger, measured again on `episodes` fresh episodes (choosing the larger of two noisy
    means and reporting it would be biased upward), the bound the lower end of that interval."""
    from sepo import progress

    check_search_fits(game)
    found = []
    progress.stage("bounded-memory best response")
    try:
        found.append(dp_best_response(game, agent, memory, episodes, seed))
    except SepoError as error:
        if "states in" not in str(error):
            raise
    if found and found[0][0].exact:
        return found[0]
    found.append(learned_best_response(game, agent, max(2 * episodes, 2), seed))
    if len(found) == 1:
        return found[0]
    result, opponent = max(found, key=lambda pair: pair[0].extra["measured_gap"])
    played = measured_gap(game, agent, opponent, max(episodes, 2), seed, "lower bound: re-measure the chosen")
    kept = {
        k: v
        for k, v in result.extra.items()
        if k not in ("measured_gap", "ci_low", "ci_high", "measured_episodes")
    }
    others = {
        f"other_method_measured_gap_{i}": r.extra["measured_gap"]
        for i, (r, _) in enumerate(found)
        if r is not result
    }
    method = (
        f"{result.method}; chosen as the larger of the two methods' measured gaps, then played "
        f"{played['episodes']} fresh episodes (the bound is the lower end of their 95% interval)"
    )
    return _bound(
        played, method, {**kept, "selection_measured_gap": result.extra["measured_gap"], **others}
    ), opponent
