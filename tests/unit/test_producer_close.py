"""ReliableProducer.close lets go of librdkafka's handle at once: the handle's callbacks refer back
to the producer, and without close the pair (with its threads reconnecting to a broker that has
gone) lives until the garbage collector happens to break the cycle."""

from __future__ import annotations

import gc
import weakref

import pytest

from connectors.kafka import ReliableProducer


def test_a_closed_producer_is_freed_without_the_garbage_collector():
    gc.disable()
    try:
        producer = ReliableProducer("127.0.0.1:1", "unit-close")
        gone = weakref.ref(producer)
        assert producer.close(0.1) == 0  # nothing was queued
        del producer
        assert gone() is None
    finally:
        gc.enable()


def test_an_unclosed_producer_waits_for_the_collector():
    """The cycle close breaks, shown: the reason close exists."""
    gc.disable()
    try:
        producer = ReliableProducer("127.0.0.1:1", "unit-close")
        gone = weakref.ref(producer)
        del producer
        assert gone() is not None
        gc.collect()
        assert gone() is None
    finally:
        gc.enable()


def test_a_closed_producer_cannot_be_used_again():
    producer = ReliableProducer("127.0.0.1:1", "unit-close")
    producer.close(0.1)
    with pytest.raises(AttributeError):
        producer.produce("t", b"v")
