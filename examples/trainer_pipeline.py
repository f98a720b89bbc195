"""Tasks, actors and objects together (the third seed's sketch): stateless tasks preprocess
batches in parallel, a stateful actor trains a model on them, refs carry the data between.

    python examples/trainer_pipeline.py
"""

import numpy as np

import zmesh as ray

ray.init(num_cpus=2)


@ray.remote
def preprocess_batch(data_batch):
    # stateless: standardise features; the target is a fixed linear function plus noise
    x = (data_batch - data_batch.mean(axis=0)) / (data_batch.std(axis=0) + 1e-8)
    rng = np.random.default_rng(int(data_batch[0, 0] * 1e6) % 2**32)
    y = x @ np.array([2.0, -1.0, 0.5]) + 0.01 * rng.standard_normal(len(x))
    return x, y


@ray.remote
class ModelTrainer:
    def __init__(self, model_config):
        self.lr = model_config["lr"]
        self.weights = np.zeros(model_config["features"])
        self.steps = 0

    def train_step(self, batch):
        x, y = batch
        error = x @ self.weights - y
        self.weights -= self.lr * (x.T @ error) / len(x)  # one gradient step on squared error
        self.steps += 1
        return float(np.mean(error**2))

    def get_model_params(self):
        return self.weights


raw = ray.put(np.random.default_rng(0).standard_normal((20, 256, 3)))  # 20 batches
trainer = ModelTrainer.remote({"lr": 0.3, "features": 3})


@ray.remote
def batch_of(data, i):
    return data[i]


# Objects hold the data; tasks preprocess each batch in parallel; the actor trains in order.
batches = [preprocess_batch.remote(batch_of.remote(raw, i)) for i in range(20)]
losses = ray.get([trainer.train_step.remote(b) for b in batches])
print(f"loss: first {losses[0]:.3f}, last {losses[-1]:.5f}")
print("learned weights:", np.round(ray.get(trainer.get_model_params.remote()), 2))  # ~[2, -1, 0.5]

ray.shutdown()
