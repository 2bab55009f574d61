"""The blob layout, for the payloads that are mostly raw bytes: numpy arrays, torch tensors and
PIL images.

A blob is ``u32 little-endian header length | msgpack header | zero padding | raw bytes``, the raw
bytes starting at the next multiple of 16 past the header (see `codec`'s docstring). Keeping it
apart from the codec's core keeps the rules for bytes a reader maps straight into memory (the
size checks, the dtype guard, the alignment) in one place, and keeps numpy, torch and Pillow out
of the core: this module only touches them through the module a caller hands it.
"""

from __future__ import annotations

import importlib
import math
import struct
from types import ModuleType
from typing import Any, Final

import msgpack  # ships no type information

from .errors import DecodeError, InvalidArgument

#: The msgpack ext code of a tuple (registered in `codec.EXT_TYPES` as "tuple"): defined here,
#: because a blob header (a structured dtype's descr) holds tuples and is read without the codec.
EXT_TUPLE: Final = 1

_HEADER_LEN = struct.Struct("<I")
_ALIGN: Final = 16


def describe(e: BaseException) -> str:
    # msgpack's FormatError carries no message; the class name alone still says what went wrong.
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


# -- encode ---------------------------------------------------------------------------------------


def array_blob(arr: Any, np: ModuleType) -> bytes:
    dtype = arr.dtype
    if dtype.hasobject:
        raise InvalidArgument(
            f"cannot encode a numpy array of dtype {dtype} (object): it holds Python objects, "
            "not data; convert it to a fixed dtype, or wrap the work in dls.thunk(...)"
        )
    if dtype.itemsize == 0:
        raise InvalidArgument(f"cannot encode a numpy array of zero-size dtype {dtype}")
    fortran = arr.ndim > 1 and arr.flags.f_contiguous and not arr.flags.c_contiguous
    # A Fortran array's transpose is C-contiguous, so both orders go out without a copy.
    flat = (arr.T if fortran else np.ascontiguousarray(arr)).reshape(-1)
    if dtype.names is not None:
        from numpy.lib import format as npy_format

        descr: Any = npy_format.dtype_to_descr(dtype)
    else:
        descr = dtype.str
    return _blob([descr, list(arr.shape), bool(fortran)], flat.view(np.uint8))


def tensor_blob(t: Any, torch: ModuleType) -> bytes:
    if t.layout != torch.strided:
        raise InvalidArgument(f"cannot encode a {t.layout} tensor: call .to_dense() first")
    if t.is_quantized:
        raise InvalidArgument("cannot encode a quantized tensor: call .dequantize() first")
    if t.device.type == "meta":
        raise InvalidArgument("cannot encode a tensor on the meta device: it holds no data")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.resolve_conj().resolve_neg().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    nbytes = t.numel() * t.element_size()
    # Read the bytes straight from the tensor's memory: torch.Tensor.numpy() would need numpy
    # and refuses bfloat16.
    import ctypes

    raw: Any = (ctypes.c_char * nbytes).from_address(t.data_ptr()) if nbytes else b""
    return _blob([name, list(t.shape)], raw)


def image_blob(img: Any) -> bytes:
    palette = None
    if img.mode in ("P", "PA") and img.palette is not None:
        palette_mode = img.palette.mode
        palette = [palette_mode, bytes(img.getpalette(palette_mode) or [])]
    return _blob([img.mode, [img.width, img.height], palette], img.tobytes())


def _blob(header: list[Any], raw: Any) -> bytes:
    head = _pack_header(header)
    pad = -(_HEADER_LEN.size + len(head)) % _ALIGN
    return b"".join((_HEADER_LEN.pack(len(head)), head, bytes(pad), raw))


def _pack_header(header: Any) -> bytes:
    # strict_types, as the codec packs: a tuple (in a structured dtype's descr) stays a tuple.
    data: bytes = msgpack.packb(
        header, use_bin_type=True, strict_types=True, default=_header_default
    )
    return data


def _header_default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(EXT_TUPLE, _pack_header(list(obj)))
    raise TypeError(f"a blob header cannot hold a {type(obj).__name__}")


# -- decode ---------------------------------------------------------------------------------------


def _require(module: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DecodeError(f"payload holds {what} but {module} cannot be imported here: {e}") from e


def _split_blob(data: bytes, what: str) -> tuple[Any, int]:
    """The blob's header and the offset where its raw bytes start."""
    if len(data) < _HEADER_LEN.size:
        raise DecodeError(f"{what} header: payload of {len(data)} bytes is too short")
    (head_len,) = _HEADER_LEN.unpack_from(data)
    head_end = _HEADER_LEN.size + head_len
    start = head_end + (-head_end % _ALIGN)
    if start > len(data):
        raise DecodeError(
            f"{what} header: says {head_len} header bytes but the payload holds {len(data)}"
        )
    try:
        # Only tuples inside a header: no pickles, whatever the caller allowed.
        header = msgpack.unpackb(
            data[_HEADER_LEN.size : head_end], ext_hook=_header_hook, raw=False
        )
    except DecodeError:
        raise
    except Exception as e:
        raise DecodeError(f"{what} header is not msgpack: {describe(e)}") from e
    return header, start


def _header_hook(code: int, data: bytes) -> Any:
    if code != EXT_TUPLE:
        raise DecodeError(f"ext type {code} is not allowed inside a blob header")
    return tuple(msgpack.unpackb(data, ext_hook=_header_hook, raw=False))


def _check_shape(shape: Any, what: str) -> list[int]:
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise DecodeError(
            f"{what} header: shape must be a list of non-negative ints, got {shape!r}"
        )
    return shape


def _check_size(what: str, shape: list[int], itemsize: int, data: bytes, start: int) -> int:
    count = math.prod(shape)
    if count * itemsize != len(data) - start:
        raise DecodeError(
            f"{what} header: shape {shape} of {itemsize}-byte items needs {count * itemsize} "
            f"bytes, the payload holds {len(data) - start}"
        )
    return count


def _numpy_dtype(np: ModuleType, descr: Any) -> Any:
    try:
        if isinstance(descr, str):
            dtype = np.dtype(descr)
        elif isinstance(descr, list):
            from numpy.lib import format as npy_format

            dtype = npy_format.descr_to_dtype(descr)
        else:
            raise TypeError(f"a {type(descr).__name__}")
    except Exception as e:
        raise DecodeError(f"ndarray header: bad dtype {descr!r}: {e}") from e
    if dtype.hasobject or dtype.itemsize == 0:
        raise DecodeError(f"ndarray header: dtype {dtype} is not allowed (object or zero-size)")
    return dtype


def _decode_array(data: bytes, what: str) -> Any:
    np = _require("numpy", f"a numpy {what}")
    header, start = _split_blob(data, what)
    if not isinstance(header, list) or len(header) != 3 or type(header[2]) is not bool:
        raise DecodeError(f"{what} header must be [dtype, shape, fortran], got {header!r}")
    dtype = _numpy_dtype(np, header[0])
    shape = _check_shape(header[1], what)
    count = _check_size(what, shape, dtype.itemsize, data, start)
    # Zero-copy: the array is a read-only view over the ext payload msgpack handed us.
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=start)
    return flat.reshape(shape, order="F" if header[2] else "C")


def decode_ndarray(data: bytes, allow_pickle: bool) -> Any:
    return _decode_array(data, "ndarray")


def decode_numpy_scalar(data: bytes, allow_pickle: bool) -> Any:
    arr = _decode_array(data, "numpy scalar")
    if arr.ndim != 0:
        raise DecodeError(f"numpy scalar header: shape must be [], got {list(arr.shape)}")
    return arr[()]


def decode_tensor(data: bytes, allow_pickle: bool) -> Any:
    torch = _require("torch", "a torch tensor")
    header, start = _split_blob(data, "tensor")
    if not isinstance(header, list) or len(header) != 2 or not isinstance(header[0], str):
        raise DecodeError(f"tensor header must be [dtype name, shape], got {header!r}")
    name = header[0]
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise DecodeError(f"tensor header: unknown torch dtype {name!r}")
    shape = _check_shape(header[1], "tensor")
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = _check_size("tensor", shape, itemsize, data, start)
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    # torch warns on a read-only buffer, and a decoded tensor is expected to be writable anyway.
    buffer = bytearray(memoryview(data)[start:])
    return torch.frombuffer(buffer, dtype=dtype).reshape(shape)


def decode_image(data: bytes, allow_pickle: bool) -> Any:
    pil_image = _require("PIL.Image", "a PIL image")
    header, start = _split_blob(data, "image")
    if (
        not isinstance(header, list)
        or len(header) != 3
        or not isinstance(header[0], str)
        or not isinstance(header[1], list)
        or len(header[1]) != 2
        or not all(type(n) is int and n >= 0 for n in header[1])
    ):
        raise DecodeError(f"image header must be [mode, [width, height], palette], got {header!r}")
    mode, size, palette = header
    img = pil_image.frombytes(mode, tuple(size), bytes(memoryview(data)[start:]))
    if palette is not None:
        if not (
            isinstance(palette, list)
            and len(palette) == 2
            and isinstance(palette[0], str)
            and isinstance(palette[1], bytes)
        ):
            raise DecodeError(f"image header: palette must be [mode, bytes], got {palette!r}")
        img.putpalette(palette[1], palette[0])
    return img
