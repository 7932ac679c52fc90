from __future__ import annotations

from .startup import main

main()
