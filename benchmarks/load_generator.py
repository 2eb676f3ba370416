"""Load generator: what the scripted stand-in sustains alone, at a rollout's concurrency and latency.

``rollout_scaling`` plays N episodes at once against the scripted server answering every call
after a fixed latency, so N calls are in flight and the best it can get is N / latency calls per
second. Whether a shortfall is the harness's or the stand-in's is told here: N workers send the
same kind of request (a PLAN turn's chat completion of about the agent's prompt size) to the
stand-in with nothing else in the process, each waiting for its answer before the next, and the
rate they sustain is compared with N / latency. The default client is a bare asyncio HTTP/1.1 one
(one connection per worker, kept alive while the server allows, a new one when it closes), so
almost all of the CPU it spends is the kernel's and the measured ceiling is the server's. ``--tree
DIR`` starts the stand-in of another checkout (a before/after comparison in one run).

``--clients`` also drives the same load through the client a rollout uses, to tell what a call
costs the playing process's one interpreter (its CPU per request): ``sdk-httpx``, the openai
client's ``post`` over its default httpx transport; ``sdk-aiohttp``, the same over its aiohttp
transport; ``project``, ``LLMClient.complete`` (``sdk-aiohttp`` with the request body built, every
attempt noted and the reply parsed, as a turn of the game role makes it). Each worker has its own
openai client, as each lane has (``LLMClient._client``). The clients alternate within a level.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from automem_dagster.llm.process import ServerProcess, free_port
from benchmarks.common import emit, parser, ratio, start_result, summary_ms, table, target

CLIENTS = ("bare", "sdk-httpx", "sdk-aiohttp", "project")

NAME = "load_generator"
FULL = {"concurrency": [16, 64], "latency_s": 0.2, "duration_s": 10.0}
QUICK = {"concurrency": [4], "latency_s": 0.05, "duration_s": 1.0}
SUSTAINED_LIMIT = 0.95
"""The stand-in is no ceiling when it sustains this share of N / latency (proposed)."""
PROMPT_CHARS = 4_000
"""About the memory agent's PLAN prompt on MiniHack (system and step message)."""


MESSAGES = [{"role": "system", "content": "x" * (PROMPT_CHARS // 2)},
            {"role": "user", "content": "Phase: PLAN\n" + "y" * (PROMPT_CHARS // 2)}]
BODY = {"model": "scripted", "max_tokens": 160, "messages": MESSAGES}
"""The chat completion every client sends (``project`` builds the same from its endpoint's settings)."""


def _request(port: int) -> bytes:
    body = json.dumps(BODY).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> bool:
    """One request and its whole answer; whether the connection may be used again."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].split(" ")[1].startswith("2"):
        raise RuntimeError(f"the stand-in answered {lines[0]!r}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    else:  # an HTTP/1.0 answer without a length ends with the connection
        await reader.read()
        return False
    return lines[0].startswith("HTTP/1.1") and headers.get("connection", "").lower() != "close"


class _Window:
    """The measured window of a level: it opens once every worker has made its first request (so a
    client's construction and its first connection are not counted per request) and closes
    ``duration_s`` later; requests finished after it opened are counted, with the process's CPU from
    then to the last one's end."""

    def __init__(self, workers: int, duration_s: float) -> None:
        self.waiting, self.duration_s = workers, duration_s
        self.started = self.deadline = self.cpu = None
        self.latencies: list[float] = []
        self.connections = 0

    def open(self) -> bool:
        return self.deadline is None or time.perf_counter() < self.deadline

    def done(self, started: float) -> None:
        if self.deadline is None:
            self.waiting -= 1
            if self.waiting == 0:
                self.started, self.cpu = time.perf_counter(), time.process_time()
                self.deadline = self.started + self.duration_s
        else:
            self.latencies.append(time.perf_counter() - started)


async def _worker(port: int, window: _Window) -> None:
    request, reader, writer = _request(port), None, None
    while window.open():
        if writer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            window.connections += 1
        started = time.perf_counter()
        reusable = await _exchange(reader, writer, request)
        window.done(started)
        if not reusable:
            writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


def _sdk_call(kind: str, port: int):
    """One worker's call through the openai client (``kind`` as in ``CLIENTS``), and what closes it."""
    import openai

    from automem_dagster.llm import EndpointConfig, LLMClient
    from automem_dagster.llm.attempts import CountingHttpClient, shared_ssl_context

    base_url = f"http://127.0.0.1:{port}/v1"
    if kind == "project":
        client = LLMClient(EndpointConfig(name="game", base_url=base_url, model="scripted", constrained="none",
                                          max_tokens=160), base_url)
        return partial(client.complete, MESSAGES, lane=0), client.close
    http = openai.DefaultAsyncHttpxClient(verify=shared_ssl_context()) if kind == "sdk-httpx" else CountingHttpClient()
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http)
    return partial(sdk.post, "/chat/completions", body=BODY, cast_to=object), sdk.close


async def _sdk_worker(kind: str, port: int, window: _Window) -> None:
    call, close = _sdk_call(kind, port)
    try:
        while window.open():
            started = time.perf_counter()
            await call()
            window.done(started)
    finally:
        await close()


def drive(port: int, concurrency: int, duration_s: float, client: str = "bare") -> dict[str, Any]:
    """``concurrency`` workers of ``client`` for ``duration_s`` (``_Window``): requests, rate, latency,
    connections opened (the bare client's), the client's CPU per request."""
    window = _Window(concurrency, duration_s)

    async def go() -> tuple[float, float]:
        workers = (_worker(port, window) if client == "bare" else _sdk_worker(client, port, window)
                   for _ in range(concurrency))
        await asyncio.gather(*workers)
        return time.process_time() - window.cpu, time.perf_counter() - window.started

    cpu, elapsed = asyncio.run(go())
    n = len(window.latencies)
    return {"client": client, "requests": n, "elapsed_s": elapsed, "requests_per_s": ratio(n, elapsed),
            "latency": summary_ms(window.latencies), "connections_opened": window.connections if client == "bare" else None,
            "generator_cpu_ms_per_request": ratio(cpu * 1e3, n)}


def standin(rules: Path, log: Path, tree: Path | None) -> ServerProcess:
    """The scripted server, of this checkout or of ``tree``'s."""
    from automem_dagster.standins.scripted_server import scripted_server

    if tree is None:
        return scripted_server(rules, log)
    port = free_port()
    cmd = ["env", "-C", str(tree), f"PYTHONPATH={tree}", sys.executable, "-m", "automem_dagster.standins.scripted_server",
           "--port", str(port), "--rules", str(rules)]
    return ServerProcess(cmd, port, log, f"scripted server of {tree}")


def main(argv: list[str] | None = None) -> int:
    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--concurrency", default=None, help="comma-separated requests in flight (default 16,64)")
    p.add_argument("--latency", type=float, default=None, help="seconds the stand-in takes per call (default 0.2)")
    p.add_argument("--duration", type=float, default=None, help="seconds per level and client (default 10)")
    p.add_argument("--tree", type=Path, default=None, help="start the stand-in of this checkout instead of this one")
    p.add_argument("--clients", default="bare", help=f"comma-separated clients, of {', '.join(CLIENTS)} (default bare)")
    args = p.parse_args(argv)
    clients = args.clients.split(",")
    if unknown := sorted(set(clients) - set(CLIENTS)):
        p.error(f"--clients: unknown {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    base = QUICK if args.quick else FULL
    levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else base["concurrency"]
    latency = base["latency_s"] if args.latency is None else args.latency
    duration = args.duration or base["duration_s"]
    settings = {"concurrency": levels, "latency_s": latency, "duration_s": duration, "prompt_chars": PROMPT_CHARS,
                "tree": str(args.tree) if args.tree else None, "clients": clients}
    result = start_result(NAME, args.quick, settings)
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        rules = Path(tmp) / "rules.json"
        rules.write_text(json.dumps([{"match": "Phase: PLAN", "reply": "<|ACTION|>search<|END|>", "delay_s": latency}]))
        server = standin(rules, Path(tmp) / "scripted.log", args.tree).start()
        try:
            for client in clients:   # warm-up: the server's first requests, each client's imports
                drive(server.port, 2, min(duration, 1.0), client)
            per_level = {str(level): _level(server, level, latency, duration, clients) for level in levels}
        finally:
            server.stop()
    result["results"] = per_level
    result["targets"] = [target(f"stand-in alone at {level} in flight: share of {level} / latency sustained",
                                f["bare"]["sustained"], SUSTAINED_LIMIT, ">=", unit="share", source="proposed")
                         for level, f in per_level.items() if "bare" in f]
    rows = [[level, client, f["requests"], f["requests_per_s"], f["allowed_per_s"], f["sustained"],
             f["latency"]["median_ms"], f["latency"]["p95_ms"], f["connections_opened"], f["server_cpu_ms_per_request"],
             f["generator_cpu_ms_per_request"]] for level, by_client in per_level.items() for client, f in by_client.items()]
    emit(result, args.out, [table(f"scripted stand-in, {latency} s per call",
                                  ["in flight", "client", "requests", "req/s", "allowed req/s", "sustained", "median ms",
                                   "p95 ms", "connections", "server CPU ms/req", "client CPU ms/req"], rows)])
    return 0


def _level(server: ServerProcess, level: int, latency: float, duration: float, clients: list[str]) -> dict[str, Any]:
    """Each client driving ``level`` requests in flight for ``duration`` seconds, one after the other, with the
    server's CPU per request and the share of ``level`` / ``latency`` each sustained."""
    from benchmarks.rollout_scaling import server_cpu_s

    by_client = {}
    for client in clients:
        cpu = server_cpu_s(server.pid)
        figures = drive(server.port, level, duration, client)
        figures["server_cpu_ms_per_request"] = ratio((server_cpu_s(server.pid) - cpu) * 1e3, figures["requests"])
        figures["allowed_per_s"] = level / latency if latency > 0 else None
        figures["sustained"] = ratio(figures["requests_per_s"], figures["allowed_per_s"]) if latency > 0 else None
        by_client[client] = figures
    return by_client


if __name__ == "__main__":
    raise SystemExit(main())
