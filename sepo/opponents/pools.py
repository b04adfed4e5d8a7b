"""Opponent pools: each domain's `train`, `exploiter` and `collusive` pools, as data.

A pool entry is a bot name with optional parameters, written `NashApprox` or
`NashApprox(alpha=0.2)` (or, in YAML/JSON, `{bot: NashApprox, alpha: 0.2}`). The special entry
`BestResponse` is the exact best response to the agent under evaluation (or, where the game is
too large, the domain's strongest lower-bound search): the rigorous protocol adds it to the
`exploiter` pool of every domain with an exact solver or a lower-bound search, so a zero exploit score
means no profitable deviation exists. Bot names and the paper's pools come from the domain spec.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sepo.errors import SepoError
from sepo.games.registry import check_protocol, get_domain, unknown_name
from sepo.inputs import parse_yaml, problem_of, read_text

BEST_RESPONSE = "BestResponse"
POOL_NAMES = ("train", "exploiter", "collusive")


@dataclass(frozen=True)
class BotSpec:
    """A bot by name and parameters; `build()` makes a fresh instance (bots may keep state)."""

    game: str
    name: str
    params: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in sorted(self.params.items()))})"

    def build(self, game=None):
        """A fresh bot; `game` (the game being played) is passed to bots that need its parameters."""
        if self.name == BEST_RESPONSE:
            raise SepoError("BestResponse is computed against the agent; build it with sepo.evaluation")
        return get_domain(self.game).build_bot(self.name, self.params, game)


_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_:.\-]*)\s*(?:\((.*)\))?\s*$")


def parse_bot(game: str, entry) -> BotSpec:
    """A pool entry (string or mapping) as a validated `BotSpec`."""
    if isinstance(entry, dict):
        entry = dict(entry)
        name = entry.pop("bot", None)
        if not isinstance(name, str):
            raise SepoError(f"pool entry {entry!r} needs a 'bot' name")
        params = entry
    elif isinstance(entry, str):
        match = _SPEC.match(entry)
        if not match:
            raise SepoError(f"cannot read bot spec {entry!r}; write NAME or NAME(key=value, ...)")
        name, params = match.group(1), _parse_params(match.group(2) or "", entry)
    else:
        raise SepoError(f"pool entry {entry!r} must be a bot name or a mapping")
    domain = get_domain(game)
    bots = domain.bots()
    if name != BEST_RESPONSE and name not in bots and domain.make_bot is None:
        raise SepoError(unknown_name("bot", name, [*bots, BEST_RESPONSE], f" for {game}"))
    spec = BotSpec(game, name, params)
    if name != BEST_RESPONSE:
        spec.build()
    return spec


def _parse_params(text: str, entry: str) -> dict:
    params = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise SepoError(f"bot spec {entry!r}: parameter {part!r} must be key=value")
        if key.strip() in params:
            raise SepoError(f"bot spec {entry!r}: parameter {key.strip()!r} is given twice")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            raise SepoError(f"bot spec {entry!r}: parameter {key.strip()!r} must be a number") from None
    return params


def default_pools(game: str, protocol: str = "rigorous", instance=None) -> dict[str, list[BotSpec]]:
    """The domain's paper pools (for the game `instance`, if its parameters matter); the rigorous
    protocol adds the exact best response to `exploiter` where the domain has a solver."""
    check_protocol(protocol)
    domain = get_domain(game)
    instance = instance if instance is not None else domain.game(protocol)
    data = domain.pools(protocol, instance)
    pools = {name: [parse_bot(game, e) for e in data.get(name, [])] for name in POOL_NAMES}
    if protocol == "rigorous" and (domain.solver is not None or domain.lower_bound is not None):
        pools["exploiter"].append(BotSpec(game, BEST_RESPONSE))
    return pools


def load_pools(game: str, path: str | Path) -> dict[str, list[BotSpec]]:
    """Pools from a YAML/JSON file `{train: [...], exploiter: [...], collusive: [...]}`."""
    path = Path(path)
    text = read_text(path, "pool file")
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as error:
        raise SepoError(f"pool file {path} is not valid YAML/JSON: {problem_of(error)}") from None
    if not isinstance(data, dict):
        raise SepoError(f"pool file {path}: expected a mapping of pool names to bot lists")
    unknown = sorted(set(data) - set(POOL_NAMES))
    if unknown:
        raise SepoError(f"pool file {path}: unknown pool name(s) {unknown}; use {list(POOL_NAMES)}")
    pools = {}
    for name in POOL_NAMES:
        entries = data.get(name) or []
        if not isinstance(entries, list):
            raise SepoError(f"pool file {path}: pool {name!r} must be a list of bots")
        pools[name] = [parse_bot(game, entry) for entry in entries]
    if not pools["train"]:
        raise SepoError(f"pool file {path}: the train pool is empty")
    for name in ("train", "collusive"):
        if any(spec.name == BEST_RESPONSE for spec in pools[name]):
            raise SepoError(f"pool file {path}: {BEST_RESPONSE} is computed against the agent under audit; "
                            f"it belongs in the exploiter pool, not the {name} pool")
    return pools
