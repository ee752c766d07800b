"""Real JAX CPU profiles for the XSpace tests: a small jitted training step, run several steps
under ``jax.profiler.trace(dir, create_perfetto_trace=True)`` (each under a StepTraceAnnotation)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STEPS = 4
PROGRAM = f"""
import sys
import jax, jax.numpy as jnp

def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)

@jax.jit
def train_step(w, x, y):
    g = jax.grad(loss)(w, x, y)
    return jax.tree_util.tree_map(lambda p, q: p - 0.01 * q, w, g)

k = jax.random.PRNGKey(0)
w = {{"a": jax.random.normal(k, (64, 128)), "b": jax.random.normal(k, (128, 8))}}
x = jax.random.normal(k, (256, 64))
y = jnp.zeros((256, 8))
w = jax.block_until_ready(train_step(w, x, y))  # compiled before the profile
with jax.profiler.trace(sys.argv[1], create_perfetto_trace=True):
    for i in range({STEPS}):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = jax.block_until_ready(train_step(w, x, y))
"""


def record(logdir: Path) -> Path:
    """Profile the program into ``logdir``; returns the run folder (``plugins/profile/<run>/``).
    In a child process: the profiler is process-wide, and JAX stays out of the test process."""
    subprocess.run([sys.executable, "-c", PROGRAM, str(logdir)], check=True, capture_output=True, timeout=300,
                   env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    (run,) = (logdir / "plugins" / "profile").iterdir()
    return run
