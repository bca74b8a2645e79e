"""Indexes over a graph's nodes: BM25 (:mod:`~graphmem.index.lexical`), the walk's lexical features, the
vector index (FAISS) and the text encoder."""
