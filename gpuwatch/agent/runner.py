"""The agent: sample on schedule, spool every batch, send from the spool in its own thread.

Two threads, joined only through the on-disk :class:`~gpuwatch.agent.spool.Spool`:

* the sample loop (the caller's thread, :meth:`Agent.run`) runs every collector at ticks
  ``start + k * interval_s`` of a monotonic clock, so a slow cycle never shifts the ones
  after it (missed ticks are skipped and counted), builds one :class:`~gpuwatch.wire.Batch`
  and writes it to the spool before anything else happens to it;
* the sender thread sends the oldest spooled batch (a backlog merged into one batch, or as
  a bundle) and acks, rejects or backs off (exponential, full jitter; after a
  ``Retry-After``, 1-1.5x it), never blocking sampling. Backing off from an outage it probes
  the daemon's ``/healthz`` and sends within seconds of it answering
  (:mod:`gpuwatch.agent.recovery`).

So a crash at any point loses at most the cycle still in memory, and an outage of the
daemon costs only spool space. A clean stop (:meth:`Agent.drain`, then :meth:`Agent.close`)
makes one more attempt at once, even in the middle of a back-off.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from gpuwatch import __version__
from gpuwatch.agent import merge
from gpuwatch.agent.process_jobs import with_process_jobs
from gpuwatch.agent.push import Backoff, Outcome, Pusher, PushResult, daemon_down
from gpuwatch.agent.recovery import ENDED_PROBE, BackoffWait, Recovery
from gpuwatch.agent.spool import Spool, SpooledBatch
from gpuwatch.clock import utcnow
from gpuwatch.collectors.base import Collector, run_collector
from gpuwatch.config import AgentConfig, Settings
from gpuwatch.wire import AgentSample, Batch
from gpuwatch.wire import v2 as wire_v2

log = logging.getLogger(__name__)

#: ``sleep(stop, seconds) -> bool``: wait up to ``seconds``; True (early) when ``stop`` is set
SleepFn = Callable[[threading.Event, float], bool]


def event_sleep(stop: threading.Event, seconds: float) -> bool:
    """The real :data:`SleepFn`: an interruptible wait on the stop event."""
    return stop.wait(max(0.0, seconds))


#: how long a refused bundle size (413) or a daemon without bundles (404/405) is believed
BUNDLE_RETRY_AFTER_S = 3600


class Agent:
    """Sample loop + spool + sender for one node.

    The agent owns ``spool`` and ``pusher`` and closes them in :meth:`close`. Both may be
    None for :meth:`collect_once_json` (``gpuwatch agent --once``), which neither spools nor
    sends. ``clock`` (monotonic seconds), ``sleep`` (see :data:`SleepFn`), ``now`` (the wall
    clock samples are stamped with) and ``rng`` (backoff jitter) are injectable for tests.
    """

    def __init__(
        self,
        settings: Settings | AgentConfig,
        collectors: Sequence[Collector],
        spool: Spool | None,
        pusher: Pusher | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: SleepFn = event_sleep,
        now: Callable[[], datetime] = utcnow,
        rng: random.Random | None = None,
        once_gap_s: float = 1.0,
        idle_poll_s: float = 5.0,
    ) -> None:
        self.config = settings.agent if isinstance(settings, Settings) else settings
        self.collectors = list(collectors)
        self.spool = spool
        self.pusher = pusher
        rng = rng or random.Random()
        self.backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s, rng)
        self.recovery = Recovery(
            self._probe, clock, self._pause, rng, self.config.probe_interval_s, self.config.recovery_jitter_s
        )
        self._clock = clock
        self._sleep = sleep
        self._now = now
        self._once_gap_s = once_gap_s
        self._idle_poll_s = idle_poll_s
        self._seq = 0  # the sequence of an agent without a spool (``--once``)
        self._stop_sender = threading.Event()
        #: cuts a back-off short: set by close (then the sender stops) and drain (one attempt now)
        self._interrupt = threading.Event()
        self._wake = threading.Event()
        self._sender: threading.Thread | None = None
        self._logged: set[str] = set()
        self._closed = False
        # counters, read by tests and by the agent's own metrics
        self.cycles = 0
        self.cycle_errors = 0
        self.skipped_ticks = 0
        self.sent_batches = 0
        self.rejected_batches = 0
        self.retried_sends = 0
        self.bundles_sent = 0
        self.merged_sends = 0
        self.probes = 0
        self.recoveries = 0  # back-offs cut short by a probe that saw the daemon back
        #: the last back-off waits, newest last (what was probed, how each ended)
        self.waits: collections.deque[BackoffWait] = collections.deque(maxlen=64)
        #: batches up to this spool seq go unmerged: a batch merged from them was refused
        self._unmerged_through = -1
        #: the spool files of the last merged batch while it is retried after an answer that may
        #: hide a stored batch (``PushResult.maybe_stored``): they go again as the same batch
        #: (same id: a duplicate if it was stored), not regrouped with the cycles spooled since,
        #: until the daemon answers stored/duplicate or refuses it (in memory: an agent restart
        #: in between regroups)
        self._merged_retry: list[Path] | None = None
        #: bundles go until a daemon refuses them (an older one); then one batch per request,
        #: or smaller bundles after a 413, until ``_full_bundles_at`` (then tried again)
        self._bundles = self.config.bundle_max_batches > 1
        self._bundle_limit = self.config.bundle_max_batches
        self._full_bundles_at: float | None = None
        self._flushing = False  # closing: push_every holds nothing back any more
        self.last_push: PushResult | None = None
        #: an AgentMetrics (Prometheus exporter) fed each batch; None when /metrics is off
        self.metrics = None

    @classmethod
    def from_settings(
        cls, settings: Settings | AgentConfig, collectors: Sequence[Collector], **kwargs
    ) -> Agent:
        """An agent with the spool and pusher that the configuration describes."""
        config = settings.agent if isinstance(settings, Settings) else settings
        token = config.token or (config.resolve_token if config.token_file is not None else None)
        if token is None:
            log.warning("no agent.token or agent.token_file set; the daemon will refuse batches (401)")
        spool = Spool(config.spool_dir, config.spool_max_bytes)
        pusher = Pusher(config.daemon_url, config.node, token, config.push_timeout_s)
        return cls(settings, collectors, spool, pusher, **kwargs)

    # ----------------------------------------------------------------- sampling

    def collect_batch(self) -> Batch:
        """Run every collector once and build the batch, with the agent's own health sample.

        ``seq`` is reserved in the spool before the collectors run (persisted there, never given
        twice), so a gap the daemon sees in it is a batch the spool dropped or a cycle a crash
        lost.
        """
        seq = self._reserve_seq()
        now = self._now()
        runs = [run_collector(collector, now) for collector in self.collectors]
        errors = {run.name: run.error for run in runs if run.error is not None}
        spool = self.spool
        health = AgentSample(
            ts=now,
            spool_batches=len(spool) if spool is not None else 0,
            spool_bytes=spool.bytes_used if spool is not None else 0,
            dropped_batches_total=spool.dropped_total if spool is not None else 0,
            collector_errors=errors or None,
            collector_seconds={run.name: run.seconds for run in runs} or None,
        )
        samples = with_process_jobs([sample for run in runs for sample in run.samples])
        samples.append(health)
        return Batch(node=self.config.node, agent_version=__version__, seq=seq, samples=samples)

    def _reserve_seq(self) -> int:
        """The spool's next sequence number (durably used up), or a count of its own without one."""
        if self.spool is not None:
            return self.spool.reserve_seq()
        self._seq += 1
        return self._seq - 1

    def cycle(self) -> Batch | None:
        """One sample cycle: collect, then spool (the sender is woken). Never raises."""
        try:
            batch = self.collect_batch()
            if self.metrics is not None:
                self.metrics.update(batch)
            if self.spool is not None:
                body = wire_v2.encode(batch, self.config.wire_format)
                self.spool.put(body, batch_id=str(batch.batch_id), seq=batch.seq)
                self._wake.set()
            return batch
        except Exception as exc:  # one bad cycle must not end the agent
            self.cycle_errors += 1
            self._log_once(logging.ERROR, f"sample cycle failed: {type(exc).__name__}: {exc}", exc_info=True)
            return None
        finally:
            self.cycles += 1

    def run(self, stop: threading.Event, max_cycles: int | None = None) -> None:
        """Sample every ``interval_s`` until ``stop`` is set or ``max_cycles`` cycles ran.

        Starts the sender thread; it keeps sending after this returns, until :meth:`close`.
        """
        if self.spool is None or self.pusher is None:
            raise ValueError("Agent.run needs a spool and a pusher")
        self.start_sender()
        interval = self.config.interval_s
        start = self._clock()
        tick = done = 0
        while not stop.is_set():
            self.cycle()
            done += 1
            if max_cycles is not None and done >= max_cycles:
                return
            tick += 1
            now = self._clock()
            if now >= start + tick * interval:  # the cycle overran: skip to the next future tick
                behind = math.floor((now - start) / interval) + 1
                self.skipped_ticks += behind - tick
                log.warning(
                    "sample cycle took longer than interval_s=%g s; skipped %d tick(s)",
                    interval,
                    behind - tick,
                )
                tick = behind
            due = start + tick * interval
            while (remaining := due - self._clock()) > 0:
                if self._sleep(stop, remaining):
                    return

    def collect_once_json(self, gap_s: float | None = None) -> str:
        """Two collections ``gap_s`` apart (rates need two snapshots); the second as pretty JSON.

        For ``gpuwatch agent --once``: nothing is spooled or sent.
        """
        self.collect_batch()
        self._sleep(threading.Event(), self._once_gap_s if gap_s is None else gap_s)
        return self.collect_batch().model_dump_json(indent=2)

    # ----------------------------------------------------------------- sending

    def start_sender(self) -> None:
        """Start the sender thread (idempotent)."""
        if self.spool is None or self.pusher is None:
            raise ValueError("the sender needs a spool and a pusher")
        if self._sender is not None and self._sender.is_alive():
            return
        self._stop_sender.clear()
        self._sender = threading.Thread(target=self._send_loop, name="gpuwatch-sender", daemon=True)
        self._sender.start()

    def send_one(self) -> PushResult | None:
        """Send the oldest spooled batches and ack/reject each; None when the spool is empty.

        One batch goes alone; a backlog of v2 batches goes merged into one batch
        (``agent.merge_backlog``, :mod:`gpuwatch.agent.merge`), otherwise as a bundle, up to
        ``agent.bundle_max_batches`` and ``agent.bundle_max_bytes`` either way. The result says
        what the sender does next: RETRY (back off) if any batch must be kept for another try,
        else OK or REJECTED.
        """
        assert self.spool is not None and self.pusher is not None
        self._maybe_restore_bundles()
        merging = self.config.merge_backlog
        limit = self._bundle_limit if self._bundles or merging else 1
        items = self.spool.peek_oldest_many(limit, self.config.bundle_max_bytes)
        if not items:
            return None
        # a bundle holds one wire format: the oldest batches up to the first of another format
        # (only after an upgrade or a change of agent.wire_format do two formats wait at once)
        version = wire_v2.version_of(items[0].data)
        items = list(itertools.takewhile(lambda item: wire_v2.version_of(item.data) == version, items))
        if merging and version == 2 and len(items) > 1 and items[0].seq > self._unmerged_through:
            merged = self._send_merged(items)
            if merged is not None:
                return merged
        if not self._bundles:
            items = items[:1]
        if len(items) == 1 or any(b"\n" in item.data for item in items):
            return self._send_alone(items[0])
        bundle = self.pusher.send_bundle([item.data for item in items])
        if bundle.items is None:
            return self._bundle_refused(bundle.request, items)
        self.last_push = bundle.request
        self.bundles_sent += 1
        retry = None
        for item, result in zip(items, bundle.items, strict=True):
            self._settle(item, result)
            if result.outcome is Outcome.RETRY and retry is None:
                retry = result
        return retry or bundle.request

    def _send_merged(self, items: list[SpooledBatch]) -> PushResult | None:
        """Send the leading ``items`` that may be merged as one batch and settle them all by its
        answer; None if they go otherwise (nothing to merge, or the daemon refused the merged
        batch: then they go as a bundle, each settled by its own answer)."""
        window, self._merged_retry = self._merged_retry, None
        pinned = window is not None and [item.path for item in items[: len(window)]] == window
        if pinned:
            items = items[: len(window)]
        try:
            batches = merge.parse([item.data for item in items])
            count = merge.mergeable_prefix(batches)
            if count < 2:
                return None
            items = items[:count]
            body = merge.encode(merge.merge(batches[:count]))
        except ValueError as exc:  # a spooled file that is not a valid v2 batch: the daemon says why
            self._log_once(logging.WARNING, f"cannot merge the spool backlog, sending it as a bundle: {exc}")
            self._unmerged_through = items[-1].seq
            return None
        result = self.pusher.send(body)
        self.last_push = result
        if result.outcome is Outcome.REJECTED:
            log.warning(
                "daemon refused a batch merged from %d spooled batches (seq %d-%d), sending them "
                "one by one in a bundle to find the bad one: %s",
                len(items),
                items[0].seq,
                items[-1].seq,
                result.reason,
            )
            self._unmerged_through = items[-1].seq
            return None
        for item in items:
            self._settle(item, result)
        if result.outcome is Outcome.OK:
            self.merged_sends += 1
        elif result.maybe_stored or pinned:
            # pinned until a definitive answer: a "maybe stored" then "connection refused" (the
            # daemon died after storing) must not regroup the window under a new id, whose
            # process readings would be stored a second time as another pack
            self._merged_retry = [item.path for item in items]
        return result

    def _send_alone(self, item: SpooledBatch) -> PushResult:
        result = self.pusher.send(item.data)
        self.last_push = result
        self._settle(item, result)
        return result

    def _bundle_refused(self, result: PushResult, items: list[SpooledBatch]) -> PushResult:
        """The daemon refused the bundle as a request: an older daemon without the bundle
        endpoint (404/405) or a smaller size limit (413) makes the agent send smaller
        bundles or single batches from now on; the oldest batch goes alone at once."""
        if result.outcome is Outcome.RETRY and result.status not in (404, 405):
            self.last_push = result
            self.retried_sends += 1
            return result
        if result.status == 413:
            self._bundle_limit = max(1, len(items) // 2)
            log.warning(
                "daemon refused a bundle of %d batches as too large; bundles of at most %d for the next %d s",
                len(items),
                self._bundle_limit,
                BUNDLE_RETRY_AFTER_S,
            )
        else:
            self._bundles = False
            log.warning(
                "daemon refused bundles (%s); one batch per request for the next %d s",
                result.reason,
                BUNDLE_RETRY_AFTER_S,
            )
        self._full_bundles_at = self._clock() + BUNDLE_RETRY_AFTER_S
        return self._send_alone(items[0])

    def _maybe_restore_bundles(self) -> None:
        """After ``BUNDLE_RETRY_AFTER_S``, full bundles again: the daemon (or the proxy in front of
        it) may have been upgraded or reconfigured meanwhile. Refused again, it costs one request."""
        if self._full_bundles_at is None or self._clock() < self._full_bundles_at:
            return
        self._full_bundles_at = None
        self._bundles = self.config.bundle_max_batches > 1
        self._bundle_limit = self.config.bundle_max_batches
        log.info("trying bundles of up to %d batches again", self._bundle_limit)

    def _settle(self, item: SpooledBatch, result: PushResult) -> None:
        """Ack, reject or keep one spooled batch after the daemon's answer for it."""
        assert self.spool is not None
        if result.outcome is Outcome.OK:
            self.spool.ack(item.path)
            self.sent_batches += 1
            self.backoff.reset()
        elif result.outcome is Outcome.REJECTED:
            self.spool.reject(item.path, result.reason)
            self.rejected_batches += 1
            self.backoff.reset()  # the daemon is up; the next batch may go at once
            log.error(
                "daemon rejected batch %s (seq %d), moved to rejected/: %s",
                item.batch_id,
                item.seq,
                result.reason,
            )
        else:
            self.retried_sends += 1

    def retry_delay(self, result: PushResult) -> float:
        """The next backoff delay; after a ``Retry-After``, 1-1.5x it (spread so
        that agents shed together do not come back together), all capped at backoff_max_s."""
        delay = self.backoff.next_delay()
        if result.retry_after_s is not None:
            delay = max(delay, min(self.backoff.after(result.retry_after_s), self.config.backoff_max_s))
        return delay

    def _send_loop(self) -> None:
        stop = self._stop_sender
        while not stop.is_set():
            self._wake.clear()  # cleared before peeking, so a put() after this wakes the wait below
            if self._waiting_for_more():
                self._wake.wait(self._idle_poll_s)
                continue
            try:
                result = self.send_one()
            except Exception as exc:  # e.g. an unreadable spool file; keep the thread alive
                self._log_once(logging.ERROR, f"sender failed: {type(exc).__name__}: {exc}", exc_info=True)
                if self._pause(self.backoff.next_delay()) and self._resume():
                    return
                continue
            if result is None:
                self._wake.wait(self._idle_poll_s)
            elif result.outcome is Outcome.RETRY and self._back_off(result):
                return

    def _back_off(self, failed: PushResult) -> bool:
        """Wait before the next attempt after ``failed`` (probing the daemon when it looked down);
        True when the sender is to stop."""
        woken = bool(self.waits) and self.waits[-1].ended == ENDED_PROBE
        wait = self.recovery.wait(
            self.retry_delay(failed), probing=daemon_down(failed), seen_down=daemon_down(failed) and not woken
        )
        self.waits.append(wait)
        if wait.ended == ENDED_PROBE:
            self.recoveries += 1
            log.info(
                "daemon answers again (%s): sending after %.1f s instead of the %.0f s back-off",
                self.pusher.health_url if self.pusher else "/healthz",
                wait.jitter_s or 0.0,
                wait.backoff_s,
            )
        return self._resume()

    def _probe(self) -> PushResult:
        assert self.pusher is not None
        self.probes += 1
        return self.pusher.probe()

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (the injected sleep); True when cut short by a stop or a drain."""
        return self._sleep(self._interrupt, seconds)

    def _resume(self) -> bool:
        """After a pause: True when the sender is to stop; a drain's interruption is used up."""
        if self._stop_sender.is_set():
            return True
        self._interrupt.clear()
        return False

    def _waiting_for_more(self) -> bool:
        """With ``agent.push_every`` = N > 1, the sender holds back until N batches wait.

        Only while the last push went through: batches kept after a failed one go as soon as
        the back-off allows, as before.
        """
        assert self.spool is not None
        every = self.config.push_every
        return every > 1 and not self._flushing and self.last_push_ok() and len(self.spool) < every

    def _flush_held(self) -> None:
        if self.config.push_every <= 1 or self.spool is None or not len(self.spool):
            return
        if self._sender is None or not self._sender.is_alive():
            return
        self._flushing = True
        self._wake.set()
        deadline = time.monotonic() + self.config.push_timeout_s
        while len(self.spool) and self.last_push_ok() and time.monotonic() < deadline:
            time.sleep(0.01)

    def last_push_ok(self) -> bool:
        """No push yet, or the last one was not to be retried."""
        return self.last_push is None or self.last_push.outcome is not Outcome.RETRY

    def drain(self, timeout_s: float) -> bool:
        """Wait (real time) until the spool is empty; True if it emptied within ``timeout_s``.

        A sender in the middle of a back-off makes one attempt at once (a clean stop would
        otherwise leave everything spooled, however soon the daemon came back), and batches
        ``push_every`` holds back go at once: a drain asks for everything.
        """
        flushing, self._flushing = self._flushing, True
        self._interrupt.set()
        self._wake.set()
        try:
            deadline = time.monotonic() + timeout_s
            while self.spool is not None and len(self.spool):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
            return True
        finally:
            self._flushing = flushing

    def settle(self, timeout_s: float) -> bool:
        """Wait (real time) until the sender has sent what it sends now: everything but the fewer
        than ``push_every`` batches it holds back; True if that happened within ``timeout_s``.

        For a driver on a virtual clock (``bench/alert_latency.py``) that must let the daemon see
        what the agents delivered, and no more, before the daemon's jobs look: unlike
        :meth:`drain`, it does not send the held batches early.
        """
        deadline = time.monotonic() + timeout_s
        while self.spool is not None and len(self.spool) >= max(1, self.config.push_every):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Stop the sender, close collectors, the pusher and the spool (idempotent).

        Unsent batches stay in the spool for the next start. Batches that ``push_every`` was
        holding back get one try first (within ``push_timeout_s``): a node shut down for
        maintenance should not keep its last minute until it comes back.
        """
        if self._closed:
            return
        self._closed = True
        self._flush_held()
        self._stop_sender.set()
        self._interrupt.set()
        self._wake.set()
        if self._sender is not None:
            self._sender.join(timeout=self.config.push_timeout_s + 5.0)
            if self._sender.is_alive():
                log.warning("sender thread did not stop within %g s", self.config.push_timeout_s + 5.0)
        for collector in self.collectors:
            try:
                collector.close()
            except Exception:
                log.warning("closing collector %s failed", collector.name, exc_info=True)
        if self.pusher is not None:
            self.pusher.close()
        if self.spool is not None:
            self.spool.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _log_once(self, level: int, message: str, **kwargs) -> None:
        if message in self._logged:
            log.debug("%s", message)
            return
        if len(self._logged) < 256:
            self._logged.add(message)
        log.log(level, "%s", message, **kwargs)
