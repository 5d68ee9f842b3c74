"""The gateway overhead benchmark (issue 7): kvgate beside LiteLLM, vllm-router, sglang-router and
the Portkey gateway, all in front of one very cheap fake upstream, in one run.

    upstream.py       the fake OpenAI-compatible upstream (raw asyncio + httptools)
    peers.py          lazy, cached installs of the peers outside the repository
    targets.py        how each target is configured, started and addressed
    kvgate_worker.py  one kvgate process on a SO_REUSEPORT port on a chosen loop (--kvgate-loop)
    load.py           wrk / aiohttp load, streaming TTFB, open streams, distinct prompts
    proctree.py       pinned processes; CPU seconds and RSS of a process tree from /proc
    report.py         summaries over rounds, kvgate's budgets, the printed tables
    profile.py        kvgate under py-spy during non-streaming load (--profile)
    run.py            the driver: python -m bench.overhead

docs/overhead.md says how to run it and what each column means.
"""
