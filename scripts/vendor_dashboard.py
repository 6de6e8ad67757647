"""Copies the charting library the dashboard uses into dashboard/vendor/ from the
pinned ``plotly`` Python package (its bundled plotly.js), so the dashboard needs no
Node toolchain and no network. Rerun after changing plotly's pin:

    .venv/bin/python scripts/vendor_dashboard.py      (or: make dashboard-vendor)
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from importlib import metadata, resources
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "dashboard" / "vendor" / "plotly.min.js"


def main() -> int:
    source = resources.files("plotly") / "package_data" / "plotly.min.js"
    with resources.as_file(source) as path:
        shutil.copyfile(path, TARGET)
    digest = hashlib.sha256(TARGET.read_bytes()).hexdigest()[:16]
    print(f"{TARGET} <- plotly {metadata.version('plotly')} ({TARGET.stat().st_size} bytes, sha256 {digest}…)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
