"""A short tour of zmesh with Ray's names: tasks, an actor, put/get and wait.

    python examples/quickstart.py
"""

import numpy as np

import zmesh as ray

ray.init(num_cpus=2)


# A task: a function that runs in a worker process.
@ray.remote
def square(x):
    return x * x


print("squares:", ray.get([square.remote(i) for i in range(5)]))


# An actor: a class whose instance lives in its own worker; calls run in order.
@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self, by=1):
        self.value += by
        return self.value


counter = Counter.remote()
for _ in range(3):
    counter.increment.remote()
print("counter:", ray.get(counter.increment.remote(10)))


# put/get: a large array goes into the node's shared-memory store once; tasks read it
# by reference, and the driver's get maps it without a copy.
@ray.remote
def total(matrix):
    return float(matrix.sum())


matrix_ref = ray.put(np.ones((1000, 1000)))
print("sum of a put matrix:", ray.get(total.remote(matrix_ref)))

# Refs compose: pass a task's result straight to another task.
print("square of a square:", ray.get(square.remote(square.remote(3))))

# wait: take results as they finish.
refs = [square.remote(i) for i in range(8)]
ready, not_ready = ray.wait(refs, num_returns=4)
print(f"wait: {len(ready)} ready, {len(not_ready)} not waited for")
print("all squares:", ray.get(refs))

ray.shutdown()
