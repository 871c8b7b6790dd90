"""Op types the engine treats as groups, named once: calls and the functions they run,
conditionals, and the ops that read or write a resource (a variable, a lookup table)."""

# Ops calling functions: (function attrs, offset from an op input to the function input).
CALLS = {
    "PartitionedCall": (("f",), 0),
    "StatefulPartitionedCall": (("f",), 0),
    "If": (("then_branch", "else_branch"), 1),
    "StatelessIf": (("then_branch", "else_branch"), 1),
    "Case": (("branches",), 1),
    "StatelessCase": (("branches",), 1),
    "While": (("cond", "body"), 0),
    "StatelessWhile": (("cond", "body"), 0),
}
# The converter key of an op whose type is a function of the graph's library (a legacy
# `Defun` called by name, as in `tf.nn.ctc_loss`'s dense form).
LEGACY_CALL = "<call of a library function>"
# Conditionals: their first input (a predicate, a branch index) is not a function input.
CONDITIONALS = frozenset(t for t, (_, offset) in CALLS.items() if offset == 1)
# Functional control flow: conditionals and while loops (calls are not).
CONTROL_FLOW = CONDITIONALS | {"While", "StatelessWhile"}

VARIABLE_WRITES = frozenset([
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterUpdate",
    "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterMul", "ResourceScatterDiv",
    "ResourceScatterMin", "ResourceScatterMax", "ResourceScatterNdUpdate",
    "ResourceScatterNdAdd", "ResourceScatterNdSub", "ResourceScatterNdMax",
    "ResourceScatterNdMin", "ResourceStridedSliceAssign"])
TABLE_WRITES = frozenset(["LookupTableInsertV2", "LookupTableRemoveV2", "LookupTableImportV2"])
# Ops that only read the resource they take: a variable, or a lookup table.
RESOURCE_READS = frozenset([
    "ReadVariableOp", "ResourceGather", "ResourceGatherNd", "VariableShape",
    "VarIsInitializedOp", "LookupTableFindV2", "LookupTableSizeV2", "LookupTableExportV2"])
# TF1 TensorArray ops that only read the array their first input holds.
TENSOR_ARRAY_READS = frozenset(["TensorArrayReadV3", "TensorArrayGatherV3",
                                "TensorArrayConcatV3", "TensorArraySizeV3"])


def is_variable_write(op):
  """Whether `op` writes the variable (or lookup table) its first input holds
  (`v[i].assign(row)` is a ResourceStridedSliceAssign; optimizers' ResourceApply* ops update
  their slots too)."""
  return (op.type in VARIABLE_WRITES or op.type in TABLE_WRITES or
          op.type.startswith("ResourceApply") or op.type.startswith("ResourceSparseApply"))
