"""Objects from the seed documents: a literal array argument, and a `put` ref passed to a task.

    python examples/sum_matrix.py
"""

import numpy as np

import zmesh as ray

ray.init(num_cpus=2)


# Define a task that sums the values in a matrix.
@ray.remote
def sum_matrix(matrix):
    return np.sum(matrix)


# Call the task with a literal argument value.
print(ray.get(sum_matrix.remote(np.ones((100, 100)))))  # -> 10000.0

# Put a large array into the object store.
matrix_ref = ray.put(np.ones((1000, 1000)))

# Call the task with the object reference as an argument: the worker maps the stored
# array instead of receiving a copy in the message.
print(ray.get(sum_matrix.remote(matrix_ref)))  # -> 1000000.0

# get on the driver maps the same stored bytes: a read-only view, no copy.
matrix = ray.get(matrix_ref)
print("shape:", matrix.shape, "writeable:", matrix.flags.writeable)


# Objects from the third seed: put a list, pass its ref, get it back.
@ray.remote
def process_data(data):
    return [x * 2 for x in data]


data_id = ray.put([1, 2, 3, 4])
result_id = process_data.remote(data_id)
print("data:", ray.get(data_id), "processed:", ray.get(result_id))  # -> [1, 2, 3, 4] [2, 4, 6, 8]

ray.shutdown()
