"""`python -m dreamlake.lakeshore.daemon`: the same as the `lakeshore-daemon` script."""

from dreamlake.lakeshore.cli.scripts import daemon

if __name__ == "__main__":
    daemon()
