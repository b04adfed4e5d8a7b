"""sepo.experiments.execute: what a results row claims."""
from sepo.experiments.execute import metric_rows


def _result(audit_exact: bool) -> dict:
    """An audit's result as `sepo eval` gives it: bootstrap metrics with intervals, the audit's
    numbers without (its own label in `exact`), and the domain's behaviour table from the episodes."""
    return {"utility": 1.0, "adversarial_gap": 0.5, "br_payoff": 2.0, "exact": audit_exact,
            "exact_label": "exact" if audit_exact else "projection", "exact_value": "adversarial_gap",
            "game/cooperation_rate": 0.75, "ci": {"utility": [0.5, 1.5]}}


def test_a_row_is_exact_only_when_its_number_is():
    """Found: an IPD gap of an agent's memory-1 projection (neither bound) and behaviour rates
    counted on two episodes were written to results.parquet with exact = True, as was every
    number without an interval."""
    rows = {row["metric"]: row["exact"] for row in metric_rows(_result(audit_exact=False))}
    assert rows == {"utility": False, "adversarial_gap": False, "br_payoff": False, "game/cooperation_rate": False}
    rows = {row["metric"]: row["exact"] for row in metric_rows(_result(audit_exact=True))}
    assert rows == {"utility": False, "adversarial_gap": True, "br_payoff": True, "game/cooperation_rate": False}


def test_an_estimated_policys_audit_numbers_are_not_exact_even_without_an_interval():
    result = {**_result(audit_exact=True), "policy": {"policy": "estimated (64 replies per state)", "exact": False},
              "ci": {"utility": [0.5, 1.5], "adversarial_gap": [0.4, 0.6]}}
    assert not any(row["exact"] for row in metric_rows(result))  # br_payoff has no interval
    result["policy"] = {"policy": "exact", "exact": True}
    assert {row["metric"] for row in metric_rows(result) if row["exact"]} == {"br_payoff"}
