"""The pricing bots' declared states."""
import numpy as np

from sepo.games.pricing.bots import GrimTrigger


def test_grim_trigger_steps_its_state_without_the_history():
    """GrimTrigger's state one period on from its state alone (the audit's DP used to rescan the
    history for each of the 225 joint prices of every period)."""
    from sepo.metrics.repeated import declared_state, declared_step

    bot = GrimTrigger()
    step, state_of = declared_step(bot), declared_state(bot)
    assert step is not None
    rng = np.random.default_rng(0)
    history, state = (), state_of(())
    for _ in range(30):
        own, rival = (int(x) for x in rng.integers(0, 15, 2))
        history, state = history + ((own, rival),), step(state, own, rival)
        assert state == state_of(history)
