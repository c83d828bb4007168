"""A page per user and per account: the report's figures, a weekly trend, the jobs, links."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from gpuwatch.clock import utcnow
from gpuwatch.daemon.app import create_app
from gpuwatch.views import GroupBy, report_period, usage_report
from gpuwatch.views.report import WEEK


def test_user_and_account_pages_show_the_report_figures(demo) -> None:  # type: ignore[no-untyped-def]
    settings, engine, result = demo
    idle_job = next(j for j, c in result.expected.items() if c == "idle_allocation")
    idle_user = next(r.user for r in result.rows if r.job_id == idle_job)
    with TestClient(create_app(settings, engine)) as client:
        # the job page and the listings link to the user's page, and the job page to the account's
        job_page = client.get(f"/jobs/{idle_job}").text
        assert f'href="/users/{idle_user}"' in job_page and 'href="/accounts/demo-lab"' in job_page
        assert f'href="/users/{idle_user}"' in client.get("/jobs").text
        page = client.get(f"/users/{idle_user}")
        end = utcnow()
        assert page.status_code == 200, page.text
        html = page.text
        # the figures are the user's `gpuwatch report` row for the last 7 days
        rows = {r.group: r for r in usage_report(engine, GroupBy.USER, *report_period(WEEK, end))}
        shown = float(re.search(r'<span data-value="([^"]+)">', html).group(1))
        assert shown == rows[idle_user].gpu_hours_wasted > 0
        # the trend: share and GPU-hours, week by week, as uPlot charts
        assert html.count('<figure class="chart line"') == 2 and "week by week" in html
        assert "/static/charts.js" in html
        assert f'href="/jobs/{idle_job}"' in html and 'href="/accounts/demo-lab"' in html
        account = client.get("/accounts/demo-lab")
        assert account.status_code == 200
        # every demo job is in the account, each linked with its user's page
        for job in result.expected:
            assert f'href="/jobs/{job}"' in account.text
        assert f'href="/users/{idle_user}"' in account.text
        missing = client.get("/users/nobody<b>")
        assert missing.status_code == 404 and "<h2>No user nobody&lt;b&gt;</h2>" in missing.text
