"""`python -m dreamlake.lakeshore.daemon`: the same as the `lakeshore-daemon` script."""

from .main import main

if __name__ == "__main__":
    main()
