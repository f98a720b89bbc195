"""`wait` over many refs: take results in the order they finish, or wait for all of them.

    python examples/wait_many.py
"""

import time

import zmesh as ray

ray.init(num_cpus=2)


@ray.remote
def task(i):
    time.sleep(0.01 * (i % 5))
    return i


# From the seed table: submit, then wait until every ref is ready.
refs = [task.remote(i) for i in range(4)]
ready_refs, remaining_refs = ray.wait(refs, num_returns=len(refs))
print(f"ready: {len(ready_refs)}, remaining: {len(remaining_refs)}")  # -> 4, 0

# Process a hundred results as they complete, a few at a time.
pending = [task.remote(i) for i in range(100)]
done = 0
total = 0
while pending:
    ready, pending = ray.wait(pending, num_returns=min(10, len(pending)))
    total += sum(ray.get(ready))
    done += len(ready)
print(f"processed {done} results as they finished, total {total}")  # -> 100, 4950

# A timeout returns whatever is ready by then.
slow = task.remote(4)
ready, not_ready = ray.wait([slow], timeout=0.0)
print(f"after timeout=0: {len(ready)} ready, {len(not_ready)} not ready")
print("slow result:", ray.get(slow))

ray.shutdown()
