"""The systemd units Lakeshore ships (package data, `*.service`).

A folder of the repository's top level, as DESIGN lays it out, and a package of the wheel, so
that `pip install dreamlake-lakeshore[daemon]` brings them and `lakeshore systemd install`
writes them from the installed package (daemon/unitfiles.py fits them to a box).
"""
