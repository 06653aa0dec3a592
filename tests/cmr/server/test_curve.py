"""CURVE on the repository's socket, with real keys and real ZeroMQ sockets: an allowed key is
served, every other client is refused at the handshake and counted, and nothing of it is stored."""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
import zmq.auth

from cmr.cli import main
from cmr.server.curve import CurveError, CurveKeys, curve_keys
from cmr.server.server import ServerError, ServerThread
from cmr.store import Store
from cmr.store.memory.store import MemoryStore
from invoseq import wire
from tests.cmr.curve_support import Keys, make_keys
from tests.support import wait_for

BatchFactory = Callable[..., wire.Batch]
Encode = Callable[[wire.Batch], list[bytes]]
SEQ = bytes.fromhex("c0" + "00" * 15)
TIMEOUT_MS = 10_000


def events(iid: int) -> dict[int, list[wire.Event]]:
    return {1: [wire.Start(iid, 0, 0, 1, 100, SEQ), wire.End(iid, 200)]}


@pytest.fixture(name="keys", scope="module")
def fixture_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(name="store")
def fixture_store() -> Iterator[Store]:
    store = MemoryStore()
    yield store
    store.close()


@pytest.fixture(name="server")
def fixture_server(store: Store, keys: Keys) -> Iterator[ServerThread]:
    curve = CurveKeys.load(str(keys.secret("repository")), str(keys.allowed_clients))
    with ServerThread(store, "tcp://127.0.0.1:*", curve=curve) as server:
        yield server


@pytest.fixture(name="dealer")
def fixture_dealer(server: ServerThread, keys: Keys) -> Iterator[Callable[..., zmq.Socket[bytes]]]:
    """``dealer(client=None, server_key="repository")``: a DEALER connected to the server, with
    the named client pair and server public key, or with no CURVE at all (``client=None``)."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sockets: list[zmq.Socket[bytes]] = []

    def dealer(client: str | None = None, server_key: str = "repository") -> zmq.Socket[bytes]:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if client is not None:
            public, secret = zmq.auth.load_certificate(keys.secret(client))
            assert secret is not None
            sock.curve_publickey, sock.curve_secretkey = public, secret
            sock.curve_serverkey = zmq.auth.load_certificate(keys.public(server_key))[0]
        sock.connect(server.endpoint)
        sockets.append(sock)
        return sock

    yield dealer
    for sock in sockets:
        sock.close()
    context.term()


def acknowledged(sock: zmq.Socket[bytes]) -> wire.Ack:
    assert sock.poll(TIMEOUT_MS), "no acknowledgement"
    header, body = sock.recv_multipart()
    assert header == wire.ACK_HEADER
    return msgspec.msgpack.decode(body, type=wire.Ack)


@pytest.mark.system
def test_an_allowed_key_is_served(
    store: Store,
    dealer: Callable[..., zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    sock = dealer("allowed")
    sock.send_multipart(encode_batch(make_batch(8, 1, events(1))))

    assert acknowledged(sock) == wire.Ack(8, 1)
    assert [r.iid for r in store.load_sequence(SEQ).invocations] == [1]
    assert store.stats().rejected == {}


REFUSED = {
    "unknown key": {"client": "stranger"},
    "revoked key": {"client": "revoked"},
    "no CURVE (NULL mechanism)": {"client": None},
    "allowed key, another server's key": {"client": "allowed", "server_key": "stranger"},
}


@pytest.mark.parametrize("refused", REFUSED.values(), ids=REFUSED.keys())
@pytest.mark.system
def test_a_client_without_an_allowed_key_gets_nothing_stored_and_is_counted(
    store: Store,
    dealer: Callable[..., zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
    refused: dict[str, str | None],
) -> None:
    intruder = dealer(**refused)
    intruder.send_multipart(encode_batch(make_batch(7, 1, events(1))))
    wait_for(lambda: store.stats().rejected.get("auth", 0) >= 1)  # its handshake was refused

    # A batch sent after the intruder's is served; the intruder's never arrives.
    client = dealer("allowed")
    client.send_multipart(encode_batch(make_batch(8, 1, events(2))))
    assert acknowledged(client) == wire.Ack(8, 1)

    stats = store.stats()
    assert [p.puid for p in stats.processes] == [8]
    assert (stats.batches, stats.events) == (1, 2)
    assert set(stats.rejected) == {"auth"}
    assert not intruder.poll(0)  # and no acknowledgement ever reached it


# -- keys and their checks ----------------------------------------------------------------


def test_generate_writes_a_pair_zeromq_loads_with_a_private_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "new" / "keys"

    assert main(["keys", "generate", "--dir", str(where), "--name", "web-1"]) == 0

    out = capsys.readouterr().out
    public, secret = where / "web-1.key", where / "web-1.key_secret"
    assert sorted(p.name for p in where.iterdir()) == ["web-1.key", "web-1.key_secret"]
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert zmq.auth.load_certificate(public)[1] is None
    both = zmq.auth.load_certificate(secret)
    assert both[0] == zmq.auth.load_certificate(public)[0]
    assert both[1] is not None
    assert f"into {where}:" in out
    assert f"cmr serve --curve-secret {secret} --allowed-clients DIR" in out
    assert "copy web-1.key into the repository's --allowed-clients DIR" in out


def test_generate_never_overwrites_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "generate", "--dir", str(tmp_path), "--name", "web-1"]) == 0
    before = (tmp_path / "web-1.key_secret").read_bytes()
    capsys.readouterr()

    assert main(["keys", "generate", "--dir", str(tmp_path), "--name", "web-1"]) == 1

    _, err = capsys.readouterr()
    assert err == (
        f"cmr: {tmp_path}/web-1.key already exists: choose another --name, or remove it first\n"
    )
    assert (tmp_path / "web-1.key_secret").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web-1.key", "web-1.key_secret"]


@pytest.mark.parametrize("name", ["../up", ".hidden", ""])
def test_generate_refuses_a_name_that_is_not_a_plain_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["keys", "generate", "--dir", str(tmp_path), "--name", name]) == 1

    _, err = capsys.readouterr()
    assert err == f"cmr: '{name}' cannot name a key file: give a plain name such as 'web-1'\n"
    assert list(tmp_path.iterdir()) == []


def test_keys_without_an_action_shows_what_it_can_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys"]) == 2

    assert "generate" in capsys.readouterr().err


def test_the_two_options_go_together(keys: Keys) -> None:
    assert curve_keys(None, None) is None
    for given in [(str(keys.secret("repository")), None), (None, str(keys.allowed_clients))]:
        with pytest.raises(CurveError, match=r"^--curve-secret and --allowed-clients go together"):
            curve_keys(*given)


def bad_key_file(tmp_path: Path) -> str:
    path = tmp_path / "broken.key_secret"
    path.write_text('curve\n    public-key = "tooshort"\n    secret-key = "tooshort"\n')
    return str(path)


BAD_KEYS: dict[str, tuple[Callable[[Keys, Path], tuple[str, str]], str]] = {
    "a public key as the secret": (
        lambda k, _: (str(k.public("repository")), str(k.allowed_clients)),
        r"repository\.key holds no secret key: give the repository's NAME\.key_secret file",
    ),
    "a missing secret": (
        lambda k, t: (str(t / "none.key_secret"), str(k.allowed_clients)),
        r"^cannot read key file .*none\.key_secret: no such file$",
    ),
    "not a key file": (
        lambda k, t: (str(k.allowed_clients.parent / "clients"), str(k.allowed_clients)),
        r"^cannot read key file .*clients: ",
    ),
    "a malformed key": (
        lambda k, t: (bad_key_file(t), str(k.allowed_clients)),
        r"^.*broken\.key_secret holds a malformed key$",
    ),
    "no directory": (
        lambda k, t: (str(k.secret("repository")), str(t / "nowhere")),
        r"nowhere is not a directory of client public keys$",
    ),
}


@pytest.mark.parametrize("case", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_unusable_keys_are_refused_in_one_line(
    keys: Keys, tmp_path: Path, case: tuple[Callable[[Keys, Path], tuple[str, str]], str]
) -> None:
    build, message = case
    with pytest.raises(CurveError, match=message):
        CurveKeys.load(*build(keys, tmp_path))


def test_a_file_in_the_allowed_directory_that_is_no_key_is_refused(
    keys: Keys, tmp_path: Path
) -> None:
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / "notes.key").write_text("hello\n")

    with pytest.raises(CurveError, match=r"notes\.key is not a key file \(made by 'cmr keys"):
        CurveKeys.load(str(keys.secret("repository")), str(clients))


def test_serve_with_half_the_options_fails_before_creating_anything(
    keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "cmr.sqlite"
    argv = ["serve", "--db", str(db), "--curve-secret", str(keys.secret("repository"))]

    assert main(argv) == 1

    _, err = capsys.readouterr()
    assert err.startswith("cmr: --curve-secret and --allowed-clients go together")
    assert err.count("\n") == 1
    assert not db.exists()


@pytest.mark.system
def test_a_curve_server_that_cannot_listen_leaves_no_authenticator_running(
    store: Store, server: ServerThread, keys: Keys
) -> None:
    curve = CurveKeys.load(str(keys.secret("repository")), str(keys.allowed_clients))
    before = set(threading.enumerate())

    with pytest.raises(ServerError, match="Address already in use"):
        ServerThread(store, server.endpoint, curve=curve)

    assert set(threading.enumerate()) <= before


@pytest.mark.system
def test_an_empty_allowed_directory_is_served_with_a_warning(
    store: Store, keys: Keys, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    curve = CurveKeys.load(str(keys.secret("repository")), str(tmp_path))

    with ServerThread(store, "tcp://127.0.0.1:*", curve=curve):
        pass

    assert f"{tmp_path} holds no client public key (*.key): every client will be refused" in (
        caplog.text
    )
