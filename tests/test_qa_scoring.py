"""graphmem.qa.scoring and the judge's parsing/config checks, against hand-computed values."""

import pytest

from graphmem.llm.client import LLMConfig
from graphmem.qa.judge import SameModelError, check_judge_config, parse_score
from graphmem.qa.scoring import (
    CONVENTIONS,
    conventions_for,
    exact_match,
    is_abstention,
    multi_answer_f1,
    normalize,
    rule_for,
    score_answer,
    token_f1,
)


def test_normalize_drops_case_punctuation_articles_and_spaces():
    assert normalize("  The Cat, sat on   A mat! ") == "cat sat on mat"
    assert normalize("An apple-pie's") == "applepies"
    assert normalize(None) == ""


def test_token_f1_hand_computed():
    # P = [cat, sat, on, mat], G = [cat, on, mat]: c = 3, prec = 3/4, rec = 1, F1 = 2·.75/1.75
    assert token_f1("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    # multiset: P = [paris, paris], G = [paris]: c = min(2, 1) = 1, prec = 1/2, rec = 1 -> 2/3
    assert token_f1("Paris paris", "Paris") == pytest.approx(2 / 3)
    # c = 0 -> 0; both empty -> 1
    assert token_f1("London", "Paris") == 0.0
    assert token_f1("the", "a") == 1.0
    # G = [7, may, 2023], P = [may, 2023]: prec 1, rec 2/3 -> 0.8
    assert token_f1("May 2023", "7 May 2023") == pytest.approx(0.8)


def test_exact_match():
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert exact_match("Eiffel", "eiffel tower") == 0.0


def test_multi_hop_partial_f1_over_comma_separated_sub_answers():
    gold = "Psychology, counseling certification"
    # one of two sub-answers found: (1 + 0) / 2
    assert multi_answer_f1("psychology", gold) == (pytest.approx(0.5), 0.0)
    # g1 = psychology: max(F1(counseling, ·)=0, F1(psychology, ·)=1) = 1
    # g2 = counseling certification vs counseling: prec 1, rec 1/2 -> 2/3; mean (1 + 2/3)/2 = 5/6
    f1, em = multi_answer_f1("counseling, psychology", gold)
    assert f1 == pytest.approx(5 / 6) and em == 0.0
    assert multi_answer_f1("counseling certification, psychology", gold) == (pytest.approx(1.0), 1.0)
    s = score_answer("psychology", gold, "multi_answer_f1")
    assert s.f1 == pytest.approx(0.5) and s.scored_gold == gold


def test_open_domain_gold_cut_at_first_semicolon():
    s = score_answer("national park", "National park; she likes the outdoors", "first_alternative")
    assert s.scored_gold == "National park" and s.f1 == 1.0 and s.em == 1.0
    # without the cut the rationale dilutes F1: G = [national, park, she, likes, outdoors], c = 2
    # -> 2·1·(2/5)/(7/5) = 4/7
    assert token_f1("national park", "National park; she likes the outdoors") == pytest.approx(4 / 7)


def test_adversarial_scored_as_correct_abstention():
    rule = rule_for(5, CONVENTIONS["locomo"])
    assert rule == "abstention"
    for answer in ("No information available.", "Not mentioned in the conversation", "not  MENTIONED!"):
        s = score_answer(answer, "self-care is important", rule)
        assert (s.f1, s.em, s.abstained, s.scored_gold) == (1.0, 1.0, True, None)
    # answering with the (adversarial) gold text is wrong: the question has no answer in memory
    assert score_answer("self-care is important", "self-care is important", rule).f1 == 0.0
    assert score_answer(None, "x", rule).f1 == 0.0  # a failed call never counts as abstaining
    # an abstention on an answerable question scores 0 and is flagged
    s = score_answer("No information available", "7 May 2023", "token_f1")
    assert s.f1 == 0.0 and s.abstained


def test_categories_are_mapped_explicitly():
    locomo = conventions_for("locomo")
    assert locomo == {1: "multi_answer_f1", 2: "token_f1", 3: "first_alternative", 4: "token_f1", 5: "abstention"}
    assert rule_for("3", locomo) == "first_alternative"
    with pytest.raises(KeyError, match="no scoring rule for category 6"):
        rule_for(6, locomo)
    with pytest.raises(KeyError, match="no scoring conventions"):
        conventions_for("unknown-set")
    assert conventions_for("anything", {"1": "token_f1"}) == {1: "token_f1"}
    with pytest.raises(ValueError, match="unknown scoring rule"):
        rule_for(1, {1: "bleu"})


def test_closed_form_answers_get_no_partial_credit():
    assert token_f1("yes", "yes it is") == pytest.approx(0.5)
    assert token_f1("yes", "yes it is", yes_no_guard=True) == 0.0
    assert token_f1("no", "yes", yes_no_guard=True) == 0.0
    assert token_f1("Yes.", "yes", yes_no_guard=True) == 1.0
    rule = rule_for("comparison", conventions_for("hotpotqa"))
    s = score_answer("the Arthur's Magazine", "Arthur's Magazine", rule)
    assert (s.f1, s.em) == (1.0, 1.0)
    assert score_answer(None, "yes", rule).f1 == 0.0


def test_is_abstention():
    assert is_abstention("I'm sorry, no information available here.")
    assert not is_abstention("Paris")
    assert is_abstention("cannot say", phrases=("cannot say",))


def test_judge_score_parsing():
    assert parse_score('{"score": 0.75, "reason": "close"}') == 0.75
    assert parse_score('Sure! ```json\n{"score": 1, "reason": "same"}\n```') == 1.0
    assert parse_score("Score: 0.4 because ...") == 0.4
    assert parse_score(" 0.3 ") == 0.3
    assert parse_score("The response is 100% correct.") == 1.0
    assert parse_score("The response is 1.0, and the reference is 0.0.") == 1.0
    assert parse_score("I would give it 0.25 since a date is missing") == 0.25
    for bad in ("", None, '{"score": 1.5}', "score: -0.2", "The answer is 2 out of 3", '{"reason": "x"}'):
        assert parse_score(bad) is None, bad


def test_the_judge_parser_reads_only_a_plain_number_in_range():
    for bad in (
        "1e308",
        "1e-300",
        "Score 1/10",
        "Score: 1e-300",
        '{"score": true}',
        '{"score": "1e-300"}',
        "1.5",
        "-1",
    ):
        assert parse_score(bad) is None, bad
    assert parse_score("0.5/1") is None and parse_score("score: 2, but 0.5 overall") is None
    assert parse_score('{"score": "0.6"}') == 0.6 and parse_score("score=0.9, fine") == 0.9


def test_judge_config_checks():
    answer = LLMConfig(model="local/smollm2-135m")
    with pytest.raises(SameModelError, match="allow_same_model"):
        check_judge_config(answer, LLMConfig(model="local/smollm2-135m"))
    check_judge_config(answer, LLMConfig(model="local/smollm2-135m"), allow_same_model=True)
    check_judge_config(answer, LLMConfig(model="gpt-4o-mini"))
    # same name behind a different endpoint is a different model
    check_judge_config(LLMConfig(model="m", api_base="http://a"), LLMConfig(model="m", api_base="http://b"))
    with pytest.raises(ValueError, match="temperature 0"):
        check_judge_config(answer, LLMConfig(model="gpt-4o-mini", temperature=0.7))
