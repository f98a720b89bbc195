"""Two groups of actors placed by bundle index, each a torch.distributed (gloo) process group.

The seed program (verl style) places 4 GPU workers with a STRICT_PACK placement group and
splits them into two groups of 2 that train different models. Here the bundles hold CPUs and
the groups use gloo, so it runs on one machine without GPUs:

    python examples/placement_group_allreduce.py
    python examples/placement_group_allreduce.py --address HOST:PORT   # on a running mesh
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist

import zmesh as ray
from zmesh.util.placement_group import placement_group, remove_placement_group
from zmesh.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def find_free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DummyAttn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


class NewDummyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


class WorkerBase:
    """One rank of a group: its own process, model replica and gloo process group."""

    def __init__(self, model_cls, temp_init=False):
        ctx = ray.get_runtime_context()
        self._node_id = ctx.get_node_id()
        self._actor_id = ctx.get_actor_id()
        self._ip_address = "127.0.0.1"
        if temp_init:  # only asked for its address
            return
        torch.manual_seed(42)  # the same initial weights on every rank
        torch.set_num_threads(1)
        dist.init_process_group(
            backend="gloo",
            world_size=int(os.environ["WORLD_SIZE"]),
            rank=int(os.environ["RANK"]),
            init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        )
        self._rank = dist.get_rank()
        self._world_size = dist.get_world_size()
        self.model = model_cls()
        print(f"=> Rank {self._rank}/{self._world_size} in group {os.environ['GROUP_NAME']!r} "
              f"initialized model: {type(self.model).__name__}")

    def get_actor_info(self):
        return {"ip_address": self._ip_address, "node_id": self._node_id}

    def train_step(self, data):
        """Forward and backward on this rank's shard, then average the gradients (all-reduce)."""
        loss = self.model(data).sum()
        loss.backward()
        for p in self.model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= self._world_size
        return loss.detach()

    def sample_grads(self):
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                return name, p.grad.clone()

    def close(self):
        dist.destroy_process_group()


Worker = ray.remote(WorkerBase)


def setup_and_create_workers(pg, model_cls, group_name, start_bundle_index, num_workers):
    print(f"========== setting up group {group_name} ==========")
    # a temporary worker on the group's first bundle tells us the master address
    temp = Worker.options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=start_bundle_index),
    ).remote(model_cls=model_cls, temp_init=True)
    master_addr = ray.get(temp.get_actor_info.remote())["ip_address"]
    master_port = str(find_free_port())
    ray.kill(temp)
    print(f"group {group_name} master: {master_addr}:{master_port}")

    workers = []
    for rank in range(num_workers):
        env_vars = {"WORLD_SIZE": str(num_workers), "RANK": str(rank),
                    "MASTER_ADDR": master_addr, "MASTER_PORT": master_port,
                    "GROUP_NAME": group_name}
        workers.append(Worker.options(
            name=f"{group_name}_rank_{rank}",
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=start_bundle_index + rank),
            runtime_env={"env_vars": env_vars},
            num_cpus=1,
        ).remote(model_cls=model_cls))
    return workers


def train_and_check(workers, data, label):
    shards = data.chunk(len(workers))
    losses = ray.get([w.train_step.remote(shards[i]) for i, w in enumerate(workers)])
    grads = ray.get([w.sample_grads.remote() for w in workers])
    for name, grad in grads[1:]:
        assert name == grads[0][0]
        assert torch.allclose(grads[0][1], grad), f"group {label}: gradients differ"
    print(f"group {label}: losses {[round(float(x), 3) for x in losses]}, "
          f"gradients of {grads[0][0]!r} agree on {len(workers)} ranks")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="join a running mesh (host:port) instead of "
                        "starting a private node with 4 CPUs")
    args = parser.parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=4)
    total_devices, per_group = 4, 2
    pg = placement_group([{"CPU": 1} for _ in range(total_devices)], strategy="STRICT_PACK",
                         name="multi_group_comm")
    ray.get(pg.ready(), timeout=60)
    print(f"=> placement group ready, bundles: {total_devices}")

    workers_a = setup_and_create_workers(pg, DummyAttn, "GroupA_DummyAttn", 0, per_group)
    workers_b = setup_and_create_workers(pg, NewDummyModel, "GroupB_NewDummyModel", 2, per_group)

    torch.manual_seed(0)
    train_and_check(workers_a, torch.randn(4, 8, 32), "A")
    train_and_check(workers_b, torch.randn(4, 64), "B")

    ray.get([w.close.remote() for w in workers_a + workers_b])
    remove_placement_group(pg)
    ray.shutdown()


if __name__ == "__main__":
    main()
