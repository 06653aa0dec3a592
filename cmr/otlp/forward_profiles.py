"""``cmr forward --profiles``: each sequence's samples, as ``cmr export --format otlp-profiles``
writes them, POSTed to the receiver's OTLP/HTTP profiles path.

OpenTelemetry's Python SDK has no profiles exporter yet, so the request is sent here: OTLP/JSON
(``Content-Type: application/json``, which OTLP/HTTP receivers take for every signal, and which
does not tie invoseq to one development version of the protobuf definitions), one request per
sequence that has samples, after its spans. A status other than 2xx, or no answer within the
timeout, ends the run with the receiver's reason, as for spans.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Final

from cmr.otlp.forward import TRACES_PATH, ForwardError, traces_url

#: The OTLP/HTTP path of profiles (the signal is still in development, and so is its path).
PROFILES_PATH: Final = "/v1development/profiles"

SendProfiles = Callable[[dict[str, Any]], None]


def profiles_url(endpoint: str) -> str:
    """Where profiles go: the endpoint with ``/v1development/profiles``, whether it was given
    bare (``http://collector:4318``) or as its traces URL (``.../v1/traces``)."""
    traces = traces_url(endpoint)
    parts = urllib.parse.urlsplit(traces)
    if not parts.path.endswith(TRACES_PATH):
        raise ForwardError(
            f"with --profiles, give the receiver's base URL or its {TRACES_PATH} URL (the "
            f"profiles path, {PROFILES_PATH}, is found from it), not '{endpoint}'"
        )
    base = parts.path[: -len(TRACES_PATH)]
    return urllib.parse.urlunsplit(parts._replace(path=base + PROFILES_PATH))


def profiles_sender(url: str, *, timeout_s: float, headers: dict[str, str]) -> SendProfiles:
    """A ``send`` that POSTs one ``ExportProfilesServiceRequest`` document and raises
    ForwardError when the receiver does not take it."""

    def send(document: dict[str, Any]) -> None:
        request = urllib.request.Request(
            url,
            data=json.dumps(document).encode(),
            headers={**headers, "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise ForwardError(
                f"{url} did not take the profiles: HTTP {exc.code} {exc.reason}"
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ForwardError(f"{url} did not take the profiles: {reason}") from None

    return send
