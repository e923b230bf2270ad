"""Rendered text images: inputs in the PP-OCR models' own domain, for accuracy checks.

Why: the benchmarks' seeded random inputs are noise to a text detector; its output on noise is a near-empty
probability map whose cosine against fp32 swings with any one rounding (PP-OCR det under precision bf16, session 28:
0.9941-0.9991 on the seeded input as single tensors were rounded or kept fp32, 0.99996-0.99997 on a rendered page
either way). A page of text lines, or one line, measures what a user of the model sees.

document(640, 640) is a page of dark text lines of random words and sizes on paper-coloured ground with mild
pixel noise (PP-OCR det's input); text_line(48, 320) is one line of such text scaled to the height (rec, cls).
Both are preprocessed as rapidocr does ((pixel / 255 - 0.5) / 0.5), NCHW float32, seeded, and need Pillow.
"""
from __future__ import annotations

import numpy as np

WORDS = ("the quick brown fox jumps over a lazy dog ONNX Runtime compiler 2026 invoice total 123.45 EUR "
         "shipping address order number 0815 paid").split()
PAPER = (245, 243, 238)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one bitmap size
        return ImageFont.load_default()


def _normalised(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    noisy = pixels.astype(np.float32) + rng.normal(0.0, 3.0, pixels.shape).astype(np.float32)
    scaled = (np.clip(noisy, 0.0, 255.0) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(scaled.transpose(2, 0, 1)[None], dtype=np.float32)


def document(height: int = 640, width: int = 640, seed: int = 0) -> np.ndarray:
    """[1, 3, height, width]: text lines (14-33 px) down a page."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), PAPER)
    draw = ImageDraw.Draw(image)
    top = 20
    while top < height - 40:
        size = int(rng.integers(14, 34))
        line = " ".join(rng.choice(WORDS, int(rng.integers(3, 9))))
        ink = tuple(int(value) for value in rng.integers(0, 80, 3))
        draw.text((int(rng.integers(10, 60)), top), line, fill=ink, font=_font(size))
        top += size + int(rng.integers(8, 30))
    return _normalised(np.asarray(image), rng)


def text_line(height: int = 48, width: int = 320, seed: int = 0) -> np.ndarray:
    """[1, 3, height, width]: one line of words filling the height, cut at the width."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), PAPER)
    draw = ImageDraw.Draw(image)
    line = " ".join(rng.choice(WORDS, 6))
    ink = tuple(int(value) for value in rng.integers(0, 80, 3))
    draw.text((4, height // 8), line, fill=ink, font=_font(int(height * 0.6)))
    return _normalised(np.asarray(image), rng)


def for_model(key: str, shape) -> np.ndarray | None:
    """The rendered input for a PP-OCR model key ("det": a page, "rec"/"cls": a line) at `shape`, else None."""
    if key == "det":
        return document(shape[2], shape[3])
    if key in ("rec", "cls"):
        return text_line(shape[2], shape[3])
    return None
