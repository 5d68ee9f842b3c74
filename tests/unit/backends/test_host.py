"""backends.host on recorded /proc/cpuinfo flag sets (AVX2-only AMD EPYC, AVX-512 Intel) and GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.host import (
    SMALL_MODEL_PARAMS, HostFacts, choose_dtypes, detect, kv_dtype_support, model_dtype, parse_cpuinfo, torch_agrees,
)

FIXTURES = Path(__file__).parent / "fixtures"
EPYC = detect(FIXTURES / "cpuinfo-amd-epyc-avx2.txt")
SPR = detect(FIXTURES / "cpuinfo-intel-xeon-avx512-amx.txt")
SKYLAKE = detect(FIXTURES / "cpuinfo-intel-xeon-avx512-skylake.txt")
SMOLLM2 = dict(checkpoint_dtype="bfloat16", params=134_515_008, head_dim=64)


def test_the_recorded_flag_sets_are_read() -> None:
    assert (EPYC.cpu_model, EPYC.isa(), EPYC.avx512, EPYC.amx, EPYC.native_bf16) == ("AMD EPYC", "AVX2", False, False, False)
    assert (SPR.isa(), SPR.avx512, SPR.amx, SPR.native_bf16) == ("AMX", True, True, True)
    assert (SKYLAKE.isa(), SKYLAKE.avx512, SKYLAKE.amx, SKYLAKE.native_bf16) == ("AVX-512", True, False, False)
    assert EPYC.describe() == "AMD EPYC (x86_64, AVX2, no native bfloat16)"


def test_avx2_only_cpu_cannot_serve_fp8_and_says_why() -> None:
    support = kv_dtype_support(EPYC, head_dim=64)
    assert {d: s.ok for d, s in support.items()} == {"auto": True, "fp8": False, "fp8_e4m3": False, "fp8_e5m2": False}
    assert support["fp8"].reason == "FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has AVX2"


@pytest.mark.parametrize("facts", [SPR, SKYLAKE], ids=["amx", "avx512"])
def test_avx512_or_amx_cpu_serves_every_kv_dtype(facts: HostFacts) -> None:
    assert all(s.ok for s in kv_dtype_support(facts, head_dim=64).values())


def test_avx512_needs_all_four_flags_as_torch_checks() -> None:
    partial = HostFacts(cpu_flags=frozenset({"avx2", "avx512f", "avx512vl", "avx512bw"}))  # no avx512dq
    assert not kv_dtype_support(partial)["fp8"].ok


def test_head_size_not_divisible_by_32_refuses_fp8_on_cpu_as_vllm_does() -> None:
    support = kv_dtype_support(SPR, head_dim=80)
    assert not support["fp8"].ok and "divisible by 32" in support["fp8"].reason and support["auto"].ok


def test_arm_cpu_has_no_fp8_kv() -> None:
    arm = HostFacts(arch="aarch64", cpu_flags=frozenset({"fp", "asimd", "bf16"}))
    assert not kv_dtype_support(arm)["fp8"].ok and arm.isa() == "aarch64"


@pytest.mark.parametrize(("capability", "expected"), [
    ((9, 0), {"auto": True, "fp8": True, "fp8_e4m3": True, "fp8_e5m2": True}),
    ((8, 9), {"auto": True, "fp8": True, "fp8_e4m3": True, "fp8_e5m2": True}),
    ((8, 0), {"auto": True, "fp8": False, "fp8_e4m3": False, "fp8_e5m2": True}),
])
def test_gpu_capability_decides_fp8(capability: tuple[int, int], expected: dict[str, bool]) -> None:
    gpu = HostFacts(cpu_flags=EPYC.cpu_flags, gpu_capability=capability, gpu_name="NVIDIA A100")
    support = kv_dtype_support(gpu, head_dim=64)
    assert {d: s.ok for d, s in support.items()} == expected
    assert gpu.describe() == f"NVIDIA A100 (compute capability {capability[0]}.{capability[1]})"
    if not expected["fp8"]:
        assert support["fp8"].reason == "FP8 (E4M3) KV cache needs compute capability 8.9+ on GPU; this GPU has 8.0"


def test_default_on_avx2_falls_back_to_the_model_dtype_in_float32() -> None:
    choice = choose_dtypes(EPYC, requested=None, **SMOLLM2)
    assert (choice.kv_cache_dtype, choice.dtype, choice.kv_storage, choice.fell_back) == ("auto", "float32", "float32", True)
    assert choice.notice(23_296, 93_184) == (
        "FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has AVX2: using float32 KV, 23,296 tokens instead of "
        "93,184; float32 weights: no AVX512-BF16/AMX, bfloat16 would be emulated")


def test_default_on_avx512_amx_is_fp8_with_the_checkpoint_dtype() -> None:
    choice = choose_dtypes(SPR, requested=None, **SMOLLM2)
    assert (choice.kv_cache_dtype, choice.dtype, choice.fell_back) == ("fp8", None, False)
    assert choice.notice(93_184) == ("this CPU has AMX, which runs an FP8 KV cache (it needs AVX-512 or AMX): using fp8 (E4M3) KV, "
                                     "93,184 tokens; bfloat16 weights: this CPU has native bfloat16")


def test_avx512_without_bf16_is_fp8_kv_with_float32_weights() -> None:
    choice = choose_dtypes(SKYLAKE, requested=None, **SMOLLM2)
    assert (choice.kv_cache_dtype, choice.dtype) == ("fp8", "float32")


def test_explicit_fp8_on_avx2_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"^--kv-cache-dtype fp8: FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has AVX2$"):
        choose_dtypes(EPYC, requested="fp8", **SMOLLM2)
    assert choose_dtypes(EPYC, requested="auto", **SMOLLM2).kv_cache_dtype == "auto"


def test_large_or_non_bf16_models_keep_their_dtype() -> None:
    assert model_dtype(EPYC, "bfloat16", SMALL_MODEL_PARAMS + 1)[0] is None
    assert model_dtype(EPYC, "float16", 1_000)[0] is None
    assert model_dtype(HostFacts(gpu_capability=(9, 0)), "bfloat16", 1_000)[0] is None


def test_cpuinfo_parse_and_torch_cross_check() -> None:
    model, flags = parse_cpuinfo("processor : 0\nmodel name : X\nflags : AVX2 sse\n\nprocessor : 1\nflags : other\n")
    assert (model, flags) == ("X", frozenset({"avx2", "sse"}))
    assert torch_agrees(EPYC, {"avx512": False, "amx_tile": False, "avx512_bf16": False}) == []
    assert torch_agrees(EPYC, {"avx512": True}) == ["avx512: torch says True, /proc/cpuinfo says False"]
    assert detect(Path("/nonexistent/cpuinfo")).cpu_flags == frozenset()


def test_an_asked_model_dtype_wins_and_is_said_so() -> None:
    choice = choose_dtypes(EPYC, requested=None, dtype_asked="bfloat16", **SMOLLM2)
    assert (choice.kv_cache_dtype, choice.dtype, choice.kv_storage) == ("auto", "bfloat16", "bfloat16")
    assert choice.notice(46_592, 93_184).endswith("46,592 tokens instead of 93,184; --dtype bfloat16 as asked")
