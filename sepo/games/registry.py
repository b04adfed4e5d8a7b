"""The domain registry: one spec per game, registered by name in one place.

A domain is one package `sepo/games/<name>/` whose `__init__.py` defines `DOMAIN = Domain(...)`.
Generic layers (play, metrics, evaluation, training, reports, CLI) reach a game only through its
spec, so they never name one. Registration is lazy, as in TextArena: `register("NAME",
"sepo.games.NAME:DOMAIN")` records where the spec lives and imports it on first use; tests and
plug-ins may also register a `Domain` object directly. Spec fields that need heavy imports (bots,
solvers, demonstrations) are functions, usually made with `ref("module:name")`, so loading a spec
stays cheap.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from sepo.errors import SepoError

if TYPE_CHECKING:  # pragma: no cover
    from sepo.games.base import Game
    from sepo.policies.base import Policy

PROTOCOLS = ("rigorous", "paper")


MAX_ROUNDS = 10_000
"""The most rounds a repeated game may have: play keeps every round of every episode in memory
(100,000 rounds of a 9-action game took more than 3.6 GB)."""


@dataclass(frozen=True)
class Param:
    """A game parameter the CLI exposes as `--<name>` (underscores become dashes).

    `type` converts the command-line string (int, float, str); `default` is the domain's default;
    `help` is the option's help text. The domain's `make_game` validates the value."""

    name: str
    type: Callable[[str], Any]
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class DemoAgent:
    """A reference agent of a domain's demo (an agent spec) and what its audit shows."""

    spec: str
    shows: str = ""


@dataclass(frozen=True)
class DemoTraining:
    """SEPO (per-rollout penalty at `lambda_e`) against payoff-only GRPO, both from the uniform
    table: the tabular trainer's settings the runs share (`TabularSEPOConfig` fields: steps,
    groups, group_size, learning_rate, game_params, ...), chosen so each run takes seconds."""

    lambda_e: float = 5.0
    settings: Mapping[str, Any] = field(default_factory=dict)
    frontier_lambdas: tuple[float, ...] = ()
    """More SEPO runs, one per λe, placed with the two on the domain's exact frontier
    (`Domain.frontier`), in the domain's own demo."""


@dataclass(frozen=True)
class DemoSpec:
    """What `sepo demo` shows of a domain: data only, run by `sepo.demo` above the domains.

    `agents[0]` is the domain's row in the all-domain audit table; the domain's own demo
    (`sepo demo --game NAME`) audits every agent under both protocols. `params` are the game
    parameters of the audits, `episodes` the episodes per opponent. A `featured` domain's
    training comparison is part of the all-domain tour too."""

    agents: tuple[DemoAgent, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    episodes: int = 100
    training: DemoTraining | None = None
    featured: bool = False


def _parameter_problem(factory, params: dict, error: Exception) -> str:
    """What is wrong with `params` for a bot's `factory`, in the bot's terms: the names it does not
    take and the ones it does (the factory may be a lambda, whose name means nothing to a user)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return str(error)
    taken = {
        n: p for n, p in signature.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    unknown = [k for k in params if k not in taken]
    if not unknown or any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
        return str(error)
    listing = ", ".join(
        n + ("" if p.default is p.empty else f" (default {p.default!r})") for n, p in taken.items()
    )
    return (f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            + (f"it takes {listing}" if listing else "it takes no parameters"))


@dataclass(frozen=True)
class Domain:
    """Everything generic code may know about a game.

    Required:
      make_game(protocol="rigorous", **params) -> Game; validates params (SepoError on bad input).
      bots() -> {name: factory(**bot_params) -> Policy}: the named scripted bots.
      pools(protocol, game) -> {"train": [...], "exploiter": [...], "collusive": [...]}: pool
        entries as data (bot names, `Name(k=v)` strings or `{bot: Name, k: v}` mappings).
      events(protocol, episode) -> {"collusion_events", "collusion_denominator",
        "externality_events", "externality_denominator"}: the domain's one definition of its
        events (a denominator of 0 means "does not apply to this episode").
    Optional:
      params: the game's CLI parameters.
      make_bot(name, params, game) -> Policy: bots whose names are not in `bots()` (for example
        `axelrod:NAME`); raise SepoError for an unknown name.
      solver(game) -> ExactSolver (sepo.metrics.exact) or None; absent => audits report pool
        lower bounds only.
      lower_bound(game, agent) -> (ExactResult, opponent Policy): for games too large for an exact
        solver, the strongest best-response lower bound on the agent's value the domain can find,
        its method named in the result (`sepo exploit` and the rigorous exploiter pool use it).
      frequencies(episodes) -> {"<name>/<key>": value}: the domain's behaviour table.
      demos() -> {mixture name: [(factory, weight), ...]} and demo_opponents: SFT traces; the
        first mixture listed is the game's default (`default_mixture`; the paper's where the game has it).
      agents: {kind: factory(arg, game) -> Policy}: agent specs only this domain defines
        (for example an equilibrium family, `nash[:ALPHA]`).
      training(game, train_entries, collusive_entries) -> a tabular training environment
        (sepo.training.environment.TabularEnvironment) for the exact tabular SEPO trainer.
      llm_training(game, train_specs, collusive_specs) -> the domain's side of language-model
        SEPO-GRPO (sepo.training.environment.LLMEnvironment).
      frontier(train_specs, lambdas, runs) -> (report dict, frontier): an exact
        utility/exploitability frontier against the train pool, runs placed on it.
      demo: a DemoSpec, what `sepo demo` shows of the domain (reference agents, SEPO against
        payoff-only); `sepo.demo` runs it.
    Capabilities are data: simultaneous moves, chance, zero-sum, third parties, and the paper's
    accounting switch `paper_pooled_exploit` (its exploit score pooled over exploiter episodes), and
    `talk`: the domain's text view shows the other players' cheap-talk messages (sepo.games.talk).
    """

    name: str
    description: str
    make_game: Callable[..., "Game"]
    bots: Callable[[], Mapping[str, Callable[..., "Policy"]]]
    pools: Callable[[str, "Game"], Mapping[str, list]]
    events: Callable[[str, Any], Mapping[str, float]]
    params: tuple[Param, ...] = ()
    make_bot: Callable[[str, dict, "Game | None"], "Policy"] | None = None
    solver: Callable[["Game"], Any] | None = None
    lower_bound: Callable[..., Any] | None = None
    frequencies: Callable[[list], dict] | None = None
    demos: Callable[[], Mapping[str, Sequence]] | None = None
    demo_opponents: tuple[str, ...] = ()
    agents: Mapping[str, Callable[[str, "Game"], "Policy"]] = field(default_factory=dict)
    training: Callable[..., Any] | None = None
    llm_training: Callable[..., Any] | None = None
    frontier: Callable[..., dict] | None = None
    demo: DemoSpec | None = None
    round_name: str = "round"
    payoff_name: str = "payoff"
    simultaneous: bool = False
    chance: bool = False
    zero_sum: bool = False
    third_parties: tuple[str, ...] = ()
    paper_pooled_exploit: bool = False
    talk: bool = False

    def game(self, protocol: str = "rigorous", **params) -> "Game":
        """The game for `protocol`, parameters not given taking the spec's defaults."""
        check_protocol(protocol)
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise SepoError(
                f"game {self.name!r} takes no parameter {unknown[0]!r}; its parameters: {allowed}"
            )
        rounds = params.get("rounds")
        if isinstance(rounds, int) and rounds > MAX_ROUNDS:
            raise SepoError(
                f"--rounds {rounds} is above the most sepo plays, {MAX_ROUNDS:,} (episodes are held in "
                "memory round by round)"
            )
        return self.make_game(protocol=protocol, **{k: v for k, v in params.items() if v is not None})

    def build_bot(self, name: str, params: dict | None = None, game: "Game | None" = None) -> "Policy":
        """A fresh instance of bot `name` (bots may keep per-episode state)."""
        params = dict(params or {})
        table = self.bots()
        if name not in table:
            if self.make_bot is not None:
                return self.make_bot(name, params, game)
            raise SepoError(unknown_name("bot", name, table, f" for {self.name}"))
        try:
            return table[name](**params)
        except SepoError:
            raise
        except (TypeError, ValueError) as error:
            raise SepoError(
                f"bad parameters {params} for bot {name!r}: {_parameter_problem(table[name], params, error)}"
            ) from None

    def default_mixture(self) -> str | None:
        """The demonstration mixture used when none is named: the first `demos()` lists (None: no demos)."""
        if self.demos is None:
            return None
        return next(iter(self.demos()), None)

    def has_bot(self, name: str) -> bool:
        return name in self.bots() or self.make_bot is not None


def unknown_name(what: str, name: str, known, where: str = "") -> str:
    """'unknown bot 'X' for GAME; did you mean ...? known bots: ...' (one line)."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"unknown {what} {name!r}{where}{hint}; known {what}s: {', '.join(known)}"


def ref(target: str) -> Callable:
    """`"module:function"` as a function that imports the module on first call and calls it."""
    module, _, attr = target.partition(":")

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)

    call.__qualname__ = call.__name__ = f"ref({target})"
    call.target = target
    return call


def resolved(reference: Callable):
    """What a `ref` names, imported (anything else as it is): to read a class attribute of it."""
    target = getattr(reference, "target", None)
    if not isinstance(target, str):
        return reference
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


_ENTRIES: dict[str, str | Domain] = {}
_FAMILIES: dict[str, str | Callable[[str], Domain]] = {}
_MADE: dict[str, Domain] = {}


def register(domain: "Domain | str", entry_point: str | None = None) -> None:
    """Register a `Domain`, or a name and its `"module:ATTRIBUTE"` entry point (imported lazily).
    A name may be registered once."""
    name = domain.name if isinstance(domain, Domain) else domain
    if name in _ENTRIES:
        raise ValueError(f"domain {name!r} is already registered")
    if isinstance(domain, Domain):
        _ENTRIES[name] = domain
    elif entry_point and ":" in entry_point:
        _ENTRIES[name] = entry_point
    else:
        raise ValueError(f"register({name!r}, ...) needs a 'module:ATTRIBUTE' entry point")


def unregister(name: str) -> None:
    """Forget a registered domain (for tests that register their own)."""
    _ENTRIES.pop(name, None)


def register_family(prefix: str, entry_point: "str | Callable[[str], Domain]") -> None:
    """Register a family of domains named `PREFIX:REST` (e.g. a game library's games by their own
    names): `entry_point` ("module:function", imported lazily, or a function) maps REST to the
    `Domain` named `PREFIX:REST` (or raises SepoError for a REST it cannot make)."""
    if prefix in _FAMILIES or ":" in prefix:
        raise ValueError(f"family {prefix!r} is already registered or holds ':'")
    _FAMILIES[prefix] = entry_point


def family_names() -> list[str]:
    """The registered families' prefixes (their domains are made on first use)."""
    return sorted(_FAMILIES)


def domain_names() -> list[str]:
    return sorted(_ENTRIES)


def default_game() -> str:
    """The first registered domain: the CLI's default `--game`."""
    return next(iter(_ENTRIES))


def get_domain(name: str) -> Domain:
    """The spec of domain `name`; an unknown name is a one-line error listing the known ones."""
    entry = _ENTRIES.get(name)
    if entry is None:
        prefix, colon, rest = name.partition(":")
        if colon and prefix in _FAMILIES:
            return _family_member(prefix, rest)
        families = "".join(f"; or {family}:GAME" for family in sorted(_FAMILIES))
        raise SepoError(unknown_name("game", name, _ENTRIES) + families)
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        domain = getattr(importlib.import_module(module), attr)
        if not isinstance(domain, Domain) or domain.name != name:
            raise TypeError(f"{entry} is not the Domain spec of {name!r}")
        _ENTRIES[name] = entry = domain
    return entry


def _family_member(prefix: str, rest: str) -> Domain:
    """The domain `PREFIX:REST`, made once by its family (cached under the name asked for and under
    the domain's own, canonical name)."""
    asked = f"{prefix}:{rest}"
    if asked in _MADE:
        return _MADE[asked]
    make = _FAMILIES[prefix]
    if isinstance(make, str):
        module, _, attr = make.partition(":")
        make = getattr(importlib.import_module(module), attr)
    domain = make(rest)
    if not isinstance(domain, Domain) or not domain.name.startswith(prefix + ":"):
        raise TypeError(f"family {prefix!r} made {domain!r}, not a Domain named '{prefix}:...'")
    _MADE[asked] = _MADE.setdefault(domain.name, domain)
    return _MADE[asked]


def domain_of(game: "Game") -> Domain:
    return get_domain(game.name)


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise SepoError(f"unknown protocol {protocol!r}; use one of: {', '.join(PROTOCOLS)}")
    return protocol
