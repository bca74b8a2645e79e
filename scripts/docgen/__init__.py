"""Renderers of the docs/ pages, each from its results files in docs/results/ (scripts/make_docs.py writes them)."""
