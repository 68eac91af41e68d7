import sys

from kubetrain.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
