"""Where the project's data lives.

The project root holds ``assets/`` (versioned data: scaffolds, endpoint configs, seed sets)
and ``runs/`` (generated outputs). It is the checkout the package is installed from
(editable install), or ``$AUTOMEM_HOME`` when set, so one installed package can serve
several project folders.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(os.environ.get("AUTOMEM_HOME") or Path(__file__).resolve().parents[1])
ASSETS = PROJECT_ROOT / "assets"
SCAFFOLDS = ASSETS / "scaffolds"
DEFAULT_ENDPOINTS = ASSETS / "endpoints" / "embedded.yaml"
RUNS = PROJECT_ROOT / "runs"
