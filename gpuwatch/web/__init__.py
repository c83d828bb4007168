"""The daemon's read-only web view: server-rendered HTML with inline SVG charts.

No JavaScript, no build step, no CDN: ``routes.py`` renders what :mod:`gpuwatch.views`
returns (the same read model as the CLI), ``svg.py`` draws the charts; ``[web]`` is
:mod:`gpuwatch.config.web`.
"""
