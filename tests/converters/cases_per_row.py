"""OpCases for converters/per_row.py: codecs, file reads and serialization, run per row.

None of these ops has an XLA kernel. Where an op's output size comes from the data (decoded
images and audio), the builder reshapes it to the size the records have, as users do, so
the empty loop (n = 0) has a known shape too.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

from tests.converters.op_cases import OpCase
from tests.converters.records import strings_of

S, U8, I32 = tf.string, tf.uint8, tf.int32
_NO_XLA = "codecs, file reads and serialization have no XLA kernels"
_IMAGE = [4, 5, 3]
_SAMPLES = 6


def _pixels(rng):
  return rng.integers(0, 256, _IMAGE, np.uint8)


def _bmp(pixels):
  """A 24-bit BMP (TF has no BMP encoder): rows bottom-up, BGR, padded to 4 bytes."""
  h, w, _ = pixels.shape
  row = w * 3 + (-w * 3) % 4
  body = b"".join(pixels[y, :, ::-1].tobytes() + b"\0" * (row - w * 3)
                  for y in reversed(range(h)))
  header = (b"BM" + (54 + len(body)).to_bytes(4, "little") + b"\0" * 4 +
            (54).to_bytes(4, "little") + (40).to_bytes(4, "little") +
            w.to_bytes(4, "little") + h.to_bytes(4, "little") + (1).to_bytes(2, "little") +
            (24).to_bytes(2, "little") + b"\0" * 24)
  return header + body


_GIFS = [bytes.fromhex(h) for h in (   # 2x2, two frames each (no GIF encoder in TF)
    "47494638376102000200810000ff00000102030000000000002c00000000020002000008060003001818"
    "100021f90401000001002c0000000002000200810000ff0000000000000000000806000108041010003b",
    "4749463837610200020081000000ff000102030000000000002c00000000020002000008060003001818"
    "100021f90401000001002c0000000002000200810909090000000000000000000806000108041010003b")]


def _files():
  """Four files of 12 bytes each in a fresh temporary directory."""
  directory = tempfile.mkdtemp(prefix="vectorize_read_file_")
  paths = []
  for k in range(4):
    path = os.path.join(directory, f"file{k}.bin")
    with open(path, "wb") as f:
      f.write(bytes(range(k, k + 12)))
    paths.append(path.encode())
  return paths


_PATHS = _files()

pngs = strings_of(lambda rng: tf.io.encode_png(_pixels(rng)).numpy())
jpegs = strings_of(lambda rng: tf.io.encode_jpeg(_pixels(rng)).numpy())
bmps = strings_of(lambda rng: _bmp(_pixels(rng)))
gifs = strings_of(lambda rng: _GIFS[rng.integers(0, 2)])
wavs = strings_of(lambda rng: tf.audio.encode_wav(
    rng.uniform(-1, 1, [_SAMPLES, 2]).astype(np.float32), 8000).numpy())
paths = strings_of(lambda rng: _PATHS[rng.integers(0, 4)])


def ints_in(low, high):
  def make(rng, shape, dtype):
    return rng.integers(low, high, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)
  return make


def crop_windows(rng, shape, dtype):
  """3x4 windows [y, x, 3, 4] at varying offsets inside a 4x5 image (one output size)."""
  del dtype
  y, x = rng.integers(0, 2, shape[:-1]), rng.integers(0, 2, shape[:-1])
  return np.stack([y, x, np.full_like(y, 3), np.full_like(x, 4)], -1).astype(np.int32)


def audio(rng, shape, dtype):
  return rng.uniform(-1, 1, shape).astype(tf.as_dtype(dtype).as_numpy_dtype)


def case(name, build, shapes, make, dtypes=(S,), **kwargs):
  return OpCase(name, build, shapes, dtypes=dtypes, make=make, xla=_NO_XLA, **kwargs)


CASES = [
    case("DecodePng", lambda s: tf.reshape(tf.io.decode_png(s, channels=3), _IMAGE), [[]],
         [pngs]),
    case("DecodeJpeg", lambda s: tf.reshape(tf.io.decode_jpeg(s, channels=3), _IMAGE), [[]],
         [jpegs]),
    case("DecodeImage",
         lambda s: tf.reshape(tf.io.decode_image(s, 3, expand_animations=False), _IMAGE),
         [[]], [pngs]),
    case("DecodeImage-any_rank",
         lambda s: tf.reshape(tf.io.decode_image(s, channels=3), _IMAGE), [[]], [pngs]),
    case("DecodeImage-gif_any_rank",
         lambda s: tf.reshape(tf.io.decode_image(s), [2, 2, 2, 3]), [[]], [gifs]),
    case("DecodeBmp", lambda s: tf.reshape(tf.io.decode_bmp(s, channels=3), _IMAGE), [[]],
         [bmps]),
    case("DecodeGif", lambda s: tf.reshape(tf.io.decode_gif(s), [2, 2, 2, 3]), [[]],
         [gifs]),
    case("DecodeAndCropJpeg",
         lambda s, w: tf.reshape(tf.io.decode_and_crop_jpeg(s, w, channels=3), [3, 4, 3]),
         [[], [4]], [jpegs, crop_windows],
         dtypes=[(S, I32)]),
    case("ExtractJpegShape", tf.io.extract_jpeg_shape, [[]], [jpegs]),
    case("EncodePng", tf.io.encode_png, [_IMAGE], [None], dtypes=[U8]),
    case("EncodeJpeg", lambda x: tf.io.encode_jpeg(x, quality=90), [_IMAGE], [None],
         dtypes=[U8]),
    case("EncodeJpegVariableQuality",
         lambda x, q: tf.raw_ops.EncodeJpegVariableQuality(images=x, quality=q),
         [_IMAGE, []], [None, ints_in(40, 95)], dtypes=[(U8, I32)]),
    case("EncodeWav", tf.audio.encode_wav, [[_SAMPLES, 2], []], [audio, ints_in(8000, 9000)],
         dtypes=[(tf.float32, I32)]),
    case("DecodeWav",
         lambda s: [tf.reshape(x, shape) for x, shape in zip(
             tf.audio.decode_wav(s, desired_channels=1), ([_SAMPLES, 1], []))],
         [[]], [wavs], tol=1e-4),
    case("ReadFile", tf.io.read_file, [[]], [paths]),
    case("SerializeTensor", tf.io.serialize_tensor, [[2, 3]], [None], dtypes=[tf.float32]),
]

UNTESTED = {}
