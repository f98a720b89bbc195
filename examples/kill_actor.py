"""`kill` an actor: its process ends, and later calls fail with RayActorError.

    python examples/kill_actor.py
"""

import zmesh as ray
from zmesh.exceptions import RayActorError

ray.init(num_cpus=2)


@ray.remote
class Worker:
    def ping(self):
        return "pong"


worker = Worker.remote()
print("before kill:", ray.get(worker.ping.remote()))

ray.kill(worker)
try:
    print("after kill: unexpectedly got", ray.get(worker.ping.remote(), timeout=10))
except RayActorError as err:
    print("after kill: RayActorError:", type(err).__name__)

ray.shutdown()
