"""Per-node tables kept across a live memory's writes (graphmem.core.rows.kept_rows: the node token counts, the
speaker and sequence codes of the pair features, the vocabulary's token ids of the lexical tables) are the
tables a fresh pass over the graph makes, after appends, a revised text and forgotten records."""

from __future__ import annotations

import torch

from graphmem import Memory
from graphmem.builders.synthetic import make_text_graph
from graphmem.core.tokens import node_tokens
from graphmem.index import lexical_features
from graphmem.index.embed import HashingEncoder
from models import edge_encoder


def records(texts, start, stop):
    return [dict(text=texts[i], id=f"n{i}", session=i // 7, time=1e9 + 30.0 * i) for i in range(start, stop)]


def same_as_fresh(graph) -> None:
    fresh = graph.copy()  # no kept state: every table made by a pass over every row
    assert torch.equal(node_tokens(graph), node_tokens(fresh))
    for table in (edge_encoder._speakers, edge_encoder._sequences):
        assert all(torch.equal(a, b) for a, b in zip(table(graph), table(fresh))), table.__name__
    (kept, lexicon), (made, lexicon_made) = lexical_features.graph_tables(graph), lexical_features.graph_tables(fresh)
    for name in ("rowptr", "term", "weight", "key", "key_weight", "key_entry"):
        assert torch.equal(getattr(kept, name), getattr(made, name)), name
    for token in [*list(lexicon_made.index.vocab)[:200], "not-a-token"]:
        assert lexicon.df.get(token, 0) == lexicon_made.df.get(token, 0)
        assert lexicon.vocab.get(token, -1) == lexicon_made.vocab.get(token, -1)


def test_tables_kept_across_writes_are_the_fresh_tables(tmp_path):
    texts = make_text_graph(260, dim=16, seed=1, validate=False).texts
    emb = HashingEncoder(384).encode(texts)
    with Memory.open(tmp_path / "memory", encoder="hashing") as mem:
        for start in range(0, 180, 60):
            mem.add_many(records(texts, start, start + 60), emb[start : start + 60])
            same_as_fresh(mem.graph)
        mem.revise("n5", "A revised text about Paris in 1999, said Alice")
        same_as_fresh(mem.graph)
        mem.graph.revise_node("n6", metadata={"speaker": "Someone new", "session": "elsewhere", "position": 9})
        same_as_fresh(mem.graph)  # a metadata edit is logged: the speaker and sequence codes are made anew
        mem.forget(["n7", "n100"])
        same_as_fresh(mem.graph)
        mem.add_many(records(texts, 180, 240), emb[180:240])
        same_as_fresh(mem.graph)
