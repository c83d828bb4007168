"""HTTP push of serialized batches to the daemon, and the retry backoff.

The daemon's ingest endpoint is ``POST {daemon_url}/api/v{N}/ingest/{node}`` with a bearer
token, N the wire format of the batch (``wire/v1.py`` v1, ``wire/v2.py`` v2, told apart by
their first bytes); a spool backlog goes to ``.../bundle``, several batches one per line,
each answered on its own. A daemon older than v2 answers 404 there: the agent then sends its
v2 batches converted to v1 for :data:`V1_FALLBACK_S`, and tries v2 again after that. A
re-sent batch is stored once, so retrying anything that is not known to be the batch's own
fault is safe. The outcome of a send (for a bundle: of each batch) is one of three:

* ``OK`` (2xx): stored (or already stored); the batch leaves the spool.
* ``REJECTED`` (400, 413, 422): the batch itself is bad; sending it again cannot help.
* ``RETRY``: everything else - no connection, timeout, 5xx, 429, 408, 404, and also 401/403,
  which mean a wrong token or an unregistered node: a configuration problem an admin fixes,
  so the data is kept and the problem is logged loudly (ERROR, once per distinct message)
  rather than dropped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import Enum
from urllib.parse import quote, urlsplit

import requests
import urllib3

from gpuwatch import __version__
from gpuwatch.clock import utcnow
from gpuwatch.wire import v2 as wire_v2

log = logging.getLogger(__name__)

REJECT_STATUSES = frozenset({400, 413, 422})
RETRY_AFTER_STATUSES = frozenset({429, 503})
_CONFIG_STATUSES = frozenset({401, 403, 404})
_MAX_LOGGED_MESSAGES = 256
_ADDRESS_RE = re.compile(r" at 0x[0-9a-fA-F]+")
#: errors raised before a connection was made: the request cannot have reached the daemon
_NOT_CONNECTED = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)
#: how long v2 batches go as v1 after a daemon answered 404 to v2 (then v2 is tried again)
V1_FALLBACK_S = 600
#: the longest a health probe waits for its answer (a probe is asked every few seconds)
PROBE_TIMEOUT_S = 5.0
#: answers that say the daemon (or its database) is not taking batches at all, as opposed to
#: refusing this agent or asking it to wait (``Retry-After``)
_DOWN_STATUSES = frozenset({502, 503, 504})

TokenSource = str | Callable[[], str | None] | None


class Outcome(str, Enum):
    """What the sender should do with the batch after one send."""

    OK = "ok"
    REJECTED = "rejected"
    RETRY = "retry"


@dataclass(frozen=True)
class PushResult:
    """Outcome of one POST; ``reason`` is a human sentence for logs and the rejected/ sidecar."""

    outcome: Outcome
    status: int | None = None
    reason: str = ""
    retry_after_s: float | None = None
    #: a wrong token, node, URL or redirect: only an admin can fix it, so it is logged at ERROR
    config_problem: bool = False
    #: the request may have reached the daemon and been stored, but no answer says so (a
    #: timeout or a connection lost after connecting, a 5xx): a merged batch then goes again
    #: as the same batch (same id), so that a stored one comes back ``duplicate``
    maybe_stored: bool = False


def daemon_down(result: PushResult) -> bool:
    """Whether a failed push says the daemon is down or cannot store (no connection, no answer,
    502/503/504 without ``Retry-After``): then its coming back is worth watching for."""
    if result.outcome is not Outcome.RETRY or result.retry_after_s is not None:
        return False
    return result.status is None or result.status in _DOWN_STATUSES


def parse_retry_after(value: str | None, now: Callable[[], datetime] = utcnow) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date, RFC 9110)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        return max(0.0, (when - now()).total_seconds())
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def classify(status: int) -> Outcome:
    """Map an HTTP status to what the sender does next (see the module docstring)."""
    if 200 <= status < 300:
        return Outcome.OK
    if status in REJECT_STATUSES:
        return Outcome.REJECTED
    return Outcome.RETRY


def _detail(response: urllib3.BaseHTTPResponse) -> str:
    """The daemon's short error text (FastAPI's ``detail``) or the start of the body."""
    raw = response.data or b""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    text = (
        str(body["detail"]) if isinstance(body, dict) and "detail" in body else raw.decode("utf-8", "replace")
    )
    text = " ".join(text.split())
    return text[:300] if text else (response.reason or "")


def _pool_for(url: str) -> urllib3.PoolManager:
    """A keep-alive connection pool for the daemon, with the environment's proxy and CA
    settings resolved once, as requests would resolve them.

    The push is the agent's hottest network path, so it talks to urllib3 (the library
    requests is built on) directly: requests re-reads the environment (proxies,
    ``REQUESTS_CA_BUNDLE``, netrc) and builds a session request on every push, ~0.5 ms of CPU
    of a ~6 ms cycle (``python bench/agent_cycle.py``). Proxies come from
    ``requests.utils.get_environ_proxies`` (so ``NO_PROXY`` works the same) and the CA bundle
    from ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` or requests' own (certifi), as requests
    would choose them.
    """
    proxies = requests.utils.get_environ_proxies(url)
    proxy = proxies.get(urlsplit(url).scheme) or proxies.get("all")
    ca_certs = (
        os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or requests.certs.where()
    )
    options = {"retries": False, "maxsize": 1, "cert_reqs": "CERT_REQUIRED", "ca_certs": ca_certs}
    return urllib3.ProxyManager(proxy, **options) if proxy else urllib3.PoolManager(**options)


@dataclass(frozen=True)
class BundleResult:
    """Outcome of one bundle POST: ``request`` for the request as a whole and, when the
    daemon answered each batch (200), ``items``: one result per batch, in order."""

    request: PushResult
    items: list[PushResult] | None = None


def bundle_items(answer: object, count: int, url: str) -> list[PushResult] | None:
    """Per-batch results from the daemon's bundle answer; None if it is not one for ``count``."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or len(results) != count:
        return None
    items = []
    for entry in results:
        if not isinstance(entry, dict):
            return None
        if entry.get("status") in ("stored", "duplicate"):
            items.append(PushResult(Outcome.OK, 200, str(entry["status"])))
            continue
        code = entry.get("code")
        if not isinstance(code, int):
            return None
        detail = " ".join(str(entry.get("detail", "")).split())[:300]
        items.append(
            PushResult(
                classify(code),
                code,
                f"HTTP {code} for this batch in a bundle to {url}: {detail}",
                config_problem=code in _CONFIG_STATUSES,
            )
        )
    return items


class Pusher:
    """Sends serialized batches to the daemon over one keep-alive connection (urllib3 pool).

    Not thread-safe: one sender thread owns it. ``token`` may be a callable (e.g.
    ``AgentConfig.resolve_token``) so that an admin who fixes the token file after a 401
    is picked up without restarting the agent.
    """

    def __init__(
        self,
        daemon_url: str,
        node: str,
        token: TokenSource,
        timeout_s: float,
        *,
        pool: urllib3.PoolManager | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base, node_part = daemon_url.rstrip("/"), quote(node, safe="")
        #: wire format -> its single-batch endpoint; ``url`` is v1's, for logs and older callers
        self.urls = {version: f"{base}/api/v{version}/ingest/{node_part}" for version in (1, 2)}
        self.url = self.urls[1]
        self.bundle_url = f"{self.url}/bundle"
        self.health_url = f"{base}/healthz"
        self.timeout_s = timeout_s
        self._token = token
        self._pool = pool or _pool_for(self.url)
        self._logged: set[str] = set()
        self._failures = 0
        self._clock = clock
        #: until when v2 batches go as v1 (the daemon answered 404 to v2); None: send v2
        self._v1_until: float | None = None
        self.downgraded = 0  # batches sent as v1 because the daemon did not take v2

    def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Content-Type": content_type, "User-Agent": f"gpuwatch-agent/{__version__}"}
        token = self._token() if callable(self._token) else self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def send(self, body: bytes) -> PushResult:
        """POST one batch and classify the outcome; never raises."""
        version, (body,) = self._as_daemon_takes([body])
        result, _ = self._post(self.urls[version], body, "application/json")
        if self._fall_back(version, result):
            return self.send(body)
        self._report(result)
        return result

    def probe(self) -> PushResult:
        """``GET /healthz`` (no token, no body): OK when the daemon says it can take batches.
        Cheap enough to ask every few seconds while backing off; never raises."""
        try:
            response = self._pool.request(
                "GET",
                self.health_url,
                headers={"User-Agent": f"gpuwatch-agent/{__version__}"},
                timeout=urllib3.Timeout(total=min(self.timeout_s, PROBE_TIMEOUT_S)),
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return PushResult(Outcome.RETRY, None, f"no answer from {self.health_url}: {type(exc).__name__}")
        if response.status == 200:
            return PushResult(Outcome.OK, 200, "healthy")
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        reason = f"HTTP {response.status} from {self.health_url}"
        return PushResult(Outcome.RETRY, response.status, reason, retry_after)

    def _as_daemon_takes(self, bodies: list[bytes]) -> tuple[int, list[bytes]]:
        """The wire format to send ``bodies`` in (all of one format) and the bodies in it."""
        version = wire_v2.version_of(bodies[0])
        if version == 2 and self._v1_until is not None:
            if self._clock() < self._v1_until:
                self.downgraded += len(bodies)
                return 1, [wire_v2.downgraded(body) for body in bodies]
            self._v1_until = None
            log.info("trying wire format v2 again at %s", self.urls[2])
        return version, bodies

    def _fall_back(self, version: int, result: PushResult) -> bool:
        """Whether a v2 send found no v2 endpoint (an older daemon): then v1 for a while."""
        if version != 2 or result.status != 404:
            return False
        self._v1_until = self._clock() + V1_FALLBACK_S
        log.warning(
            "no wire format v2 endpoint (%s): a daemon older than v2, or a wrong agent.daemon_url; "
            "sending v1 for the next %d s",
            result.reason,
            V1_FALLBACK_S,
        )
        return True

    def send_bundle(self, bodies: list[bytes]) -> BundleResult:
        """POST several batches as one bundle (one per line); never raises.

        A batch whose bytes hold a newline cannot be a bundle line: the caller sends those
        alone (the agent's own serialization never writes one).
        """
        if any(b"\n" in body for body in bodies):
            raise ValueError("a bundle line may not contain a newline")
        if len({wire_v2.version_of(body) for body in bodies}) > 1:
            raise ValueError("a bundle holds batches of one wire format")
        version, bodies = self._as_daemon_takes(bodies)
        bundle_url = f"{self.urls[version]}/bundle"
        result, answer = self._post(bundle_url, b"\n".join(bodies), "application/x-ndjson")
        if self._fall_back(version, result):
            return self.send_bundle(bodies)
        if result.outcome is not Outcome.OK:
            self._report(result)
            return BundleResult(result)
        try:
            parsed = json.loads(answer or b"null")
        except ValueError:
            parsed = None
        items = bundle_items(parsed, len(bodies), bundle_url)
        if items is None:  # a daemon bug, or something else answering at that URL
            result = PushResult(
                Outcome.RETRY, result.status, f"unexpected answer to a bundle from {bundle_url}"
            )
        self._report(result)
        for item in items or ():
            if item.outcome is Outcome.RETRY:  # e.g. a line of another node: logged like a request
                self._report(item)
        return BundleResult(result, items)

    def _post(self, url: str, body: bytes, content_type: str) -> tuple[PushResult, bytes | None]:
        """The POST's outcome and, for a 2xx, the body of the answer."""
        try:
            headers = self._headers(content_type)
        except Exception as exc:  # e.g. ConfigError from an unreadable token_file
            return PushResult(
                Outcome.RETRY, None, f"cannot read the agent token: {exc}", config_problem=True
            ), None
        try:
            response = self._pool.request(
                "POST",
                url,
                body=body,
                headers=headers,
                timeout=urllib3.Timeout(total=self.timeout_s),
                redirect=False,
            )
        except urllib3.exceptions.TimeoutError as exc:
            if not isinstance(exc, _NOT_CONNECTED):  # NewConnectionError is a subclass, oddly
                return PushResult(
                    Outcome.RETRY,
                    None,
                    f"no answer from {url} within {self.timeout_s:g} s",
                    maybe_stored=True,
                ), None
            message = _ADDRESS_RE.sub("", str(exc))
            return PushResult(
                Outcome.RETRY, None, f"cannot reach {url}: {type(exc).__name__}: {message}"
            ), None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            message = _ADDRESS_RE.sub("", str(exc))  # object addresses would make every message distinct
            return PushResult(
                Outcome.RETRY,
                None,
                f"cannot reach {url}: {type(exc).__name__}: {message}",
                maybe_stored=not isinstance(exc, _NOT_CONNECTED),
            ), None
        status = response.status
        outcome = classify(status)
        retry_after = None
        if status in RETRY_AFTER_STATUSES:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if outcome is Outcome.OK:
            return PushResult(outcome, status, "stored"), response.data
        config_problem = status in _CONFIG_STATUSES or 300 <= status < 400
        return PushResult(
            outcome,
            status,
            self._explain(url, status, response),
            retry_after,
            config_problem,
            maybe_stored=status >= 500,
        ), None

    def _explain(self, url: str, status: int, response: urllib3.BaseHTTPResponse) -> str:
        detail = _detail(response)
        if status == 401:
            hint = "the daemon refused the agent's token; check agent.token / agent.token_file"
        elif status == 403:
            hint = "the daemon refused this node; register it or use this node's own token"
        elif status == 404:
            hint = "no ingest endpoint there; check agent.daemon_url"
        elif 300 <= status < 400:
            hint = f"daemon_url redirects to {response.headers.get('Location')!r}; set it to the final URL"
        else:
            hint = ""
        parts = [f"HTTP {status} from {url}"]
        if hint:
            parts.append(hint)
        if detail:
            parts.append(detail)
        return ": ".join(parts)

    def _report(self, result: PushResult) -> None:
        """Log failures once per distinct message (a 10 s loop must not flood the log)."""
        if result.outcome is Outcome.OK:
            if self._failures:
                log.info(
                    "daemon %s accepted a batch again after %d failed attempt(s)", self.url, self._failures
                )
            self._failures = 0
            self._logged.clear()
            return
        if result.outcome is Outcome.REJECTED:
            return  # the caller knows which batch and logs it
        self._failures += 1
        if result.reason in self._logged:
            log.debug("push failed again: %s", result.reason)
            return
        if len(self._logged) < _MAX_LOGGED_MESSAGES:
            self._logged.add(result.reason)
        if result.config_problem:
            log.error("push failed, batches are kept and retried: %s", result.reason)
        else:
            log.warning("push failed, batches are kept and retried: %s", result.reason)

    def close(self) -> None:
        self._pool.clear()


class Backoff:
    """Exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff and Jitter").

    The n-th consecutive failure waits uniform(0, min(max_s, initial_s * 2**n)) so that many
    agents recovering from one daemon outage do not retry in lockstep.
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if initial_s <= 0 or max_s <= 0:
            raise ValueError("backoff bounds must be positive")
        self.initial_s = initial_s
        self.max_s = max(max_s, initial_s)
        self._rng = rng or random.Random()
        self.attempts = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay."""
        return min(self.max_s, self.initial_s * 2.0 ** min(self.attempts, 64))

    def next_delay(self) -> float:
        delay = self._rng.uniform(0.0, self.ceiling())
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0

    def after(self, retry_after_s: float) -> float:
        """A wait honouring the daemon's ``Retry-After``: uniform(1x, 1.5x) of it, never less.

        Every agent a daemon sheds in one burst gets the same header; waiting exactly that
        long would bring them back in the same burst, again and again.
        """
        return self._rng.uniform(retry_after_s, 1.5 * retry_after_s)
