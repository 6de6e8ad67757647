"""Installs Biome (the dashboard's JavaScript formatter and linter) into .venv/bin/biome:
its native binary, fetched from the npm registry and checked against a pinned sha512,
so that neither node nor npm is needed. Does nothing when the pinned version is there.

    .venv/bin/python scripts/install_biome.py
"""

from __future__ import annotations

import base64
import hashlib
import io
import platform
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "2.6.8"
#: The npm package of each platform's binary, and its tarball's sha512 (the registry's
#: ``dist.integrity``).
PACKAGES = {
    ("Linux", "x86_64"): (
        "cli-linux-x64",
        "XIk3pLQT56I6Tti+u0DF8FtSNXjCMTPbxVTzfJ9cS2t1ImVKvrqV5b52GuEaJg6/wuiXvz0sjfb5saB4TPRjzA==",
    ),
    ("Linux", "aarch64"): (
        "cli-linux-arm64",
        "0Bjim8lKwnrvXUHoI4k3Tb51BjoiLEwDnovCI8nSzkk6wj3dShiuAjrx6+X0Hjf4ejR1sRZgTQiSDHlpy9vB7w==",
    ),
}
TARGET = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "biome"


def installed() -> str:
    try:
        out = subprocess.run([str(TARGET), "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    return out.stdout.strip().removeprefix("Version: ")


def main() -> int:
    if installed() == VERSION:
        return 0
    key = (platform.system(), platform.machine())
    if key not in PACKAGES:
        print(f"install_biome: no pinned Biome binary for {key}; install Biome {VERSION} yourself", file=sys.stderr)
        return 1
    package, integrity = PACKAGES[key]
    url = f"https://registry.npmjs.org/@biomejs/{package}/-/{package}-{VERSION}.tgz"
    print(f"setup: fetching Biome {VERSION} ({package}) from the npm registry")
    with urllib.request.urlopen(url, timeout=120) as r:
        data = r.read()
    got = base64.b64encode(hashlib.sha512(data).digest()).decode()
    if got != integrity:
        print(f"install_biome: {url} does not match its pinned sha512; not installed", file=sys.stderr)
        return 1
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile("package/biome")
        assert member is not None
        binary = member.read()
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    tmp = TARGET.with_suffix(".tmp")
    tmp.write_bytes(binary)
    tmp.chmod(0o755)
    tmp.replace(TARGET)
    print(f"setup: {TARGET} is Biome {installed()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
