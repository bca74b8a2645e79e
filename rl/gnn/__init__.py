"""Supervised training of the GNN reader (the ``gnn`` policy) on gold evidence."""
