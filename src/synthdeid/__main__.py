import sys

from synthdeid.cli import main

sys.exit(main())
