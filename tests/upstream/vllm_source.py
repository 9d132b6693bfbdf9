"""vLLM's own test files, from the vLLM sdist on the package registry.

The installed wheels carry no ``tests/``; the sdist does. Fetched once (about
the size of one wheel), checked against its sha256, and only ``tests/``,
``pyproject.toml`` and ``PKG-INFO`` are unpacked.

    python tests/upstream/vllm_source.py DEST
"""

from __future__ import annotations

import hashlib
import io
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "0.32.0"
INDEX = "https://pypi.org/simple/vllm/"
SHA256 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
KEEP = ("tests/", "pyproject.toml", "PKG-INFO")


def fetch(dest: Path) -> Path:
    """``dest`` holding vLLM's sdist tests (fetched only if missing)."""
    if (dest / "PKG-INFO").is_file():
        return dest
    html = urllib.request.urlopen(INDEX, timeout=120).read().decode()
    (url,) = set(re.findall(rf'href="([^"#]+/vllm-{re.escape(VERSION)}\.tar\.gz)', html))
    data = urllib.request.urlopen(url, timeout=600).read()
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise RuntimeError(f"sha256 mismatch for {url}")
    prefix = f"vllm-{VERSION}/"
    tmp = dest.with_name(dest.name + ".partial")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name[len(prefix):] if m.name.startswith(prefix) else ""
            if (m.isfile() or m.isdir()) and rel.startswith(KEEP):
                m.name = rel
                members.append(m)
        tar.extractall(tmp, members=members, filter="data")
    tmp.rename(dest)
    return dest


if __name__ == "__main__":
    print(fetch(Path(sys.argv[1])))
