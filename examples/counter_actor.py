"""Counter actors from the seed documents: state kept between calls, calls run in order.

    python examples/counter_actor.py
"""

import zmesh as ray

ray.init(num_cpus=2)


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def increment(self):
        self.value += 1
        return self.value

    def get_value(self):
        return self.value


counter = Counter.remote()
future1 = counter.increment.remote()  # first increment
future2 = counter.increment.remote()  # second increment
future3 = counter.get_value.remote()  # read the current value
print(ray.get([future1, future2]))  # -> [1, 2]
print(ray.get(future3))  # -> 2


# The second seed's Counter: calls are fire-and-forget, yet run in submission order.
@ray.remote
class IncrCounter:
    def __init__(self):
        self.i = 0

    def get(self):
        return self.i

    def incr(self, value):
        self.i += value


c = IncrCounter.remote()
for _ in range(10):
    c.incr.remote(1)
print("final:", ray.get(c.get.remote()))  # -> 10

ray.shutdown()
