"""PIL's view of PNG and JPEG files, its bicubic resize and TorchTitan's FLUX
image processing, for tests/data/image_file_test.cpp to compare titan against.

Usage: pil_images.py DIR. Writes image files made by PIL (and a few PNGs that
PIL cannot write, made with zlib here: 16-bit RGB, interlaced), what PIL
decodes from each (and from DIR/titan_written.png when the test left one), what PIL
decodes from each, PIL's resizes of random images, and TorchTitan's
[3, S, S] tensors, with DIR/manifest.json listing them. Raw files: .rgb is
height x width x 3 bytes, .f32 is little-endian float32 [3, S, S].
"""

import json
import math
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import PIL
from PIL import Image


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write_png_by_hand(path, samples, bit_depth, colour_type, interlace):
    """A PNG from an (H, W, C) array of unsigned samples, every row filter 0;
    Adam7 when interlace (PIL writes neither 16-bit RGB nor interlaced files)."""
    height, width = samples.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"

    def rows_of(image):
        return b"".join(b"\x00" + image[y].astype(dtype).tobytes() for y in range(image.shape[0]))

    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b""
        for x0, y0, dx, dy in passes:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += rows_of(sub)
    else:
        raw = rows_of(samples)
    header = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 1 if interlace else 0)
    data = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", zlib.compress(raw))
    Path(path).write_bytes(data + png_chunk(b"IEND", b""))


def smooth_image(rng, width, height):
    """Gradients plus noise: smooth areas (where JPEG's upsampling matters) and sharp ones."""
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) * 127 // max(width + height - 2, 1)], -1)
    noise = rng.integers(-40, 41, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def main():
    out = Path(sys.argv[1])
    rng = np.random.default_rng(1234)
    manifest = {"pil_version": PIL.__version__, "decode": [], "resize": [], "square": []}

    def add_decoded(name, expected=None, note="PIL"):
        """expected: an (H, W, 3) uint8 array when PIL's own reading is not the reference."""
        if expected is None:
            with Image.open(out / name) as im:
                expected = np.asarray(im.convert("RGB"))
        (out / (name + ".rgb")).write_bytes(np.ascontiguousarray(expected).tobytes())
        manifest["decode"].append({"file": name, "width": int(expected.shape[1]), "height": int(expected.shape[0]),
                                   "expected": name + ".rgb", "reference": note})

    rgb = smooth_image(rng, 37, 23)
    Image.fromarray(rgb).save(out / "rgb.png")
    add_decoded("rgb.png")
    rgba = np.concatenate([rgb, rng.integers(0, 256, size=(23, 37, 1), dtype=np.uint8)], -1)
    Image.fromarray(rgba, "RGBA").save(out / "rgba.png")
    add_decoded("rgba.png")
    grey = rgb[:, :, 0].copy()
    Image.fromarray(grey, "L").save(out / "grey.png")
    add_decoded("grey.png")
    Image.fromarray(np.stack([grey, rgb[:, :, 1]], -1), "LA").save(out / "grey_alpha.png")
    add_decoded("grey_alpha.png")
    Image.fromarray(grey > 128).save(out / "one_bit.png")  # mode "1": a 1-bit greyscale PNG
    add_decoded("one_bit.png")
    # Palettes: 256 colours at 8 bits, 16 at 4 bits (PIL picks the depth), one with tRNS.
    Image.fromarray(rgb).quantize(256).save(out / "palette.png")
    add_decoded("palette.png")
    Image.fromarray(rgb).quantize(16).save(out / "palette_4bit.png")
    add_decoded("palette_4bit.png")
    Image.fromarray(rgb).quantize(64).save(out / "palette_transparent.png", transparency=3)
    add_decoded("palette_transparent.png")
    # 16-bit: PIL's reading of RGB takes each sample's high byte, as titan does.
    # For 16-bit grey PIL's convert("RGB") clips the value at 255 instead of
    # scaling it; titan takes the high byte there too, so that file's
    # reference is the high byte computed here.
    rgb16 = rng.integers(0, 65536, size=(19, 29, 3), dtype=np.uint32)
    write_png_by_hand(out / "rgb16.png", rgb16, 16, 2, False)
    add_decoded("rgb16.png")
    grey16 = rng.integers(0, 65536, size=(19, 29, 1), dtype=np.uint32)
    write_png_by_hand(out / "grey16.png", grey16, 16, 0, False)
    add_decoded("grey16.png", np.repeat((grey16 >> 8).astype(np.uint8), 3, -1), "high byte")
    write_png_by_hand(out / "interlaced.png", rgb.astype(np.uint32), 8, 2, True)
    add_decoded("interlaced.png")
    write_png_by_hand(out / "interlaced_rgba16.png", rng.integers(0, 65536, size=(13, 11, 4), dtype=np.uint32), 16, 6, True)
    add_decoded("interlaced_rgba16.png")

    jpeg_source = smooth_image(rng, 45, 31)
    Image.fromarray(jpeg_source).save(out / "ycc420.jpg", quality=90)
    add_decoded("ycc420.jpg")
    Image.fromarray(jpeg_source).save(out / "ycc444.jpg", quality=95, subsampling=0)
    add_decoded("ycc444.jpg")
    Image.fromarray(jpeg_source).save(out / "ycc422.jpg", quality=75, subsampling=1)
    add_decoded("ycc422.jpg")
    Image.fromarray(jpeg_source).save(out / "progressive.jpg", quality=85, progressive=True)
    add_decoded("progressive.jpg")
    Image.fromarray(jpeg_source[:, :, 1].copy(), "L").save(out / "grey.jpg", quality=90)
    add_decoded("grey.jpg")
    Image.fromarray(jpeg_source).convert("CMYK").save(out / "cmyk.jpg", quality=90)
    add_decoded("cmyk.jpg")

    # PIL's default resize filter (bicubic for RGB images since Pillow 7), on
    # noise (the negative lobes overshoot and clip) and on smooth images:
    # shrinking by odd factors, enlarging, one side unchanged, both unchanged.
    cases = [(40, 30, 32, 24), (100, 37, 87, 32), (17, 50, 32, 94), (64, 64, 32, 32), (10, 7, 33, 23),
             (257, 129, 32, 16), (31, 31, 31, 17), (45, 20, 45, 20), (3, 2, 1, 1)]
    for index, (in_w, in_h, out_w, out_h) in enumerate(cases):
        for kind in ("noise", "smooth"):
            source = (rng.integers(0, 256, size=(in_h, in_w, 3), dtype=np.uint8) if kind == "noise"
                      else smooth_image(rng, in_w, in_h))
            name = f"resize{index}_{kind}"
            (out / (name + ".in.rgb")).write_bytes(source.tobytes())
            resized = np.asarray(Image.fromarray(source).resize((out_w, out_h)))
            (out / (name + ".out.rgb")).write_bytes(resized.tobytes())
            manifest["resize"].append({"input": name + ".in.rgb", "in_width": in_w, "in_height": in_h,
                                       "width": out_w, "height": out_h, "expected": name + ".out.rgb"})

    # TorchTitan's _process_cc12m_image (torchtitan/models/flux/flux_datasets.py)
    # with its random crop offset replaced by the centre, (new - size) // 2.
    def process_like_torchtitan(img, output_size):
        width, height = img.size
        if width >= height:
            new_width, new_height = math.ceil(output_size / height * width), output_size
            img = img.resize((new_width, new_height))
            left = (new_width - output_size) // 2
            img = img.crop((left, 0, left + output_size, output_size))
        else:
            new_width, new_height = output_size, math.ceil(output_size / width * height)
            img = img.resize((new_width, new_height))
            lower = (new_height - output_size) // 2
            img = img.crop((0, lower, output_size, lower + output_size))
        if img.mode != "RGB":
            img = img.convert("RGB")
        np_img = np.array(img).transpose((2, 0, 1))
        # torch's uint8 -> float32, / 255.0, * 2.0, - 1.0 in float32 (numpy's
        # float32 operations give the same bits: division, not a reciprocal).
        return np_img.astype(np.float32) / np.float32(255.0) * np.float32(2.0) - np.float32(1.0)

    smooth_large = smooth_image(rng, 300, 200)
    Image.fromarray(smooth_large).save(out / "landscape.jpg", quality=90)
    Image.fromarray(smooth_image(rng, 77, 131)).save(out / "portrait.png")
    Image.fromarray(smooth_large[:, :, 2].copy(), "L").save(out / "landscape_grey.jpg", quality=90)
    for name in ("landscape.jpg", "portrait.png", "landscape_grey.jpg", "rgb.png"):
        for size in (16, 32, 64):
            with Image.open(out / name) as im:
                tensor = process_like_torchtitan(im, size)
            target = f"{name}.s{size}.f32"
            (out / target).write_bytes(tensor.astype("<f4").tobytes())
            manifest["square"].append({"file": name, "size": size, "expected": target})

    # A PNG titan wrote before calling this script: PIL reads it back.
    if (out / "titan_written.png").exists():
        add_decoded("titan_written.png")

    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
