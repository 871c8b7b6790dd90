"""Generators of ops whose converters came after the pool was written (issue 9's audit of
`registered_op_types()` against what programs.py drew): special functions, linear algebra,
image and pooling ops, segment and search ops, stateless samplers with per-iteration seeds,
string ops. Drawn for seeds from programs.NEWEST_FROM only, so older seeds keep their
programs.
"""

FLOAT, INT, BOOL = "float32", "int32", "bool"

# Float unary ops on any shape: (template, exact given an exact input).
UNARY = [
    "tf.math.expm1(tf.tanh({0}))", "tf.sinh(tf.tanh({0}))", "tf.cosh(tf.tanh({0}))",
    "tf.tan(tf.tanh({0}))", "tf.acos(tf.tanh({0}) * 0.9)", "tf.asin(tf.tanh({0}) * 0.9)",
    "tf.atanh(tf.tanh({0}) * 0.9)", "tf.math.acosh(tf.abs({0}) + 1.0)",
    "tf.math.digamma(tf.abs({0}) + 1.0)", "tf.math.erfinv(tf.tanh({0}) * 0.9)",
    "tf.math.ndtri(tf.sigmoid({0}) * 0.9 + 0.05)", "tf.math.special.bessel_i0e({0})",
    "tf.math.special.bessel_i1e({0})", "tf.math.special.dawsn({0})",
    "tf.math.xlogy(tf.abs({0}), tf.abs({0}) + 1.0)", "tf.math.xdivy({0}, tf.abs({0}) + 1.0)",
    "tf.math.xlog1py({0}, tf.abs({0}))", "tf.math.igamma(tf.abs({0}) + 0.5, tf.abs({0}))",
    "tf.math.zeta(tf.abs({0}) + 2.0, 1.5)", "tf.math.betainc(0.5, 1.5, tf.sigmoid({0}))",
    "tf.math.polygamma(1.0, tf.abs({0}) + 1.0)", "tf.math.multiply_no_nan({0}, tf.sign({0}))",
    "tf.raw_ops.ClipByValue(t={0}, clip_value_min=-0.3, clip_value_max=0.4)",
    "tf.raw_ops.Inv(x=tf.abs({0}) + 1.0)", "tf.math.nextafter({0}, 0.0)",
]
EXACT_UNARY = ["tf.math.rint({0})", "tf.reverse({0}, [-1])", "tf.ones_like({0}) + {0}",
               "tf.raw_ops.Snapshot(input={0})"]
INT_UNARY = ["tf.truncatediv({0}, 3)", "tf.truncatemod({0}, 3)",
             "tf.raw_ops.Mod(x={0}, y=4)", "tf.bitwise.bitwise_or({0}, 6)",
             "tf.bitwise.left_shift(tf.math.floormod({0}, 8), 2)",
             "tf.bitwise.right_shift(tf.abs({0}), 1)", "tf.bitwise.invert({0})",
             "tf.cast(tf.raw_ops.PopulationCount(x={0}), tf.int32)",
             "tf.raw_ops.Bucketize(input={0}, boundaries=[-2.0, 0.0, 3.0])",
             "tf.strings.to_number(tf.strings.as_string({0}), tf.int32)",
             "tf.strings.length(tf.strings.as_string({0}))",
             "tf.cast(tf.strings.to_hash_bucket_fast(tf.strings.as_string({0}), 7), tf.int32)"]
PREDICATES = ["tf.math.is_finite({0})", "tf.math.is_nan({0} / tf.abs({0}))",
              "tf.math.is_inf(1.0 / {0})", "tf.raw_ops.ApproximateEqual(x={0}, y={0} * 1.001, "
              "tolerance=0.01)"]


class LatePool:
  """Mixed into programs.Generator: `g_late_ops` adds one op of the list above or below."""

  def g_late_ops(self):
    r = self.rng.random()
    if r < 0.22:
      a = self.any_float()
      return self.emit(self.rng.choice(UNARY), [a.name], a.shape, FLOAT, "late_unary", False)
    if r < 0.27:
      a = self.any_float()
      return self.emit(self.rng.choice(EXACT_UNARY), [a.name], a.shape, FLOAT, "late_exact",
                       a.exact)
    if r < 0.37:
      a = self.any_int()
      form = self.rng.choice(INT_UNARY)
      if "Bucketize" in form:
        form = form.replace("{0}", "tf.cast({0}, tf.float32)")
      return self.emit(form, [a.name], a.shape, INT, "late_int")
    if r < 0.41:
      a = self.any_float(exact=True)
      return self.emit(self.rng.choice(PREDICATES), [a.name], a.shape, BOOL, "late_predicate")
    if r < 0.55:
      return self.late_linalg()
    if r < 0.68:
      return self.late_image()
    if r < 0.8:
      return self.late_segments()
    if r < 0.9:
      return self.late_random()
    return self.late_reductions()

  def square(self):
    """A [k, k] float value (k in 1..3) from scope or new."""
    k = self.rng.randint(1, 3)
    return self.operand((k, k), FLOAT), k

  def late_linalg(self):
    a, k = self.square()
    spd = "(tf.matmul({0}, {0}, transpose_b=True) + 2.0 * tf.eye(%d))" % k
    forms = [
        (f"tf.linalg.cholesky({spd})", (k, k)), (f"tf.linalg.inv({spd})", (k, k)),
        (f"tf.linalg.det({spd})", ()), (f"tf.linalg.slogdet({spd})[1]", ()),
        (f"tf.linalg.solve({spd}, {{0}})", (k, k)),
        ("tf.linalg.triangular_solve(tf.linalg.band_part({0}, -1, 0) + 3.0 * tf.eye(%d), "
         "{0})" % k, (k, k)),
        (f"tf.linalg.eigvalsh({spd})", (k,)), (f"tf.linalg.svd({spd}, compute_uv=False)", (k,)),
        ("tf.linalg.diag_part({0})", (k,)), ("tf.linalg.diag({0})", (k, k, k)),
        ("tf.linalg.set_diag({0}, tf.linalg.diag_part({0}) * 2.0)", (k, k)),
        ("tf.linalg.band_part({0}, 0, 1)", (k, k)), ("tf.linalg.trace({0})", ()),
        ("tf.nn.l2_loss({0})", ()), (f"tf.linalg.logdet({spd})", ()),
        (f"tf.linalg.lu({spd})[0]", (k, k)), (f"tf.linalg.sqrtm({spd})", (k, k)),
        ("tf.linalg.lstsq({0} + 3.0 * tf.eye(%d), {0})" % k, (k, k)),
        ("tf.linalg.tridiagonal_matmul(tf.stack([{0}[0], {0}[0], {0}[0]]), {0})", (k, k)),
    ]
    form, shape = self.rng.choice(forms)
    if self.rng.random() < 0.1:
      v = self.operand((3,), FLOAT)
      form, shape, a = "tf.linalg.cross({0}, tf.reverse({0}, [0]))", (3,), v
    return self.emit(form, [a.name], shape, FLOAT, "late_linalg", False)

  def late_image(self):
    h, w, c = self.rng.choice([2, 4]), self.rng.choice([2, 4]), self.rng.choice([1, 2, 3])
    a = self.operand((h, w, c), FLOAT)
    x4 = "{0}[tf.newaxis]"
    forms = [
        (f"tf.nn.space_to_depth({x4}, 2)[0]", (h // 2, w // 2, 4 * c)),
        (f"tf.nn.depth_to_space(tf.tile({x4}, [1, 1, 1, 4]), 2)[0]", (2 * h, 2 * w, c)),
        (f"tf.nn.local_response_normalization({x4}, 1)[0]", (h, w, c)),
        (f"tf.image.extract_patches({x4}, [1, 2, 2, 1], [1, 1, 1, 1], [1, 1, 1, 1], 'VALID')[0]",
         (h - 1, w - 1, 4 * c)),
        (f"tf.nn.max_pool_with_argmax({x4}, 2, 2, 'VALID')[0][0]", (h // 2, w // 2, c)),
        (f"tf.cast(tf.nn.max_pool_with_argmax({x4}, 2, 2, 'VALID')[1][0], tf.int32)",
         (h // 2, w // 2, c)),
        (f"tf.nn.dilation2d({x4}, tf.zeros([2, 2, {c}]), [1, 1, 1, 1], 'SAME', 'NHWC', "
         "[1, 1, 1, 1])[0]", (h, w, c)),
        (f"tf.image.crop_and_resize({x4}, [[0.0, 0.1, 0.9, 1.0]], [0], [2, 3])[0]", (2, 3, c)),
        ("tf.image.flip_left_right({0})", (h, w, c)),
        ("tf.image.per_image_standardization({0})", (h, w, c)),
        ("tf.image.total_variation({0})", ()),
        (f"tf.image.sobel_edges({x4})[0]", (h, w, c, 2)),
        (f"tf.compat.v1.nn.fused_batch_norm({x4}, tf.ones([{c}]), tf.zeros([{c}]))[0][0]",
         (h, w, c)),
        (f"tf.nn.space_to_batch({x4}, [2, 2], [[0, 0], [0, 0]])[:, 0]", (4, w // 2, c)),
        (f"tf.nn.avg_pool3d({x4}[..., tf.newaxis], 2, 2, 'VALID')[0, ..., 0]",
         (h // 2, w // 2, c // 2)),
        (f"tf.nn.max_pool3d({x4}[..., tf.newaxis], [1, 1, 1], 1, 'SAME')[0, ..., 0]",
         (h, w, c)),
        (f"tf.raw_ops.ImageProjectiveTransformV3(images={x4}, transforms=[[1.0, 0.1, 0.5, 0.0, "
         f"1.0, -0.5, 0.0, 0.0]], output_shape=[{h}, {w}], fill_value=0.0, "
         "interpolation='BILINEAR')[0]", (h, w, c)),
    ]
    if c == 3:
      forms += [("tf.image.hsv_to_rgb(tf.sigmoid({0}))", (h, w, c)),
                ("tf.image.rgb_to_grayscale({0})", (h, w, 1)),
                (f"tf.image.draw_bounding_boxes({x4}, [[[0.1, 0.2, 0.6, 0.9]]], "
                 "[[1.0, 0.0, 0.0]])[0]", (h, w, c))]
    form, shape = self.rng.choice(forms)
    if min(shape, default=1) == 0:
      return None
    dtype = INT if form.endswith("tf.int32)") else FLOAT
    if dtype == INT and not a.exact:
      return None  # an argmax of rounded values may flip between layouts
    return self.emit(form, [a.name], shape, dtype, "late_image", dtype == INT)

  def late_segments(self):
    data = self.any_float(min_rank=1, max_rank=2)
    k = data.shape[0]
    ids = self.operand((k,), INT, fresh=0.6)
    m = self.rng.randint(1, 3)
    seg = f"tf.math.floormod({{1}}, {m})"
    rest = data.shape[1:]
    r = self.rng.random()
    if r < 0.3:
      op = self.rng.choice(["unsorted_segment_min", "unsorted_segment_max",
                            "unsorted_segment_prod", "unsorted_segment_mean",
                            "unsorted_segment_sqrt_n"])
      return self.emit(f"tf.math.{op}({{0}}, {seg}, {m})", [data.name, ids.name], (m,) + rest,
                       FLOAT, "late_segment", False)
    if r < 0.55:
      op = self.rng.choice(["segment_sum", "segment_mean", "segment_sqrt_n"])
      if k == 0:
        return None
      return self.emit(f"tf.sparse.{op}({{0}}, tf.math.floormod({{1}}, {k}), "
                       f"tf.sort({seg}), num_segments={m})", [data.name, ids.name],
                       (m,) + rest, FLOAT, "late_segment", False)
    if r < 0.7:
      return self.emit(f"tf.dynamic_stitch([tf.range({k}), tf.range({k})], [{{0}}, {{0}} * 2.0])",
                       [data.name], (k,) + rest, FLOAT, "dynamic_stitch", data.exact)
    if r < 0.85:
      side = self.rng.choice(["left", "right"])
      vals = self.operand((self.rng.randint(1, 4),), FLOAT)
      return self.emit(f"tf.searchsorted(tf.sort({{0}}), {{1}}, side='{side}')",
                       [self.operand((self.rng.randint(1, 4),), FLOAT, exact=True).name,
                        vals.name], vals.shape, INT, "searchsorted")
    w = self.operand((k,), FLOAT)
    return self.emit(f"tf.math.bincount(tf.math.floormod({{0}}, 3), weights={{1}}, "
                     "minlength=3, maxlength=3)", [ids.name, w.name], (3,), FLOAT,
                     "bincount_weights", False)

  def late_random(self):
    shape = list(self.rand_shape(self.rng.randint(0, 2)))
    seed = f"tf.stack([{{0}}, {self.rng.randint(0, 99)}])"
    s = self.int_scalar()
    forms = [
        (f"tf.random.stateless_gamma({shape}, seed={seed}, alpha=1.5)", FLOAT),
        (f"tf.random.stateless_poisson({shape}, seed={seed}, lam=2.0, dtype=tf.int32)", INT),
        (f"tf.random.stateless_binomial({shape}, seed={seed}, counts=5.0, probs=0.3, "
         "output_dtype=tf.int32)", INT),
        (f"tf.cast(tf.random.stateless_uniform({shape}, seed={seed}, minval=None, maxval=None, "
         "dtype=tf.int64) % 7, tf.int32)", INT),
        (f"tf.random.stateless_parameterized_truncated_normal({shape}, seed={seed}, "
         "means=0.5, stddevs=1.0, minvals=-1.0, maxvals=2.0)", FLOAT),
    ]
    if shape and shape[0] > 0:
      forms.append((f"tf.random.experimental.stateless_shuffle(tf.range({shape[0]}), "
                    f"seed={seed})", INT))
    form, dtype = self.rng.choice(forms)
    if "stateless_shuffle" in form:
      return self.emit(form, [s.name], tuple(shape[:1]), dtype, "late_random")
    if self.rng.random() < 0.15:
      logits = self.operand((2, 3), FLOAT)
      return self.emit(f"tf.cast(tf.random.stateless_categorical({{1}}, 4, seed={seed}), "
                       "tf.int32)", [s.name, logits.name], (2, 4), INT, "late_random")
    return self.emit(form, [s.name], tuple(shape), dtype, "late_random")

  def late_reductions(self):
    a = self.any_float(min_rank=1, max_rank=2)
    r = self.rng.random()
    if r < 0.4:
      return self.emit("tf.math.reduce_euclidean_norm({0}, axis=-1)", [a.name], a.shape[:-1],
                       FLOAT, "euclidean_norm", False)
    if r < 0.7 and a.shape[-1] > 0:
      k = self.rng.randrange(a.shape[-1])
      return self.emit(f"tf.raw_ops.NthElement(input={{0}}, n={k})", [a.name], a.shape[:-1],
                       FLOAT, "nth_element", a.exact)
    return self.emit("tf.math.reduce_std({0}, axis=0)", [a.name], a.shape[1:], FLOAT,
                     "reduce_std", False)
