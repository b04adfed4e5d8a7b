"""Agent specs: one string names any agent the CLI can evaluate or train, in any domain.

    uniform                  every legal action equally likely
    bot:NAME | bot:NAME(k=v) a scripted bot of the game
    tabular:FILE.json        information-state key -> action probabilities (checked against the
                             keys of the domain's exact solver, when it has one)
    run:DIR                  the policy a `sepo train` run produced
    hf:PATH_OR_ID            a Hugging Face causal LM (needs the `llm` extra)
    openai:MODEL@URL         a chat model behind an OpenAI-compatible endpoint (the `endpoint` extra)
    KIND[:ARG]               an agent kind the domain defines (`Domain.agents`, e.g. an
                             equilibrium family)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, Game, TextView
from sepo.games.registry import domain_of
from sepo.policies.base import Policy
from sepo.policies.tabular import TabularPolicy
from sepo.policies.text_policy import TextAgentOptions

KINDS = ("uniform", "bot", "tabular", "run", "hf", "openai")


class UniformPolicy(Policy):
    """Every legal action with the same probability."""

    name = "uniform"
    classifier = {"memory_depth": 0, "stochastic": True}

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}


def load_agent(
    spec: str, game: Game, text: TextAgentOptions | None = None, view: TextView | None = None
) -> Policy:
    """The policy named by `spec` for `game`; a clear error for anything unknown. `text` sets how
    a text agent (hf:, run: with a model, openai:) decodes, estimates its policy and handles
    replies that do not parse (default: `TextAgentOptions()`); `view` is the text view it reads
    (default: the game's; e.g. a disguised one)."""
    kind, _, arg = spec.partition(":")
    domain = domain_of(game)
    if kind in domain.agents:
        return domain.agents[kind](arg, game)
    if kind == "uniform":
        return UniformPolicy()
    if kind == "bot":
        from sepo.opponents.pools import BEST_RESPONSE, parse_bot

        bot = parse_bot(game.name, arg)
        if bot.name == BEST_RESPONSE:
            raise SepoError("BestResponse is an opponent computed against an agent, not an agent spec")
        return bot.build(game)
    if kind == "tabular":
        return _load_tabular(arg, game)
    if kind == "run":
        return _load_run(Path(arg), game, text, view)
    if kind == "hf":
        return _hf_agent(arg, game, text, view)
    if kind == "openai":
        from sepo.policies.endpoint import EndpointAgent, parse_endpoint_spec

        text = text or TextAgentOptions()
        cache = {} if text.reply_cache is None else {"cache_dir": text.reply_cache}
        return EndpointAgent(
            *parse_endpoint_spec(arg),
            view or game.text,
            text.decoding,
            **text.agent_kwargs(),
            max_tokens_total=text.max_tokens_total,
            **cache,
        )
    kinds = [
        *(f"{k}[:ARG]" for k in domain.agents),
        "uniform",
        "bot:NAME",
        "tabular:FILE.json",
        "run:DIR",
        "hf:PATH",
        "openai:MODEL@URL",
    ]
    raise SepoError(f"unknown agent spec {spec!r} for {game.name}; use one of: {', '.join(kinds)}")


def check_model_source(path: str) -> None:
    """A model named by a local path must be a model folder; a Hub id is checked by its form only
    (whether the Hub has it is known when the model is loaded, possibly on another machine)."""
    local = Path(path).expanduser()
    looks_local = (
        local.exists() or path.startswith((".", "/", "~")) or path.count("/") > 1 or path.endswith("/")
    )
    if looks_local:
        if local.is_file():
            hint = (
                "; convert a GGUF file first: `sepo model import FILE --out DIR`"
                if local.suffix.lower() == ".gguf"
                else ""
            )
            raise SepoError(f"model {path!r} is a file, not a model folder{hint}")
        if not local.is_dir():
            raise SepoError(f"model {path!r}: no such folder")
        check_not_run_folder(path)
        if not ((local / "config.json").is_file() or (local / "adapter_config.json").is_file()):
            raise SepoError(f"model {path!r} is not a model folder (no config.json or adapter_config.json)")
    elif not path.strip() or any(c.isspace() for c in path) or not _hub_id(path):
        raise SepoError(f"model {path!r} is neither a folder nor a Hugging Face Hub id (OWNER/NAME)")


def check_not_run_folder(path: str) -> None:
    """A `sepo sft`/`train` run folder given where its model is meant: one line naming RUN/model and
    run:RUN (a train run has a config.json of its own, which transformers would fail to read)."""
    local = Path(path).expanduser()
    inner = local / "model"
    if local.is_dir() and (inner / "config.json").is_file() and not _model_config(local):
        raise SepoError(
            f"model {path!r} is a run folder, not a model folder; its model is {str(inner)!r} (or give the "
            f"run as run:{path})"
        )


def _model_config(folder: Path) -> bool:
    """Whether the folder's config.json is a model's (it names a `model_type`) or it holds an adapter."""
    import json

    if (folder / "adapter_config.json").is_file():
        return True
    try:
        return "model_type" in json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def _hub_id(text: str) -> bool:
    """Whether `text` has the form of a Hub id (huggingface_hub's own rule, where it is installed)."""
    try:
        from huggingface_hub.utils import validate_repo_id
    except ImportError:
        return True
    try:
        validate_repo_id(text)
    except Exception:  # noqa: BLE001 - HFValidationError, whatever its module
        return False
    return True


def check_agent(spec: str, game: Game) -> None:
    """Refuse, in one line, a spec `load_agent` would refuse for `game`, without loading a language
    model or calling an endpoint (an experiment checks its agents before it writes anything)."""
    kind, _, arg = spec.partition(":")
    if kind in domain_of(game).agents or kind not in ("hf", "run", "openai"):
        load_agent(spec, game)
    elif kind == "hf":
        check_model_source(arg)
    elif kind == "openai":
        from sepo.policies.endpoint import parse_endpoint_spec

        parse_endpoint_spec(arg)
    elif (Path(arg) / "model").is_dir():
        check_model_source(str(Path(arg) / "model"))
    else:
        _load_run(Path(arg), game)


def _load_tabular(path: str, game: Game) -> TabularPolicy:
    from sepo.metrics.exact import keys_of, solver_for

    solver = solver_for(game)
    if solver is None:
        return TabularPolicy.load(path)
    decisions = solver.decisions()
    policy = TabularPolicy.load(
        path, keys_of(decisions), num_actions=max(len(d.legal_actions) for d in decisions)
    )
    return policy.check_decisions(decisions, path)


def _hf_agent(
    path: str, game: Game, text: TextAgentOptions | None = None, view: TextView | None = None
) -> Policy:
    """A language model that plays by writing replies under the given decoding (default:
    temperature 1, 48 new tokens), parsed strictly, failures resolved by the named rule (default
    forced decoding) and counted; its policy is the distribution of the played action."""
    from sepo.policies.hf import HFDecoding, HFPolicy

    text = text or TextAgentOptions()
    if text.max_tokens_total is not None:
        raise SepoError(
            "--max-tokens-total applies to openai: agents only (a local model's replies cost no tokens "
            "from a provider)"
        )
    if isinstance(path, str):
        check_not_run_folder(path)
    decoding = HFDecoding.of(text.decoding, **text.agent_kwargs())
    return HFPolicy(path, view or game.text, mode="sample", decoding=decoding, reply_cache=text.reply_cache)


def _unfinished_model_run(run_dir: Path) -> None:
    """A language-model run stopped before its model was saved has nothing to play yet: say so,
    rather than that it holds no policy table (what a tabular run would hold)."""
    from sepo.runs import read_manifest

    try:
        manifest = read_manifest(run_dir) if run_dir.is_dir() else None
    except SepoError:
        return
    if (
        manifest is not None
        and not manifest.get("complete")
        and (manifest["command"] == "sft" or "trainer" in manifest["files"])
    ):
        raise SepoError(
            f"{run_dir} is an unfinished `sepo {manifest['command']}` run: its model is saved when it ends "
            "(the same command resumes it)"
        )


def _load_run(
    run_dir: Path, game: Game, text: TextAgentOptions | None = None, view: TextView | None = None
) -> Policy:
    from sepo.metrics.exact import solver_for
    from sepo.training.tabular import load_run_policy, run_game

    if (run_dir / "model").is_dir():
        trained = run_game(run_dir)  # as for a table: `run:` audits a run in its own game
        if trained is not None and trained != game.name:
            raise SepoError(
                f"{run_dir} is a run of game {trained!r}, not {game.name!r}; give --game {trained}, or "
                f"hf:{run_dir / 'model'} to play its model in {game.name}"
            )
        return _hf_agent(str(run_dir / "model"), game, text, view)
    _unfinished_model_run(run_dir)

    policy = load_run_policy(run_dir, game.name)
    solver = solver_for(game)
    return policy.check_decisions(solver.decisions(), str(run_dir)) if solver is not None else policy


def policy_table(agent: Policy, decisions: list[Decision] | None) -> np.ndarray | None:
    """The agent's action table at `decisions` (the solver's information states): the policy it
    plays (`policy_estimate`; for a text agent exact or estimated from its replies), or None when
    there are no decisions or the agent cannot give probabilities."""
    if not decisions:
        return None
    from sepo.policies.text_policy import policy_estimate

    try:
        return policy_estimate(agent, decisions).table()
    except NotImplementedError:
        return None
