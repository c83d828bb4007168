"""The daemon's read-only web view: server-rendered HTML with inline SVG charts.

No JavaScript, no build step, no CDN: ``routes.py`` renders pages from ``data.py`` queries
(the rollup tables and verdicts), ``svg.py`` draws the charts; ``[web]`` is
:mod:`gpuwatch.config.web`.
"""
