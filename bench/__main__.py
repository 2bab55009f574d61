"""`make bench`: every benchmark, each printing its table of ratios against its peers."""

from __future__ import annotations

import importlib
import sys

#: Benchmark modules in the order they run; each has main(argv) and prints its own table.
SUITES = ["sqlite_plane", "rpc_http", "daemon_bench"]


def main() -> None:
    for name in SUITES:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.{name}":
                continue
            raise
        print(f"\n== bench.{name}", flush=True)
        module.main([])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
