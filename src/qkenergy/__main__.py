"""``python -m qkenergy``: the command line, as the ``qkenergy`` script runs it (profilers, debuggers)."""

from qkenergy.console import main

if __name__ == "__main__":
    main()
