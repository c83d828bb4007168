"""The jobs page's filters: the query string as the listing's filters (what ``gpuwatch jobs
--low-util`` takes), a bad value as one line and HTTP 400, a limit with "N more"."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from gpuwatch.daemon.app import create_app
from gpuwatch.web.job_filters import PAGE_ROWS, BadFilter, job_query

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def test_the_query_string_as_filters() -> None:
    q = job_query(
        {"user": " alice ", "state": "R,cd", "cause": "idle_allocation", "since": "7d", "sort": "duration",
         "limit": "20", "running": "1", "node": ""},
        NOW,
    )  # fmt: skip
    f = q.filters
    assert (f.user, f.node, f.states, f.cause, f.sort, f.running) == (
        "alice", None, ("RUNNING", "COMPLETED"), "idle_allocation", "duration", True,
    )  # fmt: skip
    assert f.since == NOW - timedelta(days=7) and q.limit == 20 and q.offset == 0
    assert job_query({"offset": "40"}, NOW).offset == 40
    default = job_query({}, NOW)
    assert default.limit == PAGE_ROWS and default.filters.sort == "wasted" and default.filters.since is None


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"since": "yesterday"}, "use a number and a unit"),
        ({"since": "99999999d"}, "at most 100 years back"),
        ({"state": "RUNNIN"}, "is not a Slurm job state"),
        ({"cause": "healthy"}, "is not one of"),
        ({"sort": "bogus"}, "sort 'bogus' is not one of"),
        ({"limit": "0"}, "is not a number from 1"),
        ({"limit": "ten"}, "is not a number from 1"),
        ({"offset": "-5"}, "offset '-5' is not a number of rows"),
        ({"offset": "99999999999999999999"}, "is not a number of rows"),  # a 500 from the database
    ],
)
def test_a_bad_value_says_which(params: dict, says: str) -> None:
    with pytest.raises(BadFilter, match=says):
        job_query(params, NOW)


def _jobs(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)">', html)


def test_the_page_filters_the_demos_jobs(demo) -> None:  # type: ignore[no-untyped-def]
    settings, engine, result = demo
    wasting = {j: c for j, c in result.expected.items() if c != "healthy"}
    with TestClient(create_app(settings, engine)) as client:
        everything = client.get("/jobs").text
        assert (
            set(_jobs(everything)) == set(wasting)
            and '<form class=filters method=get action="/jobs">' in everything
        )
        idle = client.get("/jobs", params={"cause": "idle_allocation"}).text
        # jobs whose newest evaluation found the cause (in any window), each row showing that verdict
        assert {j for j, c in wasting.items() if c == "idle_allocation"} <= set(_jobs(idle))
        assert set(re.findall(r"<td class=cause>([a-z_]+)</td>", idle)) == {"idle_allocation"}
        assert 'name="cause" size=10 value="idle_allocation"' in idle  # the form keeps the value
        first = _jobs(everything)[0]
        one = client.get("/jobs", params={"limit": "1"}).text
        assert _jobs(one) == [first] and f"{len(wasting) - 1} more job(s) not shown" in one
        # paging: the same filters, two rows at a time, from the listing's third row on
        listing = _jobs(everything)
        page = client.get("/jobs", params={"limit": "2", "offset": "2", "sort": "wasted"}).text
        assert _jobs(page) == listing[2:4]
        assert f"Jobs 3&ndash;4 of {len(listing)}." in page
        links = dict(
            (text, href) for href, text in re.findall(r'<a href="(/jobs\?[^"]+)">([a-z]+ \d+)</a>', page)
        )
        assert links["previous 2"] == "/jobs?limit=2&amp;offset=0&amp;sort=wasted"
        assert links[f"next {min(2, len(listing) - 4)}"] == "/jobs?limit=2&amp;offset=4&amp;sort=wasted"
        last = client.get("/jobs", params={"limit": "2", "offset": str(len(listing) - 1)}).text
        assert _jobs(last) == listing[-1:] and "next" not in last and "more job(s)" not in last
        assert "Jobs" not in everything.split("</table>")[-1]  # the whole listing on one page: no pager
        by_duration = _jobs(client.get("/jobs", params={"sort": "duration"}).text)
        assert sorted(by_duration) == sorted(wasting)
        assert _jobs(client.get("/jobs", params={"user": "nobody"}).text) == []
        bad = client.get("/jobs", params={"since": "a while", "user": "<b>"})
        assert bad.status_code == 400 and "<p class=error>&#x27;a while&#x27;: use a number" in bad.text
        assert 'value="&lt;b&gt;"' in bad.text and "Traceback" not in bad.text
