"""A transfer's request, written in place into the consumer's reused buffer and read by the
producer: the key, the count and (up to INLINE_SIZES) the sizes come back as written, also
after a longer request used the same buffer."""

from __future__ import annotations

import numpy as np

from zmesh.tensor_transport import producer as p


def test_a_request_round_trips_through_a_reused_buffer():
    buf = np.zeros(p.REQUEST_BYTES, dtype=np.uint8)
    p.encode_request(buf, "a" * 32, list(range(1, p.INLINE_SIZES + 1)))
    assert p.decode_request(buf.tobytes()) == ("a" * 32, p.INLINE_SIZES,
                                               list(range(1, p.INLINE_SIZES + 1)))
    p.encode_request(buf, "b" * 32, [4096, 8])  # shorter, into the same buffer
    assert p.decode_request(buf.tobytes()) == ("b" * 32, 2, [4096, 8])
    p.encode_request(buf, "c" * 32, [])
    assert p.decode_request(buf.tobytes()) == ("c" * 32, 0, [])


def test_past_inline_sizes_only_the_count_is_read_inline():
    buf = np.zeros(p.REQUEST_BYTES, dtype=np.uint8)
    p.encode_request(buf, "d" * 32, [1] * (p.INLINE_SIZES + 5))
    key, count, _inline = p.decode_request(buf.tobytes())
    assert (key, count) == ("d" * 32, p.INLINE_SIZES + 5)  # the sizes follow (extra_sizes)
    assert p.extra_sizes([1] * (p.INLINE_SIZES + 5)).tolist() == [1] * (p.INLINE_SIZES + 5)
    assert p.extra_sizes([1, 2]) is None
