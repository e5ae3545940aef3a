"""``python -m simulator``: the upstream simulator on uvicorn."""

from simulator.cli import main

main()
