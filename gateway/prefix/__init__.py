"""Prompt prefixes: canonical hashing (``hashing.py``) and the per-endpoint block index (``index.py``)."""
