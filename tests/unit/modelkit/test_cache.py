"""modelkit/cache.py: built model directories are published whole, and crashed builds cleared."""

from __future__ import annotations

import os

from modelkit import cache


def test_publish_replaces_outdated_dir(tmp_path):
    root = str(tmp_path)
    final = os.path.join(root, "m")
    for version in ("old", "new"):
        with cache.build_lock(root):
            staged = cache.staging_dir(root, "m")
            cache.write_marker(staged, {"spec_hash": version})
            cache.publish(staged, final)
    assert cache.is_complete(final, "new")
    assert not cache.is_complete(final, "old")
    assert sorted(os.listdir(root)) == [cache.LOCK, "m"]


def test_lock_clears_crashed_staging_dirs(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, cache.TMP_PREFIX + "target-crashed"))
    with cache.build_lock(root):
        assert os.listdir(root) == [cache.LOCK]
