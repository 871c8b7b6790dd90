"""A real tf.data input pipeline: serialized tf.Examples parsed, raw bytes decoded, PNG
images decoded and resized, a text field hashed; three ways to run it.

Each record holds a 32x32x3 PNG, 64 float32 numbers as raw bytes, a label and a word. The
per-element function parses the record, decodes the image and resizes it to 24x24, decodes
the raw bytes and hashes the lower-cased word. The forms, each iterating the whole dataset:

- `map_batch`: `ds.map(fn).batch(b)`, what users write;
- `map_batch_parallel`: the same with `num_parallel_calls=AUTOTUNE` on the map;
- `hand`: `ds.batch(b).map(batched_fn)`, a batched function written by hand (one
  `parse_example`, one decode_raw, one resize; images decoded by `tf.map_fn`, since no
  kernel decodes a batch of PNGs): the idea of the map vectorization tf.data once had;
- `vectorize`: `ds.apply(vectorize.data.map_and_batch(fn, b))`, the per-element fn as is;
- `vectorize_parallel`: the same with `num_parallel_calls=AUTOTUNE` (batches in parallel).

Every form is checked against `map_batch` before it is timed. Rounds interleave the forms;
the table gives each form's median and best wall time per epoch, its median CPU time (all
threads of the process: the work done, which other processes on a shared machine disturb
less), and the medians over rounds of its wall and CPU time divided by `map_batch`'s in the
same round.

With `--augment`, Keras RandomFlip + RandomContrast follow the resize (per-example randomness,
equal to map_batch's draws); the forms are then map_batch and vectorize.

With `--steady`, an epoch is also split in two: the iterator start (tf.data instantiates and
optimizes the map function for every new iterator, so every epoch pays it) and the steady time
per batch of a long-lived iterator.

Run by itself: `python -m benchmarks.workloads.data_pipeline [--batch=128] [--rounds=7]
[--augment] [--steady]`.
`build(batch)` gives these forms as zero-argument callables; `build_suite(batch)` gives the
benchmark suite's four forms (`benchmarks/workload.py`), each reducing an epoch to sums.
"""

import argparse
import time

import numpy as np
import tensorflow as tf

import vectorize
from benchmarks import workload

RECORDS = 2048
IMAGE, RESIZED, RAW = 32, 24, 64
BUCKETS = 1000
_WORDS = np.array([b"Cat", b"dog", b"BIRD", b"fish", b"Horse"])
_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "raw": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "word": tf.io.FixedLenFeature([], tf.string),
}


def make_records(num_records=RECORDS, seed=0):
  """Serialized tf.Examples, as a TFRecord file would hold them."""
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, [num_records, IMAGE, IMAGE, 3], np.uint8)
  pngs = tf.map_fn(tf.io.encode_png, tf.constant(images), fn_output_signature=tf.string)
  records = []
  for k in range(num_records):
    feature = {
        "image": _bytes(pngs[k].numpy()),
        "raw": _bytes(rng.standard_normal(RAW).astype(np.float32).tobytes()),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[k % 10])),
        "word": _bytes(rng.choice(_WORDS)),
    }
    records.append(tf.train.Example(
        features=tf.train.Features(feature=feature)).SerializeToString())
  return records


def _bytes(value):
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def preprocess(record):
  """One serialized record -> (image [24, 24, 3] float, raw [64], label, word bucket)."""
  example = tf.io.parse_single_example(record, _FEATURES)
  image = tf.io.decode_png(example["image"], channels=3)
  image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, [RESIZED, RESIZED])
  raw = tf.reshape(tf.io.decode_raw(example["raw"], tf.float32), [RAW])
  bucket = tf.strings.to_hash_bucket_fast(tf.strings.lower(example["word"]), BUCKETS)
  return image, raw, example["label"], bucket


def preprocess_batch(records):
  """The same for a batch of records, written by hand."""
  example = tf.io.parse_example(records, _FEATURES)
  images = tf.map_fn(lambda png: tf.io.decode_png(png, channels=3), example["image"],
                     fn_output_signature=tf.TensorSpec([None, None, 3], tf.uint8))
  images = tf.image.resize(tf.cast(images, tf.float32) / 255.0, [RESIZED, RESIZED])
  raw = tf.reshape(tf.io.decode_raw(example["raw"], tf.float32), [-1, RAW])
  buckets = tf.strings.to_hash_bucket_fast(tf.strings.lower(example["word"]), BUCKETS)
  return images, raw, example["label"], buckets


def with_augmentation(seed=0):
  """`preprocess` then Keras RandomFlip + RandomContrast on the image, each example drawing its
  own randomness (fresh layers: each holds its own seed state)."""
  import keras  # pylint: disable=g-import-not-at-top
  flip = keras.layers.RandomFlip("horizontal", seed=seed + 1)
  contrast = keras.layers.RandomContrast(0.3, seed=seed + 2)

  def fn(record):
    image, raw, label, bucket = preprocess(record)
    return contrast(flip(image, training=True), training=True), raw, label, bucket
  return fn


def build(batch, records=None, augment=False):
  """The forms as zero-argument callables, each returning the list of the epoch's batches.

  `augment`: Keras augmentation after the resize; the forms are then map_batch and vectorize
  only (a hand-batched or parallel map draws in another order)."""
  return {name: (lambda d=dataset: list(d))
          for name, dataset in build_datasets(batch, records, augment).items()}


def build_datasets(batch, records=None, augment=False):
  """The forms' datasets (what `build` iterates), for measures other than whole epochs."""
  source = tf.data.Dataset.from_tensor_slices(records or make_records())
  autotune = tf.data.AUTOTUNE
  if augment:
    return {
        "map_batch": source.map(with_augmentation()).batch(batch),
        "vectorize": source.apply(vectorize.data.map_and_batch(
            with_augmentation(), batch, fallback_to_while_loop=False)),
    }
  return {
      "map_batch": source.map(preprocess).batch(batch),
      "map_batch_parallel": source.map(preprocess, num_parallel_calls=autotune).batch(batch),
      "hand": source.batch(batch).map(preprocess_batch),
      "vectorize": source.apply(vectorize.data.map_and_batch(
          preprocess, batch, fallback_to_while_loop=False)),
      "vectorize_parallel": source.apply(vectorize.data.map_and_batch(
          preprocess, batch, num_parallel_calls=autotune, fallback_to_while_loop=False)),
  }


def build_suite(batch, jit_compile=False):
  """The suite's four forms (`benchmarks.workload`), each reducing an epoch to sums so it
  runs inside a `tf.function`: loop = map then batch, hand-batched = batch then the
  hand-batched map, TF's pfor = batch then `tf.vectorized_map`. Strings have no XLA kernels,
  so `jit_compile` changes nothing: the suite should run this workload without XLA."""
  del jit_compile
  source = tf.data.Dataset.from_tensor_slices(make_records())

  def summed(make_dataset):
    def run():
      zeros = (tf.zeros([RESIZED, RESIZED, 3]), tf.zeros([RAW]), tf.constant(0, tf.int64),
               tf.constant(0, tf.int64))
      return make_dataset(source).reduce(zeros, lambda acc, b: tuple(
          a + tf.reduce_sum(x, 0) for a, x in zip(acc, b)))
    return run

  return {
      workload.HAND: summed(lambda ds: ds.batch(batch).map(preprocess_batch)),
      workload.VECTORIZE: summed(lambda ds: ds.apply(vectorize.data.map_and_batch(
          preprocess, batch, fallback_to_while_loop=False))),
      workload.LOOP: summed(lambda ds: ds.map(preprocess).batch(batch)),
      workload.TF_PFOR: summed(lambda ds: ds.batch(batch).map(
          lambda records: tf.vectorized_map(preprocess, records))),
  }


WORKLOAD = workload.Workload(
    name="tfdata_records",
    title=f"tf.data pipeline over {RECORDS} serialized tf.Examples (parse, decode a "
          f"{IMAGE}x{IMAGE} PNG and resize to {RESIZED}x{RESIZED}, decode {RAW} raw floats, "
          "hash a lower-cased word), one epoch; strings have no XLA kernels, so the XLA "
          "forms run the same graph",
    unit="records", build=build_suite, compiles_inside=True, batch_sizes=(32, 128),
    quick_batch_sizes=(128,),
    forms={workload.HAND: "batch(b).map(batched fn, PNGs by tf.map_fn)",
           workload.VECTORIZE: "map_and_batch(fn, b)", workload.LOOP: "map(fn).batch(b)",
           workload.TF_PFOR: "batch(b).map(tf.vectorized_map(fn))"})


def check(forms, reference="map_batch", tol=1e-5):
  """Every form yields what the reference yields, batch for batch."""
  expected = forms[reference]()
  for name, form in forms.items():
    if name == reference:
      continue
    actual = form()
    assert len(actual) == len(expected), name
    for a, e in zip(actual, expected):
      for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(e)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol,
                                   err_msg=name)


def measure(forms, rounds, reference="map_batch"):
  """Interleaved rounds. Returns {form: {"wall", "wall_min", "cpu", "ratio", "cpu_ratio"}}:
  median and best wall-clock seconds per epoch, median CPU seconds of this process (all
  threads: the work done, less sensitive to other processes on a shared machine), and the
  medians over rounds of the form's wall and CPU time divided by the reference's."""
  wall = {name: [] for name in forms}
  cpu = {name: [] for name in forms}
  for form in forms.values():   # warm-up: traces, conversions, caches
    form()
  for _ in range(rounds):
    for name, form in forms.items():
      start, start_cpu = time.perf_counter(), time.process_time()
      form()
      cpu[name].append(time.process_time() - start_cpu)
      wall[name].append(time.perf_counter() - start)

  def ratio(times, name):
    return float(np.median([t / r for t, r in zip(times[name], times[reference])]))

  return {name: {"wall": float(np.median(wall[name])), "wall_min": float(np.min(wall[name])),
                 "cpu": float(np.median(cpu[name])), "ratio": ratio(wall, name),
                 "cpu_ratio": ratio(cpu, name)} for name in forms}


_STEADY_BATCHES = 16


def measure_steady(datasets, rounds, reference="map_batch", batches=_STEADY_BATCHES):
  """An epoch split in two, in interleaved rounds: the iterator start (`iter(dataset)`, where
  tf.data instantiates and optimizes the map function again; every epoch pays it) and the
  steady time per batch of a long-lived iterator over the repeated dataset (no restart).
  Returns {form: {"start", "start_cpu", "batch", "batch_cpu", "ratio", "cpu_ratio"}}: medians
  in seconds, and the medians over rounds of the form's batch time divided by the
  reference's."""
  names = list(datasets)
  # No prefetch injected: an idle iterator would fill its buffer while another form is timed.
  options = tf.data.Options()
  options.experimental_optimization.inject_prefetch = False
  running = {name: iter(datasets[name].repeat().with_options(options)) for name in names}
  times = {name: {k: [] for k in ("start", "start_cpu", "batch", "batch_cpu")}
           for name in names}
  for name in names:   # warm-up
    for _ in range(batches):
      next(running[name])
  for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      start, start_cpu = time.perf_counter(), time.process_time()
      iterator = iter(datasets[name])
      times[name]["start_cpu"].append(time.process_time() - start_cpu)
      times[name]["start"].append(time.perf_counter() - start)
      del iterator
      start, start_cpu = time.perf_counter(), time.process_time()
      for _ in range(batches):
        next(running[name])
      times[name]["batch_cpu"].append((time.process_time() - start_cpu) / batches)
      times[name]["batch"].append((time.perf_counter() - start) / batches)

  def ratio(name, key):
    return float(np.median([t / r for t, r in zip(times[name][key], times[reference][key])]))

  return {name: dict({k: float(np.median(v)) for k, v in t.items()},
                     ratio=ratio(name, "batch"), cpu_ratio=ratio(name, "batch_cpu"))
          for name, t in times.items()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--records", type=int, default=RECORDS)
  parser.add_argument("--augment", action="store_true",
                      help="Keras RandomFlip + RandomContrast on each image")
  parser.add_argument("--steady", action="store_true",
                      help="also the iterator start and the steady time per batch")
  args = parser.parse_args()
  records = make_records(args.records)
  check(build(args.batch, records, args.augment))   # fresh forms: augmentation holds state
  results = measure(build(args.batch, records, args.augment), args.rounds)
  augmented = ", with Keras augmentation" if args.augment else ""
  print(f"tf.data pipeline{augmented}, {args.records} records, batch {args.batch}, "
        f"{args.rounds} rounds; "
        "ms per epoch (wall median, wall best, CPU median); ratios to map_batch within a "
        "round (median)")
  print(f"  {'form':20s} {'wall':>8s} {'best':>8s} {'cpu':>8s} {'wall/ref':>9s} "
        f"{'cpu/ref':>8s}")
  for name, r in results.items():
    print(f"  {name:20s} {r['wall'] * 1e3:8.1f} {r['wall_min'] * 1e3:8.1f} "
          f"{r['cpu'] * 1e3:8.1f} {r['ratio']:8.2f}x {r['cpu_ratio']:7.2f}x")
  if args.steady:
    steady = measure_steady(build_datasets(args.batch, records, args.augment), args.rounds)
    print(f"iterator start (iter(): function instantiation) and steady batches (a long-lived "
          f"iterator, {_STEADY_BATCHES} batches a round), medians; ratios to map_batch")
    print(f"  {'form':20s} {'start':>8s} {'cpu':>8s} {'batch':>8s} {'cpu':>8s} "
          f"{'batch/ref':>10s} {'cpu/ref':>8s}")
    for name, r in steady.items():
      print(f"  {name:20s} {r['start'] * 1e3:8.1f} {r['start_cpu'] * 1e3:8.1f} "
            f"{r['batch'] * 1e3:8.2f} {r['batch_cpu'] * 1e3:8.2f} {r['ratio']:9.2f}x "
            f"{r['cpu_ratio']:7.2f}x")


if __name__ == "__main__":
  main()
