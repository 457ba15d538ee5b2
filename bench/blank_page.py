"""Tell a rendered screenshot from a blank one without an image library.

PNG rows are stored filtered (each byte predicted from its left / upper neighbours), so a
flat, blank image filters to almost all zero bytes, while text, lines and charts leave
non-zero residuals. `summarize_png` reports the share of non-zero filtered bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # PNG color type -> channels


@dataclass(frozen=True)
class PngSummary:
    width: int
    height: int
    ink: float  # share of non-zero filtered bytes: ~0 for a blank page, a few percent for a real one


def summarize_png(path: str | Path) -> PngSummary:
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, header = 8, [], None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat.append(chunk)
        pos += 12 + length
    if header is None or not idat:
        raise ValueError(f"{path}: PNG without image data")
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in _CHANNELS or interlace:
        raise ValueError(f"{path}: only 8-bit, non-interlaced PNGs are supported")
    stride = width * _CHANNELS[color]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8)
    rows = raw[: height * (stride + 1)].reshape(height, stride + 1)[:, 1:]  # drop each row's filter byte
    return PngSummary(width, height, float(np.count_nonzero(rows[1:])) / max(1, rows[1:].size))
