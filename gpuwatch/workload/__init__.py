"""The reference workload: real torch training loops that waste their GPU in known ways.

``gpuwatch workload --scenario NAME`` runs one (:mod:`gpuwatch.workload.scenarios`); each
records its own step timeline (:mod:`gpuwatch.collectors.activity_stream`), which
:mod:`gpuwatch.collectors.workload_backend` turns into NVML-shaped simulated GPU samples, so the
agent, daemon and classifier can be exercised on a machine without a GPU.

torch is the optional extra ``gpuwatch[workload]``; only :mod:`gpuwatch.workload.engine`
imports it, and only when a scenario runs.
"""
