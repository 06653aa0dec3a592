"""CURVE for the repository: who may send, and what it costs a client that may not.

With CURVE, ZeroMQ encrypts every connection and authenticates both ends by key pairs. The
repository holds its own pair (``--curve-secret``) and a directory of the public keys of the
clients it allows (``--allowed-clients``); a client holds its own pair and the repository's public
key. Whether a client's key is allowed is decided by ZAP, the ZeroMQ authentication protocol, here
pyzmq's ``ThreadAuthenticator`` on the server's context. ZeroMQ asks ZAP only when a handler is
there, and a CURVE server with no handler lets every key in — so the authenticator is started
before the socket binds, and stopped after it closed.

A refused client never gets past the handshake: no frame of it reaches the repository, so there
is nothing to store or to reject. The handshake failures are seen through a socket monitor
instead, and counted as rejected, reason ``auth``, one per connection: ``HANDSHAKE_FAILED_AUTH``
(ZAP refused the key), ``HANDSHAKE_FAILED_PROTOCOL`` (the client spoke no CURVE, or not with this
repository's key) and ``HANDSHAKE_FAILED_NO_DETAIL`` (the peer hung up mid-handshake: a client
without CURVE often notices the mismatch first, and then the server sees only that). Keys are
read when the server starts: a key removed from the directory is refused (revoked) from the next
start on.

Key files are ZeroMQ certificates as ``zmq.auth`` writes and reads them: ``NAME.key`` holds the
public key, ``NAME.key_secret`` the public and the secret key.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from typing import Final

import zmq
import zmq.auth
from zmq.utils import z85

from invoseq.monitor import monitor_event

#: Handshakes that failed, each a connection that never got through: a key ZAP refused, no CURVE
#: or not with our key, or a peer that hung up during the handshake.
REFUSALS: Final = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
PUBLIC_SUFFIX: Final = ".key"
SECRET_SUFFIX: Final = ".key_secret"
_Z85_KEY_LENGTH: Final = 40


class CurveError(Exception):
    """Keys or key files the repository cannot use (a one-line message)."""


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """The repository's key pair, and the directory of the client public keys it allows."""

    public: bytes
    secret: bytes
    allowed_clients: str
    allowed: int  # public keys the directory held when loaded

    @classmethod
    def load(cls, secret_file: str, allowed_clients: str) -> CurveKeys:
        """Read and check everything before anything listens. Raises CurveError."""
        if not zmq.has("curve"):
            raise CurveError("this ZeroMQ library has no CURVE support (built without libsodium)")
        public, secret = _read_key_file(secret_file)
        if secret is None:
            raise CurveError(
                f"{secret_file} holds no secret key: give the repository's "
                f"NAME{SECRET_SUFFIX} file, not its public NAME{PUBLIC_SUFFIX}"
            )
        if not os.path.isdir(allowed_clients):
            raise CurveError(f"{allowed_clients} is not a directory of client public keys")
        files = sorted(glob.glob(os.path.join(glob.escape(allowed_clients), "*" + PUBLIC_SUFFIX)))
        for path in files:
            _read_key_file(path)
        return cls(public, secret, allowed_clients, len(files))


def curve_keys(secret_file: str | None, allowed_clients: str | None) -> CurveKeys | None:
    """The keys of ``--curve-secret`` and ``--allowed-clients``, which go together; None when
    neither is given (a server without CURVE). Raises CurveError."""
    if secret_file is None and allowed_clients is None:
        return None
    if secret_file is None or allowed_clients is None:
        raise CurveError(
            "--curve-secret and --allowed-clients go together: give both, or neither for a "
            "repository without authentication"
        )
    return CurveKeys.load(secret_file, allowed_clients)


def _read_key_file(path: str) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except ValueError:  # no public-key line
        raise CurveError(f"{path} is not a key file (made by 'cmr keys generate')") from None
    except OSError as exc:
        reason = exc.strerror or "no such file"
        raise CurveError(f"cannot read key file {path}: {reason}") from None
    for key in (public, secret):
        if key is not None and not _is_z85_key(key):
            raise CurveError(f"{path} holds a malformed key")
    return public, secret


def _is_z85_key(key: bytes) -> bool:
    try:
        z85.decode(key)
    except (ValueError, KeyError, struct.error):
        return False
    return len(key) == _Z85_KEY_LENGTH


class Gatekeeper:
    """The ZAP authenticator of one server context and the monitor of its socket's handshakes.

    ``start`` before the socket binds; ``secure`` the socket before it binds; ``close`` after
    the socket is closed and before the context terminates."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], keys: CurveKeys) -> None:
        # Imported here: it brings asyncio along, which a server without CURVE never needs.
        from zmq.auth.thread import ThreadAuthenticator

        self.keys = keys
        self._authenticator = ThreadAuthenticator(context)
        self._monitored: zmq.Socket[bytes] | None = None
        self.monitor: zmq.Socket[bytes] | None = None

    def start(self) -> None:
        self._authenticator.start()
        self._authenticator.configure_curve(domain="*", location=self.keys.allowed_clients)

    def secure(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE server with our keys, and watch its failed handshakes."""
        sock.curve_secretkey = self.keys.secret
        sock.curve_publickey = self.keys.public
        sock.curve_server = True
        self.monitor = sock.get_monitor_socket(REFUSALS)
        self._monitored = sock

    def refusals(self) -> int:
        """Handshakes refused since the last call (never waits)."""
        count = 0
        while self.monitor is not None:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            event = monitor_event(frames)
            if event is not None and event[0] & REFUSALS:
                count += 1
        return count

    def unwatch(self) -> None:
        """Stop monitoring; call while the secured socket is still open."""
        if self._monitored is not None:
            self._monitored.disable_monitor()
            self._monitored = None
        if self.monitor is not None:
            self.monitor.close(linger=0)
            self.monitor = None

    def close(self) -> None:
        self.unwatch()
        self._authenticator.stop()


@dataclass(frozen=True, slots=True)
class KeyPair:
    public: str  # path of NAME.key
    secret: str  # path of NAME.key_secret


def generate_key_pair(directory: str, name: str) -> KeyPair:
    """Write ``NAME.key`` (public) and ``NAME.key_secret`` (secret, readable by its owner only)
    into ``directory``, created if missing. Never overwrites: an existing file of either name is
    an error, checked again atomically when each file is put in place. Raises CurveError."""
    if not name or name in {".", ".."} or os.sep in name or "\0" in name or name[0] == ".":
        raise CurveError(f"'{name}' cannot name a key file: give a plain name such as 'web-1'")
    if not zmq.has("curve"):
        raise CurveError("this ZeroMQ library has no CURVE support (built without libsodium)")
    pair = KeyPair(
        os.path.join(directory, name + PUBLIC_SUFFIX),
        os.path.join(directory, name + SECRET_SUFFIX),
    )
    for path in (pair.public, pair.secret):
        if os.path.lexists(path):
            raise CurveError(f"{path} already exists: choose another --name, or remove it first")
    try:
        os.makedirs(directory, exist_ok=True)
        # A private directory next to the target: the secret key is never readable by others,
        # not even between its creation and its chmod.
        scratch = tempfile.mkdtemp(prefix=".invoseq-keys-", dir=directory)
    except OSError as exc:
        raise CurveError(f"cannot write keys into {directory}: {exc.strerror}") from None
    try:
        public, secret = zmq.auth.create_certificates(scratch, name)
        os.chmod(secret, 0o600)
        os.chmod(public, 0o644)
        _place(public, pair.public)
        try:
            _place(secret, pair.secret)
        except BaseException:
            os.unlink(pair.public)
            raise
    except OSError as exc:
        raise CurveError(f"cannot write keys into {directory}: {exc.strerror}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return pair


def _place(source: str, target: str) -> None:
    """Move ``source`` to ``target`` unless ``target`` exists: a hard link fails then, where a
    rename would replace it. On a file system without hard links, check, then rename."""
    taken = f"{target} already exists: choose another --name, or remove it first"
    try:
        os.link(source, target)
    except FileExistsError:
        raise CurveError(taken) from None
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS}:
            raise
        if os.path.lexists(target):
            raise CurveError(taken) from None
        os.rename(source, target)
