"""Live discovery through the job's own store (pitstop/profiling/jobstore.py), on a real TCPStore."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pitstop.profiling import jobstore


def test_the_rendezvous_endpoint_is_read_from_torchruns_command_line() -> None:
    assert jobstore.rendezvous_endpoint(["torchrun", "--rdzv_endpoint", "node0:29400", "t.py"]) == "node0:29400"
    assert jobstore.rendezvous_endpoint(["torchrun", "--rdzv-endpoint=10.0.0.1:1", "t.py"]) == "10.0.0.1:1"
    assert jobstore.rendezvous_endpoint(["python", "t.py"]) is None
    assert jobstore.parse_store("[::1]:29400") == ("::1", 29400)
    with pytest.raises(ValueError):
        jobstore.parse_store("node0")


def test_a_wildcard_listen_address_is_published_as_the_route_to_the_store() -> None:
    assert jobstore.advertised_host("10.1.2.3", "10.9.9.9") == "10.1.2.3"
    assert jobstore.advertised_host("0.0.0.0", "127.0.0.1") == "127.0.0.1"


def test_ranks_published_in_a_store_are_found_with_their_node_and_a_dead_store_is_one_line() -> None:
    dist = pytest.importorskip("torch.distributed")
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=5), wait_for_workers=False)
    store = f"127.0.0.1:{master.port}"
    assert jobstore.discover(store) == (None, [])
    assert jobstore.publish(dist, store, 1, 2, ("0.0.0.0", 7071), "node-b", 42) == "127.0.0.1:7071"
    world, found = jobstore.discover(store)
    assert world == 2 and found == [jobstore.RankEndpoint(1, "127.0.0.1", 7071, "node-b", 42)]
    port = master.port
    del master
    with pytest.raises(OSError, match="cannot reach the job's store"):
        jobstore.discover(f"127.0.0.1:{port}", timeout=1)
