"""TF1-style programs: tf.Graph + Session, placeholders, tf.gradients, reductions over
x[i, :len[i]], image colour ops, comparisons."""
import numpy as np
import pytest
import tensorflow as tf

import vectorize
from ._util_users4 import _no_checked_env, assert_same, loop  # noqa: F401

v1 = tf.compat.v1
RS = np.random.RandomState(3)


def _eager_loop(per_example, *arrays):
  n = len(arrays[0])
  return loop(lambda i: per_example(*[tf.constant(a[int(i)]) for a in arrays]), n)


def _session_pfor(per_example, arrays, dtypes, static_n=False, checked=False):
  """Builds pfor over placeholders in a TF1 graph; returns the fetched values."""
  with tf.Graph().as_default() as g:
    phs = [v1.placeholder(dt, [None] + list(a.shape[1:])) for a, dt in zip(arrays, dtypes)]
    n = len(arrays[0]) if static_n else tf.shape(phs[0])[0]
    body = lambda i: per_example(*[p[i] for p in phs])
    if checked:
      with vectorize.checked(sample=None):
        out = vectorize.pfor(body, n)
    else:
      out = vectorize.pfor(body, n)
    with v1.Session(graph=g) as sess:
      return sess.run(out, dict(zip(phs, arrays)))


def _masked_reductions(row, length):
  seg = row[:length]
  pos = tf.greater(seg, 0.0)
  return (tf.reduce_all(pos), tf.reduce_any(pos), tf.reduce_max(seg), tf.reduce_min(seg),
          tf.reduce_prod(seg), tf.reduce_sum(tf.cast(tf.equal(seg, 0.0), tf.int32)))


def test_session_placeholder_reductions_over_prefix():
  x = np.round(RS.randn(6, 5), 1).astype(np.float32)
  x[2, 1] = 0.0
  x[4] = np.abs(x[4]) + 0.1
  lens = np.array([3, 5, 2, 1, 4, 0], np.int32)   # 0: empty prefix (max -inf, all True)
  want = _eager_loop(_masked_reductions, x, lens)
  got = _session_pfor(_masked_reductions, [x, lens], [tf.float32, tf.int32])
  assert_same(got, want)
  got = _session_pfor(_masked_reductions, [x, lens], [tf.float32, tf.int32], static_n=True)
  assert_same(got, want)


def test_session_placeholder_reductions_n_zero():
  x = np.zeros([0, 5], np.float32)
  lens = np.zeros([0], np.int32)
  got = _session_pfor(_masked_reductions, [x, lens], [tf.float32, tf.int32])
  for g in got:
    assert g.shape == (0,)


def _int_reductions(row, length):
  seg = row[:length]
  return (tf.reduce_max(seg), tf.reduce_min(seg), tf.reduce_prod(seg),
          tf.reduce_all(tf.not_equal(seg, 0)), tf.argmax(row))


def test_session_int64_prefix_reductions_with_empty_rows():
  x = RS.randint(-3, 4, size=(5, 4)).astype(np.int64)
  lens = np.array([4, 0, 2, 1, 3], np.int32)
  want = _eager_loop(_int_reductions, x, lens)
  got = _session_pfor(_int_reductions, [x, lens], [tf.int64, tf.int32])
  assert_same(got, want)


def _bool_row(row, length):
  seg = row[:length]
  return tf.reduce_all(seg), tf.reduce_any(seg), tf.reduce_sum(tf.cast(seg, tf.int64))


def test_session_bool_prefix_reductions_checked():
  x = RS.rand(5, 4) > 0.4
  lens = np.array([4, 1, 0, 3, 2], np.int32)
  want = _eager_loop(_bool_row, x, lens)
  got = _session_pfor(_bool_row, [x, lens], [tf.bool, tf.int32], checked=True)
  assert_same(got, want)


def _color_jitter(img, hue, sat):
  a = tf.image.adjust_hue(img, hue)
  b = tf.image.adjust_saturation(a, sat)
  hsv = tf.image.rgb_to_hsv(b)
  back = tf.image.hsv_to_rgb(hsv)
  bright = tf.greater(hsv[..., 2], 0.5)
  return b, hsv, back, tf.reduce_mean(tf.cast(bright, tf.float32))


def test_session_color_jitter_per_image_params():
  imgs = RS.rand(4, 3, 5, 3).astype(np.float32)
  hue = np.array([0.1, -0.3, 0.0, 0.45], np.float32)
  sat = np.array([0.5, 1.5, 1.0, 0.0], np.float32)
  want = _eager_loop(_color_jitter, imgs, hue, sat)
  got = _session_pfor(_color_jitter, [imgs, hue, sat], [tf.float32] * 3)
  assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_color_jitter_eager_and_xla():
  imgs = tf.constant(RS.rand(3, 4, 4, 3).astype(np.float32))
  hue = tf.constant([0.2, -0.1, 0.3])
  sat = tf.constant([0.7, 1.3, 2.0])
  body = lambda i: _color_jitter(imgs[i], hue[i], sat[i])
  want = loop(body, 3)
  assert_same(vectorize.pfor(body, 3), want, rtol=1e-4, atol=1e-5)
  assert_same(tf.function(lambda: vectorize.pfor(body, 3), jit_compile=True)(), want,
              rtol=1e-4, atol=1e-5)


def test_session_tf_gradients_of_pfor_output():
  x = RS.randn(4, 3).astype(np.float32)
  wv = RS.randn(3, 2).astype(np.float32)

  def per(row, w):
    h = tf.tanh(tf.matmul(row[None], w))
    return tf.reduce_sum(h * h)

  with tf.Graph().as_default() as g:
    xp = v1.placeholder(tf.float32, [None, 3])
    w = tf.constant(wv)
    out = vectorize.pfor(lambda i: per(xp[i], w), tf.shape(xp)[0])
    gx, gw = tf.gradients(tf.reduce_sum(out * tf.range(1.0, 5.0)), [xp, w])
    ref = tf.stack([per(xp[k], w) for k in range(4)])
    rgx, rgw = tf.gradients(tf.reduce_sum(ref * tf.range(1.0, 5.0)), [xp, w])
    gx, rgx = tf.convert_to_tensor(gx), tf.convert_to_tensor(rgx)
    with v1.Session(graph=g) as sess:
      a = sess.run([out, gx, gw], {xp: x})
      b = sess.run([ref, rgx, rgw], {xp: x})
  for u, v in zip(a, b):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_session_tf_gradients_inside_body_per_example():
  x = RS.randn(5, 3).astype(np.float32)
  y = np.array([0, 1, 1, 0, 1], np.int32)
  wv = RS.randn(3, 2).astype(np.float32)
  with tf.Graph().as_default() as g:
    xp = v1.placeholder(tf.float32, [None, 3])
    yp = v1.placeholder(tf.int32, [None])
    w = v1.get_variable("w", initializer=wv, use_resource=True)

    def loss(k):
      logits = tf.matmul(xp[k][None], w)
      return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=yp[k][None], logits=logits))

    grads = vectorize.pfor(lambda i: tf.gradients(loss(i), w)[0], tf.shape(xp)[0])
    ref = tf.stack([tf.gradients(loss(k), w)[0] for k in range(5)])
    with v1.Session(graph=g) as sess:
      sess.run(v1.global_variables_initializer())
      got, want = sess.run([grads, ref], {xp: x, yp: y})
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _compare_ops(row, thr, word, key):
  return (tf.equal(row, thr), tf.greater_equal(row, thr), tf.math.logical_xor(row > 0, row < thr),
          tf.equal(word, key), tf.reduce_any(tf.equal(row, tf.reduce_max(row))),
          tf.where(tf.less(row, thr), row, tf.zeros_like(row)))


def test_session_comparisons_mixed_dtypes():
  x = RS.randint(-2, 3, size=(5, 4)).astype(np.float64)
  thr = np.array([0.0, 1.0, -1.0, 2.0, 0.5], np.float64)
  words = np.array([b"cat", b"dog", b"", b"cat", b"emu"], object)
  keys = np.array([b"cat", b"cat", b"", b"dog", b"emu"], object)
  want = _eager_loop(_compare_ops, x, thr, words, keys)
  got = _session_pfor(_compare_ops, [x, thr, words, keys],
                      [tf.float64, tf.float64, tf.string, tf.string])
  assert_same(got, want)


def test_graph_mode_python_eq_on_tensor_is_not_elementwise_reminder():
  # In a TF1 graph `t == 0` is Python identity (False); users write tf.equal. The body
  # below mixes both forms the way ported code does; both paths must equal the loop's.
  x = RS.randint(0, 3, size=(4, 3)).astype(np.int32)
  def per(row):
    c = tf.reduce_sum(tf.cast(tf.equal(row, 0), tf.int32))
    return tf.cond(tf.equal(c, 0), lambda: row * 2, lambda: row - 1)
  want = _eager_loop(per, x)
  got = _session_pfor(per, [x], [tf.int32])
  assert_same(got, want)


def _seq_stats(seq, length):
  seg = seq[:length]                              # [L, 3]
  return (tf.reduce_max(seg, axis=0), tf.reduce_min(seg, axis=1),
          tf.reduce_prod(seg, axis=0, keepdims=True), tf.reduce_all(seg > -1.0, axis=1),
          tf.reduce_any(tf.greater(seg, 1.0)), tf.math.reduce_logsumexp(seg, axis=0))


def test_session_2d_prefix_reductions_by_axis():
  x = np.round(RS.randn(4, 5, 3), 2).astype(np.float32)
  lens = np.array([2, 5, 1, 3], np.int32)
  want = _eager_loop(_seq_stats, x, lens)
  got = _session_pfor(_seq_stats, [x, lens], [tf.float32, tf.int32])
  assert_same(got, want, rtol=1e-5)


def test_session_variable_counter_and_ema():
  x = RS.randn(4, 2).astype(np.float32)
  with tf.Graph().as_default() as g:
    xp = v1.placeholder(tf.float32, [None, 2])
    ema = v1.get_variable("ema", initializer=tf.zeros([2]), use_resource=True)
    cnt = v1.get_variable("cnt", initializer=tf.constant(0), use_resource=True)

    def body(i):
      with tf.control_dependencies([cnt.assign_add(1)]):
        upd = ema.assign(0.5 * ema + 0.5 * xp[i])
      with tf.control_dependencies([upd]):
        return ema.read_value() * tf.cast(cnt.read_value(), tf.float32)

    out = vectorize.pfor(body, 4)
    with v1.Session(graph=g) as sess:
      sess.run(v1.global_variables_initializer())
      got = sess.run(out, {xp: x})
      got_ema, got_cnt = sess.run([ema, cnt])
  e, want = np.zeros(2, np.float32), []
  for k in range(4):
    e = 0.5 * e + 0.5 * x[k]
    want.append(e * (k + 1))
  np.testing.assert_allclose(got, np.stack(want), rtol=1e-6)
  np.testing.assert_allclose(got_ema, e, rtol=1e-6)
  assert got_cnt == 4


def _v1_while_ta(row, length):
  ta = tf.TensorArray(tf.float32, size=length, element_shape=[])
  def step(k, ta, acc):
    acc = tf.maximum(acc, row[k])
    return k + 1, ta.write(k, acc), acc
  _, ta, last = v1.while_loop(lambda k, *_: k < length, step,
                              [tf.constant(0), ta, tf.constant(-1e9)])
  return tf.reduce_sum(ta.stack()), last


def test_session_v1_while_loop_tensorarray_running_max():
  x = np.round(RS.randn(5, 6), 2).astype(np.float32)
  lens = np.array([3, 6, 1, 0, 4], np.int32)
  want = _eager_loop(_v1_while_ta, x, lens)
  got = _session_pfor(_v1_while_ta, [x, lens], [tf.float32, tf.int32])
  assert_same(got, want)


_IM = RS.rand(4, 6, 5, 3).astype(np.float32)
_P = np.array([0.2, -0.4, 0.0, 0.9], np.float32)
_K = np.array([0, 1, 2, 3], np.int32)


def _image_programs(imgs, p, k):
  return {
      "brightness_contrast_gamma": lambda i: tf.image.adjust_gamma(tf.image.adjust_contrast(
          tf.image.adjust_brightness(imgs[i], p[i]), p[i] + 1.0), tf.abs(p[i]) + 0.5),
      "standardize": lambda i: tf.image.per_image_standardization(imgs[i]),
      "rot90_by_k": lambda i: tf.image.rot90(imgs[i][:5, :5], k[i]),
      "gray_yiq": lambda i: (tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(imgs[i])),
                             tf.image.yiq_to_rgb(tf.image.rgb_to_yiq(imgs[i]) * p[i])),
      "crop_resize": lambda i: tf.image.resize(tf.image.crop_to_bounding_box(
          imgs[i], k[i] % 2, 1, 3, 3), [4, 4]),
      "flip_in_cond": lambda i: tf.cond(p[i] > 0, lambda: tf.image.flip_left_right(imgs[i]),
                                        lambda: tf.image.flip_up_down(imgs[i])),
      "psnr_tv_sobel": lambda i: (tf.image.psnr(imgs[i], imgs[(i + 1) % 4], 1.0),
                                  tf.image.total_variation(imgs[i]),
                                  tf.image.sobel_edges(imgs[i][None])[0]),
      "hsv_comparisons": lambda i: (
          tf.reduce_sum(tf.cast(tf.equal(imgs[i], tf.reduce_max(imgs[i])), tf.int32)),
          tf.reduce_all(tf.image.rgb_to_hsv(imgs[i])[..., 0] >= 0.0),
          tf.image.convert_image_dtype(tf.clip_by_value(imgs[i] + p[i], 0, 1), tf.uint8,
                                       saturate=True)),
  }


@pytest.mark.parametrize("name", sorted(_image_programs(None, None, None)))
def test_session_image_program(name):
  eager = _image_programs(tf.constant(_IM), tf.constant(_P), tf.constant(_K))[name]
  want = loop(eager, 4)
  with tf.Graph().as_default() as g:
    ph = [v1.placeholder(tf.float32, [None, 6, 5, 3]), v1.placeholder(tf.float32, [None]),
          v1.placeholder(tf.int32, [None])]
    out = vectorize.pfor(_image_programs(*ph)[name], tf.shape(ph[0])[0])
    with v1.Session(graph=g) as sess:
      got = sess.run(out, dict(zip(ph, [_IM, _P, _K])))
  assert_same(got, want, rtol=1e-4, atol=1e-5)
