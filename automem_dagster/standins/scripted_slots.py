"""The scripted stand-in's ``GET /slots``, in llama.cpp's shape, so the client's progress watch has something to read.

llama.cpp's server lists its slots at ``GET /slots`` (tools/server/README.md; ``server_slot::to_json``
in tools/server/server-context.cpp of ggml-org/llama.cpp, as the installed xllamacpp 2026.10.11549
answers it): ``id``, ``n_ctx``, ``speculative``, ``is_processing``, and for a slot that has served a
task ``id_task``, ``n_prompt_tokens``, ``n_prompt_tokens_processed``, ``n_prompt_tokens_cache``,
``params`` and ``next_token``, a list of one ``{"has_next_token", "has_new_line", "n_remain",
"n_decoded"}``. The stand-in shows one slot per answer under way (at least one, idle): a rule's
``delay_s`` is a hung request (processing, nothing decoded) unless the rule has ``"decode_tps": N``,
a slow one whose ``n_decoded`` grows by N tokens a second while it waits, as a loaded server's does.
"""

from __future__ import annotations

import itertools
import threading
import time


class Slots:
    """The answers under way, by task id: when each began and how fast it decodes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[int, tuple[float, float, int]] = {}
        self._ids = itertools.count()

    def begin(self, decode_tps: float, prompt_tokens: int) -> int:
        with self._lock:
            task = next(self._ids)
            self._tasks[task] = (time.monotonic(), decode_tps, prompt_tokens)
            return task

    def end(self, task: int) -> None:
        with self._lock:
            self._tasks.pop(task, None)

    def listing(self, n_ctx: int = 8192) -> list[dict]:
        """``GET /slots`` now."""
        with self._lock:
            tasks = sorted(self._tasks.items())
        now = time.monotonic()
        slots = []
        for slot, (task, (start, tps, prompt)) in enumerate(tasks):
            decoded = int((now - start) * tps)
            slots.append({"id": slot, "n_ctx": n_ctx, "speculative": False, "is_processing": True, "id_task": task,
                          "n_prompt_tokens": prompt + decoded, "n_prompt_tokens_processed": prompt,
                          "n_prompt_tokens_cache": 0, "params": {},
                          "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": -1,
                                          "n_decoded": decoded}]})
        return slots or [{"id": 0, "n_ctx": n_ctx, "speculative": False, "is_processing": False}]
