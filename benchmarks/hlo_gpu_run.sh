#!/bin/bash
# The one call on a lent GPU machine (JAX there, no TensorFlow): compile, check and time the
# HLO modules benchmarks/hlo_export.py wrote, with benchmarks/hlo_run.py. Run from the root
# of the checkout that travels; writes under $OUT. The export folder travels as a carried,
# git-ignored path, with a copy of hlo_run.py in it (the travelling checkout need not hold
# this branch):
#   python -m benchmarks.hlo_export --out=.gpu_hlo && cp benchmarks/hlo_run.py \
#     benchmarks/hlo_gpu_run.sh .gpu_hlo/      # then, there: bash .gpu_hlo/hlo_gpu_run.sh
# Extra arguments go to hlo_run.py (e.g. --only=linear,convnet, or --precision=highest for
# full float32 dots and convolutions instead of the GPU's TF32).
set -o pipefail
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
DIR=${HLO_DIR:-.gpu_hlo}
Q=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu
nvidia-smi --query-gpu=$Q --format=csv 2>&1 | tee $OUT/nvidia-smi.txt
python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())" 2>&1 | tee $OUT/env.txt
python3 ${RUNNER:-$DIR/hlo_run.py} --dir=$DIR --out=$OUT/results.json --deadline=${DEADLINE:-330} \
  --compile_threads=${THREADS:-1} --platform=gpu "$@" 2>&1 | tee $OUT/log.txt
rc=$?
nvidia-smi --query-gpu=$Q --format=csv,noheader 2>&1 | tee -a $OUT/nvidia-smi.txt
exit $rc
