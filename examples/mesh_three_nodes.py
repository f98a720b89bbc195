"""A three-node mesh on one machine: tasks spread over the nodes, an actor placed by a custom
resource on another node, and a node killed while the program runs.

    python examples/mesh_three_nodes.py
"""

from __future__ import annotations

import collections
import time

import zmesh
from zmesh.testing import Cluster


@zmesh.remote(scheduling_strategy="SPREAD")
def where(i: int) -> str:
    time.sleep(0.1)
    return zmesh.get_runtime_context().get_node_id()


@zmesh.remote(resources={"accelerator": 1}, max_restarts=1)
class Model:
    def predict(self, x: float) -> tuple[float, str]:
        return 2 * x, zmesh.get_runtime_context().get_node_id()[:8]


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1, resources={"accelerator": 1})
    spare = cluster.add_node(num_cpus=1, resources={"accelerator": 1})
    zmesh.init(address=cluster.address)
    try:
        print("nodes:", [n["NodeID"][:8] for n in zmesh.nodes() if n["Alive"]])
        counts = collections.Counter(zmesh.get([where.remote(i) for i in range(12)]))
        print("tasks per node:", {k[:8]: v for k, v in counts.items()})
        model = Model.remote()
        print("predict:", zmesh.get(model.predict.remote(21.0)))
        victim = next(n for n in cluster.list_all_nodes()
                      if n.node_id[:8] == zmesh.get(model.predict.remote(0.0))[1])
        cluster.kill_node(victim)
        print(f"killed node {victim.node_id[:8]}; the actor restarts on the other one")
        for _ in range(100):
            try:
                print("predict:", zmesh.get(model.predict.remote(21.0), timeout=10))
                break
            except zmesh.exceptions.RayActorError:
                time.sleep(0.1)  # calls in flight during the crash fail; retry
        assert spare is not None
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
