"""SFT demonstrators of an OpenSpiel game: the paper has none, so `cfr` is sepo's: CFR's average
policy after 100 iterations (80%, a near-equilibrium player in the small games) and the uniform
policy (20%, so the data also holds the states a near-equilibrium player rarely reaches)."""
from __future__ import annotations

from functools import partial

from sepo.games.openspiel.bots import AveragePolicy, Uniform


def mixtures(spec: str) -> dict:
    return {"cfr": [(partial(AveragePolicy, spec, "CFR", 100), 0.8), (Uniform, 0.2)]}
