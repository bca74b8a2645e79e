"""Compare constrained-decoding libraries over transformers: validity, ms/token, setup time.

The measurement behind the choice of llguidance (docs/llm.md). The candidates are not project
dependencies; install each into its own folder and put them on PYTHONPATH, e.g.

    pip install --no-deps --target /tmp/cd/xgrammar xgrammar==0.2.9 apache-tvm-ffi
    pip install --no-deps --target /tmp/cd/outlines outlines==1.3.3 outlines-core==0.2.14 diskcache genson
    pip install --no-deps --target /tmp/cd/lmfe lm-format-enforcer==0.11.3 interegular
    PYTHONPATH=/tmp/cd/xgrammar:/tmp/cd/outlines:/tmp/cd/lmfe python scripts/benchmarks/bench_constrained.py \
        none,llguidance,xgrammar,outlines,lmfe tiny-byte 6      # random tiny Llama, sampled, 256 tokens
    ... python scripts/benchmarks/bench_constrained.py none,llguidance,xgrammar,outlines smollm2   # greedy, 128 tokens

Each library's own transformers integration is used as it ships (no closing step), on the
reflection schema with id enums and on the pydantic Curation schema. Writes
``outputs/bench_constrained_<which>.json``.
"""

import argparse
import json
import os
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

from graphmem.config.entry import command
from graphmem.llm.local import load_model
from graphmem.llm.schemas import Curation, Reflection, parse_structured
from rl.common.seeding import seed_everything
from rl.writer.grpo import byte_tokenizer

REFL = {
    "type": "object",
    "properties": {
        "critique": {"type": "string", "maxLength": 160},
        "transitions": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "source": {"enum": ["D1:3", "D1:5", "D2:1"]},
                    "target": {"enum": ["D1:5", "D2:1", "D2:4"]},
                    "label": {"enum": ["helpful", "harmful", "neutral"]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["source", "target", "label", "confidence"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["critique", "transitions"],
    "additionalProperties": False,
}
CUR = Curation.model_json_schema()
torch.set_num_threads(int(os.environ.get("NT", "1")))
SCHEMAS = {"reflection": (REFL, Reflection), "curation": (CUR, Curation)}
PROMPT = [
    {
        "role": "system",
        "content": "You review an answer produced from memory records. Reply with one JSON object only: "
        '{"critique": "<lesson>", "transitions": [{"source": "<id>", "target": "<id>", '
        '"label": "helpful|harmful|neutral", "confidence": <0..1>}]}.',
    },
    {
        "role": "user",
        "content": "Records: [D1:3] Caroline went to a LGBTQ support group. [D1:5] She found it powerful. "
        "[D2:1] Melanie painted a sunrise.\nQuestion: When did Caroline go to the support group?\n"
        "Answer: yesterday. Feedback: reference 7 May 2023.\nTransitions to label:\n- D1:3 -> D1:5\n- D1:5 -> D2:1",
    },
]


class LLG(LogitsProcessor):
    def __init__(self, tok, schema, vocab):
        import llguidance
        import llguidance.hf

        self.ll = llguidance
        t0 = time.perf_counter()
        self.lltok = TOKCACHE.setdefault(id(tok), llguidance.hf.from_tokenizer(tok, n_vocab=vocab))
        g = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        self.m = llguidance.LLMatcher(self.lltok, g, log_level=0)
        self.setup = time.perf_counter() - t0
        self.start = None
        self.vocab = vocab

    def __call__(self, ids, scores):
        if self.start is None:
            self.start = ids.shape[1]
        elif ids.shape[1] > self.start:
            self.m.consume_token(int(ids[0, -1]))
        mask = torch.frombuffer(bytearray(self.m.compute_bitmask()), dtype=torch.uint8)
        bits = ((mask.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8)) & 1).flatten()[: scores.shape[1]].bool()
        return scores.masked_fill(~bits, float("-inf"))


TOKCACHE = {}


def make(lib, tok, schema, vocab, model):
    t0 = time.perf_counter()
    if lib == "llguidance":
        p = LLG(tok, schema, vocab)
        return {"logits_processor": LogitsProcessorList([p])}, time.perf_counter() - t0
    if lib == "xgrammar":
        import xgrammar as xgr

        info = TOKCACHE.setdefault(("x", id(tok)), xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab))
        comp = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False)
        return {
            "logits_processor": LogitsProcessorList([xgr.contrib.hf.LogitsProcessor(comp)])
        }, time.perf_counter() - t0
    if lib == "outlines":
        import outlines
        from outlines.backends import get_json_schema_logits_processor

        om = TOKCACHE.setdefault(("o", id(tok)), outlines.from_transformers(model, tok))
        proc = get_json_schema_logits_processor("outlines_core", om, json.dumps(schema))

        class Wrap(LogitsProcessor):
            def __call__(self, ids, scores):
                return proc(ids, scores)

        return {"logits_processor": LogitsProcessorList([Wrap()])}, time.perf_counter() - t0
    if lib == "lmfe":
        from lmformatenforcer import JsonSchemaParser
        from lmformatenforcer.integrations.transformers import build_transformers_prefix_allowed_tokens_fn

        fn = build_transformers_prefix_allowed_tokens_fn(tok, JsonSchemaParser(schema))
        return {"prefix_allowed_tokens_fn": fn}, time.perf_counter() - t0
    if lib == "none":
        return {}, 0.0


def run(lib, model, tok, name, enc, n_new, sample, seeds):
    schema, cls = SCHEMAS[name]
    vocab = model.config.vocab_size
    res = {"valid": 0, "n": 0, "tokens": 0, "gen_s": 0.0, "setup_s": []}
    for s in seeds:
        seed_everything(s)
        try:
            kw, setup = make(lib, tok, schema, vocab, model)
        except Exception as e:
            return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        res["setup_s"].append(round(setup, 3))
        t0 = time.perf_counter()
        try:
            out = model.generate(
                **enc,
                max_new_tokens=n_new,
                do_sample=sample,
                temperature=1.0 if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id or tok.eos_token_id,
                **kw,
            )
        except Exception as e:
            return {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        res["gen_s"] += time.perf_counter() - t0
        new = out[0, enc["input_ids"].shape[1] :]
        text = tok.decode(new, skip_special_tokens=True)
        res["tokens"] += int(new.shape[0])
        res["n"] += 1
        ok = parse_structured(text, cls).value is not None
        res["valid"] += ok
        res.setdefault("examples", []).append(text[:160])
    res["ms_per_token"] = round(1000 * res["gen_s"] / max(1, res["tokens"]), 2)
    return res


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libs", help="comma-separated libraries: none, llguidance, xgrammar, outlines, lmfe")
    ap.add_argument("which", help="smollm2 (greedy, 128 tokens), tiny-byte or another tiny random Llama (sampled)")
    ap.add_argument("samples", nargs="?", type=int, default=8, help="samples per schema of a tiny Llama")
    return ap


def work(args: argparse.Namespace) -> None:
    """Every library on every schema; the results in ``outputs/bench_constrained_<which>.json``."""
    libs, which = args.libs.split(","), args.which
    results = {}
    if which == "smollm2":
        lm = load_model()
        tok, model = lm.tokenizer, lm.model
        enc = tok.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        for lib in libs:
            for name in SCHEMAS:
                results[f"{lib}/{name}"] = run(lib, model, tok, name, enc, 128, False, [0])
                print(lib, name, json.dumps(results[f"{lib}/{name}"])[:600], flush=True)
    else:  # tiny random Llama with a given tokenizer, sampling at temperature 1
        tok, model = tiny_llama(which)
        enc = tok("Reply in JSON: ", return_tensors="pt")
        for lib in libs:
            for name in SCHEMAS:
                results[f"{lib}/{name}"] = run(lib, model, tok, name, enc, 256, True, range(args.samples))
                r = {k: v for k, v in results[f"{lib}/{name}"].items() if k != "examples"}
                print(lib, name, json.dumps(r), flush=True)
    os.makedirs("outputs", exist_ok=True)
    json.dump(results, open(f"outputs/bench_constrained_{which}.json", "w"), indent=1)


def tiny_llama(which: str):
    """A tiny random Llama (seed 0) over the byte tokenizer (``tiny-byte``) or SmolLM2's; returns both."""
    tok = byte_tokenizer() if which == "tiny-byte" else load_model().tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    seed_everything(0)
    return tok, LlamaForCausalLM(cfg).eval()


def main(argv: list[str] | None = None) -> int:
    return command(arguments(), work, argv)


if __name__ == "__main__":
    sys.exit(main())
