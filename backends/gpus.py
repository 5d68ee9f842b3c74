"""GPU inventory: what ``nvidia-smi`` says about this host's GPUs (index, name, memory in MiB).

Two pure parsers, tested on captured outputs, and one [io] function:

- :func:`parse_query_csv` reads ``nvidia-smi --query-gpu=index,name,memory.total,memory.used
  --format=csv,noheader,nounits`` (:data:`QUERY_ARGV`): one line per GPU, memory in MiB;
- :func:`parse_table` reads the default ``nvidia-smi`` table (driver 470-570 layouts): the GPU
  line ``|   0  NVIDIA H100 80GB HBM3   On |`` followed by the line holding
  ``1MiB /  81559MiB``; the ``Processes:`` section is ignored;
- :func:`inventory` runs the query and parses it: ``[]`` when ``nvidia-smi`` is not installed
  (a CPU host), :class:`GpuInventoryError` when it is installed but fails (driver not loaded).

:func:`compute_capabilities` asks ``nvidia-smi --query-gpu=compute_cap --format=csv,noheader``
(drivers 510+) for each GPU's CUDA compute capability, which decides FP8 KV (``backends.host``).

Units: MiB, as ``nvidia-smi`` prints them. Malformed lines raise :class:`GpuInventoryError`
naming the line; nothing is guessed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backends.errors import BackendError

QUERY_ARGV: tuple[str, ...] = (
    "nvidia-smi", "--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits",
)
MIB = 1024 * 1024


class GpuInventoryError(BackendError):
    """``nvidia-smi`` failed or printed something the parser does not recognise."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as ``nvidia-smi`` reports it."""

    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int

    @property
    def memory_free_mib(self) -> int:
        return max(self.memory_total_mib - self.memory_used_mib, 0)

    @property
    def memory_total_bytes(self) -> int:
        return self.memory_total_mib * MIB


def parse_query_csv(text: str) -> list[Gpu]:
    """GPUs from the CSV query output (:data:`QUERY_ARGV`); blank lines are skipped."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 4:
            raise GpuInventoryError(f"nvidia-smi CSV: expected 4 fields, got {len(fields)}: {line!r}")
        # A GPU name may itself hold commas: index first, the two memory fields last.
        index, name, total, used = fields[0], ", ".join(fields[1:-2]), fields[-2], fields[-1]
        try:
            gpus.append(Gpu(int(index), name, int(float(total)), int(float(used))))
        except ValueError as exc:
            raise GpuInventoryError(f"nvidia-smi CSV: not a number in {line!r}") from exc
    return gpus


_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|")
_TABLE_MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")


def parse_table(text: str) -> list[Gpu]:
    """GPUs from the default ``nvidia-smi`` table output."""
    gpus = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if "Processes:" in line:
            break
        match = _TABLE_GPU.match(line)
        if match is None:
            continue
        following = lines[number + 1] if number + 1 < len(lines) else ""
        memory = _TABLE_MEMORY.search(following)
        if memory is None:
            raise GpuInventoryError(f"nvidia-smi table: no 'USED MiB / TOTAL MiB' after GPU line {line!r}")
        gpus.append(Gpu(int(match.group(1)), match.group(2).strip(), int(memory.group(2)), int(memory.group(1))))
    return gpus


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Either format: the table when the text holds ``NVIDIA-SMI``'s box lines, else CSV."""
    return parse_table(text) if "NVIDIA-SMI" in text or "|===" in text else parse_query_csv(text)


Runner = Callable[[Sequence[str]], str]


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise GpuInventoryError(f"{argv[0]} exited with code {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def inventory(run: Runner = _run) -> list[Gpu]:
    """This host's GPUs, by index; ``[]`` when ``nvidia-smi`` is not installed."""
    try:
        text = run(QUERY_ARGV)
    except FileNotFoundError:
        return []
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuInventoryError(f"nvidia-smi: {exc}") from exc
    return sorted(parse_query_csv(text), key=lambda gpu: gpu.index)


CAPABILITY_ARGV: tuple[str, ...] = ("nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader")


def parse_compute_cap(text: str) -> list[tuple[int, int]]:
    """``[(9, 0), ...]`` from the ``compute_cap`` query output, one ``MAJOR.MINOR`` line per GPU."""
    capabilities = []
    for line in text.splitlines():
        if not line.strip():
            continue
        major, _, minor = line.strip().partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise GpuInventoryError(f"nvidia-smi compute_cap: not MAJOR.MINOR: {line!r}")
        capabilities.append((int(major), int(minor)))
    return capabilities


def compute_capabilities(run: Runner = _run) -> list[tuple[int, int]]:
    """Each GPU's compute capability, by index; ``[]`` without ``nvidia-smi``."""
    try:
        return parse_compute_cap(run(CAPABILITY_ARGV))
    except FileNotFoundError:
        return []
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpuInventoryError(f"nvidia-smi: {exc}") from exc
