"""``python -m minedraft.monkeypatch --markdown``: print the patch section of patches/README.md."""

from __future__ import annotations

import argparse

from minedraft.monkeypatch.ledger import render_markdown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minedraft.monkeypatch", description=__doc__)
    parser.add_argument("--markdown", action="store_true", required=True,
                        help="print the patch table generated from the ledger")
    parser.parse_args(argv)
    print(render_markdown(), end="")


if __name__ == "__main__":
    main()
