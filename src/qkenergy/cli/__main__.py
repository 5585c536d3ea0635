"""``python -m qkenergy.cli``: the same command line as the console script."""

from qkenergy.cli.main import main

if __name__ == "__main__":
    main()
