"""Institution search: which setting of a game's rules leaves trained agents colluding least, at the
least cost to the third party?

An institution is a set of game parameters (a price cap, a sanction and its detection probability,
a leniency rule, ...). For every point of a grid over some parameters (the others fixed), agents
are trained from the same start with the exact tabular trainer (payoff-only GRPO by default: the
profit-seeking learners the institution must discipline), one per seed, and each trained agent's
collusion and externality are read: exactly from the training environment where it reports them
(`collusion` against the collusive pool, `externality` against the train pool), else from an
evaluation of the final policy. The chosen setting has the least mean collusion; among settings
within `tolerance` of it, the least mean externality (the chapter's repaired rule: stop the
collusion, then spare the third party). Each mean has a 95% Student-t interval over the seeds.

Every training run is a run folder inside the search's own (part of it), so an interrupted search
resumes where it stopped and a finished one is read back.
"""
from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from sepo.errors import SepoError

COMMAND = "analyze institution"


@dataclass
class SearchConfig:
    game: str
    vary: Mapping[str, Sequence]
    fixed: Mapping[str, object] = field(default_factory=dict)
    seeds: int = 3
    steps: int = 300
    groups: int = 64
    group_size: int = 8
    learning_rate: float = 0.1
    final_learning_rate: float = 0.01
    penalty: str = "none"
    lambda_e: float = 0.0
    lambda_c: float = 0.0
    lambda_x: float = 0.0
    tolerance: float = 0.02
    episodes: int = 100

    def validate(self) -> "SearchConfig":
        if not self.vary:
            raise SepoError(
                "give at least one --vary NAME=V1,V2,... (the institution's parameters to search)"
            )
        overlap = sorted(set(self.vary) & set(self.fixed))
        if overlap:
            raise SepoError(f"--vary and --set both name {overlap[0]!r}")
        for name, values in self.vary.items():
            if not values:
                raise SepoError(f"--vary {name}= has no values")
            repeated = next((v for i, v in enumerate(values) if v in list(values)[:i]), None)
            if repeated is not None:
                raise SepoError(
                    f"--vary {name} lists {repeated!r} twice (each setting is trained once): drop the repeat"
                )
        if self.seeds < 1 or self.steps < 1:
            raise SepoError("--seeds and --steps must be >= 1")
        if self.tolerance < 0:
            raise SepoError(f"--tolerance must be >= 0, got {self.tolerance}")
        return self

    def training_config(self, params: Mapping, seed: int):
        """The tabular trainer's config of one setting's seed."""
        from sepo.training.tabular import TabularSEPOConfig

        return TabularSEPOConfig(
            game=self.game,
            game_params=dict(params),
            penalty=self.penalty,
            lambda_e=self.lambda_e,
            lambda_c=self.lambda_c,
            lambda_x=self.lambda_x,
            steps=self.steps,
            groups=self.groups,
            group_size=self.group_size,
            learning_rate=self.learning_rate,
            final_learning_rate=self.final_learning_rate,
            seed=seed,
            checkpoint_every=self.steps,
        )

    def _domain_rule(self, name: str):
        """A function the domain defines beside its game factory (e.g. `effective_params`), or None."""
        from sepo.games.registry import get_domain, resolved

        factory = resolved(get_domain(self.game).make_game)
        rule = getattr(sys.modules.get(getattr(factory, "__module__", ""), None), name, None)
        return rule if callable(rule) else None

    def game_params(self, cell: Mapping) -> dict:
        """The game parameters of a setting, without those that change nothing there (the domain's
        `effective_params` beside its game factory, where it has one: e.g. a leniency rule where
        there is no fine to cut): the game its agents are trained in."""
        params = {**self.fixed, **cell}
        effective = self._domain_rule("effective_params")
        return effective(params) if effective else params

    def same_as(self) -> list[int]:
        """For each setting, the first setting that makes the same game (itself when none before does):
        the same by the domain's `game_key` where it has one (the game as it acts: e.g. the prices
        offered and the fines charged), else by the parameters of its game."""
        key = self._domain_rule("game_key")

        def game(cell: Mapping) -> str:
            if key:
                return key({**self.fixed, **cell})
            return json.dumps(self.game_params(cell), sort_keys=True, default=str)

        first: dict[str, int] = {}
        return [first.setdefault(game(cell), index) for index, cell in enumerate(self.cells())]

    def check_cells(self) -> None:
        """Every setting's game and training run, checked (its parameters, and its sizes against this
        machine's memory) before the search's folder is made: one line naming the setting. A
        search whose settings all make one game is refused with the game's reason (there is
        nothing to choose between)."""
        cells, same = self.cells(), self.same_as()
        if len(cells) > 1 and len(set(same)) == 1:
            from sepo.games.registry import get_domain

            reason = "they differ only in ways that change no action and no payoff"
            try:
                get_domain(self.game).game("rigorous", **{**self.fixed, **cells[-1]})
            except SepoError as error:
                reason = str(error)
            raise SepoError(
                f"every setting of --vary makes the same game, so there is nothing to choose between: "
                f"{cell_name(cells[-1])}: {reason}"
            )
        for index, cell in enumerate(cells):
            if same[index] != index:
                continue
            try:
                self.training_config(self.game_params(cell), 0).validate()
            except SepoError as error:
                raise SepoError(f"the setting {cell_name(cell)}: {error}") from None

    def settings(self) -> dict:
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in self.__dict__.items()}

    def cells(self) -> list[dict]:
        names = list(self.vary)
        return [dict(zip(names, values)) for values in itertools.product(*(self.vary[n] for n in names))]


def cell_name(cell: Mapping) -> str:
    return ",".join(f"{k}={v}" for k, v in cell.items())


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean and 95% Student-t interval; one value has no interval (None, None): its spread is unknown."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, None, None
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))
    return mean, mean - half, mean + half


def _measure(game_name: str, params: dict, summary: dict, policy, config: SearchConfig, seed: int) -> dict:
    """Collusion, externality, utility and the exact value of one trained agent."""
    value_name = summary.get("exact_value")
    out = {"utility": summary.get("utility"), "exact_value": value_name, "value": summary.get(value_name)}
    if "collusion" in summary and "externality" in summary:
        out.update(collusion=summary["collusion"], externality=summary["externality"], measured="exact")
        return out
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game

    result = evaluate(load_game(game_name, **params), policy, EvalConfig(episodes=config.episodes, seed=seed))
    out.update(collusion=result["collusion"] or 0.0, externality=result["externality"] or 0.0,
               measured=f"evaluation, {config.episodes} episodes per opponent")
    return out


def search(config: SearchConfig, out: str | Path, progress: Callable[[str], None] | None = None,
           overwrite: bool = False) -> dict:
    """Train and measure every (cell, seed); the report (also written to `out/report.json`). A
    setting that makes the same game as an earlier one (`SearchConfig.same_as`) is trained
    once: its row repeats the earlier one's numbers and says so (`same_as`, `notes`)."""
    from sepo.runs import open_run
    from sepo.training.tabular import TabularSEPOTrainer

    config.validate()
    out = Path(out)
    if overwrite or not (out / "report.json").exists():  # a finished search is read back as it was
        config.check_cells()
    with open_run(out, COMMAND, config.settings(), overwrite=overwrite) as run:
        if run.finished:
            return run.result
        rows, notes, same = [], [], config.same_as()
        cells = config.cells()
        for index, cell in enumerate(cells):
            if same[index] != index:
                first = rows[same[index]]
                rows.append({**first, "cell": index, "setting": dict(cell), "same_as": same[index]})
                notes.append(
                    f"{cell_name(cell)} makes the same game as {cell_name(first['setting'])} (the settings "
                    "that differ change nothing there): trained once, the same numbers"
                )
                continue
            params = config.game_params(cell)
            inert = {name: value for name, value in cell.items() if name not in params}
            if inert:  # e.g. a bound no value of the game reaches: the row is the game without it
                notes.append(
                    f"{cell_name(cell)}: {cell_name(inert)} changes nothing in this game; trained as the "
                    "game without it"
                )
            measured = []
            for seed in range(config.seeds):
                if progress:
                    progress(
                        f"{cell_name(cell)}: seed {seed} ({index + 1} of {len(config.cells())} settings)"
                    )
                trainer = TabularSEPOTrainer(
                    config.training_config(params, seed), run.path(f"cells/{index}/seed-{seed}")
                )
                with open_run(trainer.out, "train", trainer.settings(), part_of=COMMAND) as child:
                    trainer.run = child
                    summary = trainer.train()
                from sepo.policies.tabular import TabularPolicy

                policy = TabularPolicy(trainer.policy(), trainer.env.keys)
                measured.append(_measure(config.game, params, summary, policy, config, seed))
                run.commit()
            row = {"cell": index, "setting": dict(cell), "per_seed": measured}
            for name in ("collusion", "externality", "utility", "value"):
                values = [m[name] for m in measured if m[name] is not None]
                if values:
                    mean, low, high = mean_interval(values)
                    row[name] = {"mean": mean, "ci": None if low is None else [low, high]}
            rows.append(row)
        report = choose(rows, config.tolerance)
        if notes:
            report["notes"] = notes
        report.update(
            {
                "game": config.game,
                "fixed": dict(config.fixed),
                "vary": {k: list(v) for k, v in config.vary.items()},
                "seeds": config.seeds,
                "training": {
                    "penalty": config.penalty,
                    "steps": config.steps,
                    "lambdas": [config.lambda_e, config.lambda_c, config.lambda_x],
                },
                "measured": rows[0]["per_seed"][0]["measured"] if rows else None,
            }
        )
        run.write_json("report.json", report)
        run.complete(report)
        return report


def choose(rows: list[dict], tolerance: float) -> dict:
    """The setting with the least mean collusion; among those within `tolerance` of it, the least mean
    externality."""
    least = min(row["collusion"]["mean"] for row in rows)
    near = [row for row in rows if row["collusion"]["mean"] <= least + tolerance]
    best = min(near, key=lambda row: (row["externality"]["mean"], row["collusion"]["mean"]))
    return {
        "chosen": best["setting"],
        "chosen_cell": best["cell"],
        "least_collusion": least,
        "tolerance": tolerance,
        "within_tolerance": [row["cell"] for row in near],
        "settings": rows,
    }
