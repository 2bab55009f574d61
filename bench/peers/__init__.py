"""Peers of Lakeshore, each driven at its own documented best setting (see each module).

Every module offers `rpc(settings, variant)` and `fanout(settings, variant)`, returning
`common.Measurement`s, and names the durability it runs with. The task modules the peers'
workers import live beside them (`*_tasks.py`), configured through BENCH_* environment variables.
"""
