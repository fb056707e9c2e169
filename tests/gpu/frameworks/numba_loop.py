# SPDX-License-Identifier: MIT
# A Numba CUDA kernel updating device arrays: a checksum after each step to
# OUT.   python3 numba_loop.py OUT STEPS PAUSE_S
import sys, time
import numpy as np
from numba import cuda

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])


@cuda.jit
def update(a, k):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = (a[i] * 1103515245 + 12345 + k) % 2147483648


d = cuda.to_device(np.arange(1 << 22, dtype=np.int64))
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        update[(d.size + 255) // 256, 256](d, step)
        f.write(f"{step} {int(d.copy_to_host().sum())}\n")
        time.sleep(pause)
