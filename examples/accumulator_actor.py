"""The Accumulator actor from the seed notebook: `.remote()` returns at once, `get` waits.

    python examples/accumulator_actor.py
"""

import zmesh as ray

ray.init(num_cpus=2)


@ray.remote
class Accumulator:
    def __init__(self):
        self.value = 0

    def add(self, x):
        self.value += x

    def get_value(self):
        return self.value


accumulator = Accumulator.remote()

# Check the current value: the call returns a ref immediately; get fetches the value.
value_ref = accumulator.get_value.remote()
print("value:", ray.get(value_ref))  # -> 0

# Accumulate, then check: this caller's calls run in the order they were submitted.
accumulator.add.remote(10)
print("new value:", ray.get(accumulator.get_value.remote()))  # -> 10

ray.shutdown()
