"""The error tree of the ``backends`` package.

``BackendError`` is the root; callers (the CLI, the e2e fixtures) catch it to print one clear
message. Third-party and subprocess failures are translated into these where they arise.
"""

from __future__ import annotations


class BackendError(RuntimeError):
    """Base class of every error raised by ``backends``."""


class PrepareError(BackendError):
    """Preparing the local runtime failed: worker virtualenv install or model preparation.

    The message names the step and carries the tail of the failing command's output.
    """


class WorkerStartError(BackendError):
    """A worker process exited or did not become healthy in time.

    The message carries the last lines of the worker's log.
    """


class PlanError(BackendError):
    """The KV capacity planner cannot answer: a missing input or a budget that leaves no KV memory."""


class UnsupportedModelError(PlanError):
    """The model's attention is not one the planner can size exactly (MHA, GQA or MLA).

    Raised instead of guessing: sliding-window or chunked attention, state-space/hybrid layers,
    encoder-decoder models, cross-layer KV sharing, or a config that lacks the needed fields.
    """
