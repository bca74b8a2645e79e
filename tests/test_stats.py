"""Paired statistics against hand-computed cases: bootstrap CI, paired t-test p-value, fold std (ddof = 1)."""

import math

import pytest

from graphmem.eval.stats import (
    bootstrap_ci,
    compare_policies,
    comparisons_markdown,
    fold_std,
    paired_comparison,
    paired_t_pvalue,
)


def test_bootstrap_ci_hand_computed():
    # d = [0, 0, 0, 1]: a resampled mean is K/4 with K ~ Binomial(4, 1/4), so
    # P(K <= 0) = 0.316, P(K <= 2) = 0.949, P(K <= 3) = 0.996: the 2.5th percentile is 0 and the
    # 97.5th is 3/4, with wide margins on both sides for 10,000 resamples.
    lo, hi = bootstrap_ci([0.0, 0.0, 0.0, 1.0], n_boot=10_000, seed=1)
    assert (lo, hi) == (0.0, 0.75)
    # a constant difference has a degenerate interval at that value
    assert bootstrap_ci([0.5] * 7) == (0.5, 0.5)
    # seeded: the same call gives the same interval
    d = [0.1, -0.3, 0.2, 0.0, 0.4, -0.1, 0.25]
    assert bootstrap_ci(d, seed=3) == bootstrap_ci(d, seed=3)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])


def test_paired_t_pvalue_hand_computed():
    # d = a - b = [1, 2, 3]: mean 2, s_d = 1 (ddof 1), t = 2 / (1 / sqrt 3) = 2 sqrt 3, 2 degrees of
    # freedom, where the t CDF is F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - t / sqrt(2 + t^2).
    t = 2 * math.sqrt(3)
    expected = 1 - t / math.sqrt(2 + t * t)  # = 1 - sqrt(12/14) = 0.07418
    assert paired_t_pvalue([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.074180, abs=1e-6)
    assert paired_t_pvalue([1.0, 0.0, 1.0], [1.0, 0.0, 1.0]) == 1.0  # no difference at all
    assert paired_t_pvalue([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]) == 0.0  # the same non-zero difference everywhere


def test_paired_comparison_pairs_by_question_and_skips_undefined():
    a = {"q1": 1.0, "q2": 0.5, "q3": None, "q4": 1.0, "q5": 0.0}
    r = {"q1": 0.0, "q2": 0.5, "q3": 1.0, "q4": 0.5, "q6": 1.0, "q5": 0.0}
    c = paired_comparison("a", a, "ref", r, "evidence_recall", n_boot=2000)
    # defined on both: q1, q2, q4, q5 -> d = [1, 0, 0.5, 0]
    assert c.n == 4 and c.mean == pytest.approx(0.625) and c.reference_mean == pytest.approx(0.25)
    assert c.mean_diff == pytest.approx(0.375)
    assert c.ci_low <= c.mean_diff <= c.ci_high and 0.0 <= c.ci_low and c.ci_high <= 1.0
    assert c.p_value == pytest.approx(paired_t_pvalue([1.0, 0.5, 1.0, 0.0], [0.0, 0.5, 0.5, 0.0]))
    assert paired_comparison("a", {"q1": 1.0}, "ref", {"q1": 0.0}, "m") is None  # one pair is no comparison


def test_compare_policies_rows_and_markdown():
    def rows(values):
        return [
            {"qid": f"q{i}", "metrics": {"evidence_recall": v, "chain_following": None}} for i, v in enumerate(values)
        ]

    got = compare_policies({"ref": rows([0, 0, 1, 1]), "p": rows([1, 0, 1, 1])}, "ref", n_boot=500)
    assert len(got) == 1 and got[0].policy == "p" and got[0].metric == "evidence_recall" and got[0].n == 4
    assert got[0].mean_diff == pytest.approx(0.25)
    table = comparisons_markdown(got)
    assert "| p | evidence_recall | 4 | 0.750 | 0.500 | +0.250 |" in table and "vs **ref**" in table
    with pytest.raises(ValueError, match="reference policy 'dense_topk'"):
        compare_policies({"p": rows([1])}, "dense_topk")
    with pytest.raises(ValueError, match="appears twice"):
        compare_policies({"ref": rows([0, 1]) * 2, "p": rows([1, 1])}, "ref")


def test_fold_std_uses_ddof_1():
    # values 1, 2, 3, 4: mean 2.5, squared deviations sum 5, / (4 - 1) -> sqrt(5/3)
    assert fold_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert fold_std([0.4]) is None


def test_compare_policies_leaves_out_locomo_adversarial_questions():
    def rows(values, categories):
        return [
            {"qid": f"q{i}", "category": c, "metrics": {"evidence_recall": v}}
            for i, (v, c) in enumerate(zip(values, categories))
        ]

    cats = [1, 4, 5, 5]  # the two category-5 questions are not in the overall group
    got = compare_policies({"ref": rows([0, 0, 0, 0], cats), "p": rows([1, 0, 1, 1], cats)}, "ref", n_boot=200)
    assert got[0].n == 2 and got[0].mean_diff == pytest.approx(0.5)
    got = compare_policies({"ref": rows([0, 0, 0], ["2hop"] * 3), "p": rows([1, 0, 1], ["2hop"] * 3)}, "ref")
    assert got[0].n == 3
