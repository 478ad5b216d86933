"""Raw image bytes in, the vision tower's pixels out: decoding bounded, then the folder's image processor's arithmetic.

Served: copied verbatim next to the image-and-text first step's model.py; it imports the standard library, numpy
and Pillow only (no transformers in the serving image). `Preprocess` repeats what transformers' Pillow image
processors (CLIPImageProcessorPil, SiglipImageProcessorPil) do, step for step and in their dtypes; generation
holds it to the folder's own processor class on every verification image (tasks/image_text/task.py), so a
processor this copy does not repeat exactly is refused there, never served.

Every bad image is that request's error (InvalidText, INVALID_ARG: the API's 400): bytes that are no image, a
format other than PNG, JPEG and WebP, a file cut short, and an image of more than `max_pixels` pixels, refused
from its header before a pixel is decoded (the bound Pillow's Image.MAX_IMAGE_PIXELS sets for itself, smaller).
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass

import numpy as np

from .texts import InvalidText

PIXEL_VALUES = "pixel_values"  # the vision tower's input, [N, 3, H, W] float32
FORMATS = ("PNG", "JPEG", "WEBP")  # what Pillow is allowed to open; anything else is refused by name
# Pixels one image may have (width x height, read from its header before decoding): 40 megapixels, 120 MB of
# RGB once decoded. Pillow's own bound (Image.MAX_IMAGE_PIXELS, about 89 megapixels, an error past twice that)
# stays as it is; this one is smaller and is an error, not a warning.
MAX_PIXELS = 40_000_000
PARAMETER = "image_processor"  # the step's configuration parameter holding `Preprocess` as JSON
MAX_PIXELS_PARAMETER = "max_image_pixels"


def decode_image(data: bytes, name: str, max_pixels: int = MAX_PIXELS):
    """One encoded file -> a decoded Pillow image, or that request's one-line error."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InvalidText(f"{name} is empty: send the bytes of a PNG, JPEG or WebP file", "empty")
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        raise InvalidText(_unknown(data, name), "not_an_image") from None
    except Image.DecompressionBombError as exc:
        raise InvalidText(f"{name} is refused before decoding: {exc}", "too_many_pixels") from None
    except Exception as exc:  # noqa: BLE001 - a header Pillow cannot read is the sender's error
        raise InvalidText(f"{name} cannot be read as {'/'.join(FORMATS)}: {exc}", "not_an_image") from None
    width, height = image.size
    if max_pixels and width * height > max_pixels:
        raise InvalidText(f"{name} is {width}x{height} = {width * height} pixels, over this server's limit of "
                          f"{max_pixels} pixels per image: send a smaller image", "too_many_pixels")
    try:
        image.load()
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt data
        raise InvalidText(f"{name} is a {image.format} file that cannot be decoded ({exc}): send the whole file",
                          "truncated") from None
    return image


def _unknown(data: bytes, name: str) -> str:
    """Why bytes are not a servable image: another format Pillow knows, or no image at all."""
    from PIL import Image

    try:
        other = Image.open(io.BytesIO(data)).format
    except Exception:  # noqa: BLE001
        other = None
    if other:
        return f"{name} is a {other} image: this server reads {', '.join(FORMATS)}"
    return f"{name} is not an image (no PNG, JPEG or WebP header): send the file's bytes"


@dataclass(frozen=True)
class Preprocess:
    """An image processor's settings, as its Pillow backend applies them."""

    size: dict  # {"shortest_edge": n} or {"height": h, "width": w}
    resample: int
    do_resize: bool
    do_center_crop: bool
    crop_size: dict | None
    do_rescale: bool
    rescale_factor: float
    do_normalize: bool
    image_mean: tuple[float, ...]
    image_std: tuple[float, ...]
    do_convert_rgb: bool

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Preprocess:
        data = json.loads(text)
        data["image_mean"], data["image_std"] = tuple(data["image_mean"]), tuple(data["image_std"])
        return cls(**data)

    def _target(self, height: int, width: int) -> tuple[int, int]:
        """transformers' get_resize_output_image_size (default_to_square=False), or the fixed size."""
        if "shortest_edge" in self.size:
            edge = int(self.size["shortest_edge"])
            short, long = (width, height) if width <= height else (height, width)
            new_short, new_long = edge, int(edge * long / short)
            return (new_long, new_short) if width <= height else (new_short, new_long)
        return int(self.size["height"]), int(self.size["width"])

    def __call__(self, image) -> np.ndarray:
        """A decoded Pillow image -> [3, H, W] float32 pixels."""
        from PIL import Image

        if self.do_convert_rgb:
            if "A" in image.getbands() or image.info.get("transparency") is not None:
                rgba = image.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                image = Image.alpha_composite(white, rgba).convert("RGB")
            else:
                image = image.convert("RGB")
        if self.do_resize:
            height, width = self._target(image.height, image.width)
            image = image.resize((width, height), resample=self.resample)
        pixels = np.array(image)
        pixels = pixels[..., None] if pixels.ndim == 2 else pixels
        pixels = np.moveaxis(pixels, -1, 0)  # channels first
        if self.do_center_crop and self.crop_size:
            pixels = _center_crop(pixels, int(self.crop_size["height"]), int(self.crop_size["width"]))
        if self.do_rescale:
            pixels = (pixels.astype(np.float64) * self.rescale_factor).astype(np.float32)
        if self.do_normalize:
            if not np.issubdtype(pixels.dtype, np.floating):
                pixels = pixels.astype(np.float32)
            mean = np.array(self.image_mean, dtype=pixels.dtype)
            std = np.array(self.image_std, dtype=pixels.dtype)
            pixels = ((pixels.T - mean) / std).T
        return np.ascontiguousarray(pixels, dtype=np.float32)


def _center_crop(pixels: np.ndarray, crop_height: int, crop_width: int) -> np.ndarray:
    """transformers' center_crop: the middle, padded with zeros where the image is smaller."""
    height, width = pixels.shape[-2:]
    top, left = (height - crop_height) // 2, (width - crop_width) // 2
    if top >= 0 and left >= 0:
        return pixels[..., top : top + crop_height, left : left + crop_width]
    new_height, new_width = max(crop_height, height), max(crop_width, width)
    padded = np.zeros(pixels.shape[:-2] + (new_height, new_width), dtype=pixels.dtype)
    top_pad, left_pad = math.ceil((new_height - height) / 2), math.ceil((new_width - width) / 2)
    padded[..., top_pad : top_pad + height, left_pad : left_pad + width] = pixels
    top, left = top + top_pad, left + left_pad
    bottom, right = top + crop_height, left + crop_width
    return padded[..., max(0, top) : min(new_height, bottom), max(0, left) : min(new_width, right)]
