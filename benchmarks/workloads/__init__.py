"""The suite's workloads, in the order the runner runs and reports them (the paper's §6)."""

from benchmarks.workloads import augmentation
from benchmarks.workloads import circuit
from benchmarks.workloads import convnet
from benchmarks.workloads import data_pipeline
from benchmarks.workloads import jacobians
from benchmarks.workloads import keras_layers
from benchmarks.workloads import linear
from benchmarks.workloads import mapping
from benchmarks.workloads import nuts
from benchmarks.workloads import per_example_gradients
from benchmarks.workloads import recursion
from benchmarks.workloads import varlen_lstm

ALL = (
    linear.WORKLOAD,
    convnet.WORKLOAD,
    varlen_lstm.WORKLOAD,
    varlen_lstm.CONSTANTS,
    per_example_gradients.CONVNET,
    per_example_gradients.LSTM,
    jacobians.VGG,
    jacobians.LSTM,
    jacobians.LSTM_BATCH,
    mapping.MAP_FN,
    mapping.DATA,
    circuit.WORKLOAD,
    keras_layers.DP_SGD,
    keras_layers.TRANSFORMER,
    keras_layers.INFERENCE,
    augmentation.WORKLOAD,
    data_pipeline.WORKLOAD,
    recursion.FIB,
    recursion.FIB_LOOP,
    nuts.NUTS,
    nuts.NUTS_CORRELATED,
)
