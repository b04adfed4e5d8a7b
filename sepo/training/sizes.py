"""The size of a training run, checked from its settings before anything is built or written.

Besides the game's exact solver (`Game.exact_size`, checked first), a run holds:
- the tree of a repeated game's histories that its environment keeps: the joint-history DP over
  the states the policy remembers, twice (the solver's and the environment's own), or every whole
  history for an environment that declares `full_history_tree` (its training reach needs them);
- a step's sampled rollouts, `groups` x `group_size` of them, each as long as the game
  (`rollout_decisions`);
- for a language model, the prompts of the whole run (`steps` x `groups`), a step's completions,
  and the replies it reads to measure the model's played policy: at each step `table_samples` per
  information state, and at the end `final_samples` per state, each at most `MAX_SAMPLED_REPLIES`
  in all, the limit `sepo eval` reads under.
Each is estimated with `sepo.limits` and refused in one line that says what does not fit, the
estimate, the limit and the settings that would fit.
"""

from __future__ import annotations

from typing import Mapping

from sepo.errors import SepoError
from sepo.limits import count_text, memory_budget, refuse, rollout_batch_bytes, size_text

SHORT_GAME_DECISIONS = 8
"""The decisions a rollout is counted at in a game without a length parameter (a short game
has one or two of the agent's)."""

CLI_OPTIONS = {
    "groups": "--groups",
    "group_size": "--group-size",
    "rounds": "--rounds",
    "memory": "--memory",
    "table_samples": "--samples",
    "final_samples": "--final-samples",
    "steps": "--steps",
}
"""How the refusals name each setting (an experiment config names its own fields instead)."""

PROMPT_BYTES = 160
"""One entry of a language-model run's prompt list (steps x groups, built when training starts):
its text, its slot in the list and its row in the dataset."""
COMPLETION_BYTES = 16 << 10
"""One completion of a language-model step besides its tokens: its prompt's decision and context,
its reward and log record (the model's activations come on top, and depend on the model)."""
COMPLETION_TOKEN_BYTES = 64
"""One token of a completion: its id, mask and log-probability, in the trainer's tensors and copies."""


def rollout_decisions(game) -> int:
    """The most decisions of one training rollout: an extensive-form game's longest play
    (`max_game_length`), else a repeated game's rounds (on the game or its `rules`), else
    `SHORT_GAME_DECISIONS`."""
    longest = getattr(getattr(game, "pyspiel_game", None), "max_game_length", None)
    if callable(longest):
        return max(1, int(longest()))
    for source in (game, getattr(game, "rules", None)):
        rounds = getattr(source, "rounds", None)
        if isinstance(rounds, int) and not isinstance(rounds, bool):
            return max(1, rounds)
    return SHORT_GAME_DECISIONS


def _keeps_whole_histories(domain, language_model: bool) -> bool:
    from sepo.games.registry import resolved

    factories = [domain.training] + ([domain.llm_training] if language_model else [])
    return any(getattr(resolved(f), "full_history_tree", False) for f in factories if f is not None)


def tree_need(domain, game, language_model: bool = False) -> tuple[int, int, int | None] | None:
    """(bytes, states, memory) of the history tree a training run of `game` keeps; None for a game
    without one (no joint-history stage game)."""
    from sepo.metrics.repeated import tree_states

    stage_game, rounds = getattr(game, "stage_game", None), getattr(game, "rounds", None)
    if not callable(stage_game) or not isinstance(rounds, int):
        return None
    stage = stage_game(0)
    memory = None if _keeps_whole_histories(domain, language_model) else getattr(game, "memory", None)
    return (
        _bytes(stage, rounds, memory, getattr(game, "memory", None)),
        tree_states(stage, rounds, memory),
        memory,
    )


def _bytes(stage, rounds: int, memory: int | None, remembered: int | None) -> int:
    """A training tree of `memory` (None: whole histories) over a policy table of the information
    states that remember `remembered` rounds (each a Python decision)."""
    from sepo.metrics.repeated import tree_bytes, tree_states

    keys = None if remembered is None else tree_states(stage, min(remembered, rounds - 1) + 1)
    return tree_bytes(stage, rounds, memory, agent_states=keys, training=True)


def _most_rounds(
    stage, rounds: int, memory: int | None, remembered: int | None, budget: int, rollouts: int
) -> int:
    """The most rounds whose training tree and a step's `rollouts` (a decision a round) fit in
    `budget` (0 when none does)."""
    low, high = 0, rounds
    while low < high:
        middle = (low + high + 1) // 2
        if _bytes(stage, middle, memory, remembered) + rollout_batch_bytes(rollouts, middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def check_tree(
    domain, game, language_model: bool = False, options: Mapping[str, str] = CLI_OPTIONS, rollouts: int = 0
) -> int:
    """Refuse, in one line, a history tree that does not fit beside a step's `rollouts` (naming
    the rounds that would, and a smaller memory where one fits); returns the tree's estimated bytes
    (0 without one)."""
    found = tree_need(domain, game, language_model)
    if found is None:
        return 0
    need, states, memory = found
    budget = memory_budget()
    if need + (rollout_batch_bytes(rollouts, game.rounds) if rollouts else 0) <= budget:
        return need
    if (
        need <= budget
    ):  # the tree fits, the rollouts beside it do not: said by `check_rollouts`, with the rounds
        return need
    stage, rounds = game.stage_game(0), game.rounds
    kept = (
        "every whole history (the training reach needs them)"
        if memory is None
        else f"the last {memory} round{'s' if memory != 1 else ''} of history at each round"
    )
    fixes = []
    if memory is not None and memory > 0:
        smaller = next(
            (
                m
                for m in range(memory - 1, -1, -1)
                if _bytes(stage, rounds, m, m) + rollout_batch_bytes(rollouts, rounds) <= budget
            ),
            None,
        )
        if smaller is not None:
            fixes.append(f"{options['memory']} {smaller}" + (" or less" if smaller else ""))
    most = _most_rounds(stage, rounds, memory, getattr(game, "memory", None), budget, rollouts)
    if most >= 1:
        fixes.append(f"{options['rounds']} {most} or fewer")
    refuse(
        f"training in {game.name} keeps a tree of {kept}: {count_text(states)} states at {rounds:,} rounds, "
        "which",
        need,
        "use " + " or ".join(fixes) if fixes else "use a shorter game",
        budget,
    )
    return need


def check_rollouts(
    game, groups: int, group_size: int, held: int = 0, options: Mapping[str, str] = CLI_OPTIONS, domain=None
) -> None:
    """Refuse, in one line, a step's `groups` x `group_size` rollouts that would not fit beside the
    `held` bytes (the game's tree), naming the most groups that fit (and the rounds that would
    let these rollouts fit, in a repeated game)."""
    decisions = rollout_decisions(game)
    rollouts = groups * group_size
    need = rollout_batch_bytes(rollouts, decisions)
    budget = memory_budget() - held
    if need <= budget:
        return
    per_group = rollout_batch_bytes(group_size, decisions)
    fits = budget // per_group if budget > 0 else 0
    fixes = (
        [f"{options['groups']} {fits} or fewer"]
        if fits >= 1
        else [f"a smaller {options['group_size']} (a group of {group_size:,} alone does not fit)"]
    )
    found = tree_need(domain, game) if held and domain is not None else None
    if found is not None:
        most = _most_rounds(
            game.stage_game(0),
            game.rounds,
            found[2],
            getattr(game, "memory", None),
            memory_budget(),
            rollouts,
        )
        if most >= 1:
            fixes.append(f"{options['rounds']} {most} or fewer")
    fix = "use " + " or ".join(fixes)
    beside = f" beside the game's tree ({size_text(held)})" if held else ""
    refuse(
        f"a training step's {count_text(rollouts)} rollouts ({options['groups']} {groups} x "
        f"{options['group_size']} "
        f"{group_size:,}, up to {decisions:,} decisions each){beside}",
        need,
        fix,
        max(budget, 0),
    )


def check_language_model_batches(
    steps: int,
    groups: int,
    group_size: int,
    max_new_tokens: int,
    held: int = 0,
    options: Mapping[str, str] = CLI_OPTIONS,
) -> None:
    """Refuse, in one line, a language-model run whose prompt list (steps x groups) or one step's
    completions (groups x group_size, each up to `max_new_tokens`) would not fit; the model's own
    activations come on top (they depend on the model, loaded later), so this is at the least."""
    budget = memory_budget() - held
    prompts = steps * groups
    if prompts * PROMPT_BYTES > budget:
        refuse(
            f"the run's prompt list ({options['steps']} {steps} x {options['groups']} {groups} = "
            f"{count_text(prompts)} prompts)",
            prompts * PROMPT_BYTES,
            f"use fewer {options['steps']} or {options['groups']} "
            f"(at most {max(0, budget // PROMPT_BYTES):,} prompts)",
            max(budget, 0),
        )
    completion = COMPLETION_BYTES + COMPLETION_TOKEN_BYTES * max_new_tokens
    completions = groups * group_size
    if completions * completion > budget:
        fits = max(0, budget // (completion * group_size))
        refuse(
            f"a training step's {count_text(completions)} completions ({options['groups']} {groups} x "
            f"{options['group_size']} {group_size}, before the model's own activations)",
            completions * completion,
            f"use {options['groups']} {fits} or fewer"
            if fits >= 1
            else f"use a smaller {options['group_size']}",
            max(budget, 0),
        )


def read_states(config, game) -> tuple[int, int]:
    """(information states a step reads the model at, states the final read reads it at): the
    solver's; for an environment that focuses each read on drawn states (`focus`), the states it
    draws for a step of `config.groups` groups and for the final read."""
    import numpy as np

    from sepo.games.registry import get_domain, resolved
    from sepo.metrics.exact import exact_solver

    domain = get_domain(config.game)
    solver = None if callable(getattr(resolved(domain.llm_training), "focus", None)) else exact_solver(game)
    if solver is not None:
        states = _state_count(solver)
        return states, states
    from sepo.training.environment import build_environment

    train, collusive, exploiters = (
        config.pool_specs()
    )  # the environment's own solver (and its focus) names them
    env = build_environment(
        domain.llm_training, game, train, collusive, exploiters, config.charges, "language-model training"
    )
    focus = getattr(env, "focus", None)
    if not callable(focus):
        states = _state_count(env.solver)
        return states, states
    rng = np.random.default_rng([config.seed, 0x512E])
    counts = []
    for count in (config.groups, None):
        focus(rng, count)
        counts.append(_state_count(env.solver))
    return counts[0], counts[1]


def _state_count(solver) -> int:
    keys = getattr(solver, "keys", None)
    return len(keys) if keys is not None else len(solver.decisions())


def check_replies(states: int, samples: int, when: str, option: str) -> None:
    """Refuse, in one line, reading a model at `states` information states from `samples`
    sampled replies each, `when`, when that is more replies than `sepo eval` reads at most."""
    from sepo.policies.text_policy import MAX_SAMPLED_REPLIES

    count = states * samples
    if count <= MAX_SAMPLED_REPLIES:
        return
    fewer = MAX_SAMPLED_REPLIES // max(1, states)
    fix = (
        f"use {option} {fewer} or fewer (a wider interval)"
        if fewer >= 1
        else "train a game with fewer information states"
    )
    raise SepoError(
        f"training reads the model's played policy {when} at {states:,} information states from {samples:,} "
        f"sampled replies each ({option}): {count:,} model replies, more than the {MAX_SAMPLED_REPLIES:,} "
        f"`sepo eval` reads at most; {fix}"
    )


def check_plan(config, options: Mapping[str, str] = CLI_OPTIONS) -> None:
    """The whole training plan of `config` (a tabular or a language-model trainer's config),
    refused in one line where any part would not fit (module doc). Called by the configs'
    `validate`, before any run folder is made."""
    import json
    from dataclasses import asdict

    from sepo.games.registry import get_domain
    from sepo.metrics.exact import check_exact_size

    key = (
        type(config).__name__,
        json.dumps(asdict(config), sort_keys=True, default=str),
        tuple(sorted(options.items())),
    )
    if key in _CHECKED:  # a config is validated several times on its way to the trainer
        return
    domain = get_domain(config.game)
    game = domain.game(config.protocol, **config.game_params)
    check_exact_size(game)
    language_model = hasattr(config, "final_samples")
    held = check_tree(
        domain, game, language_model, options, 0 if language_model else config.groups * config.group_size
    )
    if not language_model:
        check_rollouts(game, config.groups, config.group_size, held, options, domain)
        _CHECKED.add(key)
        return
    check_language_model_batches(
        config.steps, config.groups, config.group_size, config.max_new_tokens, held, options
    )
    from sepo.policies.text_policy import MAX_SAMPLED_REPLIES

    per_state = (config.table_samples, config.final_samples)
    if not all(isinstance(n, int) and 1 <= n <= MAX_SAMPLED_REPLIES for n in per_state):
        return  # a count no read may take at all: the language-model config's own check names it
    step, final = read_states(config, game)
    check_replies(step, config.table_samples, "at every step", options["table_samples"])
    check_replies(final, config.final_samples, "at the end of the run", options["final_samples"])
    _CHECKED.add(key)


_CHECKED: set = set()
"""The plans this process has checked (a check may build the game's solver to count its states)."""
