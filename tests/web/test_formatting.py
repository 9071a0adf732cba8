"""Numbers and times for people, charts as geometry, and the queue index's windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from scheduler.budgets.queries import SpendSample
from scheduler.core.bands import Band
from scheduler.board.queue import QueueIndex, job_matches, queue_window, round_robin_place
from scheduler.board.read import forget as forget_board, queue_index
from scheduler.tick.fairness import SharePoint
from scheduler.views.charts import nice_ceiling, round_step, share_chart, spend_chart


def render(source: str, **context) -> str:
    return Template("{% load console %}" + source).render(Context(context))


def test_numbers_are_grouped_and_memory_is_in_gib():
    assert render("{{ n|points }}", n=12400) == "12,400"
    assert render("{{ n|limit_text }} {{ z|limit_text }}", n=10000, z=0) == "10,000 unlimited"
    assert render("{{ b|gib }} {{ h|gib }} {{ m|gib }}", b=16 << 30, h=3 << 29, m=512 << 20) == "16 GiB 1.5 GiB 512 MiB"
    assert render("{{ c|cores }} {{ h|cores }}", c=8000, h=500) == "8 cores 0.5 cores"
    assert render("{{ s|seconds_text }} {{ d|seconds_text }}", s=90, d=2 * 86400 + 3600) == "1 min 30 s 2 d 1 h"


def test_times_are_relative_with_the_absolute_time_on_hover():
    moment = timezone.now() - timedelta(minutes=3)
    html = render("{% when t %}", t=moment)
    assert ">3 minutes ago</time>" in html
    assert f'title="{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"' in html
    assert f'datetime="{moment.isoformat()}"' in html
    millis = int((timezone.now() - timedelta(seconds=30)).timestamp() * 1000)
    assert "30 s ago" in render("{% when ms %}", ms=millis) or "31 s ago" in render("{% when ms %}", ms=millis)
    assert render("{% when none %}", none=None) == "—"
    assert "in 2 hours" in render("{% when t %}", t=timezone.now() + timedelta(hours=2, seconds=5))


def test_badges_and_resources():
    assert render("{% band_badge 3 %}") == '<span class="band band-batch" title="BATCH band">BATCH</span>'
    assert render('{% resources 2000 8589934592 "gpu" "h100" 4 %}') == "2 cores · 8 GiB · 4 × h100 GPU"
    assert render("{% resources 500 0 %}") == "0.5 cores · 0 bytes"


def test_chart_geometry_follows_the_samples():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    samples = [
        SpendSample(t0 + timedelta(minutes=i), {"alice": s}, {"alice": lim})
        for i, (s, lim) in enumerate([(0, 10), (12, 10), (30, 10), (5, 0), (5, 0)])
    ]
    chart = spend_chart(samples, "alice", 1000, width=200, height=100)
    assert chart.samples == 5 and chart.peak == 30 and chart.last_spend == 5 and chart.last_limit == 0
    xs = [float(p.split(",")[0]) for p in chart.spend.split()]
    assert xs[0] == chart.left and xs[-1] == chart.plot_right and xs == sorted(xs)
    ys = [float(p.split(",")[1]) for p in chart.spend.split()]
    assert ys[2] == min(ys)  # the peak is highest on screen
    assert len(chart.limits) == 1 and len(chart.limits[0].split()) == 3  # unlimited stretch not drawn
    assert len(chart.over) == 2
    assert [label for _, label in chart.y_ticks] == ["0", "10", "20", "30", "40", "50"]


def test_share_chart_draws_a_line_per_user_and_a_missing_user_at_zero():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    series = [(t0, SharePoint({"alice": 0.5, "bob": 0.5})), (t0 + timedelta(minutes=5), SharePoint({"alice": 1.0}))]
    chart = share_chart(series, width=200, height=100)
    lines = {user: [tuple(map(float, p.split(","))) for p in points.split()] for user, points, _ in chart.lines}
    bottom, top = chart.height - chart.bottom, chart.top
    assert lines["alice"] == [(chart.left, (bottom + top) / 2), (chart.plot_right, top)]
    assert lines["bob"] == [(chart.left, (bottom + top) / 2), (chart.plot_right, bottom)]
    assert [label for _, label in chart.y_ticks] == ["0%", "25%", "50%", "75%", "100%"]
    assert share_chart([]).empty


def test_share_chart_of_many_users_draws_the_largest_and_one_line_for_the_rest():
    from scheduler.views.charts import SHARE_LINES

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    # u00 has the largest share, u01 the next, ...; 40 users, shares summing to 1 at each sample.
    weights = {f"u{i:02d}": 40 - i for i in range(40)}
    total = sum(weights.values())
    shares = {u: w / total for u, w in weights.items()}
    series = [(t0, SharePoint(shares)), (t0 + timedelta(minutes=5), SharePoint({**shares, "u39": 0.0}))]
    chart = share_chart(series, width=200, height=100)
    labels = [label for label, _, _ in chart.lines]
    assert labels == [f"u{i:02d}" for i in range(SHARE_LINES)] + [f"{40 - SHARE_LINES} other users"]
    assert len({colour for _, _, colour in chart.lines}) == SHARE_LINES + 1
    rest = sum(shares[f"u{i:02d}"] for i in range(SHARE_LINES, 40))
    bottom, top = chart.height - chart.bottom, chart.top
    first_y = float(chart.lines[-1][1].split()[0].split(",")[1])
    assert first_y == round(bottom - (bottom - top) * rest, 1)
    # Up to one more user than there are lines, every user has their own line.
    few = share_chart([(t0, SharePoint({f"u{i}": 0.1 for i in range(SHARE_LINES + 1)}))])
    assert [label for label, _, _ in few.lines] == [f"u{i}" for i in range(SHARE_LINES + 1)]


def test_a_ticks_sample_keeps_its_largest_users_and_the_chart_sums_the_rest_exactly():
    from scheduler.core.fairness import FAIRNESS_VERSION
    from scheduler.tick.fairness import SHARE_USERS_PER_POINT, sample_shares
    from scheduler.views.charts import SHARE_LINES

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    values = {f"u{i:03d}": 1000 - i for i in range(200)}  # u000 the largest
    total = sum(values.values())
    sample = {
        "version": FAIRNESS_VERSION,
        "bands": {"batch": {"running_value": total, "users": {u: [v, 0, 0, 0] for u, v in values.items()}}},
    }
    point = sample_shares(sample)[Band.BATCH]
    assert sorted(point.shares) == [f"u{i:03d}" for i in range(SHARE_USERS_PER_POINT)]
    assert point.rest == pytest.approx(sum(values[f"u{i:03d}"] for i in range(SHARE_USERS_PER_POINT, 200)) / total)
    chart = share_chart([(t0, point), (t0 + timedelta(minutes=5), point)], width=200, height=100)
    assert [label for label, _, _ in chart.lines] == [f"u{i:03d}" for i in range(SHARE_LINES)] + ["other users"]
    others = sum(values[f"u{i:03d}"] for i in range(SHARE_LINES, 200)) / total
    bottom, top = chart.height - chart.bottom, chart.top
    assert float(chart.lines[-1][1].split()[0].split(",")[1]) == round(bottom - (bottom - top) * others, 1)


def test_chart_of_a_user_missing_from_samples_uses_the_default_limit():
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    chart = spend_chart([SpendSample(t0, {}, {})], "carol", 1000, axes=False)
    assert chart.last_spend == 0 and chart.last_limit == 1000 and chart.limits
    assert spend_chart([], "carol", 1000).empty


@pytest.mark.parametrize(
    "value, ceiling", [(0, 1), (7, 10), (11, 20), (24, 25), (26, 50), (1100, 2000), (99_000, 100_000)]
)
def test_chart_axes_end_on_round_numbers(value, ceiling):
    assert nice_ceiling(value) == ceiling


@pytest.mark.parametrize("top, divisions", [(1, 1), (2, 2), (10, 5), (20, 4), (25, 5), (50, 5), (250, 5), (2000, 4)])
def test_gridlines_fall_on_round_steps(top, divisions):
    assert round_step(top) == divisions


def make_index(tasks: dict[str, list[int]], spend=None) -> QueueIndex:
    """An index built the way ``queue_index`` builds it, from an explanation's task map."""
    ids, reason_of, owner = {}, {}, {}
    for task_id, (rank, position, reason) in sorted(tasks.items(), key=lambda kv: (kv[1][0], kv[1][1])):
        ids.setdefault(rank, []).append(task_id)
        reason_of.setdefault(rank, []).append(reason)
        owner.setdefault(rank, []).append(task_id.split("/")[1])
    users = {rank: list(dict.fromkeys(o)) for rank, o in owner.items()}
    return QueueIndex(1, None, spend or {}, {}, ["r0", "r1"], ids, reason_of, owner, users)


def test_queue_windows_filter_and_count():
    index = make_index(
        {
            "/bob/a/0": [2, 1, 0],
            "/alice/b/0": [2, 2, 1],
            "/bob/a/1": [2, 3, 0],
            "/alice/b/1": [2, 4, 1],
            "/alice/b/c/0": [3, 1, 0],
        }
    )
    entries, total = queue_window(index, 2, offset=1, limit=2)
    assert total == 4 and [(e.task, e.position, e.reason) for e in entries] == [
        ("/alice/b/0", 2, "r1"),
        ("/bob/a/1", 3, "r0"),
    ]
    entries, total = queue_window(index, 2, user="alice")
    assert total == 2 and [e.position for e in entries] == [2, 4]
    assert queue_window(index, 3, job="/alice/b")[1] == 1  # a job id matches its children
    assert queue_window(index, 2, job="lice/b")[1] == 2
    assert queue_window(index, Band.SYSTEM) == ([], 0)


def test_job_filter_matches_the_job_and_its_children_only():
    assert job_matches("/alice/train/0", "/alice/train")
    assert job_matches("/alice/train/eval/3", "/alice/train/")
    assert not job_matches("/alice/training/0", "/alice/train")
    assert job_matches("/alice/training/0", "train")


def test_round_robin_place_names_the_turn_and_own_tasks_ahead():
    index = make_index(
        {"/bob/a/0": [2, 1, 0], "/alice/b/0": [2, 2, 0], "/bob/a/1": [2, 3, 0], "/alice/b/1": [2, 4, 0]},
        spend={"alice": 40},
    )
    place = round_robin_place(index, 2, 4)
    assert (place.user, place.turn, place.ahead_own, place.band_size) == ("alice", 2, 1, 4)
    assert place.users == [("bob", 0), ("alice", 40)]
    assert round_robin_place(index, 2, 9) is None


@pytest.mark.django_db
def test_queue_index_is_read_once_per_tick_and_sorted_if_needed(django_assert_num_queries):
    from scheduler.models import TickRecord

    forget_board()
    TickRecord.objects.create(
        started_at=timezone.now(),
        now_ms=0,
        duration_ms=1,
        spend={"bob": 7},
        limits={},
        explanation={
            "version": 3,
            "bands": {"2": {"ids": ["/bob/a/0", "/bob/a/1"], "reasons": [0, 0], "requested": [2, 2]}},
            "reasons": [{"code": "no_healthy_workers"}],
        },
    )
    with django_assert_num_queries(2):
        index = queue_index()
    assert index.ids[2] == ["/bob/a/0", "/bob/a/1"] and index.spend == {"bob": 7}
    with django_assert_num_queries(1):
        assert queue_index() is index
    forget_board()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (7199, "2 hours"),
        (7200, "2 hours"),
        (5400, "2 hours"),
        (4800, "1 hour"),
        (3580, "1 hour"),
        (90, "2 minutes"),
        (89, "1 minute"),
        (84_000, "23 hours"),
        (86_000, "1 day"),
        (3 * 86_400, "3 days"),
    ],
)
def test_relative_times_round_to_the_nearest_unit(seconds, text):
    from scheduler.templatetags.console import rounded_span

    assert rounded_span(seconds) == text


def test_a_two_hour_grant_approved_just_now_ends_in_2_hours(alice, ada):
    """It read "ends in 1 hour": timesince truncates 1 h 59 min 59 s to one hour."""
    from scheduler.budgets.writes import approve_uplift, request_uplift
    from tests.web.conftest import client_for

    grant = request_uplift(alice, budget_limit=5000, reason="deadline", duration_seconds=7200)
    approve_uplift(ada, grant.pk)
    page = client_for(alice).get("/budgets/alice/").content.decode()
    assert ">in 2 hours</time>" in page and ">in 1 hour</time>" not in page
