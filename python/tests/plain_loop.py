"""A plain training loop reporting through `import perf_lessons`, with sleeps for the work: what
scripts/test-wheel runs under the installed tuner to see the installed package reach it.

    tuner sweep --batch-sizes 8,16 -- python3 plain_loop.py
"""

import sys
import time

import perf_lessons

if "--installed" in sys.argv and not perf_lessons.__file__.startswith(sys.prefix):
    sys.exit("perf_lessons came from %s, not from this environment (%s)"
             % (perf_lessons.__file__, sys.prefix))

batch = perf_lessons.setting("BATCH_SIZE", 4)
steps = perf_lessons.setting("WARMUP_STEPS", 1) + perf_lessons.setting("STEPS", 3)
for _ in range(steps):
    time.sleep(0.002)  # the loader's wait
    with perf_lessons.step(samples=batch) as s:
        time.sleep(0.01)  # forward, backward, optimizer
        s.forward_s = 0.004
        # With PyTorch on a GPU the step carries max_memory_reserved() by itself.
        s.peak_memory_bytes = 50_000_000 + 1_000_000 * batch
