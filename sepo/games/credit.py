"""Which opponents training rollouts meet, and what each one's rollouts are credited with.

Evaluation counts utility u against the `train` pool, collusion c against the `collusive` pool and
externality x against the `train` and `exploiter` pools (the exact best response included under
the rigorous protocol), each a mean over the pool's opponents (their episodes have equal
denominators, so the pooled rate is the mean of the opponents' rates). The trainers draw a rollout's
opponent uniformly from a list of K entries and credit its payoff and events with per-entry weights,
so that the expected credited rate is the evaluated one:

    weight_j = K · m(j) / n

with n the pool's size (counting an opponent once per pool it is in, as evaluation plays it once per
pool) and m(j) the entry's share of those places (1 for an entry that is the pool's only copy of the
opponent). The entries are the train bots (or the agent itself under self-play), then the current
gap maximiser where the domain's exploitability charge needs it, then any exploiter or collusive
opponent that is not among them, only when a term that evaluation counts against it is charged
(`Charges`): a run whose λc and λx are 0 meets exactly the opponents it always met. This is the
paper's trainer (each rollout also plays the exploiters and collusive partners) in the per-pool
credit form of its newer version, with weights that make every charged term the evaluated one.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

SELF = "Self"
MAXIMISER = "BestResponse"


@dataclass(frozen=True)
class Charges:
    """The event terms a run charges: a term is charged when its λ is nonzero and the penalty mode
    charges each rollout (`per-rollout`, `shuffled`)."""

    collusion: bool = False
    externality: bool = False


@dataclass
class Mixture:
    """The rollout opponents, drawn uniformly, with each entry's credit per term.

    `labels[j]`: the entry's opponent (a bot label, `Self`, or `BestResponse` for the gap
    maximiser); `extra`: the specs of the entries after the partners and the maximiser, in order;
    `utility`, `collusion`, `externality`: `[K]` credits."""

    labels: list[str]
    partners: int
    maximiser: int | None
    extra: list = field(default_factory=list)
    utility: np.ndarray = None
    collusion: np.ndarray = None
    externality: np.ndarray = None

    @property
    def size(self) -> int:
        return len(self.labels)

    def is_partner(self, index: int) -> bool:
        return index < self.partners


def training_mixture(
    train_specs,
    collusive_specs=(),
    exploiter_specs=(),
    *,
    charges: Charges = Charges(),
    maximiser: bool = True,
    best_response_counts: bool = False,
    self_play: bool = False,
) -> Mixture:
    """The entries (module doc). `maximiser`: the domain's rollouts include the gap maximiser (its
    exploitability charge needs it); `best_response_counts`: evaluation's exploiter pool holds the
    exact best response (the rigorous protocol), so the maximiser's rollouts count toward x (a
    domain whose rollouts do not include it gets an entry for it when x is charged)."""
    train = [spec.label for spec in train_specs]
    partners = [SELF] if self_play else list(train)
    labels = list(partners)
    extra = []
    where = len(labels) if maximiser else None
    if maximiser:
        labels.append(MAXIMISER)

    def join(specs):
        for spec in specs:
            if spec.label not in labels:
                labels.append(spec.label)
                extra.append(spec)

    if charges.externality and self_play:
        join(train_specs)
    if charges.externality:
        join(exploiter_specs)
        if best_response_counts and MAXIMISER not in labels:
            labels.append(MAXIMISER)
            extra.append(None)  # the maximiser, played only for x
    if charges.collusion:
        join(collusive_specs)

    size = len(labels)
    copies = Counter(labels)

    def credit(places: Counter) -> np.ndarray:
        total = sum(places.values())
        if not total:
            return np.zeros(size)
        return np.array([size * places[label] / (total * copies[label]) for label in labels])

    utility = credit(Counter([SELF] if self_play else train))
    collusion = (
        credit(Counter(spec.label for spec in collusive_specs)) if charges.collusion else np.zeros(size)
    )
    if charges.externality:
        places = Counter(train) + Counter(spec.label for spec in exploiter_specs)
        if best_response_counts:
            places[MAXIMISER] += 1
        externality = credit(places)
    else:
        externality = np.zeros(size)
    return Mixture(labels, len(partners), where, extra, utility, collusion, externality)


def credited_rollouts(
    rows: np.ndarray,
    own: np.ndarray,
    group_of: np.ndarray,
    opponent_of: np.ndarray,
    mixture: Mixture,
    utility: np.ndarray,
    collusion: np.ndarray,
    externality: np.ndarray,
    advantages: np.ndarray | None = None,
    mask: np.ndarray | None = None,
):
    """Rollouts whose per-round `utility`, `collusion` and `externality` are scaled by their
    opponent's credits for each term (module doc), and the agent's exact advantages
    (`advantages[..., 0]`, scaled in place) credited as its utility."""
    from sepo.games.records import Rollouts

    credit = mixture.utility[opponent_of]
    if advantages is not None:
        advantages[..., 0] *= credit[:, None]
    return Rollouts(
        rows,
        own,
        np.ones_like(own, dtype=bool) if mask is None else mask,
        group_of,
        credit * utility,
        mixture.collusion[opponent_of] * collusion,
        mixture.externality[opponent_of] * externality,
        advantages,
    )
