"""nvidia-smi parsers on captured outputs, and inventory() without nvidia-smi."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from backends.gpus import QUERY_ARGV, Gpu, GpuInventoryError, inventory, parse_nvidia_smi, parse_query_csv, parse_table

FIXTURES = Path(__file__).parent / "fixtures"
H100 = "NVIDIA H100 80GB HBM3"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


CASES = [
    ("nvidia_smi_query_h100x8.csv", parse_query_csv, 8, Gpu(2, H100, 81559, 74312)),
    ("nvidia_smi_query_mixed.csv", parse_query_csv, 2, Gpu(1, "NVIDIA GeForce RTX 4090", 24564, 1083)),
    ("nvidia_smi_table_h100x2_550.txt", parse_table, 2, Gpu(1, H100, 81559, 74312)),
    ("nvidia_smi_table_a100x4_470.txt", parse_table, 4, Gpu(2, "NVIDIA A100-SXM...", 81251, 2048)),
]


@pytest.mark.parametrize(("name", "parser", "count", "sample"), CASES, ids=[c[0] for c in CASES])
def test_parsers_read_captured_outputs(name: str, parser, count: int, sample: Gpu) -> None:  # noqa: ANN001
    gpus = parser(fixture(name))
    assert len(gpus) == count
    assert [g.index for g in gpus] == list(range(count))
    assert sample in gpus
    assert parse_nvidia_smi(fixture(name)) == gpus  # the format is recognised


def test_units_and_free_memory() -> None:
    gpu = parse_query_csv(fixture("nvidia_smi_query_h100x8.csv"))[2]
    assert gpu.memory_free_mib == 81559 - 74312
    assert gpu.memory_total_bytes == 81559 * 1024 * 1024


def test_process_lines_are_not_gpus() -> None:
    assert [g.index for g in parse_table(fixture("nvidia_smi_table_h100x2_550.txt"))] == [0, 1]


def test_a_name_with_a_comma_survives() -> None:
    assert parse_query_csv("0, Tesla V100-SXM2-16GB, rev 2, 16160, 0\n") == [Gpu(0, "Tesla V100-SXM2-16GB, rev 2", 16160, 0)]


@pytest.mark.parametrize("text", ["0, H100, lots, 1\n", "0, H100\n"])
def test_malformed_csv_is_refused(text: str) -> None:
    with pytest.raises(GpuInventoryError, match="nvidia-smi CSV"):
        parse_query_csv(text)


def test_table_gpu_without_memory_line_is_refused() -> None:
    with pytest.raises(GpuInventoryError, match="no 'USED MiB / TOTAL MiB'"):
        parse_table("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |   0 |\n| N/A |\n")


def test_inventory_runs_the_query_and_sorts() -> None:
    seen: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> str:
        seen.append(argv)
        return "1, B, 100, 0\n0, A, 200, 0\n"

    assert [g.name for g in inventory(run)] == ["A", "B"]
    assert seen == [QUERY_ARGV]


def test_inventory_is_empty_without_nvidia_smi() -> None:
    def run(argv: Sequence[str]) -> str:
        raise FileNotFoundError(argv[0])

    assert inventory(run) == []


def test_inventory_reports_a_failing_nvidia_smi() -> None:
    def run(argv: Sequence[str]) -> str:
        raise subprocess.TimeoutExpired(argv[0], 30)

    with pytest.raises(GpuInventoryError, match="nvidia-smi"):
        inventory(run)


def test_real_inventory_on_this_host_does_not_raise() -> None:
    assert isinstance(inventory(), list)  # [] on the CPU machines


def test_compute_capability_query_is_parsed() -> None:
    from backends.gpus import CAPABILITY_ARGV, compute_capabilities, parse_compute_cap

    assert parse_compute_cap("9.0\n8.9\n\n") == [(9, 0), (8, 9)]
    with pytest.raises(GpuInventoryError, match="MAJOR.MINOR"):
        parse_compute_cap("[N/A]\n")
    seen: list[tuple[str, ...]] = []
    assert compute_capabilities(lambda argv: seen.append(tuple(argv)) or "8.0\n") == [(8, 0)]
    assert seen == [CAPABILITY_ARGV]

    def missing(argv: object) -> str:
        raise FileNotFoundError("nvidia-smi")
    assert compute_capabilities(missing) == []
