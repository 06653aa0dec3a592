"""gRPC across processes, with no code change on either side: a server script started as its user
starts it under ``tracer run --include svc``, a traced client program (``INVOSEQ_INSTRUMENT=1``)
making a unary and a streaming call, both sending to a real ``cmr serve``: the client's sequence
is one tree through both processes, read back with ``cmr show --json``."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.processes.web_support import named, nodes, pid, traced_server, trees
from tests.support import cmr_server, free_port, run_traced, write_script

SERVER = """
import sys
from concurrent import futures

import grpc


def price_of(item):
    return len(item) * 3


class Pricing:
    def quote(self, request, context):
        return str(price_of(request)).encode()

    def prices(self, request, context):
        for n in range(3):
            yield str(price_of(request) + n).encode()


def serve(port):
    pricing = Pricing()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    methods = {
        "Quote": grpc.unary_unary_rpc_method_handler(pricing.quote),
        "List": grpc.unary_stream_rpc_method_handler(pricing.prices),
    }
    handler = grpc.method_handlers_generic_handler("shop.Pricing", methods)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
"""

CLIENT = """
import sys

import grpc

import tracer


@tracer.traced
def checkout(port):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        quote = channel.unary_unary("/shop.Pricing/Quote")(b"apple", timeout=60)
        prices = list(channel.unary_stream("/shop.Pricing/List")(b"pear", timeout=60))
    return quote, prices


print(checkout(int(sys.argv[1])))
"""


def test_a_client_and_a_server_process_make_one_tree(tmp_path: Path) -> None:
    write_script(tmp_path / "svc.py", SERVER)
    client = write_script(tmp_path / "client.py", CLIENT)
    port = free_port()
    db = tmp_path / "cmr.sqlite"
    with cmr_server(db) as endpoint:
        command = ["svc.py", str(port)]
        with traced_server(tmp_path, endpoint, "svc", command, port, stop=signal.SIGTERM):
            result = run_traced(client, endpoint, [str(port)], INVOSEQ_INSTRUMENT="1")
        assert result.stdout == "(b'15', [b'12', b'13', b'14'])\n"
        stored = trees(db)
    [root] = [r for r in stored.values() if r["name"] == "__main__.checkout"]
    quote, listed = root["children"]
    assert [quote["name"], listed["name"]] == [
        "grpc.client /shop.Pricing/Quote",
        "grpc.client /shop.Pricing/List",
    ]
    for sent, handler, prices in ((quote, "quote", 1), (listed, "prices", 3)):
        assert sent["attributes"]["rpc.grpc.status_code"] == 0
        [served] = sent["children"]
        assert served["name"] == sent["name"].replace("client", "server")
        assert served["handoff"]["kind"] == "remote"
        assert served["attributes"]["rpc.grpc.status_code"] == 0
        [handled] = served["children"]
        assert handled["name"].endswith(f"Pricing.{handler}")
        assert [c["name"] for c in handled["children"]] == [
            handled["name"].rpartition(".Pricing")[0] + ".price_of"
        ] * prices
        assert pid(served) == pid(handled) != pid(sent)
        assert pid(sent) == pid(root)
    # Whatever else is stored (the server's traced ``serve``, still running at SIGTERM) holds
    # nothing of the calls: the serving thread started with no sequence.
    others = [r for r in stored.values() if r is not root]
    assert all(not named(r, "grpc.server /shop.Pricing/Quote") for r in others)
    assert all(len(list(nodes(r))) == 1 for r in others), others
