"""Kuhn poker: three cards, ante 1, one bet of 1.

Rules of one hand. Cards J < Q < K are dealt one to each seat; each antes 1 chip. Seat 0 acts
first and may PASS or BET. After PASS, seat 1 may PASS (showdown for 1) or BET, and then seat 0
must CALL (showdown for 2) or FOLD (lose 1). After an opening BET, seat 1 must CALL (showdown
for 2) or FOLD (lose 1). Showdown: the higher card wins the pot. Zero sum.

An episode is `hands` hands (6 in the paper) in which the two players alternate seats: player 0
is seat 0 in hand 1, seat 1 in hand 2, and so on. Actions use OpenSpiel's ids (0 = pass/fold,
1 = bet/call) and information states use OpenSpiel's keys: the card (0 = J, 1 = Q, 2 = K)
followed by the betting so far in p/b, e.g. "0", "1p", "2pb".
"""
from __future__ import annotations

from dataclasses import dataclass

from sepo.games.base import (
    CHANCE,
    TERMINAL,
    Decision,
    Game,
    RoundResult,
    State,
    TextView,
    episode_record_bytes,
    longest_within,
)

PASS, BET = 0, 1
CARD_NAMES = ("J", "Q", "K")
DEALS = tuple((a, b) for a in range(3) for b in range(3) if a != b)
"""The six equally likely deals as (card of seat 0, card of seat 1)."""

TERMINAL_HISTORIES = ("pp", "bp", "bb", "pbp", "pbb")
INFO_STATES = ("0", "1", "2", "0p", "1p", "2p", "0b", "1b", "2b", "0pb", "1pb", "2pb")
"""The 12 information states, in sepo's canonical order (seat 0 openings, seat 1 after a pass,
seat 1 facing a bet, seat 0 facing a bet after passing)."""


def seat_to_act(history: str) -> int:
    return 0 if len(history) in (0, 2) else 1


def facing_bet(history: str) -> bool:
    return history.endswith("b")


def is_hand_over(history: str) -> bool:
    return history in TERMINAL_HISTORIES


def seat0_payoff(history: str, card0: int, card1: int) -> int:
    """Net chips won by seat 0 at a terminal history."""
    if history == "bp":
        return 1
    if history == "pbp":
        return -1
    stake = 1 if history == "pp" else 2
    return stake if card0 > card1 else -stake


def action_names(history: str) -> tuple[str, str]:
    """Text names of (action 0, action 1) at this point of the hand."""
    return ("FOLD", "CALL") if facing_bet(history) else ("PASS", "BET")


@dataclass
class _Hand:
    cards: tuple[int, int]  # by seat
    history: str = ""


class KuhnState(State):
    """An episode of Kuhn poker hands with alternating seats."""

    def __init__(self, game: "KuhnPoker"):
        self._game = game
        self._hand_index = 0
        self._hand: _Hand | None = None
        self._rounds: list[RoundResult] = []

    def num_players(self) -> int:
        return 2

    def seat_of(self, player: int, hand_index: int | None = None) -> int:
        hand_index = self._hand_index if hand_index is None else hand_index
        return (player + hand_index) % 2

    def player_in_seat(self, seat: int) -> int:
        return (seat + self._hand_index) % 2

    def current_player(self) -> int:
        if self._hand_index >= self._game.hands:
            return TERMINAL
        if self._hand is None:
            return CHANCE
        return self.player_in_seat(seat_to_act(self._hand.history))

    def chance_outcomes(self) -> list[tuple[int, float]]:
        return [(index, 1.0 / len(DEALS)) for index in range(len(DEALS))]

    def card_of(self, player: int) -> int:
        return self._hand.cards[self.seat_of(player)]

    def decision(self, player: int) -> Decision:
        hand = self._hand
        seat = self.seat_of(player)
        prior = [r.payoffs[player] for r in self._rounds]
        return Decision(
            game=self._game.name,
            player=player,
            info_key=f"{hand.cards[seat]}{hand.history}",
            legal_actions=(PASS, BET),
            action_names=action_names(hand.history),
            observation={
                "hand": self._hand_index + 1,
                "hands": self._game.hands,
                "card": hand.cards[seat],
                "seat": seat,
                "history": hand.history,
                "facing_bet": facing_bet(hand.history),
                "prior_wins": sum(1 for p in prior if p > 0),
                "prior_losses": sum(1 for p in prior if p < 0),
                "prior_net": sum(prior),
            },
        )

    def apply_action(self, action: int) -> None:
        if self.is_terminal():
            raise ValueError("kuhn: the episode is over; no action can be applied")
        if self._hand is None:
            if not 0 <= action < len(DEALS):
                raise ValueError(
                    f"kuhn: chance outcome {action!r} is not a deal index in 0..{len(DEALS) - 1}"
                )
            self._hand = _Hand(cards=DEALS[action])
            return
        if action not in (PASS, BET):
            raise ValueError(
                f"kuhn: illegal action {action!r}; legal actions are 0 (pass/fold) and 1 (bet/call)"
            )
        self._hand.history += "pb"[action]
        if is_hand_over(self._hand.history):
            self._finish_hand()

    def _finish_hand(self) -> None:
        hand = self._hand
        seat0 = seat0_payoff(hand.history, *hand.cards)
        payoffs = tuple(float(seat0 if self.seat_of(p) == 0 else -seat0) for p in range(2))
        self._rounds.append(
            RoundResult(
                payoffs=payoffs,
                info={"cards": hand.cards, "history": hand.history, "player0_seat": self.seat_of(0)},
            )
        )
        self._hand_index += 1
        self._hand = None

    def rounds(self) -> list[RoundResult]:
        return list(self._rounds)

    def clone(self) -> "KuhnState":
        copy = KuhnState(self._game)
        copy._hand_index = self._hand_index
        copy._hand = None if self._hand is None else _Hand(self._hand.cards, self._hand.history)
        copy._rounds = list(self._rounds)
        return copy


class KuhnPoker(Game):
    """Kuhn poker, `hands` hands per episode with alternating seats (1 hand is the exact game)."""

    name = "kuhn"
    num_players = 2
    max_payoff = 2.0
    zero_sum = True

    def __init__(self, hands: int = 6, text_style: str = "rigorous"):
        if hands < 1:
            raise ValueError(f"kuhn: hands must be >= 1, got {hands}")
        self.hands = hands
        self.protocol = text_style
        from sepo.games.kuhn.text import KuhnText

        self._text = KuhnText(style=text_style)

    def new_initial_state(self) -> KuhnState:
        return KuhnState(self)

    def episode_bytes(self) -> int:
        """About 1 kB per decision record (measured), 1-2 decisions a hand."""
        return episode_record_bytes(self.hands, 2000)

    def episode_size_hint(self, per_episode: int) -> str | None:
        longest = longest_within(per_episode, 2000)
        return f"--hands {longest} or fewer" if longest >= 1 else None

    @property
    def text(self) -> TextView:
        return self._text


def make_game(protocol: str = "rigorous", hands: int = 6) -> KuhnPoker:
    """The domain's game factory: `hands` hands per episode, prompts in `protocol`'s style."""
    from sepo.errors import SepoError

    if not isinstance(hands, int) or hands < 1:
        raise SepoError(f"--hands must be an integer >= 1, got {hands!r}")
    return KuhnPoker(hands=hands, text_style=protocol)
