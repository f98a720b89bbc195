"""Stateless tasks from the seed documents: `square`, `add` and a sleeping `example_task`.

    python examples/square_tasks.py
"""

import time

import zmesh as ray

ray.init(num_cpus=4)


# Define the square task.
@ray.remote
def square(x):
    return x * x


# Launch four parallel square tasks and retrieve the results.
futures = [square.remote(i) for i in range(4)]
print(ray.get(futures))  # -> [0, 1, 4, 9]


@ray.remote
def add(x, y):
    return x + y


# .remote() returns a future (an ObjectRef) at once; get waits for the value.
future = add.remote(1, 2)
print("add:", ray.get([future]))  # -> [3]
print("add_remote(10, 20):", ray.get(add.remote(10, 20)))  # -> 30


# Resources per call with .options(); the seed notebook slept 2 s per task, 0.1 s keeps
# the example short while still showing that four CPUs run four tasks at once.
@ray.remote
def example_task(x):
    time.sleep(0.1)
    return x * x


start = time.perf_counter()
results = ray.get([example_task.options(num_cpus=1).remote(i) for i in range(8)])
elapsed = time.perf_counter() - start
print(results)  # -> [0, 1, 4, 9, 16, 25, 36, 49, 64]
print(f"8 tasks of 0.1 s on 4 CPUs took {elapsed:.2f} s")

ray.shutdown()
