"""Fuzz the ingest endpoints from the daemon's own OpenAPI document (schemathesis, bounded).

Valid token, registered node; bodies generated from each wire format's batch schema (v1
``Batch``, v2 ``ColumnarBatch``: positive) and against it (negative), alone and as bundle
lines mixed with raw garbage. The daemon may refuse
anything, but never with a server error: no 5xx at all. Not even 503: the database is healthy
throughout and nothing is shed at this load, so a 503 would be a bug reported as an outage
(fuzzing v2 found one: SQLite refusing an INSERT of no rows, an error without SQLSTATE, which
the daemon takes for an outage).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import requests

from gpuwatch.sql.nodes import create_token
from tests.daemon_process import DaemonProcess

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

pytestmark = pytest.mark.slow

NODE = "fuzz-node"


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def fuzzed(request, sqlite_url, tmp_path):
    """(daemon, token, the single-batch ingest operation of one wire format in its OpenAPI
    document, that format's version)."""
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine

    engine = create_engine(sqlite_url)
    migrate.upgrade(engine)
    token = create_token(engine, NODE)
    daemon = DaemonProcess(sqlite_url, tmp_path / "daemon.log")
    daemon.start()
    try:
        schema = schemathesis.openapi.from_url(f"{daemon.url}/openapi.json")
        yield daemon, token, schema[f"/api/v{request.param}/ingest/{{node}}"]["POST"], request.param
    finally:
        daemon.stop()
        engine.dispose()


def _run(strategy, check: Callable, max_examples: int) -> None:
    """``check`` over ``max_examples`` generated inputs, the same ones on every run."""
    hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )(hypothesis.given(strategy)(check))()


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_ingest_never_answers_a_server_error(fuzzed, mode):
    from schemathesis import GenerationMode

    daemon, token, operation, _ = fuzzed
    seen: dict[int, int] = {}
    errors: list[str] = []
    with requests.Session() as session:

        def check(case) -> None:
            case.path_parameters = {"node": NODE}
            if isinstance(case.body, dict) and mode == "positive":
                case.body["node"] = NODE  # so that bodies get past the node check into storage
            response = case.call(
                base_url=daemon.url, session=session, headers={"Authorization": f"Bearer {token}"}, timeout=10
            )
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            if response.status_code >= 500:
                errors.append(f"{response.status_code}: {case.as_curl_command()}\n{response.text[:500]}")

        _run(operation.as_strategy(generation_mode=GenerationMode(mode)), check, 100)
    print(f"{mode}: statuses {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= 50
    assert not errors, "\n\n".join(errors[:3])


def test_bundle_never_answers_a_server_error(fuzzed):
    """Bundles of generated batches (valid and not) and raw garbage lines: no 5xx,
    and every 200 answers each line."""
    from schemathesis import GenerationMode

    daemon, token, operation, version = fuzzed
    st = hypothesis.strategies
    cases = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )

    def line_of(case) -> bytes:
        if isinstance(case.body, dict):
            case.body["node"] = NODE
        return json.dumps(case.body, default=str).encode()

    lines = st.one_of(cases.map(line_of), st.binary(max_size=64))
    seen: dict[int, int] = {}
    errors: list[str] = []
    with requests.Session() as session:

        def check(bundle: list[bytes]) -> None:
            body = b"\n".join(bundle)
            response = session.post(
                f"{daemon.url}/api/v{version}/ingest/{NODE}/bundle",
                data=body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
                timeout=10,
            )
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            if response.status_code >= 500:
                errors.append(f"{response.status_code}: {body[:300]!r}\n{response.text[:500]}")
            if response.status_code == 200:
                sent = [line for line in body.split(b"\n") if line.strip()]
                assert len(response.json()["results"]) == len(sent)

        _run(st.lists(lines, min_size=1, max_size=5), check, 60)
    print(f"bundle: statuses {dict(sorted(seen.items()))}")
    assert seen.get(200, 0) >= 10
    assert not errors, "\n\n".join(errors[:3])
