"""Opponent pools as data: each game's `train`, `exploiter` and `collusive` pools.

A pool entry is a bot name with optional parameters, written `NashApprox` or
`NashApprox(alpha=0.2)` (or, in YAML/JSON, `{bot: NashApprox, alpha: 0.2}`). The special entry
`BestResponse` is the exact best response to the agent under evaluation: the rigorous protocol
adds it to the `exploiter` pool, so a zero exploit score means no profitable deviation exists.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sepo.errors import SepoError
from sepo.opponents.kuhn import BOTS as KUHN_BOTS

BEST_RESPONSE = "BestResponse"
POOL_NAMES = ("train", "exploiter", "collusive")
BOTS_BY_GAME = {"kuhn": KUHN_BOTS}

PAPER_POOLS = {
    "kuhn": {
        "train": ["NashApprox", "TightPassive", "LooseAggressive"],
        "exploiter": ["MaxExploiter"],
        "collusive": ["LooseAggressive"],
    },
}


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

    def build(self):
        if self.name == BEST_RESPONSE:
            raise SepoError("BestResponse is computed against the agent; build it with sepo.evaluation")
        try:
            return BOTS_BY_GAME[self.game][self.name](**self.params)
        except (TypeError, ValueError) as error:
            raise SepoError(f"bad parameters {self.params} for bot {self.name!r}: {error}") from None


_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*$")


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
    bots = BOTS_BY_GAME.get(game)
    if bots is None:
        raise SepoError(f"no bots for game {game!r}; games with bots: {', '.join(sorted(BOTS_BY_GAME))}")
    if name != BEST_RESPONSE and name not in bots:
        raise SepoError(f"unknown bot {name!r} for {game}; known bots: {', '.join(sorted(bots))}, {BEST_RESPONSE}")
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
        try:
            params[key.strip()] = float(value)
        except ValueError:
            raise SepoError(f"bot spec {entry!r}: parameter {key.strip()!r} must be a number") from None
    return params


def default_pools(game: str, protocol: str = "rigorous") -> dict[str, list[BotSpec]]:
    """The paper's pools; the rigorous protocol adds the exact best response to `exploiter`."""
    if game not in PAPER_POOLS:
        raise SepoError(f"no pools defined for game {game!r}")
    from sepo.games import check_protocol

    check_protocol(protocol)
    pools = {name: [parse_bot(game, e) for e in entries] for name, entries in PAPER_POOLS[game].items()}
    if protocol == "rigorous":
        pools["exploiter"].append(BotSpec(game, BEST_RESPONSE))
    return pools


def load_pools(game: str, path: str | Path) -> dict[str, list[BotSpec]]:
    """Pools from a YAML/JSON file `{train: [...], exploiter: [...], collusive: [...]}`."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SepoError(f"pool file not found: {path}") from None
    except yaml.YAMLError as error:
        raise SepoError(f"pool file {path} is not valid YAML/JSON: {error}") from None
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
    return pools
