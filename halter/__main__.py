"""``python -m halter``: the command line."""
import sys

from halter.cli import main

sys.exit(main())
