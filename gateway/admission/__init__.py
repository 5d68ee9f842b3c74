"""Admission: before a request is scheduled, is its cluster saturated, and if so queue, spill or shed?

* ``saturation.py``: the predicted wait before a cluster could start a request (route selection's
  load model plus engine confirmation), pure;
* ``queue.py``: the bounded gateway queue (strict priority, start-time fair queueing across keys,
  TTL, cancel-safe slot hand-over);
* ``decision.py``: admit | queue | spill | shed (429/503 with ``Retry-After``), pure.

The director (``gateway/proxy.py``) runs it between route selection and scheduling; see
``docs/admission.md``.
"""
