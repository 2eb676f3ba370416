"""How many threads a compute-bound part may take: its default, or the person's share of the cores.

The embedded model server (llama.cpp) and LoRA training (torch) both spin threads that wait for one
another; on a small machine shared with other work, giving either every core makes it several times
slower. Each reads its own environment variable (``AUTOMEM_EMBEDDED_THREADS``,
``AUTOMEM_TORCH_THREADS``) through ``threads_from_env``, so a bad value is refused the same way."""

from __future__ import annotations

import os


def threads_from_env(variable: str, default: int) -> int:
    """``variable``'s whole number (at least 1) when set and not blank, else ``default``."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    try:
        return max(1, int(value))
    except ValueError:
        raise ValueError(f"{variable}={value!r} is not a whole number of threads: set it to e.g. 1, or unset it "
                         "for the default") from None
