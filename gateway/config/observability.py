"""``[metrics]``, ``[tracing]`` and ``[logging]``: what the gateway exports about itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.section import Section


class MetricsSettings(Section):
    """Prometheus metrics of the gateway itself."""

    enabled: bool = Field(True, description="Serve Prometheus text at GET /metrics.")
    loop_lag_interval_s: float = Field(
        0.05, ge=0.0, le=1.0,
        description="Event-loop lag monitor tick in seconds (kvgate_event_loop_lag_seconds); 0: no monitor. A stall "
        "shorter than the tick may go unseen; each tick costs ~0.25 ms of CPU (0.05 s: ~0.6% of a core; 0.005 s: ~5%).",
    )


class TracingSettings(Section):
    """OpenTelemetry traces: a server span per request, a client span per upstream attempt."""

    enabled: bool = Field(False, description="Export spans over OTLP/HTTP (protobuf).")
    otlp_endpoint: str = Field("http://127.0.0.1:4318/v1/traces", description="OTLP/HTTP traces URL.")
    service_name: str = Field("kvgate", description="service.name resource attribute.")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="Share of new traces sampled (parent-based).")


class LoggingSettings(Section):
    """Structured logs on stderr; the level is server.log_level."""

    format: Literal["json", "text"] = Field("json", description="One JSON object per line, or plain text.")
    log_payloads: bool = Field(
        False, description="Add request bodies and non-streamed answers (4 KiB each) to access logs."
    )
