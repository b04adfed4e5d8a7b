"""What an exact value of a policy that was not read exactly says about itself."""
from sepo.metrics.exact import POINT_ESTIMATE_NOTE, SAMPLED_NOTE, estimate_note


def test_a_policy_read_from_its_answer_lines_is_not_said_to_be_sampled():
    """An answer-line read that leaves a share of the replies has no sampling interval: its note
    gives the share instead of pointing at an interval that is not there."""
    note = estimate_note({"read_exactly": False, "replies_per_state": None, "rest": 0.004}, False)
    assert "0.40% of the replies" in note and "no sampling interval" in note
    assert note != SAMPLED_NOTE


def test_a_sampled_policy_keeps_the_sampled_notes():
    sampled = {"read_exactly": False, "replies_per_state": 32}
    assert estimate_note(sampled, False) == SAMPLED_NOTE
    assert estimate_note(sampled, True) == POINT_ESTIMATE_NOTE
