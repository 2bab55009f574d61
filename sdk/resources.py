"""What a job asks for to run: GPUs (how many, which kind, how much memory each), CPUs, memory.

One validator for every place a request enters (a submit on any plane, a udf, a queue's
default), so the embedded plane and HTTP refuse the same things with the same words. A request
is a plain dict of the keys below; the empty dict asks for nothing. What is stored on the
invocation row is what was asked, normalised (a whole `gpus` as an int); the daemon decides
where it runs.

`gpus`: a number >= 0. Below 1 (0.25, 0.5) a job shares one GPU with others; from 1 up it is a
whole number of GPUs of its own. Absent: the daemon's `--gpus-per-job` (default 0).
`gpu_type`: a name, or an ordered list of acceptable names (the first that a daemon has wins),
matched case-insensitively as a substring of the GPU's name: "H100" matches
"NVIDIA H100 80GB HBM3".
`gpu_memory_gb`: the least memory each of its GPUs must have.
`cpus`, `memory_gb`: what the job needs of the box's CPUs and memory (a daemon that declares
or detects them subtracts what its running jobs asked for).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidArgument

KEYS = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")
#: The most GPU type names one request may list as acceptable.
MAX_GPU_TYPES = 4
#: A GPU type name: letters, digits, spaces, '.', '_' and '-' (every GPU model name is), so
#: that the pattern the claim matches names against (`gpu_type_pattern`) needs no escaping
#: beyond '.'.
_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
#: The largest whole number of GPUs a request may ask for (no box has more).
MAX_GPUS = 1024
#: Past this a number is a mistake, not a machine (1 EiB of memory, a million CPUs).
MAX_AMOUNT = 2.0**30


def check_resources(value: object, where: str = "resources") -> dict[str, Any]:
    """The request `value` checked and normalised; InvalidArgument naming the key otherwise.

    `where` names the request in messages (`resources`, `queue resources`), so a producer
    reads which of its settings was refused.
    """
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"{where} must be an object with keys among {', '.join(KEYS)}, got {_shown(value)}"
        )
    unknown = [k for k in value if k not in KEYS]
    if unknown:
        raise InvalidArgument(
            f"unknown {where} key(s) {', '.join(repr(k) for k in unknown)}; use {', '.join(KEYS)}"
        )
    out: dict[str, Any] = {}
    if "gpus" in value:
        out["gpus"] = _gpus(value["gpus"], where)
    if "gpu_type" in value:
        out["gpu_type"] = _gpu_type(value["gpu_type"], where)
    for key in ("gpu_memory_gb", "cpus", "memory_gb"):
        if key in value:
            out[key] = _amount(value[key], f"{where}.{key}")
    return out


def check_optional(value: object, where: str = "resources") -> dict[str, Any] | None:
    """`check_resources`, with None meaning "not stated" (the next default applies)."""
    return None if value is None else check_resources(value, where)


def _gpus(value: object, where: str) -> float | int:
    number = _number(value, f"{where}.gpus")
    allowed = (
        f"{where}.gpus must be a number >= 0: a fraction below 1 (such as 0.5 or 0.25) shares "
        f"one GPU, from 1 up a whole number of GPUs (at most {MAX_GPUS})"
    )
    if number < 0 or number > MAX_GPUS or (number > 1 and number != int(number)):
        raise InvalidArgument(f"{allowed}; got {_shown(value)}")
    return int(number) if number == int(number) else float(number)


def _gpu_type(value: object, where: str) -> str | list[str]:
    key = f"{where}.gpu_type"
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not 1 <= len(names) <= MAX_GPU_TYPES:
        raise InvalidArgument(
            f"{key} must be a GPU name or a list of 1 to {MAX_GPU_TYPES} acceptable names in "
            f"order of preference, got {_shown(value)}"
        )
    for name in names:
        if not isinstance(name, str) or not _TYPE_NAME.fullmatch(name):
            raise InvalidArgument(
                f"{key} names are 1 to 64 letters, digits, spaces, '.', '_' or '-', starting "
                f"with a letter or digit (such as 'H100' or 'A100-80GB'), got {_shown(name)}"
            )
    return value if isinstance(value, str) else list(names)


def _amount(value: object, key: str) -> float | int:
    number = _number(value, key)
    if not 0 <= number <= MAX_AMOUNT:
        raise InvalidArgument(f"{key} must be a number from 0 to 2**30, got {_shown(value)}")
    return number


def _number(value: object, key: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{key} must be a number, got {_shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(f"{key} must be a finite number, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def gpu_types(request: Mapping[str, Any]) -> list[str]:
    """The request's acceptable GPU type names, in order of preference ([] = any)."""
    value = request.get("gpu_type")
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def gpu_type_pattern(request: Mapping[str, Any]) -> str | None:
    """The pattern a claim matches the daemon's GPU names against (lower case, names
    separated by '|'): any acceptable name found in one GPU's name is a match. None: any GPU.

    A regular expression both engines search the same way: names hold only letters, digits,
    spaces, '_', '-' and '.', and '.' is escaped.
    """
    names = gpu_types(request)
    if not names:
        return None
    return "|".join(name.lower().replace(".", "\\.") for name in names)


def type_matches(request: Mapping[str, Any], gpu_name: str) -> bool:
    """Whether a GPU named `gpu_name` is of a type the request accepts."""
    names = gpu_types(request)
    return not names or any(n.lower() in gpu_name.lower() for n in names)


def preferred_type(request: Mapping[str, Any], names: Sequence[str]) -> str | None:
    """The first acceptable type (in the request's order) among GPU `names`; None: no type
    was asked for, or none fits."""
    for wanted in gpu_types(request):
        if any(wanted.lower() in n.lower() for n in names):
            return wanted
    return None


def describe(request: Mapping[str, Any]) -> str:
    """A request in words: "2 GPUs of type H100 or A100 with 80 GB each, 8 CPUs"."""
    parts = []
    gpus = request.get("gpus")
    if gpus:
        text = f"{gpus:g} GPU" + ("" if gpus <= 1 else "s")
        types = gpu_types(request)
        if types:
            text += " of type " + " or ".join(types)
        if request.get("gpu_memory_gb"):
            text += f" with {request['gpu_memory_gb']:g} GB each"
        parts.append(text)
    if request.get("cpus"):
        parts.append(f"{request['cpus']:g} CPUs")
    if request.get("memory_gb"):
        parts.append(f"{request['memory_gb']:g} GB of memory")
    return ", ".join(parts) or "nothing"


#: What a claimer may say it has free (`check_free`), and what a missing figure means: no
#: GPU, no limit on CPUs or memory, `--gpus-per-job` 0.
FREE_KEYS: dict[str, Any] = {
    "gpus_whole": 0.0,
    "gpu_share": 0.0,
    "gpu_names": (),
    "gpu_memory_gb": 0.0,
    "cpus": MAX_AMOUNT,
    "memory_gb": MAX_AMOUNT,
    "default_gpus": 0.0,
    "box": None,
}


def check_free(value: object) -> dict[str, Any]:
    """What a claimer has free, complete: `gpus_whole` (GPUs no job uses), `gpu_share` (the
    most room on one GPU, 0..1), `gpu_names` (the names of GPUs with room), `gpu_memory_gb`
    (the most memory of one of them), `cpus`, `memory_gb`, and `default_gpus` (its
    --gpus-per-job, the request of a job that states none)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"free must be an object with keys among {', '.join(FREE_KEYS)}")
    unknown = [k for k in value if k not in FREE_KEYS]
    if unknown:
        raise InvalidArgument(
            f"unknown free key(s) {', '.join(repr(k) for k in unknown)}; use {', '.join(FREE_KEYS)}"
        )
    out: dict[str, Any] = dict(FREE_KEYS)
    for key, given in value.items():
        if key == "box":
            out[key] = None if given is None else _check_box(given)
        elif key == "gpu_names":
            if not isinstance(given, (list, tuple)) or not all(
                isinstance(n, str) and 0 < len(n) <= 256 for n in given
            ):
                raise InvalidArgument("free.gpu_names must be a list of GPU names")
            out[key] = list(given)
        else:
            out[key] = float(_amount(given, f"free.{key}"))
    return out


def _check_box(value: object) -> dict[str, Any]:
    """`free.box`: what the claimer has in all, and when running jobs surely free whole GPUs
    (`whole_free_at`: [[epoch seconds, whole GPUs free by then], ...], from their timeouts).
    With it, a claim reserves for the head the box could run but not now (no starvation)."""
    if not isinstance(value, Mapping):
        raise InvalidArgument("free.box must be an object")
    box = check_free({k: v for k, v in value.items() if k != "whole_free_at"})
    box["box"] = None
    steps = value.get("whole_free_at", [])
    if not isinstance(steps, (list, tuple)) or not all(
        isinstance(s, (list, tuple)) and len(s) == 2 for s in steps
    ):
        raise InvalidArgument("free.box.whole_free_at must be a list of [time, GPUs] pairs")
    box["whole_free_at"] = [
        (float(_number(t, "free.box.whole_free_at")), float(_number(n, "free.box.whole_free_at")))
        for t, n in steps
    ]
    return box


def fit_params(free: Mapping[str, Any]) -> dict[str, Any]:
    """`free` (checked) as the parameters of the claim's `fits` fragment."""
    return {
        "default_gpus": float(free["default_gpus"]),
        "gpu_share": float(free["gpu_share"]),
        "gpus_whole": float(free["gpus_whole"]),
        "gpu_memory_gb": float(free["gpu_memory_gb"]),
        # One text the acceptable names are searched in; no name holds a newline.
        "gpu_names": "\n".join(n.lower() for n in free["gpu_names"]),
        "cpus": float(free["cpus"]),
        "memory_gb": float(free["memory_gb"]),
    }


def request_columns(request: Mapping[str, Any]) -> dict[str, Any]:
    """A request as the invocation row's columns (migration 24); None where it says nothing."""
    number = {k: (float(request[k]) if k in request else None) for k in KEYS if k != "gpu_type"}
    return {**number, "gpu_type": gpu_type_pattern(request)}
