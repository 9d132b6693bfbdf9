"""vLLM's own test files, from the vLLM 0.32.0 sdist, fetched by pip.

The installed wheels carry no ``tests/``; the sdist does. pip fetches it, so
pip's own configuration (index, proxy, certificates) decides where from, and
pip checks it against SHA256 before unpacking it (hash-checking mode). Only
what ``KEEP`` names is kept.

``pip download --no-binary :all:`` unpacks the sdist and then fails to build
vLLM's metadata, deleting the tree; with ``--no-clean`` the unpacked tree stays
under ``$TMPDIR/pip-download-*/vllm*/`` (see the project's CPU environment
notes), which is all this needs. Should pip build the metadata after all, the
sdist lands in the download directory instead, and is read from there.

Kept: ``tests/`` (vLLM's scheduler tests), ``vllm/`` and ``csrc/`` (the sources
``patches/`` applies to), ``pyproject.toml`` and ``PKG-INFO``. A cache that
lacks any of them is fetched again.

    python tests/upstream/vllm_source.py DEST
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from minedraft.config import environment

VERSION = "0.32.0"
SHA256 = "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"
KEEP = ("tests/", "vllm/", "csrc/", "pyproject.toml", "PKG-INFO")
PIP_TIMEOUT_S = 1800


def cache_dir() -> Path:
    """Where the kept tree lives: ``$MINEDRAFT_VLLM_SRC`` or ``~/.cache/minedraft/vllm-src-VERSION``."""
    return Path(environment.get("MINEDRAFT_VLLM_SRC") or os.path.expanduser(f"~/.cache/minedraft/vllm-src-{VERSION}"))


def fetch(dest: Path) -> Path:
    """``dest`` holding what ``KEEP`` names of vLLM's sdist (fetched only if missing). Several processes
    may ask at once (``make test``'s two workers): one fetches, the others wait for it (a lock beside ``dest``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.with_name(dest.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return _fetch_unlocked(dest)


def _fetch_unlocked(dest: Path) -> Path:
    if all((dest / name.rstrip("/")).exists() for name in KEEP):
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="vllm-sdist-") as scratch:
        tree = _download_with_pip(Path(scratch))
        _copy_kept(tree, partial)
    shutil.rmtree(dest, ignore_errors=True)  # an older cache that kept less
    partial.rename(dest)
    return dest


def _download_with_pip(scratch: Path) -> Path:
    """The unpacked sdist (a directory holding PKG-INFO), under ``scratch``."""
    requirements = scratch / "requirements.txt"
    requirements.write_text(f"vllm=={VERSION} --hash=sha256:{SHA256}\n")
    downloads, pip_tmp = scratch / "downloads", scratch / "tmp"
    pip_tmp.mkdir()
    command = [sys.executable, "-m", "pip", "download", "--no-clean", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", "--require-hashes", "-r", str(requirements), "-d", str(downloads)]
    proc = subprocess.run(command, env={**os.environ, "TMPDIR": str(pip_tmp)}, capture_output=True,
                          text=True, timeout=PIP_TIMEOUT_S)
    sdist = downloads / f"vllm-{VERSION}.tar.gz"
    if sdist.is_file():
        return _unpack_checked(sdist, scratch / "sdist")
    trees = [p.parent for p in pip_tmp.glob("pip-download-*/vllm*/PKG-INFO") if _is_vllm_release(p)]
    if len(trees) != 1:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"pip left no unpacked vllm {VERSION} sdist (exit {proc.returncode}):\n{tail}")
    return trees[0]


def _is_vllm_release(pkg_info: Path) -> bool:
    headers = pkg_info.read_text(errors="replace").split("\n\n", 1)[0].splitlines()
    return "Name: vllm" in headers and f"Version: {VERSION}" in headers


def _unpack_checked(sdist: Path, into: Path) -> Path:
    if hashlib.sha256(sdist.read_bytes()).hexdigest() != SHA256:
        raise RuntimeError(f"sha256 mismatch for {sdist.name}")
    with tarfile.open(sdist, mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    return into / f"vllm-{VERSION}"


def _copy_kept(tree: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in KEEP:
        source = tree / name.rstrip("/")
        if source.is_dir():
            shutil.copytree(source, dest / source.name, ignore=_links)
        else:
            shutil.copy2(source, dest / source.name)


def _links(directory: str, names: list[str]) -> list[str]:
    """Symbolic links are left out, as before: a link could point outside the tree."""
    return [n for n in names if os.path.islink(os.path.join(directory, n))]


if __name__ == "__main__":
    print(fetch(Path(sys.argv[1])))
