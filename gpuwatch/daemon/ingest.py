"""``POST /api/v{1,2}/ingest/{node}`` (one batch) and ``.../bundle`` (several): how samples get in.

Each wire format has its endpoints: v1 (``wire/v1.py``, a list of samples) and v2
(``wire/v2.py``, the same samples as columns, what agents send); the checks and answers
below are the same for both.

Checks, in order, each with its own status so an agent (and an admin reading its log)
knows what to do:

=====  ==========================================================  ==================
code   when                                                        agent does
=====  ==========================================================  ==================
401    no bearer token, or the token is not this node's            retries, logs
403    node not registered; the token belongs to another node;     retries, logs
       the batch names another node than the URL
413    body larger than ``daemon.max_batch_bytes``                 keeps in rejected/
408    body not all there within ``daemon.body_timeout_s``         retries
400    not JSON, or an unsupported ``schema_version``              keeps in rejected/
422    JSON that is not a valid batch; samples stamped beyond      keeps in rejected/
       ``daemon.max_future_skew_s``; a batch the database
       itself refuses, twice (``daemon/writer.py``)
503    database unavailable; the daemon busy (``admission.py``)    retries
200    ``stored`` or ``duplicate`` (batch id seen before)          deletes from spool
=====  ==========================================================  ==================

Nothing is stored unless every check passes, and then all of the batch is stored at once.

A bundle is an agent's spool backlog in one request: one batch per line (NDJSON), at most
``daemon.max_bundle_batches`` of them within ``daemon.max_batch_bytes``. 401/403 (token,
node), 413 (size) and 503 apply to the whole request; each line is then checked as above and
answered on its own (``stored``, ``duplicate``, or ``refused`` with the code it would have
had alone), and the valid lines are stored in one transaction. After a 30-minute outage an
agent replays 180 batches; as bundles that is a few requests instead of 180, and the daemon's
fixed cost per request (HTTP, auth, transaction) is paid once per bundle.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Request
from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from gpuwatch.clock import utcnow
from gpuwatch.daemon.admission import Admission, Busy
from gpuwatch.daemon.ingest_log import IngestLog
from gpuwatch.daemon.store.batch_store import IngestResult, IngestStatus
from gpuwatch.daemon.token_cache import TokenCache
from gpuwatch.daemon.writer import IngestWriter
from gpuwatch.sql import nodes as node_store
from gpuwatch.wire import Batch, json_schema
from gpuwatch.wire import v2 as wire_v2
from gpuwatch.wire.text import without_nul
from gpuwatch.wire.v2 import ColumnarBatch

#: a batch in either wire format
WireBatch = Batch | ColumnarBatch

log = logging.getLogger(__name__)

INGEST_REQUESTS = Counter(
    "gpuwatch_daemon_ingest_requests_total", "Ingest requests by HTTP status.", ["status"]
)
INGEST_SAMPLES = Counter("gpuwatch_daemon_ingest_samples_total", "Samples stored.")
INGEST_BUNDLE_LINES = Counter(
    "gpuwatch_daemon_ingest_bundle_batches_total",
    "Batches received in bundles: accepted (stored or duplicate) or refused (by a check or by the database).",
    ["outcome"],
)
INGEST_SECONDS = Histogram(
    "gpuwatch_daemon_ingest_seconds", "Time to validate and store one request (a batch, or a bundle of them)."
)

_MAX_ERRORS_SHOWN = 20


class IngestError(HTTPException):
    """An HTTP error whose detail is a message for the agent's log."""


def _fail(status: int, message: str) -> IngestError:
    return IngestError(status_code=status, detail=message)


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _fail(401, "missing bearer token (Authorization: Bearer <node token>)")
    return token.strip()


def authenticate(engine: sa.Engine, node: str, token: str) -> int:
    """The node's id if ``token`` is its token; else the right 401/403."""
    with engine.connect() as conn:
        found = node_store.get_node(conn, node)
        if found is None:
            raise _fail(403, f"node {node!r} is not registered; run: gpuwatch token create {node}")
        if node_store.token_matches(found, token):
            return found.id
        owner = node_store.node_for_token(conn, token)
    if owner is not None:
        raise _fail(403, f"this token belongs to node {owner!r}; it may only write that node's samples")
    raise _fail(401, f"invalid token for node {node!r}")


def _declared_length(request: Request, limit: int) -> int | None:
    """The body's Content-Length, if the client gave one; 413 at once if it is over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is None or not declared.isdigit():
        return None
    if int(declared) > limit:
        raise _fail(
            413, f"body of {declared} bytes exceeds the limit of {limit} bytes (daemon.max_batch_bytes)"
        )
    return int(declared)


def _admitted_body(request: Request, limit: int, admission: Admission):  # type: ignore[no-untyped-def]
    """The body within ``admission``, counted as it arrives (503 with Retry-After when the daemon
    holds too much, 413 past ``limit``, 408 when it comes too slowly)."""
    return admission.body(_declared_length(request, limit), request.stream(), limit)


#: wire format version -> its batch model; each has its own endpoints, /api/v{version}/ingest
WIRE_FORMATS: dict[int, type[Any]] = {1: Batch, 2: ColumnarBatch}


def parse_batch(body: bytes, version: int = 1) -> WireBatch:
    """Validate the body as a batch of wire format ``version`` (NUL characters removed from its
    strings: ``wire/text.py``), mapping pydantic errors to 400 or 422."""
    try:
        return WIRE_FORMATS[version].model_validate_json(without_nul(body))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if any(e["type"] == "json_invalid" for e in errors):
            raise _fail(400, f"body is not valid JSON: {errors[0]['msg']}") from None
        if any(e["loc"] == ("schema_version",) and e["type"] == "literal_error" for e in errors):
            others = ", ".join(f"v{v} at /api/v{v}/ingest" for v in sorted(WIRE_FORMATS) if v != version)
            raise _fail(
                400,
                f"this endpoint takes schema_version {version}; this daemon also accepts {others}",
            ) from None
        shown = [
            {"loc": ".".join(map(str, e["loc"])), "msg": e["msg"], "type": e["type"]}
            for e in errors[:_MAX_ERRORS_SHOWN]
        ]
        raise IngestError(
            status_code=422,
            detail={"message": f"invalid batch: {len(errors)} error(s)", "errors": shown},
        ) from None


def stamps(batch: WireBatch) -> list[datetime]:
    """Every sample's ``ts``, in either wire format."""
    if isinstance(batch, Batch):
        return [s.ts for s in batch.samples]
    return wire_v2.timestamps(batch)


#: no real sample is older: a stamp before it is a node whose clock was reset (1970), and would
#: make a daily partition for that day; before year 1 in UTC it cannot even be converted
EARLIEST_SAMPLE = datetime(2000, 1, 1, tzinfo=timezone.utc)


def check_clock(batch: WireBatch, max_future_skew_s: float) -> None:
    """Refuse samples from the future: they would sort after everything real; and from
    before :data:`EARLIEST_SAMPLE`.

    The rule (``docs/wire-format.md``): a sample may be at most ``max_future_skew_s``
    ahead of the daemon's clock, and not older than 2000-01-01 UTC. Any age after that is
    fine (a spool replaying after an outage).
    """
    limit = utcnow() + timedelta(seconds=max_future_skew_s)
    every = stamps(batch)
    # each distinct stamp once (a v2 batch's samples of one cycle share one datetime object,
    # whose hash is computed once: wire_v2._shared_stamps); the samples are counted only to
    # say how many a refusal concerns
    try:
        in_utc = {ts: ts.astimezone(timezone.utc) for ts in set(every)}
    except OverflowError:  # e.g. 0001-01-01T00:00:00+00:02
        message = "a sample is stamped before year 1 in UTC; fix the node's clock (chrony/NTP)"
        raise _fail(422, message) from None
    before = [utc for utc in in_utc.values() if utc < EARLIEST_SAMPLE]
    if before:
        count = sum(1 for ts in every if in_utc[ts] < EARLIEST_SAMPLE)
        raise _fail(
            422,
            f"{count} sample(s) stamped before {EARLIEST_SAMPLE.date()} (UTC), as early as "
            f"{min(before).isoformat()}; fix the node's clock (chrony/NTP)",
        )
    ahead = [utc for utc in in_utc.values() if utc > limit]
    if ahead:
        count = sum(1 for ts in every if in_utc[ts] > limit)
        raise _fail(
            422,
            f"{count} sample(s) stamped up to {max(ahead).isoformat()}, more than "
            f"{max_future_skew_s:g} s ahead of the daemon's clock; fix the node's clock (chrony/NTP)",
        )


def checked_batch(line: bytes, node: str, max_future_skew_s: float, version: int = 1) -> WireBatch:
    """One batch as the daemon accepts it: valid, of ``node``, and not from the future."""
    batch = parse_batch(line, version)
    if batch.node != node:
        raise _fail(403, f"batch is for node {batch.node!r}; node {node!r} may only write its own samples")
    check_clock(batch, max_future_skew_s)
    return batch


def bundle_lines(body: bytes, max_batches: int) -> list[bytes]:
    """The batches of a bundle body: one JSON batch per line (NDJSON), blank lines ignored."""
    lines = [line for line in body.split(b"\n") if line.strip()]
    if not lines:
        raise _fail(400, "empty bundle: expected one JSON batch per line")
    if len(lines) > max_batches:
        raise _fail(413, f"bundle of {len(lines)} batches exceeds the limit of {max_batches} batches")
    return lines


_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or invalid token."},
    403: {"description": "Unknown node, or a token of another node."},
}


def _count_refusal(node: str, exc: HTTPException, ingest_log: IngestLog) -> None:
    """A request refused as a whole: counted by status and logged with the reason (requests
    turned away for load or for a database outage once a minute and in the summary: they
    come by the hundred)."""
    INGEST_REQUESTS.labels(str(exc.status_code)).inc()
    if isinstance(exc, Busy):
        ingest_log.shed(exc.retry_after_s)
        return
    if isinstance(exc, Unavailable):
        ingest_log.unavailable(exc.__cause__)
        return
    log.warning("ingest refused", extra={"node": node, "status": exc.status_code, "why": exc.detail})


def build_router(
    engine: sa.Engine,
    writer: IngestWriter,
    max_batch_bytes: int,
    max_future_skew_s: float,
    max_bundle_batches: int,
    ingest_log: IngestLog,
    admission: Admission,
) -> APIRouter:
    router = APIRouter()
    tokens = TokenCache()

    async def node_id_of(node: str, request: Request) -> int:
        token = _bearer(request)
        node_id = tokens.get(node, token)
        if node_id is None and tokens.stale() and not tokens.loading:
            # one request reloads the copy; others meanwhile are looked up one by one
            tokens.loading = True
            try:
                await _run_sync(tokens.load, engine)
            finally:
                tokens.loading = False
            node_id = tokens.get(node, token)
        if node_id is None:
            node_id = await _run_sync(authenticate, engine, node, token)
            tokens.put(node, token, node_id)
        return node_id

    def add_endpoints(version: int, model: type[Any]) -> None:
        """``POST /api/v{version}/ingest/{node}`` and ``.../bundle`` for one wire format."""
        body_schema: dict[str, Any] = {"$ref": f"#/components/schemas/{model.__name__}"}

        @router.post(
            f"/api/v{version}/ingest/{{node}}",
            openapi_extra={
                "requestBody": {"required": True, "content": {"application/json": {"schema": body_schema}}}
            },
            responses={
                **_AUTH_RESPONSES,
                200: {"description": "Stored, or a duplicate of a batch already stored."},
                400: {"description": "Not JSON, or unsupported schema_version."},
                413: {"description": "Batch too large."},
                422: {"description": "Invalid batch."},
                503: {"description": "Database unavailable; retry later."},
            },
            tags=["ingest"],
        )
        async def ingest(node: str, request: Request) -> dict[str, Any]:
            """Store one batch from ``node``. Idempotent by ``batch_id``."""
            started = time.perf_counter()
            try:
                node_id = await node_id_of(node, request)
                async with _admitted_body(request, max_batch_bytes, admission) as body:
                    batch = checked_batch(body, node, max_future_skew_s, version)
                    result = await _stored(writer, node_id, batch)
                if result.status is IngestStatus.REFUSED:
                    raise _fail(422, result.detail)
            except HTTPException as exc:
                _count_refusal(node, exc, ingest_log)
                raise
            INGEST_REQUESTS.labels("200").inc()
            INGEST_SAMPLES.inc(result.samples)
            INGEST_SECONDS.observe(time.perf_counter() - started)
            ingest_log.request(
                "ingest",
                node,
                {result.status.value: 1},
                result.samples,
                (time.perf_counter() - started) * 1000,
                batch_id=str(batch.batch_id),
                status=result.status.value,
                wire=version,
            )
            return {"status": result.status.value, "samples": result.samples, "batch_id": str(batch.batch_id)}

        @router.post(
            f"/api/v{version}/ingest/{{node}}/bundle",
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "description": f"Batches of this node, one {model.__name__} per line.",
                    "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
                }
            },
            responses={
                200: {
                    "description": "One result per line, in order: ``stored``, ``duplicate``, or "
                    "``refused`` with the HTTP ``code`` a single batch would have had (400, 403, 422) "
                    "and its ``detail``. Refused lines do not stop the others."
                },
                **_AUTH_RESPONSES,
                400: {"description": "Empty bundle."},
                413: {"description": "Body or number of batches over the limit."},
                503: {"description": "Database unavailable; nothing or only part stored; send it all again."},
            },
            tags=["ingest"],
        )
        async def ingest_bundle(node: str, request: Request) -> dict[str, Any]:
            """Store several batches from ``node`` in one request (an agent's spool backlog).

            Each line is checked like a single batch; the valid ones go to the database together,
            in one transaction. Idempotent by each batch's ``batch_id``.
            """
            started = time.perf_counter()
            try:
                node_id = await node_id_of(node, request)
                async with _admitted_body(request, max_batch_bytes, admission) as body:
                    lines = bundle_lines(body, max_bundle_batches)
                    results: list[dict[str, Any]] = []
                    accepted: list[WireBatch] = []
                    for line in lines:
                        try:
                            batch = checked_batch(line, node, max_future_skew_s, version)
                        except IngestError as exc:
                            results.append(
                                {"status": "refused", "code": exc.status_code, "detail": exc.detail}
                            )
                            continue
                        accepted.append(batch)
                        results.append({"batch_id": str(batch.batch_id)})
                    stored = await _stored_many(writer, node_id, accepted) if accepted else []
            except HTTPException as exc:
                _count_refusal(node, exc, ingest_log)
                raise
            results_stored = iter(stored)
            for entry in results:
                if "batch_id" in entry:
                    result = next(results_stored)
                    if result.status is IngestStatus.REFUSED:
                        entry.update(status="refused", code=422, detail=result.detail)
                    else:
                        entry.update(status=result.status.value, samples=result.samples)
            refused = sum(entry["status"] == "refused" for entry in results)
            INGEST_REQUESTS.labels("200").inc()
            INGEST_BUNDLE_LINES.labels("refused").inc(refused)
            INGEST_BUNDLE_LINES.labels("accepted").inc(len(lines) - refused)
            samples = sum(result.samples for result in stored)
            INGEST_SAMPLES.inc(samples)
            INGEST_SECONDS.observe(time.perf_counter() - started)
            if refused:
                log.warning(
                    "bundle lines refused",
                    extra={
                        "node": node,
                        "refused": refused,
                        "why": [r["detail"] for r in results if "code" in r][:3],
                    },
                )
            ingest_log.request(
                "ingest bundle",
                node,
                collections.Counter(entry["status"] for entry in results),
                samples,
                (time.perf_counter() - started) * 1000,
                batches=len(lines),
                refused=refused,
                wire=version,
            )
            return {"results": results, "samples": samples}

    for version, model in WIRE_FORMATS.items():
        add_endpoints(version, model)
    return router


class Unavailable(IngestError):
    """503: the database is unreachable; the agent keeps its batches and retries. Logged (with
    the cause) once a minute by :class:`IngestLog`, not per request: in an outage every agent
    gets one, again and again."""

    def __init__(self) -> None:
        super().__init__(status_code=503, detail="database unavailable; retry later")


async def _run_sync(func: Any, *args: Any) -> Any:
    """Run blocking database work in the thread pool; database outages become 503."""
    from starlette.concurrency import run_in_threadpool

    try:
        return await run_in_threadpool(func, *args)
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise Unavailable() from exc


async def _stored(writer: IngestWriter, node_id: int, batch: Batch) -> IngestResult:
    """Hand the batch to the group-commit writer and wait for its transaction to commit."""
    return await _committed(writer.submit(node_id, batch))


async def _stored_many(writer: IngestWriter, node_id: int, batches: list[Batch]) -> list[IngestResult]:
    """A bundle's valid batches, stored together; their results in order."""
    return await _committed(writer.submit_many(node_id, batches))


async def _committed(future: Future) -> Any:
    """Wait for the writer's transaction; database outages become 503."""
    try:
        return await asyncio.wrap_future(future)
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise Unavailable() from exc


def openapi_components() -> dict[str, Any]:
    """The batch schemas (every wire format) and their definitions, for the OpenAPI
    document's components."""
    components: dict[str, Any] = {}
    for model in WIRE_FORMATS.values():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    return components


__all__ = [
    "build_router",
    "bundle_lines",
    "checked_batch",
    "json_schema",
    "openapi_components",
    "parse_batch",
]
