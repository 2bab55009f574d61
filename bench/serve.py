"""Launchers for the figures the command line cannot ask for: a server or a daemon whose SQLite
connection runs with synchronous=NORMAL (the CLI always opens FULL, the durable default).

    python -m bench.serve server --store PATH --port P [--normal]
    python -m bench.serve daemon --store PATH --queue Q --name N [--concurrency C]
                                                   [--prefetch K] [--normal]

Each does what `lakeshore server` / `lakeshore-daemon` do (cli/server.py, daemon/main.py) with
`open_store(..., durable=False)`; the FULL figures use the real commands.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["server", "daemon"])
    p.add_argument("--store", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--queue", default="default")
    p.add_argument("--name", default="bench")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--prefetch", type=int, default=0)
    p.add_argument("--handler", default=None)
    p.add_argument("--normal", action="store_true")
    a = p.parse_args(argv)
    from dreamlake.lakeshore.home import home
    from dreamlake.lakeshore.plane.dispatch import Dispatch, open_store

    if a.what == "server":
        import uvicorn

        from dreamlake.lakeshore.plane.auth import bootstrap
        from dreamlake.lakeshore.server.app import create_app

        store = open_store(a.store, durable=not a.normal)
        bootstrap(store, home())
        app = create_app(store)
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=a.port,
            log_level="warning",
            timeout_graceful_shutdown=3,
            access_log=False,
        )
        return
    from dreamlake.lakeshore.daemon import log
    from dreamlake.lakeshore.daemon.worker import Daemon, DaemonConfig

    log.configure(json=True, level="warning")
    plane = Dispatch(a.store, durable=not a.normal)
    config = DaemonConfig(
        name=a.name,
        queues=(a.queue,),
        concurrency=a.concurrency,
        prefetch=a.prefetch,
        handler=a.handler,
    )
    try:
        code = Daemon(plane, config).run()
    finally:
        plane.close()
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
