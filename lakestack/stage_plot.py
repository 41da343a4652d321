"""A PNG of the stage times across a run: one stacked bar per micro-batch, a colour per stage.

Written with the standard library only (zlib + a 3x5 pixel font), so the run report has its plot on a fresh
clone without a plotting dependency. When the report's matplotlib plots (``lakestack.plots``) are on main,
this picture becomes one more of them and this writer can go: :func:`bars` is the data either one draws.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.stages import STAGES

WIDTH, HEIGHT = 960, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 34, 96
_SCALE = 2  # font pixels per glyph pixel
COLORS: dict[str, tuple[int, int, int]] = {
    "wait_in_stream": (0x1F, 0x77, 0xB4),
    "planning_and_reading": (0xFF, 0x7F, 0x0E),
    "transfer_into_spark": (0x2C, 0xA0, 0x2C),
    "spark_processing": (0xD6, 0x27, 0x28),
    "delta_commit": (0x94, 0x67, 0xBD),
    "checkpoint": (0x8C, 0x56, 0x4B),
}
_WHITE, _BLACK, _GRID = (255, 255, 255), (0, 0, 0), (225, 225, 225)

# 3x5 glyphs, one string of 15 bits per character (rows top to bottom).
_FONT: dict[str, str] = {
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011", "D": "110101101101110",
    "E": "111100110100111", "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010", "P": "110101110100100",
    "Q": "010101101110011", "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111", "0": "111101101101111", "1": "010110010010111",
    "2": "110001010100111", "3": "110001010001110", "4": "101101111001001", "5": "111100110001110",
    "6": "011100111101111", "7": "111001010010010", "8": "111101111101111", "9": "111101111001110",
    ".": "000000000000010", "-": "000000111000000", "+": "000010111010000", "(": "001010010010001",
    ")": "100010010010100", "/": "001001010100100", ":": "000010000010000", " ": "000000000000000",
    "_": "000000000000111", ";": "000010000010100", ",": "000000000010100", "=": "000111000111000", "%": "101001010100101",
}  # fmt: skip


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(_WHITE * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
        """Fill [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + len(row)] = row

    def text(self, x: int, y: int, text: str, color: tuple[int, int, int] = _BLACK) -> int:
        """Draw ``text`` (upper-cased; unknown characters as blanks) from its top-left; return its width."""
        for index, char in enumerate(text.upper()):
            glyph = _FONT.get(char, _FONT[" "])
            left = x + index * 4 * _SCALE
            for bit, on in enumerate(glyph):
                if on == "1":
                    gx, gy = left + (bit % 3) * _SCALE, y + (bit // 3) * _SCALE
                    self.rect(gx, gy, gx + _SCALE, gy + _SCALE, color)
        return len(text) * 4 * _SCALE

    def png(self) -> bytes:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def bars(records: Sequence[Mapping[str, Any]], *, max_bars: int) -> list[dict[str, float]]:
    """Per bar, seconds per stage: the batches that carried rows, in run order, averaged in runs of
    consecutive batches when there are more than ``max_bars`` of them (a missing stage counts as 0)."""
    busy = [r for r in records if r.get("rows")]
    if not busy:
        return []
    size = math.ceil(len(busy) / max_bars)
    out = []
    for start in range(0, len(busy), size):
        group = busy[start : start + size]
        out.append({s: sum(float(r.get(s) or 0.0) for r in group) / len(group) for s in STAGES})
    return out


def _nice_step(top: float) -> float:
    raw = top / 5 if top > 0 else 0.2
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def render(records: Sequence[Mapping[str, Any]], *, title: str) -> bytes:
    """The PNG bytes of the stacked stage bars of ``records`` (see :func:`bars`)."""
    canvas = _Canvas(WIDTH, HEIGHT)
    plot_w, plot_h = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM
    data = bars(records, max_bars=plot_w // 3)
    top = max((sum(b.values()) for b in data), default=0.0)
    step = _nice_step(top)
    y_max = step * max(1, math.ceil(top / step)) if top > 0 else step * 5
    canvas.text(_LEFT, 8, title)
    bottom = _TOP + plot_h
    tick = 0.0
    while tick <= y_max + 1e-9:
        y = bottom - round(tick / y_max * plot_h)
        canvas.rect(_LEFT, y, _LEFT + plot_w, y + 1, _GRID)
        label = f"{tick:g}"
        canvas.text(_LEFT - 8 - len(label) * 4 * _SCALE, y - 5, label)
        tick += step
    canvas.rect(_LEFT, _TOP, _LEFT + 1, bottom + 1, _BLACK)
    canvas.rect(_LEFT, bottom, _LEFT + plot_w, bottom + 1, _BLACK)
    if data:
        slot = plot_w / len(data)
        width = max(1, int(slot * 0.8))
        for index, bar in enumerate(data):
            x = _LEFT + 1 + int(index * slot)
            level = 0.0
            for stage in STAGES:
                y0 = bottom - round((level + bar[stage]) / y_max * plot_h)
                y1 = bottom - round(level / y_max * plot_h)
                canvas.rect(x, y0, x + width, y1, COLORS[stage])
                level += bar[stage]
    else:
        canvas.text(_LEFT + 20, _TOP + plot_h // 2, "NO MICRO-BATCH CARRIED ROWS")
    count = sum(1 for r in records if r.get("rows"))
    per = "" if len(data) == count else f", {count // max(1, len(data)) or 1}+ PER BAR"
    canvas.text(_LEFT, bottom + 10, f"MICRO-BATCHES IN RUN ORDER ({count}{per}); SECONDS PER STAGE")
    x, y = _LEFT, bottom + 34
    for stage in STAGES:
        label = stage.replace("_", " ")
        needed = 14 + 8 + len(label) * 4 * _SCALE + 24
        if x + needed > WIDTH - _RIGHT:
            x, y = _LEFT, y + 22
        canvas.rect(x, y, x + 14, y + 10, COLORS[stage])
        x += 22 + canvas.text(x + 22, y, label) + 24
    return canvas.png()


def write_stage_plot(
    path: Path, records: Sequence[Mapping[str, Any]], *, title: str = "stage time per micro-batch (s)"
) -> Path:
    """Write the stage plot of ``records`` (as :class:`jobs.stages.StageRecorder` keeps them) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render(records, title=title))
    return path


__all__ = ["COLORS", "bars", "render", "write_stage_plot"]
