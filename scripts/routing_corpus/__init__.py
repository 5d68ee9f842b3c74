"""The seeded generator of ``data/routing/requests.jsonl`` (see ``scripts/make_routing_corpus.py``).

``material``: what users paste or products configure (documents, tables, code, tracebacks, tool
definitions, system prompts, chit-chat); ``light`` and ``heavy``: the requests themselves, by
task, each task labeled once (``data/routing/README.md`` states the rule); ``tasks``: the
template format; ``asks``: all tasks and the earlier turns of multi-turn items. All text was
written for kvgate.
"""
