"""One attempt on one endpoint: what it holds, how it is opened, and how it ends (exactly once).

An :class:`Attempt` is made when the endpoint's circuit breaker let the request through
(``breaker.allow()``, which may hand it the one half-open probe); it takes the endpoint's
in-flight slot (``endpoint.acquire`` and the ``kvgate_endpoint_in_flight`` gauge) at once, and
carries the scheduling decision whose prefill ticket it settles (``decision.commit`` when the
endpoint accepted the request, ``decision.observe`` when it answered). It is ended exactly once,
by whoever ends the body, with one of:

* :meth:`Attempt.succeeded`: the breaker hears a success, the decision observes the usage;
* :meth:`Attempt.failed`: the endpoint's own failure (breaker, ``last_error``, failure metric);
* :meth:`Attempt.cooled`: a 429 with ``Retry-After``: the endpoint cools, the breaker hears nothing;
* :meth:`Attempt.abandoned`: the client's 4xx, a cancel, a repeated error: the probe is given back
  (also any failure of a ``blameless`` attempt: a read of a stored response, whose failure is that
  request's outcome; health checks still catch a dead endpoint).

Each frees the slot; later calls do nothing. The buffered writer ends it through
:meth:`BufferedReply.settle`, the relay (``gateway/relay.py``) when its stream ends, the
director when the attempt fails before the client saw a byte (:class:`Retry`).

:class:`Opener` (one per app) opens an attempt's request on its endpoint and turns what comes
back into a :class:`BufferedReply`, an open stream (:class:`Upstreamed`) or a :class:`Retry`
(``gateway/failover.py``'s :func:`~gateway.failover.classify` decides which).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway import failover
from gateway.continuation import continuation_body, resumable
from gateway.deadlines import deadline
from gateway.endpoints.model import Endpoint
from gateway.errors import GatewayError, UpstreamClientError, UpstreamError, UpstreamTimeoutError, error_message_of
from gateway.exchange import SUCCESS, Exchange
from gateway.observability.metrics import GatewayMetrics
from gateway.protocol.openai import InferenceRequest
from gateway.protocol.sse import StreamObserver
from gateway.selection.route import Route
from gateway.upstream.client import Upstream, UpstreamResponse

if TYPE_CHECKING:
    from gateway.admission.gate import Lease
    from gateway.scheduling.scheduler import Decision

MAX_HELD_BYTES = 64 * 1024  # a preamble longer than this is sent on: the stream is committed


class Attempt:
    """What one try on one endpoint holds (module doc). Made only after ``breaker.allow()`` said yes."""

    __slots__ = ("endpoint", "decision", "_metrics", "_held", "_lease", "blameless")

    def __init__(
        self, endpoint: Endpoint, decision: Decision | None, metrics: GatewayMetrics, lease: Lease | None = None
    ) -> None:
        """``lease``: the request's admission lease (``[admission]`` on), held while the slot is."""
        self.endpoint = endpoint
        self.decision = decision
        self._metrics = metrics
        self._held = True
        self._lease = lease
        self.blameless = False  # True: a failure is the request's outcome, never the breaker's (a stored response's read)
        endpoint.acquire()
        metrics.tally.shift(metrics.in_flight, (endpoint.spec.name,), 1.0)  # added in at scrape (observability/tally.py)
        if lease is not None:
            lease.hold()

    @property
    def ended(self) -> bool:
        return not self._held

    def accepted(self) -> None:
        """The endpoint accepted the request (a 2xx with its headers): settle the prefill ticket, record the prefix."""
        if self.decision is not None:
            self.decision.commit(self.endpoint)

    def succeeded(self, usage: Any = None, *, accepted: bool = False) -> None:
        """The endpoint answered in full: a success for its breaker; the decision observes ``usage``
        (measured usage only, or None). ``accepted``: also :meth:`accepted` first (a buffered answer)."""
        if self._end():
            if accepted:
                self.accepted()
            self.endpoint.record_success()
            if self.decision is not None:
                self.decision.observe(self.endpoint, usage)

    def failed(self, reason: str, message: str) -> None:
        """The endpoint failed (``reason``: a metric label such as ``timeout``; ``message``: why).
        A ``blameless`` attempt is :meth:`abandoned` instead (counted, the breaker told nothing)."""
        if self.blameless:
            self.abandoned(reason)
            return
        if self._end():
            self.endpoint.record_failure(f"{reason}: {message}")
            self._metrics.upstream_failures.labels(self.endpoint.spec.name, reason).inc()

    def cooled(self, seconds: float, reason: str, message: str) -> None:
        """A 429 with ``Retry-After``: out of rotation for ``seconds``; no failure is counted."""
        if self._end():
            endpoint = self.endpoint
            endpoint.breaker.release_probe()
            endpoint.cool_down(seconds)
            endpoint.last_error = f"{reason}: {message}"
            self._metrics.upstream_failures.labels(endpoint.spec.name, reason).inc()

    def abandoned(self, reason: str | None = None) -> None:
        """Ended for no fault of the endpoint (the client's 4xx, a cancel); ``reason``: count it as
        an upstream failure label all the same (a repeated error) without telling the breaker."""
        if self._end():
            self.endpoint.breaker.release_probe()
            if reason is not None:
                self._metrics.upstream_failures.labels(self.endpoint.spec.name, reason).inc()

    def retried(self, retry: Retry) -> None:
        """End on a :class:`Retry`: cooled for a 429's ``Retry-After``, else failed."""
        if retry.cool_s and not self.blameless:
            self.cooled(retry.cool_s, retry.reason, retry.error.message)
        else:
            self.failed(retry.reason, retry.error.message)

    def _end(self) -> bool:
        """Free the slot (and drop the admission lease: the gate may hand the slot on); True only the first time."""
        if not self._held:
            return False
        self._held = False
        self.endpoint.release()
        metrics = self._metrics
        metrics.tally.shift(metrics.in_flight, (self.endpoint.spec.name,), -1.0)
        if self._lease is not None:
            self._lease.drop()
        return True


class Retry(Exception):
    """An attempt failed before anything reached the client; the next endpoint may be tried."""

    def __init__(
        self, error: GatewayError, reason: str, wait_s: float = 0.0, cool_s: float = 0.0,
        echo: tuple[int, str] | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason
        self.wait_s = wait_s  # a Retry-After to honour before the next attempt
        self.cool_s = cool_s  # > 0: a 429's Retry-After; the endpoint cools, no failure is counted
        self.echo = echo  # a 5xx's (status, error message): the same from the next endpoint stops the attempts


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class BufferedReply:
    """A complete non-streaming answer: the endpoint's status and body bytes, untouched.

    ``attempt`` and ``exchange``: the request's accounting still to do. Whoever writes the answer
    calls :meth:`settle` right after writing it, without awaiting in between: the client gets its
    answer ~25 us sooner, and nothing else runs on the event loop before the accounting is done.
    """

    status: int
    body: bytes
    content_type: str
    attempt: Any = None  # an Attempt (or anything with its ``succeeded``), ended by settle
    exchange: Exchange | None = None
    reader: Callable[[bytes], Any] | None = None  # body -> OpenAI-shaped usage (another API's answer); None: ``usage``

    def settle(self) -> None:
        """End the attempt (prefix commit, breaker, closed loop) and the exchange (the close-out), once."""
        attempt, self.attempt = self.attempt, None
        if attempt is None:
            return
        usage = usage_of(self.body) if self.reader is None else self.reader(self.body)
        attempt.succeeded(usage, accepted=True)
        if self.exchange is not None:
            self.exchange.finish(SUCCESS, usage=usage)


@dataclass(slots=True)
class Upstreamed:
    """An attempt's open stream: the attempt (its slot held), the response, the first bytes read."""

    attempt: Attempt
    response: UpstreamResponse
    first: bytes
    first_events: list[tuple[bytes, dict[str, Any] | None]] | None = None  # already observed
    strip_usage: bool = False  # kvgate asked this endpoint for usage the client did not ask for

    @property
    def endpoint(self) -> Endpoint:
        return self.attempt.endpoint


def usage_of(body: bytes) -> object:
    """The ``usage`` object of a non-streaming answer, or None (never raises)."""
    if b'"usage"' not in body:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return parsed.get("usage") if isinstance(parsed, dict) else None


class Opener:
    """Opens attempts' requests on their endpoints (one per app; module doc).

    The client's own API key never reaches an endpoint; each gets only its own credential.
    Streams ask for usage the client did not ask for (``stream_options.include_usage``); an
    endpoint answering that with a 400 (or 422) naming ``stream_options`` is asked again at once
    without it, and remembered (per process, bounded) as one never to ask.
    """

    __slots__ = (
        "_upstream", "clock", "sleep", "_max_retry_after_s", "_max_cooldown_s", "_refuses_usage", "max_attempts",
    )

    def __init__(
        self, upstream: Upstream, *, clock: Callable[[], float], max_retry_after_s: float, max_cooldown_s: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, max_attempts: int = 3,
    ) -> None:
        """``clock``: monotonic seconds; ``max_retry_after_s`` / ``max_cooldown_s``: caps (seconds) on an
        endpoint's Retry-After as a wait before the next attempt and as its cooldown; ``sleep``: how a
        Retry-After is waited (tests inject one); ``max_attempts``: ``upstream.max_attempts``, the most
        attempts one request makes (the director reads it)."""
        self.max_attempts = max_attempts
        self._upstream = upstream
        self.clock = clock
        self.sleep = sleep
        self._max_retry_after_s = max_retry_after_s
        self._max_cooldown_s = max_cooldown_s
        self._refuses_usage: set[str] = set()  # endpoints that answered 400 to ``stream_options``

    def asks_usage(self, request: InferenceRequest, endpoint: Endpoint) -> bool:
        """Whether to ask ``endpoint`` for the stream's usage on the client's behalf."""
        return not request.wants_usage and endpoint.spec.name not in self._refuses_usage

    async def buffered(self, attempt: Attempt, request: InferenceRequest, exchange: Exchange, route: Route) -> BufferedReply:
        """The endpoint's complete answer, within ``timeouts.total_s``; raises :class:`Retry` or UpstreamClientError."""
        endpoint = attempt.endpoint
        response: UpstreamResponse | None = None
        try:
            with deadline(route.timeouts.total_s):
                response = await self._open(attempt, request, request.body_for(endpoint.spec.served_model), exchange, route)
                raw = await _read(endpoint, response)
        except TimeoutError:
            if response is not None:
                response.close()
            raise Retry(UpstreamTimeoutError(f"Upstream endpoint '{endpoint.name}' timed out."), "timeout") from None
        except BaseException:
            if response is not None:
                response.close()
            raise
        if not raw.strip():
            raise Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' sent an empty answer."), "empty_body")
        return BufferedReply(response.status, raw, response.headers.get("content-type", "application/json"), attempt, exchange)

    async def stream(
        self, attempt: Attempt, request: InferenceRequest, exchange: Exchange, route: Route,
        observer: StreamObserver, seen: StreamObserver | None = None,
    ) -> Upstreamed:
        """Open a stream (asking for usage, once more without if refused) and read it until content.

        ``seen``: continue the answer this observer saw (``continuation_body``), not start afresh.
        Raises :class:`Retry` or UpstreamClientError.
        """
        endpoint = attempt.endpoint
        ask = self.asks_usage(request, endpoint)
        by_event = observer.collect or ask
        try:
            source = await self._open_stream(attempt, request, _stream_body(request, endpoint, ask, seen), exchange, route, observer, by_event)
        except UpstreamClientError as error:
            if not (ask and error.status in (400, 422) and "stream_options" in error.message):
                raise
            if len(self._refuses_usage) < 4096:  # bounded: endpoints remembered as refusing it
                self._refuses_usage.add(endpoint.spec.name)
            ask = False
            body = _stream_body(request, endpoint, False, seen)
            source = await self._open_stream(attempt, request, body, exchange, route, observer, observer.collect)
        source.strip_usage = ask
        return source

    async def _open(self, attempt: Attempt, request: InferenceRequest, body: bytes, exchange: Exchange, route: Route) -> UpstreamResponse:
        endpoint = attempt.endpoint
        spec = endpoint.spec
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", "X-Request-Id": exchange.request_id}
        if spec.api_key:
            headers["Authorization"] = f"Bearer {spec.api_key}"
        try:
            if type(request) is InferenceRequest or request.method == "POST":
                response = await self._upstream.post(spec.base_url + request.operation.path, body, headers, route.timeouts.connect_s)
            else:  # another API's GET / DELETE of a stored response (gateway/api_director.py)
                url = spec.base_url + request.operation.path
                response = await self._upstream.request(request.method, url, body, headers, route.timeouts.connect_s)
        except UpstreamTimeoutError as error:
            raise Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise Retry(_named(endpoint, error), "connect") from None
        status = response.status
        if status < 300:
            return response
        raw = await _read(endpoint, response)
        verdict = failover.classify(status)
        if status < 400:  # a redirect is never followed nor relayed: the prompt stays put
            message = f"Upstream endpoint '{endpoint.name}' answered a redirect (HTTP {status}); kvgate does not follow redirects."
            raise Retry(UpstreamError(message), f"http_{status}")
        kept = failover.rate_limit_headers(response.headers)
        if status == 405 and response.headers.get("allow"):  # the methods the endpoint serves there
            kept["Allow"] = response.headers["allow"]
        if verdict is failover.CLIENT_ERROR:
            raise UpstreamClientError(status, raw, kept)
        wait = failover.retry_after_s(kept.get("retry-after"), self._max_retry_after_s)
        if status == 429:
            cool = failover.retry_after_s(kept.get("retry-after"), self._max_cooldown_s)
            raise Retry(UpstreamClientError(429, raw, kept), "http_429", wait, cool)
        reason = error_message_of(raw, status, relay_text=False)  # never an HTML page or a Traceback
        message = f"Upstream endpoint '{endpoint.name}' returned HTTP {status}: {reason}"
        error_class = UpstreamTimeoutError if status in (408, 504) else UpstreamError
        raise Retry(error_class(message), f"http_{status}", wait, echo=(status, reason) if status >= 500 else None)

    async def _open_stream(
        self, attempt: Attempt, request: InferenceRequest, body: bytes, exchange: Exchange, route: Route,
        observer: StreamObserver, by_event: bool,
    ) -> Upstreamed:
        """Open a stream and read it until content (holding its preamble, ``hold_preamble``); a
        :class:`Retry` if it is empty, ends or breaks before content, or opens with an error."""
        endpoint = attempt.endpoint
        response: UpstreamResponse | None = None
        try:
            with deadline(route.timeouts.first_byte_s):
                response = await self._open(attempt, request, body, exchange, route)
                first, events, ended = await hold_preamble(response, observer, by_event=by_event)
        except TimeoutError:
            if response is not None:
                response.close()
            raise Retry(UpstreamTimeoutError(f"Upstream endpoint '{endpoint.name}' sent nothing in time."), "timeout") from None
        except UpstreamTimeoutError as error:
            raise Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise Retry(_named(endpoint, error), "broken_body") from None
        except BaseException:  # cancelled (the client left): abort, so the engine stops generating
            if response is not None:
                response.close()
            raise
        if ended:  # nothing, or only comments and role chunks
            response.release()
            what = "an empty stream" if not first else "a stream that ended before any content"
            raise Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' sent {what}."), "empty_body")
        if observer.error is not None and observer.output_events == 0:
            response.close()
            message = str(observer.error.get("message") or "in-band error event")
            raise Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' failed: {message}"), "stream_error")
        return Upstreamed(attempt, response, first, events)


class Continuation:
    """Handed to the relay of a stream that may be continued (``gateway/continuation.py``): the
    decision's ranked endpoints and how to open the next stream on one of them."""

    __slots__ = ("_opener", "_request", "_exchange", "_route", "_decision", "_metrics", "_clock")

    def __init__(
        self, opener: Opener, request: InferenceRequest, exchange: Exchange, route: Route, decision: Decision,
        metrics: GatewayMetrics,
    ) -> None:
        self._opener, self._request, self._exchange, self._route = opener, request, exchange, route
        self._decision, self._metrics, self._clock = decision, metrics, opener.clock

    async def next(self, seen: StreamObserver, tried: set[str]) -> Upstreamed | None:
        """Continue the answer ``seen`` so far on a ranked endpoint not in ``tried`` (those that fail
        here are added), or None. A 429 with ``Retry-After`` there cools it instead of counting a failure."""
        if not resumable(self._request, seen):
            return None
        for endpoint in self._decision.ranked:
            name = endpoint.spec.name
            if name in tried or endpoint.cooling_until or not endpoint.breaker.allow():
                continue
            attempt = Attempt(endpoint, self._decision, self._metrics, self._exchange.lease)
            try:
                scratch = StreamObserver(self._clock)
                source = await self._opener.stream(attempt, self._request, self._exchange, self._route, scratch, seen)
            except Retry as retry:
                attempt.retried(retry)
                tried.add(name)
                continue
            except UpstreamClientError:
                attempt.abandoned()
                tried.add(name)
                continue
            except BaseException:
                attempt.abandoned()
                raise
            self._metrics.continuations.labels(self._exchange.cluster).inc()
            source.first_events = None
            return source
        return None


def _stream_body(request: InferenceRequest, endpoint: Endpoint, ask: bool, seen: StreamObserver | None) -> bytes:
    served = endpoint.spec.served_model
    if seen is None:
        return request.body_for(served, ask_usage=ask)
    return continuation_body(request, seen, served, ask_usage=ask) or b""


def _named(endpoint: Endpoint, error: GatewayError) -> GatewayError:
    """The same error class, its message prefixed with the endpoint's name (never its URL)."""
    return type(error)(f"Upstream endpoint '{endpoint.name}' failed: {error.message}.")


async def _read(endpoint: Endpoint, response: UpstreamResponse) -> bytes:
    try:
        return await response.read()
    except UpstreamTimeoutError as error:
        raise Retry(_named(endpoint, error), "timeout") from None
    except UpstreamError as error:
        raise Retry(_named(endpoint, error), "broken_body") from None


async def hold_preamble(
    response: UpstreamResponse, observer: StreamObserver, *, by_event: bool
) -> tuple[bytes, list[tuple[bytes, dict[str, Any] | None]] | None, bool]:
    """Read a new stream until it has *started* (``StreamObserver.started``): past its comments
    and role-only chunks, which are held; at most ``MAX_HELD_BYTES`` are held.

    Returns (the bytes read, their events when ``by_event`` else None, whether the body ended).
    Every read is observed once. The caller bounds the time (``first_byte_s``) and maps errors.
    """
    held: list[bytes] = []
    events: list[tuple[bytes, dict[str, Any] | None]] | None = [] if by_event else None
    size = 0
    while True:
        chunk = await response.next_chunk()
        if not chunk:
            return b"".join(held), events, True
        held.append(chunk)
        size += len(chunk)
        if events is not None:
            events.extend(observer.split(chunk))
        else:
            observer.feed(chunk)
        if observer.started or size > MAX_HELD_BYTES:
            return (held[0] if len(held) == 1 else b"".join(held)), events, False
