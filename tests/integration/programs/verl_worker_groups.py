"""verl's single controller, unchanged, on zmesh: run with `python -m zmesh.ray_compat`.

The program of the seed document (RayResourcePool / RayClassWithInitArgs / RayWorkerGroup
with @register dispatch modes) and the rest of the worker-group surface, on CPU with two
fake GPUs. Prints one JSON line of results for tests/integration/test_verl.py to check.
"""

import json
import os
import sys

import ray
import torch
import torch.distributed as dist
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, Execute, register
from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
    create_colocated_worker_cls_fused,
)


def step(name):
    print(f"step {name}", file=sys.stderr, flush=True)


def tolist(values):
    return [v.tolist() if isinstance(v, torch.Tensor) else v for v in values]


@ray.remote
class GPUAccumulator(Worker):
    """The seed's first worker: each rank starts at its rank."""

    def __init__(self) -> None:
        super().__init__()
        self.value = torch.zeros(size=(1,)) + self.rank

    def add(self, x):
        self.value += x
        return self.value.clone()

    def get_value(self):
        return self.value.clone()


@ray.remote
class Decorated(Worker):
    def __init__(self) -> None:
        super().__init__()
        self.value = torch.zeros(size=(1,)) + self.rank

    @register(Dispatch.ONE_TO_ALL)
    def add(self, x):
        self.value = self.value + x
        return self.value.clone()

    @register(Dispatch.ALL_TO_ALL)
    def scale(self, factor):
        return float(self.value.item()) * factor

    @register(Dispatch.DP_COMPUTE)
    def square(self, x):
        return x * x + self.rank

    @register(Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto):
        data.batch["a"] = data.batch["a"] * 2 + self.rank
        return data

    @register(Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def whoami(self):
        return self.rank

    @register(Dispatch.ONE_TO_ALL)
    def allreduce(self):
        # torch.distributed at the MASTER_ADDR / MASTER_PORT verl gave this worker group
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:"
                                    f"{os.environ['MASTER_PORT']}", rank=self.rank,
                                    world_size=self.world_size)
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return t.item()

    def _private_helper(self):
        return f"private {self.rank}"


@ray.remote
class Actor(Worker):
    """The colocated example of the seed document (on CPU)."""

    def __init__(self) -> None:
        super().__init__()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data: DataProto):
        data.batch["a"] += self.rank
        return data


@ray.remote
class Critic(Worker):
    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def sub(self, data: DataProto):
        data.batch["a"] -= self.config["b"]
        return data


def main() -> None:
    ray.init(num_cpus=128, num_gpus=4)
    out = {"ray_is_zmesh": ray.get is __import__("zmesh").get}
    pool = RayResourcePool([2], use_gpu=True)

    # the seed: execute_all_sync splits list arguments across the workers
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(cls=GPUAccumulator))
    step("world_size")
    out["world_size"] = wg.world_size
    step("execute_all_sync")
    out["execute_all_sync"] = tolist(wg.execute_all_sync("add", x=[1, 3]))
    step("execute_all_async")
    out["execute_all_async"] = tolist(ray.get(wg.execute_all_async("get_value")))
    step("execute_rank_zero_sync")
    out["execute_rank_zero_sync"] = wg.execute_rank_zero_sync("get_value").tolist()
    step("execute_rank_zero")
    out["execute_rank_zero"] = ray.get(wg.execute_rank_zero("get_value")).tolist()
    step("worker_alive")
    out["worker_alive"] = [wg._is_worker_alive(w) for w in wg.workers]
    step("accelerator_ids")
    out["accelerator_ids"] = ray.get(wg.workers[0].get_cuda_visible_devices.remote())

    # @register dispatch modes on a second group in the same pool
    dg = RayWorkerGroup(pool, RayClassWithInitArgs(cls=Decorated))
    step("one_to_all")
    out["one_to_all"] = tolist(dg.add(10))
    step("all_to_all")
    out["all_to_all"] = dg.scale([2, 3])
    step("dp_compute")
    out["dp_compute"] = dg.square([3, 4])
    data = DataProto.from_dict({"a": torch.arange(4, dtype=torch.float32)})
    step("dp_compute_proto")
    out["dp_compute_proto"] = dg.double(data).batch["a"].tolist()
    step("rank_zero")
    out["rank_zero"] = dg.whoami()
    step("gloo_allreduce")
    out["gloo_allreduce"] = dg.allreduce()
    step("private_method")
    out["private_method"] = ray.get([w._private_helper.remote() for w in dg.workers])

    # from_detached: a group of detached workers, attached again by name
    detached_pool = RayResourcePool([2], use_gpu=True, name_prefix="det")
    det = RayWorkerGroup(detached_pool, RayClassWithInitArgs(cls=Decorated), detached=True)
    again = RayWorkerGroup.from_detached(worker_names=det.worker_names,
                                         ray_cls_with_init=RayClassWithInitArgs(cls=Decorated))
    step("from_detached")
    out["from_detached"] = tolist(again.add(1))
    step("named_actors")
    out["named_actors"] = sorted(n for n in ray.util.list_named_actors()
                                 if n in det.worker_names) == sorted(det.worker_names)
    for w in det.workers:
        ray.kill(w)

    # colocated worker classes: two roles in one process per rank (the seed's second program)
    cls_dict = {"actor": RayClassWithInitArgs(cls=Actor),
                "critic": RayClassWithInitArgs(cls=Critic, config={"b": 10})}
    colocated_pool = RayResourcePool(process_on_nodes=[2], use_gpu=False)
    wg_dict = RayWorkerGroup(resource_pool=colocated_pool,
                             ray_cls_with_init=create_colocated_worker_cls(cls_dict))
    spawn = wg_dict.spawn(prefix_set=cls_dict.keys())
    data = DataProto.from_dict({"a": torch.zeros(10)})
    step("colocated_actor")
    out["colocated_actor"] = spawn["actor"].add(data).batch["a"].tolist()
    step("colocated_critic")
    out["colocated_critic"] = spawn["critic"].sub(data).batch["a"].tolist()

    # the fused form: calls go through the worker's `_fuw_execute`
    fused_pool = RayResourcePool(process_on_nodes=[2], use_gpu=False)
    fused = RayWorkerGroup(resource_pool=fused_pool,
                           ray_cls_with_init=create_colocated_worker_cls_fused(cls_dict))
    fused_wgs = fused.spawn(prefix_set=cls_dict.keys())
    data = DataProto.from_dict({"a": torch.zeros(4)})
    step("fused_actor")
    out["fused_actor"] = fused_wgs["actor"].add(data).batch["a"].tolist()

    print("RESULT " + json.dumps(out), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
    sys.exit(0)
