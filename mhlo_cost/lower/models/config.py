"""Configurations and named video shapes shared by every frontend of the bundled models.

A named shape is ``FRAMES_WIDTH_HEIGHT`` (``204_640_360``: 204 frames of 640x360 video). OpenSora 1.2's
VAE compresses 17 frames into 5 latent frames (plus a ceil(rest/4) tail) and 8x8 pixels into one latent
pixel; STDiT3 then patches the latent with a (1, 2, 2) kernel, padding H and W up to even sizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: The video shapes of the reference analysis.
NAMED_SHAPES = ("204_640_360", "408_640_360", "51_1280_720", "102_1280_720")


@dataclass(frozen=True)
class VideoShape:
    frames: int
    width: int
    height: int

    @classmethod
    def parse(cls, name: str) -> "VideoShape":
        parts = name.split("_")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"video shape must be FRAMES_WIDTH_HEIGHT with positive integers, got {name!r}")
        f, w, h = (int(p) for p in parts)
        return cls(f, w, h)

    @property
    def name(self) -> str:
        return f"{self.frames}_{self.width}_{self.height}"

    # Latent sizes after OpenSora 1.2's VAE.
    @property
    def latent_t(self) -> int:
        return 5 * (self.frames // 17) + math.ceil((self.frames % 17) / 4)

    @property
    def latent_h(self) -> int:
        return self.height // 8

    @property
    def latent_w(self) -> int:
        return self.width // 8


@dataclass(frozen=True)
class STDiT3Config:
    """STDiT3 hyper-parameters; the defaults are STDiT3-XL/2 as OpenSora 1.2 ships it."""

    depth: int = 28  # spatial blocks; as many temporal blocks alternate with them
    hidden: int = 1152
    heads: int = 16
    mlp_ratio: float = 4.0
    in_channels: int = 4
    out_channels: int = 8  # pred_sigma: 2 x in_channels
    patch: tuple[int, int, int] = (1, 2, 2)
    caption_channels: int = 4096
    caption_tokens: int = 300
    freq_dim: int = 256  # sinusoidal timestep embedding width
    # Input sizes (latent): frames T, height H, width W, and the batch (2 with classifier-free guidance).
    batch: int = 2
    latent_t: int = 60
    latent_h: int = 45
    latent_w: int = 80
    dtype: str = "bfloat16"
    qk_norm: bool = True  # RMSNorm on q and k of the self-attention (OpenSora 1.2 ships it on)
    input_sq_size: int = 512  # reference resolution of the 2-D positional embedding's scale
    vae_downsample: int = 8  # pixels per latent pixel (only the positional embedding's scale uses it)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden * self.mlp_ratio)

    @property
    def tokens_t(self) -> int:
        return math.ceil(self.latent_t / self.patch[0])

    @property
    def tokens_s(self) -> int:
        return math.ceil(self.latent_h / self.patch[1]) * math.ceil(self.latent_w / self.patch[2])

    def with_shape(self, shape: str | VideoShape) -> "STDiT3Config":
        v = VideoShape.parse(shape) if isinstance(shape, str) else shape
        return replace(self, latent_t=v.latent_t, latent_h=v.latent_h, latent_w=v.latent_w)

    def small(self) -> "STDiT3Config":
        """The reduced configuration of the fast tests: depth 2, hidden 64, 4 heads, caption 32x8."""
        return replace(self, depth=2, hidden=64, heads=4, caption_channels=32, caption_tokens=8,
                       latent_t=3, latent_h=6, latent_w=8, dtype="float32")


def unpublished_shape_note(name: str) -> str | None:
    """For a video shape that is not a published one, what it means in tokens (a typo such as ``204_640_36``
    lowers another model: this says which); None for a published shape."""
    if name in NAMED_SHAPES:
        return None
    c = STDiT3Config().with_shape(VideoShape.parse(name))
    return (f"{name} is not a published STDiT3 shape ({', '.join(NAMED_SHAPES)}): it means latent "
            f"{c.latent_t}x{c.latent_h}x{c.latent_w}, T={c.tokens_t} x S={c.tokens_s} = "
            f"{c.tokens_t * c.tokens_s:,} tokens per sample")
