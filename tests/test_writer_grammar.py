"""The triple grammar (``rl/writer/grammar.py``): whatever the weights, a completion sampled or decoded under it
is anchored triples citing its window's labels, in GRPO's rollouts as in the greedy rewrites."""

from __future__ import annotations

import re

import pytest
import torch

from models.gnn_reader import GNNReader
from rl.writer.format import TRIPLE_RE, parse_triples, well_formed
from rl.writer.grammar import constrain_generate, make_grammar, triple_regex
from rl.writer.grpo import WriterConfig, WriterTask, generate_completions, load_writer, train_writer

BUDGET = {"max_entries": 1, "top_k_neighbors": 1, "max_hops": 1, "max_nodes": 2}


def window(task_id: str, k: int = 3) -> WriterTask:
    emb = torch.nn.functional.normalize(torch.randn(k, 8, generator=torch.Generator().manual_seed(k)), dim=1)
    ids = [f"{task_id}:{i}" for i in range(k)]
    texts = ["Alice met Bob in Paris", "Bob flew to Rome", "Carol sings"][:k]
    return WriterTask(task_id, ids, texts, emb, emb[[0]].clone(), [[ids[0], ids[1]]])


def test_the_regex_admits_anchored_lines_of_the_window_only():
    rx = re.compile(triple_regex(4))
    good = "(alice | met | bob) [F1]\n(bob | flew to | rome) [F4]"
    assert rx.fullmatch(good) and all(TRIPLE_RE.match(line) for line in good.splitlines())
    for bad in ("[F1] Alice met Bob", "(alice | met | bob) [F5]", "(alice | met) [F1]", "( | met | bob) [F1]", ""):
        assert not rx.fullmatch(bad), bad
    assert not rx.fullmatch(f"({'x' * 33} | r | y) [F1]") and rx.fullmatch(f"({'x' * 32} | r | y) [F1]")
    with pytest.raises(ValueError, match="at least one fragment"):
        triple_regex(0)


@pytest.mark.parametrize("sample", [False, True])
def test_every_completion_under_the_grammar_is_well_formed(sample):
    torch.manual_seed(0)
    model, tok = load_writer("tiny", seed=0)
    tasks = [window("a"), window("b"), window("c", 2)]
    # a byte per token: a slot of the random writer can take ~100 tokens, so the budget holds whole lines
    cfg = WriterConfig(model="tiny", fragments_per_task=3, max_completion_length=400, grammar=True)
    if sample:
        restore = constrain_generate(model, make_grammar(model, tok, 3))
        enc = tok([t.prompt() for t in tasks[:2]], return_tensors="pt", padding=True)
        out = model.generate(
            **enc, do_sample=True, max_new_tokens=400, num_return_sequences=4, pad_token_id=tok.pad_token_id
        )
        restore()
        new = out[:, enc["input_ids"].shape[1] :]
        texts = [tok.decode(row, skip_special_tokens=True) for row in new]
        cuts = [not bool((row == tok.eos_token_id).any()) for row in new]
        ids = [tasks[i // 4].fragment_ids for i in range(len(texts))]
        assert "generate" not in vars(model)  # the plain generate is back
    else:
        texts, cuts = generate_completions(model, tok, tasks, cfg)
        ids = [t.fragment_ids for t in tasks]
        plain = WriterConfig(model="tiny", max_completion_length=48)
        free, free_cuts = generate_completions(model, tok, tasks, plain)
        assert not any(
            well_formed(t, i, c) for t, c, i in zip(free, free_cuts, ids)
        )  # the random writer, unconstrained
    assert all(well_formed(t, i, c) for t, c, i in zip(texts, cuts, ids))
    assert any(parse_triples(t, i, c)[0] for t, c, i in zip(texts, cuts, ids))


def test_grpo_rollouts_under_the_grammar_are_all_triples(tmp_path):
    torch.manual_seed(0)
    tasks = [window("t0"), window("t1")]
    cfg = WriterConfig(
        model="tiny",
        fragments_per_task=3,
        max_steps=1,
        max_completion_length=400,
        reader_budget=BUDGET,
        output_dir=str(tmp_path),
        grammar=True,
    )
    model, tok = load_writer("tiny", seed=0)
    _, history, records = train_writer(tasks, GNNReader(input_dim=8, hidden_dim=4), cfg, model=model, tokenizer=tok)
    assert len(records) == cfg.batch_size and all(r["well_formed"] == 1.0 for r in records)
    assert history[0]["rewards/well_formed/mean"] == 1.0 and "generate" not in vars(model)


def test_each_generate_call_opens_fresh_matchers_whatever_its_prompt_length():
    torch.manual_seed(0)
    model, tok = load_writer("tiny", seed=0)
    grammar = make_grammar(model, tok, 3)
    restore = constrain_generate(model, grammar)
    ids = window("a").fragment_ids
    try:
        for prompt in ("short", "a much longer prompt than the first one, " * 3, "mid length prompt"):
            enc = tok([prompt] * 2, return_tensors="pt")
            out = model.generate(**enc, do_sample=True, max_new_tokens=400, pad_token_id=tok.pad_token_id)
            for row in out[:, enc["input_ids"].shape[1] :]:
                text, cut = tok.decode(row, skip_special_tokens=True), not bool((row == tok.eos_token_id).any())
                assert well_formed(text, ids, cut), (prompt, text)
    finally:
        restore()
