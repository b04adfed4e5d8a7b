"""sepo's domains as Inspect tasks: `inspect eval sepo/<domain> --model PROVIDER/MODEL`.

A thin adapter (needs the `inspect` extra, `pip install 'sepo[inspect]'`; imported only here). One
task per registered domain, named after it and registered through the `inspect_ai` entry point
(`sepo._registry`). Its one sample is one sepo audit of the model Inspect evaluates:

- the **solver** plays the domain's episodes through sepo's text view and strict parser against a
  named pool (`pool`: train, exploiter or collusive; by default all three, as `sepo eval`), each
  decision one chat [system, user] sent to Inspect's model, failed replies handled by the named
  failure rule, then reads the agent's played policy at the solver's information states, exactly
  as `sepo eval` does (one code path: `sepo.evaluation.evaluate.evaluate`);
- the **scorer** reports sepo's metrics as the score's values (utility against the train pool,
  the pool exploit score, the exact exploitability or adversarial gap of the played policy where
  the domain has an exact solver, the invalid-action rate, safety) and puts the whole sepo result
  (intervals, label of the policy reading, notes) in the score's metadata.

Why a bridge: sepo's play loop is synchronous (it batches decisions per turn) and Inspect's model
is asynchronous, so the audit runs in a worker thread and each batch of chats goes back to
Inspect's event loop (`anyio.from_thread.run`), where the requests run concurrently; Inspect then
logs every model call, its tokens and its retries as for any task.
"""
from __future__ import annotations

import json
import math
from typing import Any, Sequence

from sepo.errors import SepoError
from sepo.games.base import Decision, TextView
from sepo.policies.replies import Decoding, Reply
from sepo.policies.text_policy import DEFAULT_REPROMPTS

SCORED = ("utility", "exploit_pool", "exact_value", "invalid_action_rate", "safety")
"""The score's values, in every domain: `exact_value` is the domain's exact exploitability
(zero-sum) or adversarial gap (general-sum) of the played policy, NaN where the domain has no
exact solver or the audit was refused; which one, and how it was read, is the score's answer."""
POOLS = ("train", "exploiter", "collusive")


def _inspect():
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise SepoError("Inspect tasks need inspect_ai: pip install 'sepo[inspect]'") from None


class InspectModelSource:
    """A `ReplySource` whose replies come from the model Inspect is evaluating (see module doc).
    Called from the audit's worker thread; every call's chats go out concurrently on Inspect's
    event loop. `finished` is Inspect's `stop_reason == "stop"`: a reply cut at the token limit is
    `truncated`, never read for an action."""

    def __init__(self, model, view: TextView, decoding: Decoding):
        self.model, self.text, self.decoding = model, view, decoding
        self.name = f"inspect:{model}"

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        return self.chat_replies([[{"role": "system", "content": self.text.system_prompt()},
                                   {"role": "user", "content": self.text.user_prompt(d)}] for d in decisions], n, seed)

    def chat_replies(self, chats: Sequence[list[dict]], n: int, seed: int) -> list[list[Reply]]:
        import anyio.from_thread
        import numpy as np

        seeds = [[int(np.random.SeedSequence([seed % 2**63, i, k]).generate_state(1)[0] & 0x7FFFFFFF) for k in range(n)]
                 for i in range(len(chats))]
        return anyio.from_thread.run(self._generate_all, list(chats), seeds)

    async def _generate_all(self, chats: list[list[dict]], seeds: list[list[int]]) -> list[list[Reply]]:
        import anyio

        out: list[list[Reply | None]] = [[None] * len(s) for s in seeds]

        async def one(i: int, k: int) -> None:
            out[i][k] = await self._generate(chats[i], seeds[i][k])

        async with anyio.create_task_group() as group:
            for i, row in enumerate(seeds):
                for k in range(len(row)):
                    group.start_soon(one, i, k)
        return out  # type: ignore[return-value]

    async def _generate(self, chat: list[dict], seed: int) -> Reply:
        from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser, GenerateConfig

        kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
        d = self.decoding
        config = GenerateConfig(temperature=d.temperature, top_p=d.top_p if d.top_p < 1 else None,
                                top_k=d.top_k or None, max_tokens=d.max_new_tokens,
                                seed=None if d.greedy else seed)
        output = await self.model.generate([kinds[m["role"]](content=m["content"]) for m in chat], config=config)
        usage = output.usage
        return Reply(output.completion, output.stop_reason == "stop", getattr(usage, "input_tokens", 0) or 0,
                     getattr(usage, "output_tokens", 0) or 0)


def audit_task(domain: str, pool: str | None = None, episodes: int = 20, seed: int = 0, protocol: str = "rigorous",
               temperature: float = 0.0, max_tokens: int = 48, samples: int = 64, failure_rule: str = "fallback",
               reprompts: int = DEFAULT_REPROMPTS, replicates: int = 1000, game_params: dict | None = None):
    """The Inspect `Task` that audits the evaluated model in `domain` (see module doc). Defaults:
    greedy decoding (so the played policy is read exactly), the `fallback` failure rule (the
    paper's forced decoding needs the model's next-token log-probabilities, which Inspect's
    providers do not all give)."""
    _inspect()
    from inspect_ai import Task
    from inspect_ai.dataset import Sample

    from sepo.evaluation.evaluate import EvalConfig
    from sepo.games import load_game
    from sepo.opponents.pools import default_pools
    from sepo.policies.replies import decoding_for
    from sepo.policies.text_policy import TextAgentOptions

    if pool is not None and pool not in POOLS:
        raise SepoError(f"unknown pool {pool!r}; use one of {', '.join(POOLS)} (or none: all three)")
    game = load_game(domain, protocol, **(game_params or {}))
    options = TextAgentOptions(decoding_for(protocol, temperature=temperature, max_new_tokens=max_tokens), samples,
                               failure_rule, seed, reprompts)
    pools = None
    if pool is not None:
        pools = {name: (specs if name == pool else []) for name, specs in default_pools(game.name, protocol, game).items()}
    config = EvalConfig(protocol=protocol, episodes=episodes, seed=seed, pools=pools, replicates=replicates).validate()
    sample = Sample(input=game.text.system_prompt(), id=f"{game.name}-{pool or 'all'}-seed{seed}",
                    metadata={"game": game.name, "pool": pool or "all", "protocol": protocol, "episodes": episodes})
    return Task(dataset=[sample], solver=play_audit(game, options, config), scorer=sepo_metrics(),
                metadata={"sepo_game": game.name, "decoding": options.decoding.record(), "failure_rule": failure_rule})


def play_audit(game, options, config):
    """The solver: one sepo audit of the evaluated model (`evaluate`, in a worker thread)."""
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.solver import solver

    @solver(name="sepo_play_audit")
    def make():
        async def solve(state, generate):
            import anyio.to_thread

            from sepo.evaluation.evaluate import evaluate
            from sepo.policies.text_policy import TextPolicy

            model = get_model()
            source = InspectModelSource(model, game.text, options.decoding)
            agent = TextPolicy(source, failure_rule=options.failure_rule, samples=options.samples, seed=options.seed,
                               reprompts=options.reprompts, name=str(model))
            result = await anyio.to_thread.run_sync(lambda: evaluate(game, agent, config))
            result["agent"] = f"inspect:{model}"
            state.metadata["sepo"] = json.loads(json.dumps(result, default=_jsonable))
            state.output = ModelOutput.from_content(model=str(model), content=_summary(result))
            return state

        return solve

    return make()


def sepo_metrics():
    """The scorer: sepo's headline metrics as the score's values (NaN where the audit has none),
    the whole sepo result as its metadata."""
    from inspect_ai.scorer import Score, mean, scorer

    @scorer(name="sepo_metrics", metrics={name: [mean()] for name in SCORED})
    def make():
        async def score(state, target):
            result = state.metadata["sepo"]
            values = {name: _value(result.get(name)) for name in SCORED if name != "exact_value"}
            value_name = result.get("exact_value")
            values["exact_value"] = _value(result.get(value_name)) if value_name else float("nan")
            policy = (result.get("policy") or {}).get("policy")
            answer = f"{value_name} ({result.get('exact_label')}) of the {policy} policy" if value_name else None
            return Score(value=values, answer=answer, explanation=_summary(result), metadata=result)

        return score

    return make()


def _value(value) -> float:
    return float("nan") if value is None else float(value)


def _jsonable(value: Any):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _summary(result: dict) -> str:
    names = [n for n in SCORED if n != "exact_value"] + ([result["exact_value"]] if result.get("exact_value") else [])
    parts = [f"{name} {result[name]:.4f}" for name in names if isinstance(result.get(name), float)
             and not math.isnan(result[name])]
    label = (result.get("policy") or {}).get("read")
    return f"{result['game']}: " + ", ".join(parts) + (f" (policy read: {label})" if label else "")


def register_tasks() -> list[str]:
    """One Inspect task per registered domain, named after it (`sepo/<domain>` once sepo is an
    installed package); returns the names."""
    _inspect()
    from inspect_ai import task

    from sepo.games import domain_names

    from inspect_ai._util.registry import registry_info

    for name in domain_names():
        registered = task(name=name)(_task_for(name))
        if registry_info(registered).name != f"sepo/{name}":
            # Inspect prefixes the package's name only when it finds sepo's installed metadata; run
            # from a checkout, the source tree's `sepo.egg-info` (no PEP 610 record) hides it, and the
            # task would be `<domain>`, not `sepo/<domain>`. Then register the full name as well.
            task(name=f"sepo/{name}")(_task_for(name))
    return list(domain_names())


def _task_for(domain: str):
    """The task function of one domain: its parameters are the `-T` options of `inspect eval`."""

    def build(pool: str | None = None, episodes: int = 20, seed: int = 0, protocol: str = "rigorous",
              temperature: float = 0.0, max_tokens: int = 48, samples: int = 64, failure_rule: str = "fallback",
              reprompts: int = DEFAULT_REPROMPTS, replicates: int = 1000, game_params: dict | None = None):
        return audit_task(domain, pool, episodes, seed, protocol, temperature, max_tokens, samples, failure_rule,
                          reprompts, replicates, game_params)

    build.__name__ = build.__qualname__ = domain.replace("-", "_")
    return build
