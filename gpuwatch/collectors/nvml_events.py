"""XID and other critical GPU events, waited for on their own thread.

NVML delivers these through an event set, not a reading: ``nvmlEventSetCreate`` once,
``nvmlDeviceRegisterEvents(handle, mask, set)`` per GPU, then ``nvmlEventSetWait_v2(set,
timeout_ms)`` blocks until an event or the timeout (``NVMLError_Timeout``), so the thread
wakes at least every ``timeout_ms`` to see whether it should stop. ``nvidia-smi`` shows the
same events in ``dmesg`` as ``NVRM: Xid (PCI:...): <code>``.

What is registered, per GPU, is what it supports of (``nvmlDeviceGetSupportedEventTypes``):

* ``nvmlEventTypeXidCriticalError``: ``eventData`` is the XID code (79 "fallen off the bus",
  48 "double-bit ECC", 94/95 contained/uncontained ECC, 13 "graphics engine exception"...);
* ``nvmlEventTypeDoubleBitEccError``: reported as XID 48, the code the driver gives the same
  fault, so a DBE reads the same whether NVML sent it as an ECC event, an XID event or both;
* ``nvmlEventTypeSingleBitEccError``: corrected, so not an XID; counted
  (:attr:`XidEventWatcher.single_bit_ecc_events`) and logged at debug. The corrected-error
  counter itself is in every sample (``ecc_corrected_errors``).

Each sample takes what arrived since the previous one (:meth:`XidEventWatcher.drain`) and
reduces it with :func:`~gpuwatch.collectors.gpu_backend.reduce_xids`, the same function the
simulated backend uses: distinct codes in order of arrival; ``[]`` for a watched GPU with no
event, None for a GPU that is not watched (events unsupported, or watching turned off).

An event's ``device`` is the same opaque ``nvmlDevice_t`` pointer the handle holds, so it is
matched by address (:func:`handle_address`), without asking NVML about a GPU that may just
have fallen off the bus.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

from gpuwatch.collectors.gpu_backend import ThreadOwner

log = logging.getLogger(__name__)

#: XID the driver uses for a double-bit (uncorrectable) ECC error
XID_DOUBLE_BIT_ECC = 48
#: how long one nvmlEventSetWait_v2 blocks; also the longest close() waits for the thread
DEFAULT_WAIT_MS = 500
#: codes kept per GPU between two samples; an event storm must not grow memory without bound
_MAX_PENDING = 1024


def handle_address(handle: Any) -> int | None:
    """The address an ``nvmlDevice_t`` points at; events carry the same pointer."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


class XidEventWatcher(ThreadOwner):
    """One NVML event set for every GPU, and the thread that waits on it.

    ``nvml`` is ``pynvml`` or the test fake. Pass ``start=False`` and call :meth:`wait_once`
    to drive it by hand (tests do). :meth:`close` stops the thread and frees the set; it must
    run before ``nvmlShutdown``.
    """

    def __init__(self, nvml: Any, *, wait_ms: int = DEFAULT_WAIT_MS, start: bool = True) -> None:
        self._nvml = nvml
        self.wait_ms = wait_ms
        self._lock = threading.Lock()
        self._pending: dict[int, list[int]] = {}
        self._by_address: dict[int, int] = {}
        self._logged: set[str] = set()
        self.single_bit_ecc_events: dict[int, int] = {}
        self.events_seen = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._set = nvml.nvmlEventSetCreate()  # raises NVMLError: the caller decides
        self._start_thread = start

    # -- registration ---------------------------------------------------------------------

    def wanted_mask(self) -> int:
        nv = self._nvml
        return (
            nv.nvmlEventTypeXidCriticalError
            | nv.nvmlEventTypeDoubleBitEccError
            | nv.nvmlEventTypeSingleBitEccError
        )

    def register(self, index: int, handle: Any) -> bool:
        """Watch GPU ``index``; False (and the GPU stays unwatched) when it supports none of it."""
        nv = self._nvml
        address = handle_address(handle)
        if address is None:
            self._log_once(f"GPU {index}: handle is not an NVML device pointer; events not watched")
            return False
        try:
            supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            supported = 0
        except nv.NVMLError as exc:
            self._log_once(f"GPU {index}: nvmlDeviceGetSupportedEventTypes failed: {exc}")
            return False
        mask = supported & self.wanted_mask()
        if not mask & (nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError):
            log.info("GPU %d: no XID/ECC events on this card (supported mask 0x%x)", index, supported)
            return False
        try:
            nv.nvmlDeviceRegisterEvents(handle, mask, self._set)
        except nv.NVMLError as exc:  # NoPermission in some containers, NotSupported on vGPU
            self._log_once(f"GPU {index}: nvmlDeviceRegisterEvents(0x{mask:x}) failed: {exc}")
            return False
        with self._lock:
            self._by_address[address] = index
            self._pending.setdefault(index, [])
        if self._start_thread and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name="gpuwatch-nvml-events", daemon=True)
            self._thread.start()
        return True

    def watched(self, index: int) -> bool:
        with self._lock:
            return index in self._pending

    # -- waiting --------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.wait_once():
                # a failing wait (not a timeout) must not spin: back off one wait period
                self._stop.wait(self.wait_ms / 1000)

    def wait_once(self, wait_ms: int | None = None) -> bool:
        """One ``nvmlEventSetWait_v2``; True on an event or a timeout, False on another error."""
        nv = self._nvml
        try:
            data = nv.nvmlEventSetWait_v2(self._set, self.wait_ms if wait_ms is None else wait_ms)
        except nv.NVMLError_Timeout:
            return True
        except nv.NVMLError as exc:
            self._log_once(f"nvmlEventSetWait_v2 failed: {exc}")
            return False
        self._record(data)
        return True

    def _record(self, data: Any) -> None:
        nv = self._nvml
        address = handle_address(data.device)
        event_type = int(data.eventType)
        with self._lock:
            index = self._by_address.get(address) if address is not None else None
            if index is None:
                self._log_once(f"event 0x{event_type:x} for a GPU not registered here")
                return
            self.events_seen += 1
            if event_type & nv.nvmlEventTypeXidCriticalError:
                code = int(data.eventData)
            elif event_type & nv.nvmlEventTypeDoubleBitEccError:
                code = XID_DOUBLE_BIT_ECC
            else:
                if event_type & nv.nvmlEventTypeSingleBitEccError:
                    self.single_bit_ecc_events[index] = self.single_bit_ecc_events.get(index, 0) + 1
                log.debug("GPU %d: event 0x%x data %d", index, event_type, int(data.eventData))
                return
            pending = self._pending[index]
            if len(pending) < _MAX_PENDING:
                pending.append(code)
        log.warning(
            "GPU %d: XID %d (event 0x%x, GPU instance %d, compute instance %d)",
            index,
            code,
            event_type,
            int(data.gpuInstanceId),
            int(data.computeInstanceId),
        )

    def drain(self, index: int) -> list[int] | None:
        """Codes seen on GPU ``index`` since the last drain, in order; None when not watched."""
        with self._lock:
            if index not in self._pending:
                return None
            codes = self._pending[index]
            self._pending[index] = []
            return codes

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the thread (within one wait period) and ``nvmlEventSetFree``; safe twice."""
        if not self._end_thread():
            return
        try:
            self._nvml.nvmlEventSetFree(self._set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", exc)

    def _log_once(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self._logged:
            self._logged.add(message)
            log.log(level, "%s", message)


def start_watcher(nvml: Any, *, start: bool, wait_ms: int = DEFAULT_WAIT_MS) -> XidEventWatcher | None:
    """A watcher, or None (logged) where this NVML has no event sets at all."""
    try:
        return XidEventWatcher(nvml, start=start, wait_ms=wait_ms)
    except AttributeError:
        log.info("this pynvml has no event API; XID events not watched")
    except nvml.NVMLError as exc:
        log.warning("nvmlEventSetCreate failed (%s); XID events not watched", exc)
    return None
