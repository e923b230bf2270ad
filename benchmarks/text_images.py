"""Synthetic printed-text images in PP-OCR's input format, for measuring numerics where random noise means nothing.

On uniform noise PP-OCRv4 det's probability map stays below 0.001 everywhere (measured: max 0.0004 at 640x640),
so an output cosine against fp32 is dominated by rounding of near-zero values and calibration ranges come from
activations the model never sees on real input. These images carry lines of random letters and digits in
Pillow's default font at random sizes, dark ink on a light background, normalised as PP-OCR does
((pixel / 255 - 0.5) / 0.5, NCHW). On them det marks about 8% of a 640x640 image as text (p > 0.3).
"""
from __future__ import annotations

import string

import numpy as np

CHARACTERS = list(string.ascii_letters + string.digits + "  ")


def text_image(height: int, width: int, seed: int) -> np.ndarray:
    """One 1x3xHxW float32 image: text lines filling the height (one line when the image is a single line tall)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), tuple(int(value) for value in rng.integers(170, 256, 3)))
    draw = ImageDraw.Draw(image)
    single_line = height <= 64
    top = 0 if single_line else int(rng.integers(0, max(1, height // 10)))
    while top < height - 8:
        size = int(rng.integers(int(height * 0.55), int(height * 0.8))) if single_line else \
            int(rng.integers(max(10, height // 40), max(12, height // 10)))
        font = ImageFont.load_default(size=size)
        text = "".join(rng.choice(CHARACTERS, int(rng.integers(4, 40))))
        left = int(rng.integers(0, max(1, width // 5)))
        top_here = (height - size) // 2 if single_line else top
        draw.text((left, top_here), text, fill=tuple(int(value) for value in rng.integers(0, 90, 3)), font=font)
        if single_line:
            break
        top += int(size * rng.uniform(1.3, 2.5))
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    return ((pixels - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def text_images(count: int, shape: tuple, seed: int) -> np.ndarray:
    """`count` images stacked on the batch axis (sample i is images[i:i+1]), image i drawn with seed (seed, i)."""
    _, channels, height, width = shape
    if channels != 3:
        raise ValueError(f"text images are RGB; the shape {shape} has {channels} channels")
    return np.concatenate([text_image(height, width, seed * 100_003 + index) for index in range(count)])
