"""kvgate: an OpenAI-compatible LLM gateway with prefix-cache-aware routing."""

__version__ = "0.1.0"
