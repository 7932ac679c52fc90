"""mkdocs hook: draw the performance pages' plots from ``benchmarks/results`` before each build.

They land in ``docs/performance/plots/`` (git-ignored): generated, never drawn or committed by hand.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def on_pre_build(config: Any, **_: Any) -> None:
    spec = importlib.util.spec_from_file_location("plot_results", os.path.join(ROOT, "benchmarks", "plot_results.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_all(os.path.join(ROOT, "docs", "performance", "plots"))
