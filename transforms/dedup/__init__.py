"""Deduplication stages: exact (exact.py) and near-duplicate MinHash LSH (minhash.py)."""
