"""What users call on top of pfor: jacobians, per-example gradients, map_fn, tf.data."""
