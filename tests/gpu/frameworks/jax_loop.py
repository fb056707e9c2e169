# SPDX-License-Identifier: MIT
# A jitted JAX training loop with JAX's defaults (it preallocates 75% of the
# GPU unless XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise): each step's
# loss to OUT.   python3 jax_loop.py OUT STEPS PAUSE_S
import sys, time
import jax, jax.numpy as jnp

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (1024, 1024)) * 0.01
x = jax.random.normal(jax.random.PRNGKey(1), (256, 1024))
y = jax.random.normal(jax.random.PRNGKey(2), (256, 1024))


@jax.jit
def step_fn(w):
    loss, g = jax.value_and_grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    return w - 0.1 * g, loss


with open(out, "a", buffering=1) as f:
    for step in range(steps):
        w, loss = step_fn(w)
        f.write(f"{step} {float(loss).hex()}\n")
        time.sleep(pause)
