"""Options and checks that several `sepo` commands share: the protocol choice, the agent and
--overwrite help texts, the refusal of a collusion weight where there is no collusion, and the
note an old spelling of an option gets."""
from __future__ import annotations

from sepo.cli.common import choice_enum, err_console
from sepo.cli.game_options import agent_help
from sepo.errors import SepoError
from sepo.games import PROTOCOLS

Protocol = choice_enum("Protocol", PROTOCOLS)

OVERWRITE_HELP = "Replace an existing run of this command in --out (removes only the files that run wrote)."

AGENT_HELP = agent_help()


def collusion_applies(the_game, protocol: str, lambda_c: float | None) -> None:
    """--lambda-c weighs collusion, which a two-player zero-sum game has none of in the rigorous
    protocol (no third party to collude against): giving it there is a mistake, not a no-op."""
    if lambda_c and protocol == "rigorous" and the_game.zero_sum and the_game.num_players == 2:
        raise SepoError(f"--lambda-c does not apply to {the_game.name}: a two-player zero-sum game has no "
                        "collusion to weigh under the rigorous protocol (a domain's paper-protocol collusion "
                        "measure, where it has one, is charged under --protocol paper)")


def deprecated(old: str, new: str) -> None:
    """One line on stderr: the spelling `old` works for this release still; `new` is its name now."""
    err_console.print(f"warning: {old} is deprecated and will be removed in the next release; use {new}",
                      highlight=False, markup=False, soft_wrap=True)
