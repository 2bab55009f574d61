"""Jobs of the multi-node tests (issue 47): real torch.distributed on gloo, on the CPU."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def all_reduce() -> dict[str, Any]:
    """Each rank sends rank + 1; every rank gets the sum."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    try:
        value = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(value)
        return {
            "rank": dist.get_rank(),
            "world": dist.get_world_size(),
            "sum": float(value.item()),
            "addrs": os.environ["LAKESHORE_NODE_ADDRS"].split(","),
            "port": int(os.environ["MASTER_PORT"]),
        }
    finally:
        dist.destroy_process_group()


def ddp_train(steps: int = 50) -> list[float]:
    """A tiny model trained with DistributedDataParallel over a fixed global batch split by rank;
    rank 0's weights at the end."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        model = _model()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x, y = _batch()
        mine = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine])
            loss.backward()
            opt.step()
        return [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]
    finally:
        dist.destroy_process_group()


def single_train(steps: int = 50) -> list[float]:
    """The same training in one process over the whole batch: what DDP must equal."""
    import torch

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]


def reduce_forever(marker: str) -> None:
    """All-reduce in a loop; rank 1 writes its pid to `marker` once the loop runs."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    if dist.get_rank() == 1:
        Path(marker).write_text(str(os.getpid()))
    while True:
        dist.all_reduce(torch.ones(1))
        time.sleep(0.01)


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def _batch() -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def _wait_for_file(path: Path, *, timeout_s: float) -> None:
    """Until `path` exists or `timeout_s` passed (the caller's test checks which)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def one_fails_one_waits(marker: str) -> None:
    """Rank 1 fails once rank 0 runs; rank 0 waits outside any collective (so gloo cannot
    notice), until its daemon stops it because the gang ended."""
    rank = int(os.environ["RANK"])
    if rank == 1:
        _wait_for_file(Path(marker), timeout_s=60)
        raise RuntimeError("rank 1 fails on purpose")
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


def ddp_resumable(
    steps: int,
    folder: str,
    *,
    every: int = 10,
    wait_at: int | None = None,
    mark_at: int | None = None,
    pause_s: float = 0.0,
) -> list[float]:
    """`ddp_train` that checkpoints every `every` steps (rank 0 writes, every rank reads) and
    resumes from the last checkpoint; rank 0's weights at the end.

    With `wait_at`, on its first attempt rank 1 writes its pid to `folder`/rank1.pid at that
    step and waits there (rank 0 blocks in the next all-reduce) for the test to kill it; each
    step takes at least `pause_s`. With `mark_at`, rank 1 writes its pid there at that step of
    its first attempt and goes on (the test stops it). Every step says it moved
    (`dls.run.progress()`). Each step the ranks agree whether a preemption notice came to any of
    them (an all-reduce of the flag); if so rank 0 checkpoints, they meet at a barrier (no part
    gives the attempt back before the checkpoint is on the row), and all raise `dls.Preempted`.
    Rank 0 records in `folder`/rank0.noticed that the notice reached it."""
    import torch
    import torch.distributed as dist

    import dreamlake.lakeshore as dls

    root = Path(folder)
    dist.init_process_group("gloo", init_method="env://")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        if rank == 0:
            dls.run.on_preempt(lambda: (root / "rank0.noticed").write_text("noticed"))
        model = _model()
        state = dls.run.last_checkpoint()
        start = 0
        if state is not None:
            start = int(state["step"])
            with torch.no_grad():
                for p, values in zip(model.parameters(), state["params"], strict=True):
                    p.copy_(torch.tensor(values).reshape(p.shape))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        x, y = _batch()
        mine = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        for step in range(start, steps):
            flag = torch.tensor([1.0 if dls.run.preempting.is_set() else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() > 0:
                if rank == 0:
                    # The all-reduce told rank 0 first; its own notice comes through the plane
                    # (rank 1's daemon -> plane -> rank 0's daemon), which must say it within
                    # seconds: ended before that, rank 0 would record nothing either way.
                    _wait_for_file(root / "rank0.noticed", timeout_s=10)
                    dls.run.checkpoint({"step": step, "params": _params(model)})
                dist.barrier()
                raise dls.Preempted(f"rank {rank} stops at step {step}")
            if rank == 1 and step == mark_at and not (root / "rank1.pid").exists():
                (root / "rank1.pid").write_text(str(os.getpid()))
            dls.run.progress()
            if rank == 1 and step == wait_at and not (root / "rank1.pid").exists():
                (root / "rank1.pid").write_text(str(os.getpid()))
                time.sleep(3600)  # killed here by the test
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x[mine]), y[mine]).backward()
            opt.step()
            if rank == 0 and (step + 1) % every == 0:
                dls.run.checkpoint({"step": step + 1, "params": _params(model)})
            if rank == 0 and step == 30:
                (root / "rank0.step30").write_text(str(os.getpid()))
            time.sleep(pause_s)
        return [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]
    finally:
        dist.destroy_process_group()


def _params(model: Any) -> list[list[float]]:
    return [p.detach().flatten().tolist() for p in model.parameters()]


def started_at(folder: str, seconds: float = 0.0) -> float:
    """Write when this part (or one box's job) started to `folder`, hold `seconds`, return it."""
    import dreamlake.lakeshore as dls

    start = time.time()
    name = f"{os.environ.get('LAKESHORE_NODE_RANK', 'single')}-{dls.run.id}-{dls.run.attempt}"
    (Path(folder) / name).write_text(repr(start))
    time.sleep(seconds)
    return start


def port_held(seconds: float) -> int:
    """A gang's MASTER_PORT, with the process group up for `seconds` (so two gangs overlap)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    try:
        dist.barrier()
        time.sleep(seconds)
        dist.barrier()
        return int(os.environ["MASTER_PORT"])
    finally:
        dist.destroy_process_group()


def ranks() -> dict[str, Any]:
    """What a part was told: its rank, the gang's size and every part's address (no torch)."""
    import dreamlake.lakeshore as dls

    return {"rank": dls.run.node_rank, "nodes": dls.run.num_nodes, "addrs": dls.run.node_addrs}
