"""``python -m gpuwatch`` is the ``gpuwatch`` command."""

from gpuwatch.cli.main import main

main()
