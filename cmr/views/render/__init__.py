"""Renderers: one module per output format, each a pure function of a (viewed) tree."""

from cmr.views.render.json import (
    profile_to_json,
    stats_to_json,
    summaries_to_json,
    thread_activity_to_json,
    tree_to_json,
)
from cmr.views.render.profile_text import render_profile
from cmr.views.render.tables import render_sequence_list, render_stats, render_thread_activity
from cmr.views.render.terms import format_duration
from cmr.views.render.text import render_text

__all__ = [
    "format_duration",
    "profile_to_json",
    "render_profile",
    "render_sequence_list",
    "render_stats",
    "render_text",
    "render_thread_activity",
    "stats_to_json",
    "summaries_to_json",
    "thread_activity_to_json",
    "tree_to_json",
]
