"""RL weight sync: a trainer group all-reduces gradients, then hands its weights to a
rollout group through the tensor transport (producer -> consumer over torch.distributed,
never through pickling or the object store).

The single-controller pattern of RL post-training (verl, OpenRLHF): the driver places two
groups of actors, steps the trainers, and after each step broadcasts the new weights to
every rollout worker. On GPUs use backend "nccl" and tensor_transport="nccl"; here it runs
on CPU with gloo:

    python examples/rl_weight_sync.py
"""

import torch

import zmesh
import zmesh.collective as col

FEATURES = 8
TRUE_W = torch.linspace(-1.0, 1.0, FEATURES)


@zmesh.remote
class Trainer:
    """One data-parallel rank: its own shard of data, gradients averaged over the group."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        gen = torch.Generator().manual_seed(rank)
        self.x = torch.randn(256, FEATURES, generator=gen)
        self.y = self.x @ TRUE_W
        self.w = torch.zeros(FEATURES, requires_grad=True)

    def step(self, lr: float) -> float:
        loss = ((self.x @ self.w - self.y) ** 2).mean()
        self.w.grad = None
        loss.backward()
        grad = self.w.grad.detach().clone()
        col.allreduce(grad, group_name="trainers")  # the group was declared by the driver
        with torch.no_grad():
            self.w -= lr * grad / self.world
        return float(loss.detach())

    @zmesh.method(tensor_transport="gloo")
    def weights(self) -> dict:
        return {"w": self.w.detach().clone()}


@zmesh.remote
class Rollout:
    """An inference worker: it only ever receives weights."""

    def __init__(self) -> None:
        self.w = torch.zeros(FEATURES)

    def load_weights(self, state: dict) -> float:
        self.w.copy_(state["w"])  # arrived straight from the trainer that produced it
        return float(self.w.norm())

    def error(self) -> float:
        return float((self.w - TRUE_W).abs().max())


def main() -> None:
    zmesh.init(num_cpus=4)
    trainers = [Trainer.remote(r, 2) for r in range(2)]
    col.create_collective_group(trainers, world_size=2, ranks=[0, 1], backend="gloo",
                                group_name="trainers")
    rollouts = [Rollout.remote() for _ in range(2)]
    for step in range(30):
        losses = zmesh.get([t.step.remote(0.1) for t in trainers])
        if step % 10 == 9:
            ref = trainers[0].weights.remote()  # the weights stay in trainer 0
            zmesh.get([r.load_weights.remote(ref) for r in rollouts])
            print(f"step {step + 1}: loss {sum(losses) / 2:.4f}, weights synced to "
                  f"{len(rollouts)} rollout workers")
    errors = zmesh.get([r.error.remote() for r in rollouts])
    trainer_w = zmesh.get(trainers[0].weights.remote())["w"]
    same = all(abs(e - float((trainer_w - TRUE_W).abs().max())) < 1e-6 for e in errors)
    print(f"rollout weights match the trainer's: {same}")
    zmesh.shutdown()


if __name__ == "__main__":
    main()
