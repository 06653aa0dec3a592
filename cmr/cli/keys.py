"""``cmr keys generate``, and the CURVE options of ``cmr serve``.

The key handling itself lives in ``cmr/server/curve.py``, which the server uses too.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from cmr.cli.common import CliError, Commands, Parser, command, emit
from cmr.server.curve import CurveError, CurveKeys, curve_keys, generate_key_pair


def add_keys(commands: Commands) -> None:
    parser = command(
        commands,
        "keys",
        description=(
            "Manage the CURVE key pairs that encrypt the connections between traced processes "
            "and the repository, and decide which processes may send to it. The repository "
            "and every client each hold a key pair: 'cmr serve --curve-secret' takes the "
            "repository's secret key, '--allowed-clients' a directory of the public keys of "
            "the clients it accepts."
        ),
        examples=[
            "cmr keys generate --dir /etc/invoseq --name repository",
            "cmr keys generate --dir ./keys --name web-1",
        ],
        handler=lambda args: _usage(parser),
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", parser_class=Parser)
    generate = command(
        actions,
        "generate",
        summary="write a new key pair: NAME.key (public) and NAME.key_secret (secret)",
        description=(
            "Write a new key pair into DIR: NAME.key, the public key, to share, and "
            "NAME.key_secret, the secret key, readable by you only. The same kind of pair "
            "serves the repository and the clients. Existing files are never overwritten."
        ),
        examples=[
            "cmr keys generate --dir /etc/invoseq --name repository",
            "cmr keys generate --dir ./keys --name web-1",
        ],
        handler=_generate,
    )
    generate.add_argument(
        "--dir",
        metavar="DIR",
        default=".",
        help="where to write the two files (created if missing; default: the current directory)",
    )
    generate.add_argument(
        "--name",
        metavar="NAME",
        help="the files' name: NAME.key and NAME.key_secret (default: this host's name)",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    """``cmr keys`` without an action: what it can do."""
    parser.print_help(sys.stderr)
    return 2


def _generate(args: argparse.Namespace) -> int:
    name = args.name if args.name is not None else socket.gethostname().split(".")[0]
    try:
        pair = generate_key_pair(args.dir, name)
    except CurveError as exc:
        raise CliError(str(exc)) from None
    public, secret = os.path.basename(pair.public), os.path.basename(pair.secret)
    emit(
        "\n".join(
            [
                f"wrote the key pair '{name}' into {os.path.abspath(args.dir)}:",
                f"  {public:{len(secret)}}  public key: share it",
                f"  {secret}  secret key: keep it private (readable by you only)",
                "as the repository's pair:",
                f"  cmr serve --curve-secret {os.path.abspath(pair.secret)} --allowed-clients DIR",
                f"  and give every client {public} (configure(curve_server_key=...) or "
                "INVOSEQ_CURVE_SERVER_KEY)",
                "as a client's pair:",
                f"  copy {public} into the repository's --allowed-clients DIR (then restart it),",
                f"  and give this client alone {secret} (configure(curve_client_key=...) or "
                "INVOSEQ_CURVE_CLIENT_KEY)",
            ]
        )
    )
    return 0


def add_curve_options(parser: argparse.ArgumentParser) -> None:
    """``cmr serve --curve-secret FILE --allowed-clients DIR``."""
    parser.add_argument(
        "--curve-secret",
        metavar="FILE",
        help="encrypt and authenticate with CURVE: the repository's NAME.key_secret "
        "(from 'cmr keys generate'); needs --allowed-clients",
    )
    parser.add_argument(
        "--allowed-clients",
        metavar="DIR",
        help="with --curve-secret: accept only clients whose public key (NAME.key) is in DIR, "
        "as it is when the server starts",
    )


def curve_from_args(args: argparse.Namespace) -> CurveKeys | None:
    """The CURVE keys ``cmr serve`` was given, read and checked; None without CURVE."""
    try:
        return curve_keys(args.curve_secret, args.allowed_clients)
    except CurveError as exc:
        raise CliError(str(exc)) from None
