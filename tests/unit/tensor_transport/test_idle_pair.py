"""A pair that stays idle longer than its group's timeout still serves the next transfer.

The producer's thread waits in a receive for the consumer's next request. gloo closes the
pair when a receive's wait times out, so a wait bounded by the group's timeout (300 s in
the runtime) broke every pair idle for that long, and the consumer's next fetch failed with
"the producer died or stopped answering" (e.g. weights synced every few minutes). Real gloo
groups, in one process, with a 1 s timeout."""

from __future__ import annotations

import datetime
import threading
import time

import pytest

from zmesh.tensor_transport import consumer
from zmesh.tensor_transport import producer as p

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

TIMEOUT = datetime.timedelta(seconds=1)


def test_a_pair_idle_past_its_groups_timeout_serves_the_next_fetch(monkeypatch):
    store = dist.HashStore()

    def pair_group(pair_id: str, rank: int, backend: str, part: str = "") -> object:
        return dist.ProcessGroupGloo(dist.PrefixStore(pair_id + part, store), rank, 2, TIMEOUT)

    monkeypatch.setattr(p, "pair_group", pair_group)
    kept = p.KeptTensors()
    key = "k" * 32
    kept.keep(key, [torch.arange(6, dtype=torch.float32)])
    serving = threading.Thread(target=kept._serve, args=("0" * 32, "gloo"), daemon=True)
    serving.start()

    pair = consumer._Pair.__new__(consumer._Pair)  # the consumer's side, without a query
    pair.pair_id = "0" * 32
    pair.pg = pair_group(pair.pair_id, 1, "gloo")
    pair.ask_pg = pair_group(pair.pair_id, 1, "gloo", p.ASK_PART)
    pair.fresh = False
    pair.lock = threading.Lock()
    pair.request = torch.zeros(p.REQUEST_BYTES, dtype=torch.uint8)
    pair.request_host = pair.request.numpy()
    pair.ctl = "cpu"
    pair.request_sent = pair.request
    pair.status = torch.empty(1, dtype=torch.int64)
    pair.status_host = pair.status.numpy()
    pair.gone_watch = None
    metas = [([6], "float32")]
    consumer._pairs[("addr", "gloo")] = pair
    try:
        first = consumer.fetch("addr", "gloo", key, metas, "cpu", "producer")
        assert first[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        # the pair stays idle well past its group's timeout (the condition under test,
        # not a wait for something to happen)
        time.sleep(3 * TIMEOUT.total_seconds())
        assert serving.is_alive(), "the producer's thread gave the idle pair up"
        again = consumer.fetch("addr", "gloo", key, metas, "cpu", "producer")
        assert again[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    finally:
        consumer._pairs.pop(("addr", "gloo"), None)
        del pair  # closing the consumer's groups ends the producer's thread
    serving.join(timeout=60)
    assert not serving.is_alive(), "the producer's thread outlived its consumer"
    assert kept.sent_bytes == 2 * 24
