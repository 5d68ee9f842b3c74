"""KV lab: FP8 formats and KV pruning measured on a real model (``kvgate kv-lab``).

The studies (``engine``, ``fp8``, ``scales``, ``pruning``, ``study_fp8``, ``study_pruning``,
``main``) need torch and transformers and run only in the worker venv, started by ``launch`` as a
subprocess; ``prompts``, ``report`` and ``launch`` are plain Python the gateway may import.
"""

POLICIES = ("streaming", "h2o", "snapkv", "baseline")
"""The pruning policies (``backends.kv.lab.pruning`` implements them)."""
