"""Crash- and race-safe publication of built model directories.

A model directory is built under a temporary name inside the cache root and
renamed into place only once complete, with its marker already written, so
an existing directory whose marker carries the expected spec hash is always
usable. Builders serialise on an ``fcntl`` lock; readers never take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile

MARKER = "minedraft-kit.json"
LOCK = ".lock"
TMP_PREFIX = ".tmp-"


def spec_hash(spec: dict) -> str:
    """Stable short hash of a JSON-able spec."""
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_marker(model_dir: str) -> dict | None:
    """The completion marker of ``model_dir``, or None if absent or unreadable."""
    try:
        with open(os.path.join(model_dir, MARKER)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_complete(model_dir: str, expected_hash: str) -> bool:
    marker = read_marker(model_dir)
    return marker is not None and marker.get("spec_hash") == expected_hash


def write_marker(model_dir: str, marker: dict) -> None:
    with open(os.path.join(model_dir, MARKER), "w") as f:
        json.dump(marker, f, indent=2, sort_keys=True)
        f.write("\n")


@contextlib.contextmanager
def build_lock(root: str):
    """Exclusive lock on the cache root; also clears a crashed builder's debris."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, LOCK), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            _remove_stale_tmp(root)
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _remove_stale_tmp(root: str) -> None:
    for name in os.listdir(root):
        if name.startswith(TMP_PREFIX):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _make_readable(path: str) -> None:
    """``mkdtemp`` and safetensors create owner-only modes; a cache is shared."""
    os.chmod(path, 0o755)
    for name in os.listdir(path):
        os.chmod(os.path.join(path, name), 0o644)


def staging_dir(root: str, name: str) -> str:
    """A fresh directory on the same filesystem as its final place."""
    return tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=root)


def publish(staged: str, final: str) -> None:
    """Move ``staged`` to ``final``, replacing an outdated ``final`` if any.

    Call with the build lock held. The old directory is renamed aside first
    (rename cannot replace a non-empty directory); a reader racing this sees
    either the old or no directory, and a missing one sends it to the lock.
    """
    _make_readable(staged)
    if os.path.exists(final):
        old = staging_dir(os.path.dirname(final), "old")
        os.rename(final, os.path.join(old, "x"))
        shutil.rmtree(old, ignore_errors=True)
    os.rename(staged, final)
