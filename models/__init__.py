"""PyTorch modules: the walk scorer, the inductive edge encoder, relation intent, the ranking head and the GNN
reader; tensors in, tensors out (no datasets, no files)."""
