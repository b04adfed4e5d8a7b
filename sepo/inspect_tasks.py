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

Decoding, read rather than assumed: Inspect's providers may drop what the task asks for (its
OpenAI provider drops `temperature` for a model name it does not know, and `top_k` always). The
task resends the sampling fields in `extra_body` for OpenAI-family providers, then, before the
audit, sends one probe request and reads from Inspect's record of the call the decoding that
reached the model (the server's echo where it gives one, as `sepo serve` does, else the request as
sent). The audit reads the policy under that decoding: exactly only when the replies were greedy,
else estimated from sampled replies with intervals; the recorded calls of the audit are checked
against it, and the result's `decoding` says what was asked, sent and played.

Why a bridge: sepo's play loop is synchronous (it batches decisions per turn) and Inspect's model
is asynchronous, so the audit runs in a worker thread and each batch of chats goes back to
Inspect's event loop (`anyio.from_thread.run`), where the requests run concurrently; Inspect then
logs every model call, its tokens and its retries as for any task.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import replace
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
    `truncated`, never read for an action.

    `requested` is the decoding the task asks for; `decoding` the one the audit assumes the model
    played (set by `settle`, from what was actually sent). Inspect's providers may drop fields
    (its OpenAI provider drops `temperature` for model names it does not know), so for the
    OpenAI-family providers the sampling fields also travel in `extra_body`, which they pass on."""

    def __init__(self, model, view: TextView, decoding: Decoding, *, force: bool | None = None):
        self.model, self.text = model, view
        self.requested = self.decoding = decoding
        self.force = _openai_family(model) if force is None else force
        self.sent: dict | None = None
        self.name = f"inspect:{model}"

    def config(self, seed: int | None):
        """The `GenerateConfig` of one request (`seed` None under greedy decoding)."""
        from inspect_ai.model import GenerateConfig

        d = self.requested
        extra = {}
        if self.force:
            extra = {"temperature": d.temperature, **({"top_p": d.top_p} if d.top_p < 1 else {}),
                     **({"top_k": d.top_k} if d.top_k else {}),
                     **({"repetition_penalty": d.repetition_penalty} if d.repetition_penalty != 1 else {}),
                     **({"seed": seed} if seed is not None else {})}
        return GenerateConfig(
            temperature=d.temperature,
            top_p=d.top_p if d.top_p < 1 else None,
            top_k=d.top_k or None,
            max_tokens=d.max_new_tokens,
            seed=seed,
            extra_body=extra or None,
        )

    async def settle(self, seed: int) -> dict:
        """Send one probe request and read, from Inspect's record of the call, the decoding that
        reached the model (the server's own echo where it gives one, as `sepo serve` does, else
        the request as sent); `decoding` becomes that decoding, so an audit whose temperature 0
        was dropped is read as the sampled policy it is, not as the greedy one."""
        from inspect_ai.model import ChatMessageSystem, ChatMessageUser

        probe = [ChatMessageSystem(content=self.text.system_prompt()),
                 ChatMessageUser(content="This is a check of the connection: reply with one word.")]
        config = self.config(None if self.requested.greedy else seed)
        output = await self.model.generate(probe, config=config)
        if output.error:
            raise SepoError(f"the model's first request failed: {output.error}")
        call = _last_call()
        if call is None:  # Inspect kept no raw record (e.g. --no-log-model-api): ask the provider itself
            answer = await self.model.api.generate(probe, [], "none", self.model.config.merge(config))
            call = answer[1] if isinstance(answer, tuple) else None
        self.sent = sent_decoding(call)
        temperature = self.sent["temperature"]
        if self.sent["source"] == "not recorded":  # e.g. mockllm: no request to read, the config stands
            return self.sent
        if temperature is None or temperature != self.requested.temperature:
            # the model played another decoding than asked: audit that one (sampled: estimated, with
            # intervals)
            self.decoding = replace(
                self.requested, temperature=1.0 if temperature is None else float(temperature)
            )
        return self.sent

    def check_calls(self, calls) -> dict:
        """Counts of the decodings the audit's recorded model calls reached the model with (Inspect
        keeps the raw request of the first few calls per sample unless `--log-model-api`); a call
        that differs in greediness from what the audit assumed stops it: its reading would be wrong."""
        counts: dict[str, int] = {}
        for call in calls:
            sent = sent_decoding(call)
            recorded = sent["source"] != "not recorded"
            key = f"temperature {sent['temperature']}" if recorded else "not recorded"
            counts[key] = counts.get(key, 0) + 1
            if recorded and (sent["temperature"] == 0) != self.decoding.greedy:
                raise SepoError(
                    f"a model call reached the model with temperature {sent['temperature']} "
                    f"({sent['source']}) while the audit read the policy as "
                    f"{'greedy' if self.decoding.greedy else 'sampled'}; its numbers would be mislabelled"
                )
        return counts

    def record(self, calls: dict | None = None) -> dict:
        """What the result says about decoding: asked for, reached the model, played."""
        played = self.decoding.record()
        if (
            self.sent is not None
            and self.sent["source"] != "not recorded"
            and self.sent["temperature"] is None
        ):
            played["temperature"] = None  # the server's default; not known here
        return {"requested": self.requested.record(), "sent": self.sent, "played": played,
                "forced_through_extra_body": self.force, "calls": calls or {}}

    def replies(self, decisions: Sequence[Decision], n: int, seed: int) -> list[list[Reply]]:
        return self.chat_replies(
            [
                [
                    {"role": "system", "content": self.text.system_prompt()},
                    {"role": "user", "content": self.text.user_prompt(d)},
                ]
                for d in decisions
            ],
            n,
            seed,
        )

    def chat_replies(self, chats: Sequence[list[dict]], n: int, seed: int) -> list[list[Reply]]:
        import anyio.from_thread
        import numpy as np

        seeds = [
            [
                int(np.random.SeedSequence([seed % 2**63, i, k]).generate_state(1)[0] & 0x7FFFFFFF)
                for k in range(n)
            ]
            for i in range(len(chats))
        ]
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
        from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

        kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
        config = self.config(None if self.decoding.greedy else seed)
        output = await self.model.generate(
            [kinds[m["role"]](content=m["content"]) for m in chat], config=config
        )
        usage = output.usage
        return Reply(output.completion, output.stop_reason == "stop", getattr(usage, "input_tokens", 0) or 0,
                     getattr(usage, "output_tokens", 0) or 0)


def _openai_family(model) -> bool:
    """Whether Inspect's provider for `model` speaks the OpenAI API (and passes `extra_body` on)."""
    return any(
        c.__name__ in ("OpenAIAPI", "OpenAICompatibleAPI") for c in type(getattr(model, "api", None)).__mro__
    )


def sent_decoding(call) -> dict:
    """The decoding a recorded model call (Inspect's `ModelCall`, or None) reached the model with:
    the server's echo (`sepo serve`'s `sepo_decoding`) where the response has one, else the
    request's fields as sent (`extra_body` last, as the OpenAI client merges it), else a nested
    generation config's; `temperature` None when the request carried none (the server's default)."""
    from sepo.models.serve import DECODING_FIELD

    fields = ("temperature", "top_p", "top_k", "repetition_penalty", "seed")
    if call is None:
        return {**dict.fromkeys(fields), "source": "not recorded"}
    echo = (call.response or {}).get(DECODING_FIELD) if isinstance(call.response, dict) else None
    if isinstance(echo, dict) and isinstance(echo.get("temperature"), (int, float)):
        return {**{f: echo.get(f) for f in fields}, "source": "server"}
    request = call.request or {}
    nested = [v for v in request.values() if isinstance(v, dict) and "temperature" in v]
    body = {**(nested[0] if nested else {}), **request, **(request.get("extra_body") or {})}
    return {**{f: body.get(f) for f in fields}, "source": "request"}


def _last_call():
    """The recorded call of the sample's most recent model event (None when the provider records none)."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import transcript

    for event in reversed(list(transcript().events)):
        if isinstance(event, ModelEvent):
            return event.call
    return None


def _calls_since(start: int) -> list:
    """The recorded calls (or None) of the sample's model events after the first `start` events."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import transcript

    return [e.call for e in list(transcript().events)[start:] if isinstance(e, ModelEvent)]


def audit_task(
    domain: str,
    pool: str | None = None,
    episodes: int = 20,
    seed: int = 0,
    protocol: str = "rigorous",
    temperature: float = 0.0,
    max_tokens: int = 48,
    samples: int = 64,
    failure_rule: str = "fallback",
    reprompts: int = DEFAULT_REPROMPTS,
    replicates: int = 1000,
    game_params: dict | None = None,
):
    """The Inspect `Task` that audits the evaluated model in `domain` (see module doc). Defaults:
    greedy decoding (so the played policy is read exactly, when the greedy replies are what the
    model played: see `InspectModelSource.settle`), the `fallback` failure rule (the
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

    _check_options(pool=pool, episodes=episodes, seed=seed, protocol=protocol, temperature=temperature,
                   max_tokens=max_tokens, samples=samples, failure_rule=failure_rule, reprompts=reprompts,
                   replicates=replicates, game_params=game_params)
    game = load_game(domain, protocol, **(game_params or {}))
    options = TextAgentOptions(
        decoding_for(protocol, temperature=float(temperature), max_new_tokens=max_tokens),
        samples,
        failure_rule,
        seed,
        reprompts,
    )
    every = default_pools(game.name, protocol, game)
    pools = None if pool is None else {name: (specs if name == pool else []) for name, specs in every.items()}
    config = EvalConfig(
        protocol=protocol, episodes=episodes, seed=seed, pools=pools, replicates=replicates
    ).validate()
    _check_sizes(game, config, pools or every, options)
    sample = Sample(
        input=game.text.system_prompt(),
        id=f"{game.name}-{pool or 'all'}-seed{seed}",
        metadata={"game": game.name, "pool": pool or "all", "protocol": protocol, "episodes": episodes},
    )
    return Task(dataset=[sample], solver=play_audit(game, options, config), scorer=sepo_metrics(),
                metadata={"sepo_game": game.name, "decoding_requested": options.decoding.record(),
                          "failure_rule": failure_rule})


TASK_FAILURE_RULES = ("fallback", "random-legal", "reprompt")
"""The failure rules an Inspect task can apply: `forced` needs the model's next-token
log-probabilities, which the task does not read through Inspect."""
MAX_EPISODES = 10_000_000
MAX_SEED = 2**63 - 1


def _check_options(**given) -> None:
    """One line (`SepoError`) for the first `-T` option that is not what the task takes, before
    anything is built: types (a whole number is not text, a bool or a float), ranges, names."""
    from sepo.games.registry import PROTOCOLS
    from sepo.policies.replies import MAX_NEW_TOKENS
    from sepo.policies.text_policy import MAX_REPROMPTS

    def whole(name: str, low: int, high: int) -> None:
        value = given[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise SepoError(f"-T {name} must be a whole number, got {value!r}")
        if not low <= value <= high:
            raise SepoError(f"-T {name} must be in {low:,}..{high:,}, got {value:,}")

    def one_of(name: str, choices, none_ok: bool = False) -> None:
        value = given[name]
        if not (none_ok and value is None) and (not isinstance(value, str) or value not in choices):
            listed = f"{', '.join(choices[:-1])} or {choices[-1]}" + (" (or left out)" if none_ok else "")
            raise SepoError(f"-T {name} must be {listed}, got {value!r}")

    one_of("pool", POOLS, none_ok=True)
    one_of("protocol", PROTOCOLS)
    if given["failure_rule"] == "forced":
        raise SepoError(
            "-T failure_rule=forced needs log-probabilities the task does not read; use fallback, "
            "random-legal or reprompt"
        )
    one_of("failure_rule", TASK_FAILURE_RULES)
    whole("episodes", 1, MAX_EPISODES)
    whole("seed", 0, MAX_SEED)
    whole("max_tokens", 1, MAX_NEW_TOKENS)
    whole("samples", 1, 100_000)
    whole("reprompts", 1, MAX_REPROMPTS)
    whole("replicates", 1, 100_000)
    temperature = given["temperature"]
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or not 0 <= temperature <= 100
    ):
        raise SepoError(f"-T temperature must be a number in 0..100 (0 = greedy), got {temperature!r}")
    params = given["game_params"]
    if params is not None and not (isinstance(params, dict) and all(isinstance(k, str) for k in params)):
        raise SepoError(f"-T game_params must be a mapping of the domain's parameters, e.g. '{{rounds: 4}}', "
                        f"got {params!r}")


_TASK_OPTIONS = ("pool", "episodes", "seed", "protocol", "temperature", "max_tokens", "samples",
                 "failure_rule", "reprompts", "replicates")
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?: (\d{1,3}(?:,\d{3})+|\d+)(?![\d.]))?")


def task_words(message: str, domain: str) -> str:
    """`message` with the command line's option names in the `-T` form the task takes: a game
    parameter's `--hands 10,971` reads `-T game_params='{hands: 10971}'`, a task option's
    `--episodes 651` reads `-T episodes=651` (numbers without separators, which YAML would split)."""
    from sepo.games.registry import get_domain

    try:
        params = {p.name for p in get_domain(domain).params}
    except (SepoError, AttributeError):
        params = set()

    def swap(match: re.Match) -> str:
        name, number = match.group(1).replace("-", "_"), (match.group(2) or "...").replace(",", "")
        if name in params:
            return f"-T game_params='{{{name}: {number}}}'"
        if name in _TASK_OPTIONS:
            return f"-T {name}={number}"
        return match.group(0)

    return _OPTION.sub(swap, message)


def _check_sizes(game, config, pools: dict, options) -> None:
    """The audit's episodes, bootstrap and sampled replies against this machine, before the task
    runs (inside the sample they would fail only after Inspect started it)."""
    from sepo.limits import check_episodes, memory_budget, size_text

    # the exact best response may join
    opponents = max(1, sum(len(pools.get(name, [])) for name in POOLS)) + 1
    check_episodes(game, config.episodes, opponents, "this audit")
    need = 2 * 8 * config.replicates * config.episodes * opponents
    if need > memory_budget():
        raise SepoError(
            f"-T replicates={config.replicates} with -T episodes={config.episodes} would hold about "
            f"{size_text(need)} of bootstrap resamples and this machine can spare "
            f"{size_text(memory_budget())}; use fewer replicates or episodes"
        )
    if not options.decoding.greedy:
        from sepo.metrics.exact import NoExactSolver, exact_solver
        from sepo.policies.text_policy import check_sampled_replies

        try:
            states = len(exact_solver(game).decisions())
        except (NoExactSolver, AttributeError, TypeError):
            return
        try:
            check_sampled_replies(states, options.samples, "the model")
        except SepoError as error:
            raise SepoError(
                str(error)
                .replace("--temperature", "-T temperature=")
                .replace("--samples ", "-T samples=")
                .replace("= 0", "=0")
            ) from None


def play_audit(game, options, config):
    """The solver: one sepo audit of the evaluated model (`evaluate`, in a worker thread), read
    under the decoding that reached the model (`InspectModelSource.settle`), every call checked."""
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.solver import solver

    @solver(name="sepo_play_audit")
    def make():
        async def solve(state, generate):
            import anyio.to_thread
            from inspect_ai.log import transcript

            from sepo.evaluation.evaluate import evaluate
            from sepo.policies.text_policy import TextPolicy

            model = get_model()
            source = InspectModelSource(model, game.text, options.decoding)
            start = len(transcript().events)
            await source.settle(options.seed)
            agent = TextPolicy(
                source,
                failure_rule=options.failure_rule,
                samples=options.samples,
                seed=options.seed,
                reprompts=options.reprompts,
                name=str(model),
            )
            result = await anyio.to_thread.run_sync(lambda: evaluate(game, agent, config))
            result["agent"] = f"inspect:{model}"
            result["decoding"] = source.record(source.check_calls(_calls_since(start)))
            if source.decoding != source.requested:
                result.setdefault("notes", []).append(_played_note(source))
            state.metadata["sepo"] = json.loads(json.dumps(result, default=_jsonable))
            state.output = ModelOutput.from_content(model=str(model), content=_summary(result))
            return state

        return solve

    return make()


def _played_note(source: InspectModelSource) -> str:
    sent = source.sent or {}
    what = (
        "no temperature reached the model (Inspect's provider dropped it), so it sampled at the server's "
        "default"
        if sent.get("temperature") is None
        else f"the model decoded at temperature {sent['temperature']:g}"
    )
    return (
        f"decoding: temperature {source.requested.temperature:g} was asked for, but {what} (read from the "
        f"{sent.get('source')}); the policy is estimated from sampled replies, not read as the greedy policy"
    )


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
            return Score(value=values, answer=_answer(result), explanation=_summary(result), metadata=result)

        return score

    return make()


def _answer(result: dict) -> str | None:
    """Which exact value the score holds and how the policy was read: "exploitability (exact) of
    the exact policy" only when the played policy was read exactly; else an estimate, with its
    interval."""
    value_name = result.get("exact_value")
    if not value_name:
        return None
    policy = result.get("policy") or {}
    if policy.get("read_exactly", True):
        return f"{value_name} ({result.get('exact_label')}) of the {policy.get('read', 'exact')} policy"
    low, high = (result.get("ci") or {}).get(value_name) or (None, None)
    interval = (
        f"; 95% interval [{low:.4f}, {high:.4f}]"
        if isinstance(low, float) and isinstance(high, float)
        else ""
    )
    return f"{value_name} (estimate{interval}) of the {policy.get('read')} policy"


def _value(value) -> float:
    return float("nan") if value is None else float(value)


def _jsonable(value: Any):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _summary(result: dict) -> str:
    names = [n for n in SCORED if n != "exact_value"] + (
        [result["exact_value"]] if result.get("exact_value") else []
    )
    parts = [f"{name} {result[name]:.4f}" for name in names if isinstance(result.get(name), float)
             and not math.isnan(result[name])]
    label = (result.get("policy") or {}).get("read")
    return f"{result['game']}: " + ", ".join(parts) + (f" (policy read: {label})" if label else "")


def register_tasks() -> list[str]:
    """One Inspect task per registered domain, named after it (`sepo/<domain>` once sepo is an
    installed package); returns the names."""
    _inspect()
    from inspect_ai import task
    from inspect_ai._util.registry import registry_info

    from sepo.games import domain_names

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

    def build(
        pool: str | None = None,
        episodes: int = 20,
        seed: int = 0,
        protocol: str = "rigorous",
        temperature: float = 0.0,
        max_tokens: int = 48,
        samples: int = 64,
        failure_rule: str = "fallback",
        reprompts: int = DEFAULT_REPROMPTS,
        replicates: int = 1000,
        game_params: dict | None = None,
    ):
        from inspect_ai._util.error import PrerequisiteError

        try:
            return audit_task(
                domain,
                pool,
                episodes,
                seed,
                protocol,
                temperature,
                max_tokens,
                samples,
                failure_rule,
                reprompts,
                replicates,
                game_params,
            )
        except SepoError as error:  # Inspect prints a PrerequisiteError as its message alone, not a traceback
            from rich.text import Text

            raise PrerequisiteError(
                Text(f"sepo/{domain}: {task_words(str(error), domain)}", no_wrap=True, overflow="ignore")
            ) from None

    build.__name__ = build.__qualname__ = domain.replace("-", "_")
    return build
