# SPDX-License-Identifier: MIT
# CuPy with its default memory pool: an array evolved on the GPU, its sum
# after each step to OUT.   python3 cupy_loop.py OUT STEPS PAUSE_S
import sys, time
import cupy as cp

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
a = cp.random.RandomState(3).standard_normal((2048, 2048), dtype=cp.float32)
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        a = cp.tanh(a @ a.T * 1e-3 + a)
        f.write(f"{step} {float(a.sum()).hex()}\n")
        time.sleep(pause)
