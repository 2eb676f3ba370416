"""A local model server as a child process on 127.0.0.1, started and stopped by PID.

Running servers in their own process group means a crashed server never takes the caller
down, and ``stop`` can prove it is gone (tests check the PID afterwards). On Linux the server
is also told to stop when its parent dies, even by SIGKILL, so a killed rollout or test never
leaves an orphaned model server holding the CPU.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""prctl option: the signal a process receives when the thread that started it exits."""


def _stop_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when the parent dies (Linux only; elsewhere a no-op).

    An ignored or blocked SIGTERM survives exec, so a caller that ignores it would hand that on
    and neither the death signal nor ``stop`` could end the server. That happens in practice:
    under ``nohup ... &`` SIGINT is ignored, and Dagster's in-process execution maps SIGTERM to
    SIGINT's handler. The child therefore takes SIGTERM's default action back first."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerStartError(RuntimeError):
    """A local server that could not start; the message names its log and what to try."""


class ModelFileMissing(ServerStartError, FileNotFoundError):
    """The model file a local server needs is not there (also a FileNotFoundError, for callers that catch that)."""


_START_ADVICE = ("the usual causes are a missing or damaged model file, too little free memory, or a bad option; "
                 "fix the cause shown there and rerun the same command (finished episodes are kept)")


class ServerProcess:
    """``command`` is the argv to run; it must serve ``GET /health`` on ``port``."""

    def __init__(self, command: list[str], port: int, log_path: Path, label: str):
        self.command = command
        self.port = port
        self.log_path = Path(log_path)
        self.label = label
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, wait_s: float = 120.0) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=_stop_with_parent)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise ServerStartError(f"{self.label} exited with code {code} while starting; see {self.log_path} "
                                       f"({_START_ADVICE}):\n{_tail(self.log_path)}")
            if _healthy(self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise ServerStartError(f"{self.label} did not become healthy in {wait_s:.0f}s; see {self.log_path}: the machine "
                               "may be too busy (stop other work) or the server hung while loading")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if it has not exited after ``grace_s``."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
