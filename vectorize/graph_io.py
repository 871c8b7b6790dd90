"""Reading traced graphs and emitting ops into the graph under construction.

The walker reads `FuncGraph`s (the traced body, and the bodies of called functions) and
emits converted ops into the current default graph with `emit`, which copies the functions
an op refers to (If/While/PartitionedCall attrs) into that graph's library. Ops are visited
in a depth-first post-order over data and control edges, which is topological even where a
control edge was added after its target was created.
"""

import contextlib
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.core.framework import tensor_pb2
from tensorflow.core.framework import tensor_shape_pb2
from tensorflow.python.eager import context
from tensorflow.python.eager import execute
from tensorflow.python.framework import function_def_to_graph
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.framework import tensor_util
from tensorflow.python.ops import control_flow_util_v2

from vectorize import op_types
from vectorize.errors import ConversionError


_DROPPED_ATTRS = ("_class",)


def attrs_of(op):
  """The op's attrs as {name: AttrValue}, without colocation constraints."""
  node_def = op.node_def
  return {k: v for k, v in node_def.attr.items() if k not in _DROPPED_ATTRS}


def attr_value(value):
  """A Python value (bool, int, float, str, dtype, shape, list, AttrValue) as an AttrValue."""
  if isinstance(value, attr_value_pb2.AttrValue):
    return value
  if isinstance(value, bool):
    return attr_value_pb2.AttrValue(b=value)
  if isinstance(value, int):
    return attr_value_pb2.AttrValue(i=value)
  if isinstance(value, float):
    return attr_value_pb2.AttrValue(f=value)
  if isinstance(value, (str, bytes)):
    return attr_value_pb2.AttrValue(s=tf.compat.as_bytes(value))
  if isinstance(value, tf.DType):
    return attr_value_pb2.AttrValue(type=value.as_datatype_enum)
  if isinstance(value, tf.TensorShape):
    return attr_value_pb2.AttrValue(shape=value.as_proto())
  if isinstance(value, (list, tuple)):
    if all(isinstance(v, tf.DType) for v in value) and value:
      return attr_value_pb2.AttrValue(
          list=attr_value_pb2.AttrValue.ListValue(type=[v.as_datatype_enum for v in value]))
    if all(isinstance(v, float) for v in value) and value:
      return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(f=value))
    if all(isinstance(v, (str, bytes)) for v in value) and value:
      return attr_value_pb2.AttrValue(
          list=attr_value_pb2.AttrValue.ListValue(s=[tf.compat.as_bytes(v) for v in value]))
    return attr_value_pb2.AttrValue(
        list=attr_value_pb2.AttrValue.ListValue(i=[int(v) for v in value]))
  raise TypeError(f"Cannot turn {value!r} into an AttrValue.")


def _function_names(attrs):
  for value in attrs.values():
    if value.HasField("func"):
      yield value.func.name
    elif value.HasField("list"):
      for f in value.list.func:
        yield f.name


def function_names(op):
  """The names of the functions `op` runs (a call's f, a loop's cond and body, branches)."""
  return list(_function_names(attrs_of(op)))


def find_function(graph, name):
  """The function `name` from `graph`'s library or an enclosing graph's, or None. A legacy
  function (`Defun`, as `tf.nn.ctc_loss`'s dense form's loops) gets the `graph` a traced
  one has, built from its definition once."""
  while graph is not None:
    fn = graph._get_function(name)  # pylint: disable=protected-access
    if fn is not None:
      if not hasattr(fn, "graph") and hasattr(fn, "definition"):
        with graph.as_default():   # where the functions it calls are found
          fn.graph = function_def_to_graph.function_def_to_graph(
              fn.definition, include_library_functions=True)
      return fn
    graph = getattr(graph, "outer_graph", None)
  return None


def _copy_functions(attrs, src_graph, dst_graph):
  for name in _function_names(attrs):
    if dst_graph._is_function(name):  # pylint: disable=protected-access
      continue
    fn = find_function(src_graph, name)
    if fn is not None:
      dst_graph._add_function_recursive(fn)  # pylint: disable=protected-access


def emit(op_type, inputs, attrs, src_graph=None, name=None):
  """Creates an op in the current graph; returns the `tf.Operation`."""
  graph = tf_ops.get_default_graph()
  if src_graph is not None:
    _copy_functions(attrs, src_graph, graph)
  inputs = [_input(t) for t in inputs]
  op = graph._create_op_internal(  # pylint: disable=protected-access
      op_type, inputs, attrs=attrs, name=_clean_name(name or op_type))
  if op.outputs and execute.must_record_gradient():
    _record_on_tapes(op)
  return op


def _input(value):
  """An op input as a tensor; small integer numpy values (static axes, shapes) as shared
  constants."""
  if isinstance(value, tf.Tensor):
    return value
  if isinstance(value, (np.ndarray, np.integer)) and value.dtype in (np.int32, np.int64):
    return constant(value, tf.as_dtype(value.dtype))
  return tf.convert_to_tensor(value)


def _record_on_tapes(op):
  """Records `op` on the active gradient tapes, as TF's generated op wrappers do: ops made
  with the low-level graph API are otherwise invisible to `tf.GradientTape`."""
  attrs = []
  for name in op.node_def.attr:
    attrs.extend([name, op.get_attr(name)])
  execute.record_gradient(op.type, list(op.inputs), tuple(attrs), list(op.outputs))


# graph -> {(dtype, shape, bytes): weak ref to the Const tensor}; weak both ways, since a
# tensor holds its graph.
_constants = weakref.WeakKeyDictionary()
_CACHED_CONSTANT_SIZE = 64
_SHARED_DTYPES = (tf.int32.as_datatype_enum, tf.int64.as_datatype_enum)
# What `constant` shares: integers, and floats (the 1 of `1 - y` in a gradient's factor).
_SHAREABLE_DTYPES = _SHARED_DTYPES + tuple(
    d.as_datatype_enum for d in (tf.float16, tf.float32, tf.float64))


def constant(value, dtype=tf.int32):
  """A Const of a small value (shape vectors, slice bounds) in the current graph.

  Conversions emit many identical small constants, and each costs about a millisecond through
  `tf.constant`; here they are built from a hand-made proto and shared per graph. Shared ones
  are created outside any control-dependency scope, so reusing one adds no ordering; outside
  a TF1 control-flow context only, where sharing across contexts would be invalid.
  """
  graph = tf_ops.get_default_graph()
  array = np.asarray(value, dtype.as_numpy_dtype)
  if (tf.executing_eagerly() or array.size > _CACHED_CONSTANT_SIZE or
      dtype.as_datatype_enum not in _SHAREABLE_DTYPES or
      graph._get_control_flow_context() is not None):  # pylint: disable=protected-access
    return tf.constant(array, dtype)
  key = (dtype, array.shape, array.tobytes())
  cache = _constants.setdefault(graph, {})
  ref = cache.get(key)
  tensor = ref() if ref is not None else None
  if tensor is None:
    proto = tensor_pb2.TensorProto(
        dtype=dtype.as_datatype_enum, tensor_content=array.tobytes(),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in array.shape]))
    attrs = {"value": attr_value_pb2.AttrValue(tensor=proto),
             "dtype": attr_value_pb2.AttrValue(type=dtype.as_datatype_enum)}
    with graph.control_dependencies(None):
      tensor = graph._create_op_internal(  # pylint: disable=protected-access
          "Const", [], [dtype], attrs=attrs, name="Const").outputs[0]
    cache[key] = weakref.ref(tensor)
  return tensor


def copy_small_constant(op):
  """The value of Const `op` as a shared `constant`, if it is a small integer or float one,
  else None. (Bodies repeat shape and axis constants, and a gradient's scalars: an unrolled
  loop has one set per step.)"""
  proto = op.get_attr("value")
  if proto.dtype not in _SHAREABLE_DTYPES:
    return None
  num = 1
  for d in proto.tensor_shape.dim:
    num *= d.size
  if num > _CACHED_CONSTANT_SIZE:
    return None
  return constant(tensor_util.MakeNdarray(proto), tf.as_dtype(proto.dtype))


def _type(dtype):
  return attr_value_pb2.AttrValue(type=dtype.as_datatype_enum)


def _int(value):
  return attr_value_pb2.AttrValue(i=value)


def _index_input(value):
  """An int32/int64 index input: a tensor as is, ints (or nested lists) as a shared Const."""
  if isinstance(value, (tf.Tensor, tf.Variable)):
    return tf.convert_to_tensor(value)
  return constant(value, tf.int32)


# Thin constructors for the ops conversions emit most (reshapes, slices, concats, pads,
# transposes, packs): they skip TF's Python op layer (op-def matching, and a Const per list
# argument), which costs several times the op creation itself.

def _with_index_input(op_type, index_attr):
  """A constructor `(tensor, index) -> output` of an op taking a tensor and one int input
  (a shape, permutation, axis, paddings or multiples) typed by `index_attr`."""

  def build(tensor, index):
    index = _index_input(index)
    return emit(op_type, [tensor, index], {"T": _type(tensor.dtype),
                                           index_attr: _type(index.dtype)}).outputs[0]

  return build


_emit_reshape = _with_index_input("Reshape", "Tshape")


def reshape(tensor, shape):
  """`tensor` reshaped to `shape`. A reshape of a reshape reshapes the first one's input, and
  a reshape back to that input's own static shape is the input itself: a converter folds
  the loop axis into the batch and the next unfolds it, and a kernel that looks at its
  input's producer (oneDNN's max-pool gradient takes its forward op's workspace, 2-4x
  faster) then sees the op that made it. (Not inside a control-dependency block, where the
  caller needs a new op to carry the dependency.)"""
  inner = tensor
  while (inner.op.type == "Reshape" and not inner.op.control_inputs and
         inner.graph is tensor.graph):
    inner = inner.op.inputs[0]
  if inner is not tensor and not _in_control_dependencies(tf.compat.v1.get_default_graph()):
    wanted = tf.get_static_value(shape) if isinstance(shape, tf.Tensor) else shape
    if (wanted is not None and inner.shape.is_fully_defined() and
        [int(d) for d in np.ravel(wanted)] == inner.shape.as_list()):
      return inner
  return _emit_reshape(inner, shape)


def _in_control_dependencies(graph):
  return bool(getattr(graph, "_control_dependencies_stack", None))
pad = _with_index_input("Pad", "Tpaddings")
transpose = _with_index_input("Transpose", "Tperm")
expand_dims = _with_index_input("ExpandDims", "Tdim")
tile = _with_index_input("Tile", "Tmultiples")


def slice_(tensor, begin, size):
  begin, size = _index_input(begin), _index_input(size)
  return emit("Slice", [tensor, begin, size], {"T": _type(tensor.dtype),
                                               "Index": _type(begin.dtype)}).outputs[0]


def concat(tensors, axis):
  if len(tensors) == 1:
    return tensors[0]
  axis = _index_input(axis)
  return emit("ConcatV2", list(tensors) + [axis],
              {"N": _int(len(tensors)), "T": _type(tensors[0].dtype),
               "Tidx": _type(axis.dtype)}).outputs[0]


def pack(tensors, axis=0):
  return emit("Pack", list(tensors), {"N": _int(len(tensors)), "T": _type(tensors[0].dtype),
                                      "axis": _int(axis)}).outputs[0]


def binary(op_type, x, y):
  """`op_type`, an elementwise op of two inputs of one dtype ("Mul", "Sub", "AddV2", ...),
  on tensors or Python numbers; a number becomes a shared constant of the other's dtype."""
  if _is_number(x):
    x = constant(x, y.dtype)
  if _is_number(y):
    y = constant(y, x.dtype)
  return emit(op_type, [x, y], {"T": _type(x.dtype)}).outputs[0]


def _is_number(value):
  return isinstance(value, (int, float, np.number))


def matmul(a, b, transpose_a=False, transpose_b=False):
  """`tf.linalg.matmul` of real matrices or batches of them, emitted directly.

  Batches of one dtype are BatchMatMulV2: oneDNN's CPU rewrite takes V2 and not V3, and
  Eigen's V3 kernel took 1.3x its time on per_example_lstm's `[128, 10, 384]^T x
  [128, 10, 1024]` (vectorize 0.90 of before, bit-identical)."""
  ranks = a.shape.rank, b.shape.rank
  if a.dtype.is_complex or None in ranks or min(ranks) < 2:
    return tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
  if ranks == (2, 2):
    return emit("MatMul", [a, b], {"T": _type(a.dtype), "transpose_a": _bool(transpose_a),
                                   "transpose_b": _bool(transpose_b)}).outputs[0]
  if a.dtype == b.dtype:
    return batch_matmul(a, b, transpose_a, transpose_b)
  if ranks[0] != ranks[1]:
    return tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
  return emit("BatchMatMulV3", [a, b], {
      "Ta": _type(a.dtype), "Tb": _type(b.dtype), "Tout": _type(a.dtype),
      "adj_x": _bool(transpose_a), "adj_y": _bool(transpose_b)}).outputs[0]


def batch_matmul(x, y, adj_x=False, adj_y=False):
  """BatchMatMulV2 (batch dims broadcast) of one dtype, emitted directly: the walker makes
  one per matmul it cannot fold, and TF's op layer costs more than the op's own node.

  A batch dim that is 1 in both operands is squeezed out and put back on the product: TF
  2.21's oneDNN kernel (CPU, float32 and bfloat16) returns garbage, or corrupts the heap, for
  rank-4 operands whose batch dims are `[b, 1]` against `[1, 1]` (b >= 3, six rows or more),
  the shape the loop axis gives a per-iteration `[1, m, k] @ [1, k, p]`.
  """
  rx, ry = x.shape.rank, y.shape.rank
  ones = []
  if rx is not None and ry is not None:
    rank = max(rx, ry)
    x_batch = [1] * (rank - rx) + x.shape.as_list()[:-2]
    y_batch = [1] * (rank - ry) + y.shape.as_list()[:-2]
    ones = [d for d in range(rank - 2) if x_batch[d] == 1 and y_batch[d] == 1]
  if ones:
    x = _squeeze(x, [d - (rank - rx) for d in ones if d >= rank - rx])
    y = _squeeze(y, [d - (rank - ry) for d in ones if d >= rank - ry])
  product = emit("BatchMatMulV2", [x, y], {"T": _type(x.dtype), "adj_x": _bool(adj_x),
                                           "adj_y": _bool(adj_y)}).outputs[0]
  for d in ones:
    product = tf.expand_dims(product, d)
  return product


def _squeeze(tensor, axes):
  return tf.squeeze(tensor, axes) if axes else tensor


def _bool(value):
  return attr_value_pb2.AttrValue(b=bool(value))


def copy_op(op, inputs):
  """Re-emits `op` unchanged on new inputs; returns the new operation."""
  return keep_unlowered_where_grappler_breaks(
      emit(op.type, inputs, attrs_of(op), op.graph, name=op.name))


def folded(op, inputs):
  """The outputs of invariant `op` on `inputs` as shared constants, when they are small
  integers computed from small integer constants (shape arithmetic: `reduce_max` of a
  constant, a range, a slice of a shape), else None.

  Folding them here keeps constant subgraphs out of emitted loops (Grappler would fold them
  later, but not inside a loop that reads a variable), and makes such values known at trace
  time: XLA needs static TensorList capacities and Fill dims.
  """
  if op.control_inputs or not op.outputs or any(
      t.dtype.as_datatype_enum not in _SHARED_DTYPES or not t.shape.is_fully_defined() or
      t.shape.num_elements() > _CACHED_CONSTANT_SIZE for t in op.outputs):
    return None
  if (not all(_is_small_int_constant(t) for t in inputs) or any(_function_names(attrs_of(op)))
      or _feeds_a_random_op(op)):
    return None
  arrays = [tensor_util.MakeNdarray(t.op.get_attr("value")) for t in inputs]
  node_def = op.node_def
  key = (op.type, tuple(sorted((k, v.SerializeToString(deterministic=True))
                               for k, v in node_def.attr.items())),
         tuple((a.dtype.str, a.shape, a.tobytes()) for a in arrays))
  if key not in _folded_results:
    if len(_folded_results) > _MAX_FOLDED_RESULTS:
      _folded_results.clear()
    _folded_results[key] = _execute(op, node_def, arrays)
  arrays = _folded_results[key]
  if arrays is None:
    return None    # invalid here: leave the error to run time, where TensorFlow reports it
  return [constant(a, t.dtype) for a, t in zip(arrays, op.outputs)]


# (op type, attrs, input values) -> output arrays, or None where the op fails: an unrolled
# loop repeats the same shape arithmetic in every step, and each eager run costs about a
# millisecond. Small integer values only, so the table stays small.
_folded_results = {}
_MAX_FOLDED_RESULTS = 10000


def _execute(op, node_def, arrays):
  """The outputs of `op` run eagerly on `arrays`, as numpy arrays, or None if it fails."""
  attrs = []
  for name in node_def.attr:
    attrs.extend([name, op.get_attr(name)])
  try:
    with context.eager_mode():
      results = execute.execute(op.type, len(op.outputs), [tf.constant(a) for a in arrays],
                                tuple(attrs), context.context())
      return [r.numpy() for r in results]
  except (tf.errors.OpError, TypeError, ValueError):
    return None


def _feeds_a_random_op(op):
  """Whether a random op reads `op` (a seed): under XLA, a random op whose seed is a
  constant draws other numbers than one whose seed is computed, so folding a seed would
  change what the body samples."""
  return any("Random" in c.type or (c.type.startswith("Stateless") and
                                    c.type not in ("StatelessIf", "StatelessWhile",
                                                   "StatelessCase"))
             for t in op.outputs for c in t.consumers())


def _is_small_int_constant(tensor):
  return (isinstance(tensor, tf.Tensor) and tensor.op.type == "Const" and
          tensor.dtype.as_datatype_enum in _SHARED_DTYPES and tensor.shape.is_fully_defined()
          and tensor.shape.num_elements() <= _CACHED_CONSTANT_SIZE)


def _clean_name(name):
  return name.split("/")[-1].lstrip("_") or "op"


def ops_in_order(outputs, extra_ops=()):
  """The ops that `outputs` and `extra_ops` depend on, inputs before users."""
  order, done, on_path = [], set(), set()
  roots = [t.op for t in outputs] + list(extra_ops)
  for root in roots:
    stack = [(root, False)]
    while stack:
      op, expanded = stack.pop()
      if expanded:
        on_path.discard(op)
        if op not in done:
          done.add(op)
          order.append(op)
        continue
      if op in done or op in on_path:
        continue
      on_path.add(op)
      stack.append((op, True))
      for dep in op.control_inputs:
        if dep not in done:
          stack.append((dep, False))
      for t in reversed(op.inputs):
        if t.op not in done:
          stack.append((t.op, False))
  return order


def through_identities(t):
  """The tensor that `t` forwards through Identity and IdentityN ops."""
  while t.op.type in ("Identity", "IdentityN"):
    t = t.op.inputs[t.value_index if t.op.type == "IdentityN" else 0]
  return t


OPTIONAL_MAKERS = ("OptionalFromValue", "OptionalNone")
OPTIONAL_READERS = ("OptionalGetValue", "OptionalHasValue")


def optional_payload_spec(t):
  """The (dtype, shape) of the value the Optional `t` holds, where the graph says: what
  makes it (`OptionalFromValue` of one tensor) or what reads it (`OptionalGetValue`'s
  attrs); else None."""
  source = through_identities(t)
  if source.op.type == "OptionalFromValue" and len(source.op.inputs) == 1:
    return source.op.inputs[0].dtype, source.op.inputs[0].shape
  for consumer in t.consumers():
    if consumer.type in ("Identity", "IdentityN"):
      out = consumer.outputs[0 if consumer.type == "Identity" else list(
          consumer.inputs).index(t)]
      spec = optional_payload_spec(out)
      if spec is not None:
        return spec
    if consumer.type == "OptionalGetValue" and len(consumer.get_attr("output_types")) == 1:
      return (tf.as_dtype(consumer.get_attr("output_types")[0]),
              tf.TensorShape(consumer.get_attr("output_shapes")[0]))
  return None


def carries_optional(t):
  """Whether the variant `t` is an Optional: made by an Optional op, or passed on by an
  identity, a conditional or a call from one, or read as one."""
  if t.dtype != tf.variant:
    return False
  source = through_identities(t)
  op = source.op
  if op.type in OPTIONAL_MAKERS:
    return True
  if op.type == "ZerosLike":   # a gradient's zeros for an Optional output
    return carries_optional(op.inputs[0])
  if op.type in op_types.CONDITIONALS:
    return any(carries_optional(g.outputs[source.value_index]) for g in branch_graphs(op))
  if op.type in op_types.CALLS and op.type not in op_types.CONTROL_FLOW or is_legacy_call(op):
    return carries_optional(called_graph(op).outputs[source.value_index])
  return any(c.type in OPTIONAL_READERS for c in source.consumers())


def is_legacy_call(op):
  """Whether `op` calls a library function by its name as its type (a legacy `Defun`)."""
  return op.type not in op_types.CALLS and find_function(op.graph, op.type) is not None


def called_graph(op):
  """The FuncGraph a call runs: PartitionedCall's 'f', or a legacy call's op type."""
  if is_legacy_call(op):
    return find_function(op.graph, op.type).graph
  return function_graph(op, "f")


def function_graph(op, attr_name):
  """The FuncGraph of the function named by `op`'s attr (e.g. PartitionedCall's 'f')."""
  name = op.get_attr(attr_name).name
  fn = find_function(op.graph, name)
  if fn is None:
    raise ValueError(f"Function {name} used by {op.name} is not in the graph's library.")
  return fn.graph


def capture(external):
  """`external` (an outer or eager tensor) as a tensor of the current graph."""
  graph = tf.compat.v1.get_default_graph()
  if hasattr(graph, "capture") and (hasattr(external, "numpy") or external.graph is not graph):
    return graph.capture(external)
  return external


def called_graphs(op, attrs):
  """The FuncGraphs that `op` calls through `attrs` (a function, or a list: Case)."""
  graphs = []
  for attr in attrs:
    value = op.get_attr(attr)
    names = [f.name for f in value] if isinstance(value, list) else [value.name]
    for name in names:
      fn = find_function(op.graph, name)
      if fn is None:
        raise ConversionError(f"Function {name} used by {op.name} is not in the graph's "
                              "library.")
      graphs.append(fn.graph)
  return graphs


_PASS_THROUGH = ("Identity", "StopGradient")


# Ops Grappler may remove when their shapes or constants make them no-ops (a reshape or
# transpose that keeps every element in place, a reduction over no axes, a cast to the same
# type, a product with 1), and the additions it then folds into a product by 2.
_SHAPE_ONLY = ("Identity", "StopGradient", "Reshape", "Transpose", "Squeeze", "ExpandDims",
               "BroadcastTo", "Cast", "Sum", "Mean", "Max", "Min", "Prod", "All", "Any")
_WITH_A_CONSTANT = ("Mul", "RealDiv", "Div", "AddV2", "Add", "Sub")
_ADDITIONS = ("Add", "AddV2", "AddN")


def branch_graphs(op):
  """The FuncGraphs of a conditional's branches: If's then and else, Case's in order."""
  if op.type in ("If", "StatelessIf"):
    return called_graphs(op, op_types.CALLS[op.type][0])
  return [find_function(op.graph, f.name).graph for f in op.get_attr("branches")]


def keep_unlowered_where_grappler_breaks(made):
  """`keep_unlowered(made)` where the While, If or Case op that made `made` runs (in a
  function it calls, at any depth) an addition of a value to itself through ops that may be
  no-ops (`c + tf.transpose(c)` of size-1 axes, `j + tf.reduce_sum(j)` of a scalar);
  returns `made`.

  Lowered, Grappler rewrites such a sum into a product with a constant it anchors on a
  Switch, and the whole function returns an empty float32 (0,) tensor or loses a branch's
  effects: a wrong answer (TensorFlow's bug, plain `tf.function` loops show it; fuzz seeds
  3100245, 3100843). A functional While costs vectorized loops 1.3-1.6x (varlen_lstm), so
  only such ops stay functional. Each op is checked as it is made, inner ones first: a
  function's ops can no longer be changed once the function is defined.
  """
  if tf.executing_eagerly() or not isinstance(made, (tf.Tensor, tf.Operation)):
    return made
  op = made
  if isinstance(made, tf.Tensor):
    op = made.op
    while op.type in _PASS_THROUGH:
      op = op.inputs[0].op
  if op.type in op_types.CONTROL_FLOW and _runs_a_self_addition(op, set()):
    keep_unlowered(op)
  return made


def _runs_a_self_addition(op, seen):
  for name in _function_names(attrs_of(op)):
    fn = find_function(op.graph, name)
    if name in seen or fn is None or getattr(fn, "graph", None) is None:
      continue
    seen.add(name)
    if _adds_a_value_to_itself(fn.graph) or any(
        _runs_a_self_addition(inner, seen) for inner in fn.graph.get_operations()
        if any(_function_names(attrs_of(inner)))):
      return True
  return False


def _adds_a_value_to_itself(graph):
  def root(t):
    while t.op.inputs:
      if t.op.type in _SHAPE_ONLY:
        t = t.op.inputs[0]
        continue
      varying = [x for x in t.op.inputs if x.op.type != "Const"]
      if t.op.type not in _WITH_A_CONSTANT or len(varying) != 1:
        break
      t = varying[0]
    return t
  for op in graph.get_operations():
    if op.type in _ADDITIONS and len(op.inputs) >= 2:
      roots = [root(t) for t in op.inputs]
      if len({r.ref() for r in roots}) < len(roots):
        return True
  return False


@contextlib.contextmanager
def user_control_flow_unlowered():
  """Within: every While, If and Case built (the user's own, at any depth of their
  functions) stays functional. For the user's code run as it is (the whole body's
  sequential loop): a conditional nested in another's branch is defined inside a function
  before any scan could mark it, and lowered there, Grappler's rewrite of a self-addition
  empties it ("Retval[0] does not have value", fuzz seed 3102302)."""
  flag = "_DISABLE_LOWER_USING_SWITCH_MERGE"
  if not hasattr(control_flow_util_v2, flag):   # another TF's internals: the scan alone
    yield
    return
  saved = getattr(control_flow_util_v2, flag)
  setattr(control_flow_util_v2, flag, True)
  try:
    yield
  finally:
    setattr(control_flow_util_v2, flag, saved)


def keep_unlowered(made):
  """Marks the While, If or Case op `made` (or that made the tensor `made`, through
  identities) never to be lowered to Switch / Merge; returns `made`.

  A loop or conditional that runs the user's ops as they are (the whole body, the checked
  mode's copy of it) must survive Grappler. Lowered, Grappler's constant folding anchors a
  constant it makes for the arithmetic optimizer's rewrite of `c + tf.reduce_sum(c)` (a
  reduction over no axes) on the exit port of a Switch: the body's value is dead, and the
  whole function returns empty float32 tensors of shape (0,) (fuzz seeds 3100017, 3100245;
  plain TF shows it too). A functional op's body is optimized as a function, where the
  rewrite is right. Eager code has no op; nothing to mark.
  """
  if tf.executing_eagerly() or not isinstance(made, (tf.Tensor, tf.Operation)):
    return made
  op = made.op if isinstance(made, tf.Tensor) else made
  while op.type in _PASS_THROUGH:
    op = op.inputs[0].op
  if op.type in op_types.CONTROL_FLOW:
    op._set_attr("_lower_using_switch_merge",   # pylint: disable=protected-access
                 attr_value_pb2.AttrValue(b=False))
  return made


def while_loop(cond, body, loop_vars, shape_invariants=None, **kwargs):
  """`tf.while_loop` that is safe from Grappler's shape inference, for loops we emit.

  Lowered to Switch / Merge, a loop is shape-inferred by Grappler from its first iteration:
  a loop variable whose shape changes (the live lanes of a loop of per-iteration trips, a
  growing stack) keeps the initial shape wherever a value is sized from it, so
  `tf.size(tf.range(tf.size(live)))` is folded to a constant and the body computes with a
  stale size (TF 2.21; plain `tf.function` loops show it: a wrong count, or a RaggedRange
  whose starts and limits differ in size; fuzz seed 3200748). Inside the loop's functions,
  each variable whose invariant is not fully defined passes through a PlaceholderWithDefault
  of that invariant: its shape is what the invariant says, and Grappler folds nothing
  through it. The loop is then kept functional where Grappler breaks lowered loops
  otherwise (`keep_unlowered_where_grappler_breaks`).
  """
  invariants = tf.nest.flatten(shape_invariants) if shape_invariants is not None else []

  def opaque(state):
    flat = tf.nest.flatten(state)
    if len(flat) != len(invariants):
      return state
    return tf.nest.pack_sequence_as(state, [
        _with_shape(t, shape) for t, shape in zip(flat, invariants)])

  results = tf.while_loop(lambda *state: cond(*opaque(state)),
                          lambda *state: body(*opaque(state)),
                          loop_vars, shape_invariants=shape_invariants, **kwargs)
  keep_unlowered_where_grappler_breaks(tf.nest.flatten(results)[0])
  return results


def _with_shape(t, shape):
  """`t` through a PlaceholderWithDefault of `shape` where `shape` leaves dims unknown."""
  if (not isinstance(t, tf.Tensor) or not isinstance(shape, tf.TensorShape) or
      shape.is_fully_defined() or t.dtype in (tf.variant, tf.resource)):
    return t
  return tf.raw_ops.PlaceholderWithDefault(input=t, shape=shape)
