"""Contract tests: each protocol against each implementation (simulator vs real vLLM)."""
