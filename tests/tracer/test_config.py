"""Settings: argument > environment > default, and clear errors for values the tracer cannot use."""

from __future__ import annotations

import pytest

import tracer
from tracer.config import DEFAULT_ENDPOINT, Config, ConfigError, resolve


def test_defaults() -> None:
    config = resolve({}, {})
    assert config == Config()
    assert config.endpoint == DEFAULT_ENDPOINT


def test_argument_beats_environment_beats_default() -> None:
    env = {"INVOSEQ_ENDPOINT": "ipc:///tmp/env.sock", "INVOSEQ_FLUSH_TIMEOUT_MS": "250"}
    from_env = resolve({}, env)
    assert from_env.endpoint == "ipc:///tmp/env.sock"
    assert from_env.flush_timeout_ms == 250
    explicit = resolve({"endpoint": "tcp://127.0.0.1:9", "flush_timeout_ms": None}, env)
    assert explicit.endpoint == "tcp://127.0.0.1:9"
    assert explicit.flush_timeout_ms == 250


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("INVOSEQ_ENABLED", "0"),
        ("INVOSEQ_ENABLED", "false"),
        ("INVOSEQ_BATCH_EVENTS", "128"),
        ("INVOSEQ_QUEUE_BATCHES", "8"),
        ("INVOSEQ_FLUSH_INTERVAL_MS", "5"),
    ],
)
def test_every_variable_is_read(variable: str, value: str) -> None:
    assert resolve({}, {variable: value}) != Config()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"endpoint": "localhost:7311"}, "endpoint"),
        ({"batch_events": 0}, "batch_events"),
        ({"flush_timeout_ms": -1}, "flush_timeout_ms"),
        ({"enabled": "maybe"}, "enabled"),
        ({"queue_batches": "many"}, "queue_batches"),
        ({"no_such_setting": 1}, "no_such_setting"),
    ],
)
def test_bad_arguments_raise_a_clear_error(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tracer.configure(**settings)


def test_bad_environment_value_names_the_variable_or_falls_back_when_lenient(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"INVOSEQ_BATCH_EVENTS": "lots"}
    with pytest.raises(ConfigError, match="INVOSEQ_BATCH_EVENTS"):
        resolve({}, env)
    assert resolve({}, env, strict=False).batch_events == Config().batch_events
    assert "INVOSEQ_BATCH_EVENTS" in caplog.text


def test_the_replaced_per_thread_bound_says_what_replaced_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ConfigError, match="replaced by max_buffered_bytes"):
        resolve({"max_buffered_events": 1000}, {})
    env = {"INVOSEQ_MAX_BUFFERED_EVENTS": "1000"}
    with pytest.raises(ConfigError, match=r"INVOSEQ_MAX_BUFFERED_EVENTS: .*max_buffered_bytes"):
        resolve({}, env)
    assert resolve({}, env, strict=False) == Config()  # a lazily configured process goes on
    assert "INVOSEQ_MAX_BUFFERED_EVENTS is ignored" in caplog.text


def test_configure_s_typed_settings_are_exactly_the_config_fields() -> None:
    """``configure(**settings)`` is typed by ``Settings``: every setting, and nothing else, so a
    type checker catches a misspelt one before the ConfigError at run time does."""
    from dataclasses import fields

    from tracer.config import Settings

    assert set(Settings.__annotations__) == {f.name for f in fields(Config)}
    assert Settings.__total__ is False


def test_http_options_take_invoseqs_variable_before_opentelemetrys() -> None:
    both = {
        "INVOSEQ_EXCLUDED_URLS": "/healthz",
        "OTEL_PYTHON_EXCLUDED_URLS": "/ready",
        "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST": "X-Request-Id",
    }
    config = resolve({}, both)
    assert config.excluded_urls == "/healthz"
    assert config.capture_server_request_headers == "X-Request-Id"
    assert resolve({"excluded_urls": "/live"}, both).excluded_urls == "/live"


def test_an_excluded_url_that_is_no_regular_expression_names_its_variable() -> None:
    with pytest.raises(ConfigError, match=r"OTEL_PYTHON_EXCLUDED_URLS: '\(' is no regular"):
        resolve({}, {"OTEL_PYTHON_EXCLUDED_URLS": "/ok,("})
