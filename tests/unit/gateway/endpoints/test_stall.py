import pytest

from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.stall import StallDetector


def stats(running: float | None, tokens: float | None, waiting: float = 0.0) -> EngineStats:
    return EngineStats("vllm", running=running, waiting=waiting, generated_tokens=tokens)


@pytest.mark.parametrize(
    "samples, stalled",
    [
        ([(0, 2, 100), (10, 2, 100), (31, 2, 100)], True),  # running, no new tokens for 31 s
        ([(0, 2, 100), (10, 2, 100), (29, 2, 100)], False),  # not long enough yet
        ([(0, 2, 100), (20, 2, 140), (45, 2, 140)], False),  # progress at 20 s restarts the clock
        ([(0, 0, 100), (40, 0, 100)], False),  # idle engine: nothing to make progress on
        ([(0, 2, 100), (31, 2, 100), (32, 2, 101)], False),  # moved again: re-admitted
        ([(0, 2, 100), (31, 2, 100), (32, 0, 100)], False),  # its stuck requests were aborted
        ([(0, 2, None), (60, 2, None)], False),  # an engine without the counter is never judged
    ],
)
def test_stall_detection(samples: list[tuple[float, float, float | None]], stalled: bool) -> None:
    detector = StallDetector(stall_s=30)
    verdict = False
    for now, running, tokens in samples:
        verdict = detector.observe("e", stats(running, tokens), now)
    assert verdict is stalled


def test_waiting_requests_count_too() -> None:
    detector = StallDetector(stall_s=30)
    detector.observe("e", stats(0, 10, waiting=3), 0)
    assert detector.observe("e", stats(0, 10, waiting=3), 31)


def test_disabled_with_zero() -> None:
    detector = StallDetector(stall_s=0)
    detector.observe("e", stats(3, 10), 0)
    assert not detector.observe("e", stats(3, 10), 1000)


def test_parser_reads_the_generated_token_counter() -> None:
    from gateway.endpoints.metrics_parse import parse_engine_stats

    text = 'vllm:num_requests_running{model_name="m"} 2.0\nvllm:generation_tokens_total{model_name="m"} 1234.0\n'
    parsed = parse_engine_stats(text)
    assert parsed is not None and parsed.generated_tokens == 1234.0 and parsed.running == 2.0
