"""Load generator: what the scripted stand-in sustains alone, at a rollout's concurrency and latency.

``rollout_scaling`` plays N episodes at once against the scripted server answering every call
after a fixed latency, so N calls are in flight and the best it can get is N / latency calls per
second. Whether a shortfall is the harness's or the stand-in's is told here: N workers send the
same kind of request (a PLAN turn's chat completion of about the agent's prompt size) to the
stand-in with nothing else in the process, each waiting for its answer before the next, and the
rate they sustain is compared with N / latency. The client is a bare asyncio HTTP/1.1 one (one
connection per worker, kept alive while the server allows, a new one when it closes), so almost
all of the CPU it spends is the kernel's and the measured ceiling is the server's. ``--tree DIR``
starts the stand-in of another checkout (a before/after comparison in one run).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from automem_dagster.llm.process import ServerProcess, free_port
from benchmarks.common import emit, parser, ratio, start_result, summary_ms, table, target

NAME = "load_generator"
FULL = {"concurrency": [16, 64], "latency_s": 0.2, "duration_s": 10.0}
QUICK = {"concurrency": [4], "latency_s": 0.05, "duration_s": 1.0}
SUSTAINED_LIMIT = 0.95
"""The stand-in is no ceiling when it sustains this share of N / latency (proposed)."""
PROMPT_CHARS = 4_000
"""About the memory agent's PLAN prompt on MiniHack (system and step message)."""


def _request(port: int) -> bytes:
    body = json.dumps({"model": "scripted", "max_tokens": 160, "messages": [
        {"role": "system", "content": "x" * (PROMPT_CHARS // 2)},
        {"role": "user", "content": "Phase: PLAN\n" + "y" * (PROMPT_CHARS // 2)}]}).encode()
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


async def _worker(port: int, deadline: float, latencies: list[float], connections: list[int]) -> None:
    request, reader, writer = _request(port), None, None
    while time.perf_counter() < deadline:
        if writer is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            connections[0] += 1
        started = time.perf_counter()
        reusable = await _exchange(reader, writer, request)
        latencies.append(time.perf_counter() - started)
        if not reusable:
            writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


def drive(port: int, concurrency: int, duration_s: float) -> dict[str, Any]:
    """``concurrency`` workers for ``duration_s``: requests, rate, latency, connections opened, client CPU."""
    latencies: list[float] = []
    connections = [0]

    async def go() -> float:
        started = time.perf_counter()
        deadline = started + duration_s
        await asyncio.gather(*(_worker(port, deadline, latencies, connections) for _ in range(concurrency)))
        return time.perf_counter() - started

    cpu = time.process_time()
    elapsed = asyncio.run(go())
    return {"requests": len(latencies), "elapsed_s": elapsed, "requests_per_s": ratio(len(latencies), elapsed),
            "latency": summary_ms(latencies), "connections_opened": connections[0],
            "generator_cpu_ms_per_request": ratio((time.process_time() - cpu) * 1e3, len(latencies))}


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
    from benchmarks.rollout_scaling import server_cpu_s

    p = parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--concurrency", default=None, help="comma-separated requests in flight (default 16,64)")
    p.add_argument("--latency", type=float, default=None, help="seconds the stand-in takes per call (default 0.2)")
    p.add_argument("--duration", type=float, default=None, help="seconds per level (default 10)")
    p.add_argument("--tree", type=Path, default=None, help="start the stand-in of this checkout instead of this one")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    levels = [int(x) for x in args.concurrency.split(",")] if args.concurrency else base["concurrency"]
    latency = base["latency_s"] if args.latency is None else args.latency
    duration = args.duration or base["duration_s"]
    settings = {"concurrency": levels, "latency_s": latency, "duration_s": duration, "prompt_chars": PROMPT_CHARS,
                "tree": str(args.tree) if args.tree else None}
    result = start_result(NAME, args.quick, settings)
    per_level = {}
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        rules = Path(tmp) / "rules.json"
        rules.write_text(json.dumps([{"match": "Phase: PLAN", "reply": "<|ACTION|>search<|END|>", "delay_s": latency}]))
        server = standin(rules, Path(tmp) / "scripted.log", args.tree).start()
        try:
            drive(server.port, 2, min(duration, 1.0))  # warm-up: the server's first requests and imports
            for level in levels:
                cpu = server_cpu_s(server.pid)
                figures = drive(server.port, level, duration)
                figures["server_cpu_ms_per_request"] = ratio((server_cpu_s(server.pid) - cpu) * 1e3, figures["requests"])
                figures["allowed_per_s"] = level / latency
                figures["sustained"] = ratio(figures["requests_per_s"], figures["allowed_per_s"])
                per_level[str(level)] = figures
        finally:
            server.stop()
    result["results"] = per_level
    result["targets"] = [target(f"stand-in alone at {level} in flight: share of {level} / latency sustained",
                                f["sustained"], SUSTAINED_LIMIT, ">=", unit="share", source="proposed")
                         for level, f in ((int(k), v) for k, v in per_level.items())]
    rows = [[k, f["requests"], f["requests_per_s"], f["allowed_per_s"], f["sustained"], f["latency"]["median_ms"],
             f["latency"]["p95_ms"], f["connections_opened"], f["server_cpu_ms_per_request"],
             f["generator_cpu_ms_per_request"]] for k, f in per_level.items()]
    emit(result, args.out, [table(f"scripted stand-in alone, {latency} s per call",
                                  ["in flight", "requests", "req/s", "allowed req/s", "sustained", "median ms", "p95 ms",
                                   "connections", "server CPU ms/req", "generator CPU ms/req"], rows)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
